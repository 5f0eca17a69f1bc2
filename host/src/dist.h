/*
 * dist.h - one model across the ranks of an MPI job.
 *
 * Internal header. Two parts:
 *   dist_link.c  the transport: MPI initialized once per process, every
 *                send and receive non-blocking and waited for with a
 *                deadline (a rank that stops answering is named, never
 *                waited on forever), byte and wait accounting, and the
 *                fault injection the tests use (TSR_MPI_FAULT);
 *   dist.c       the protocol: rank 0 mirrors its models, engines and
 *                sequences onto the other ranks by id, and evaluates a
 *                batch either as a pipeline (TSR_SPLIT_LAYERS: micro-batches
 *                flow rank 0 -> 1 -> ... -> last -> 0, each rank running its
 *                layers, several micro-batches in flight) or as data
 *                parallelism (TSR_SPLIT_ROWS: each sequence lives on one
 *                rank, which evaluates it whole and returns its logits).
 *
 * Messages are one header (tsr_dist_hdr_t) and a payload in one MPI_BYTE
 * message. Control and pass messages travel downstream in one ordered
 * stream (tag TSR_DIST_TAG_DOWN): rank 0 -> 1 -> 2 ... in a pipeline
 * (each rank forwards what it does not consume), rank 0 -> k in data
 * parallelism; answers come back to rank 0 on a tag per engine. Every rank
 * runs the same build (the payloads are the host's own structs).
 */
#ifndef TSR_DIST_H
#define TSR_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "tessera.h"

typedef struct tsr_dist tsr_dist_t;
struct tsr_exec_pass_slot;

/* Tags: the downstream stream, errors to rank 0, statistics answers, the
 * liveness probe, and one answer tag per engine id (TSR_DIST_TAG_ENGINE +
 * id % span). */
enum {
  TSR_DIST_TAG_DOWN = 1,
  TSR_DIST_TAG_ERROR = 2,
  TSR_DIST_TAG_STATS = 3,
  TSR_DIST_TAG_PING = 4, /* rank 0 -> k after a timeout: which rank is silent */
  TSR_DIST_TAG_PONG = 5, /* k -> rank 0, answered from any wait of rank k    */
  TSR_DIST_TAG_ENGINE = 16,
  TSR_DIST_TAG_SPAN = 30000,
};

typedef enum tsr_dist_op {
  TSR_DIST_MODEL_OPEN = 1, /* id = model; payload "path\0tokenizer\0"      */
  TSR_DIST_MODEL_CLOSE,    /* id = model                                   */
  TSR_DIST_ENGINE_CREATE,  /* id = engine, a = model; tsr_session_options_t */
  TSR_DIST_ENGINE_DESTROY, /* id = engine                                  */
  TSR_DIST_SEQ_CREATE,     /* id = engine, a = sequence                    */
  TSR_DIST_SEQ_DESTROY,
  TSR_DIST_SEQ_RESET,
  TSR_DIST_PASS,     /* id = engine, n = entries, rows; entries, then x     */
  TSR_DIST_EVAL,     /* id = engine, n = entries, rows = tokens; entries, tokens */
  TSR_DIST_LOGITS,   /* answer to EVAL: rows = logit rows of vocab floats   */
  TSR_DIST_STATS,    /* request; the answer is a tsr_rank_stats_t      */
  TSR_DIST_SHUTDOWN,
  TSR_DIST_ERROR,    /* payload: the message text                          */
} tsr_dist_op_t;

typedef struct tsr_dist_hdr {
  uint32_t op, id;
  uint32_t n, rows;
  uint64_t a, b;
} tsr_dist_hdr_t;

/* One entry of a PASS or EVAL message. */
typedef struct tsr_dist_entry {
  uint64_t seq;          /* sequence id (creation order in its engine) */
  int32_t n, pos0, row0; /* tokens, first position, first row           */
  int32_t want_logits;   /* EVAL only                                   */
} tsr_dist_entry_t;

/* A growable receive buffer. */
typedef struct tsr_dist_buf {
  void *p;
  size_t len, cap;
} tsr_dist_buf_t;

/* ---- the transport (dist_link.c) ---- */

/* Initializes MPI for the context (once per process) and reads the rank;
 * *out is NULL when `opts->mpi` is false. */
tsr_status_t tsr_dist_create(const tsr_context_options_t *opts, tsr_dist_t **out);
/* Rank 0: tells the other ranks to stop (or aborts the job if it broke).
 * Every rank: finalizes MPI if the context initialized it. */
void tsr_dist_destroy(tsr_dist_t *d);
int tsr_dist_rank(const tsr_dist_t *d);
int tsr_dist_size(const tsr_dist_t *d);
tsr_split_t tsr_dist_split(const tsr_dist_t *d);
/* Non-NULL: why the job is broken (every later call fails with it). */
const char *tsr_dist_broken(const tsr_dist_t *d);
/* Next id for a model or an engine (rank 0). */
uint32_t tsr_dist_next_id(tsr_dist_t *d);

/* A send in flight. */
typedef struct tsr_dist_send {
  void *req;   /* MPI_Request, opaque here */
  int dest;
  bool active;
} tsr_dist_send_t;

/* Starts sending hdr + payload (copied into `staging`, which must stay
 * alive until tsr_dist_send_wait) to `dest` on `tag`; `act` counts the
 * payload as activation bytes. */
tsr_status_t tsr_dist_send_start(tsr_dist_t *d, int dest, int tag, const tsr_dist_hdr_t *hdr,
                                 const void *payload, size_t len, bool act,
                                 tsr_dist_buf_t *staging, tsr_dist_send_t *out);
/* Waits for a send to complete, at most the timeout. */
tsr_status_t tsr_dist_send_wait(tsr_dist_t *d, tsr_dist_send_t *s, const char *what);
/* Both at once. */
tsr_status_t tsr_dist_send(tsr_dist_t *d, int dest, int tag, const tsr_dist_hdr_t *hdr,
                           const void *payload, size_t len, bool act, const char *what);
/* Receives one message from `src` on `tag` into `buf` (header first),
 * waiting at most the timeout (forever if `forever`). On rank 0, an error
 * message from any rank ends the wait with that rank's error. */
tsr_status_t tsr_dist_recv(tsr_dist_t *d, int src, int tag, tsr_dist_buf_t *buf, bool forever,
                           const char *what);
/* Reports an error to rank 0 (a worker's failure). */
void tsr_dist_report(tsr_dist_t *d, tsr_status_t st);
/* Marks the job broken with `st`'s message; returns st. */
tsr_status_t tsr_dist_break(tsr_dist_t *d, tsr_status_t st);
/* Counters of this rank. */
void tsr_dist_counters(const tsr_dist_t *d, tsr_rank_stats_t *out);
void tsr_dist_add_busy(tsr_dist_t *d, double s, uint64_t passes);
/* The fault the tests inject: after this rank computed TSR_MPI_FAULT's
 * `after` passes, it exits, kills itself or stops answering. */
void tsr_dist_fault_point(tsr_dist_t *d);

/* Which layers rank `r` of `size` holds of a model of `n_layers` in a
 * pipeline: [*l0, *l1), contiguous, in rank order, as even as the count
 * allows (rank 0 gets no more than the others: it also runs the
 * classifier). */
void tsr_dist_layers(int32_t n_layers, int r, int size, int32_t *l0, int32_t *l1);

/* What this rank holds and runs on, for the statistics. */
void tsr_dist_set_layers(tsr_dist_t *d, int32_t l0, int32_t l1, bool ends);
void tsr_dist_set_devices(tsr_dist_t *d, const char *devices);

/* ---- the protocol (dist.c); each is a no-op without MPI ---- */

/* The layers a model loaded in this context holds: all, or this rank's
 * share of a pipeline (`ends`: the embedding and classifier, rank 0). */
void tsr_dist_model_layers(const tsr_context_t *ctx, int32_t n_layers, int32_t *l0, int32_t *l1,
                           bool *ends);
/* Rank 0: the other ranks load the model too (and acknowledge). */
tsr_status_t tsr_dist_model_open(tsr_model_t *m, const char *path, const char *tokenizer);
void tsr_dist_model_close(tsr_model_t *m);
/* Rank 0: the engine is mirrored on the other ranks (acknowledged). */
tsr_status_t tsr_dist_engine_open(tsr_engine_t *o, const tsr_session_options_t *opts);
void tsr_dist_engine_close(tsr_engine_t *o);
/* Sets the rank holding the sequence's cache and creates it there. */
tsr_status_t tsr_dist_seq_open(tsr_engine_t *o, tsr_seq_t *s);
void tsr_dist_seq_close(tsr_engine_t *o, tsr_seq_t *s);
void tsr_dist_seq_reset(tsr_engine_t *o, tsr_seq_t *s);
/* Rank 0: evaluates a batch across the ranks (engine lock held). */
tsr_status_t tsr_dist_eval(tsr_engine_t *o, tsr_batch_t *b);
/* Rank 0: every rank's counters, out[size]. */
tsr_status_t tsr_dist_gather(const tsr_context_t *ctx, tsr_rank_stats_t *out);
/* Rank 0: the per-rank table of --stats. */
void tsr_dist_print_stats(const tsr_engine_t *o, FILE *f);

void tsr_dist_buf_free(tsr_dist_buf_t *b);
tsr_status_t tsr_dist_buf_reserve(tsr_dist_buf_t *b, size_t n);

#endif
