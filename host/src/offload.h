/*
 * offload.h - the engine: the model's graph, its plans, the devices' side
 * (resident weights, staging), and the batched forward pass over many
 * sequences.
 *
 * Internal header. One engine per (model, precision, attention pattern),
 * shared by all its sequences:
 *   plan.c    the partitioner: one plan per batch size it considers (plan.h);
 *   exec.c    the executor: weights uploaded once and resident on the
 *             devices the plans name; a batch's matmul group goes to a
 *             device as one upload of all its rows, one ring with every
 *             descriptor (every row and column chunk of every member), one
 *             launch and one read-back per member; with --split rows each
 *             device takes a share of the rows, all launches in flight at
 *             once. Matmul groups and int8 attention share one launch /
 *             reset / retry / fallback path (contract 1 keeps the output
 *             identical after a fallback);
 *   devio.c   every HAL call of the executor, with its accounting (copies,
 *             bytes, launches, cycles, wait time) and trace events;
 *   forward.c sequences (KV cache, position), batches and the forward pass
 *             that interprets the graph over a batch's stacked rows;
 *   report.c  plan and statistics printing.
 */
#ifndef TSR_OFFLOAD_H
#define TSR_OFFLOAD_H

#include "attn.h"
#include "base/clock.h"
#include "compute/hgemm.h"
#include "driver/devmem.h"
#include "driver/kernel_model.h"
#include "graph.h"
#include "internal.h"
#include "plan.h"
#include "recover.h"

typedef struct tsr_engine tsr_exec_t;

/* Per-role counters (a role's nodes in every layer together). */
typedef struct tsr_role_stats {
  uint64_t calls;         /* group executions                          */
  uint64_t rows;          /* rows they carried                         */
  uint64_t device_calls;  /* of which ran (at least partly) on a device */
  uint64_t tiles;         /* descriptors run by devices                */
  uint64_t cycles;        /* device busy cycles (share of the launch)  */
  double proj_s;          /* those cycles at the device clock          */
  uint64_t bytes_up, bytes_down;
  uint64_t fallbacks;     /* launches run on the host after a failure  */
  double host_s;          /* wall time on the host for this role       */
  double model_cycles;    /* cycles the cost model predicted            */
} tsr_role_stats_t;

/* The int8 attention nodes (every layer together). */
typedef struct tsr_attn_stats {
  uint64_t calls;         /* node executions (per sequence)              */
  uint64_t device_calls;  /* of which ran (at least partly) on a device  */
  uint64_t rows;          /* query rows                                  */
  uint64_t pairs;         /* (query block, key block) pairs computed     */
  uint64_t dense_pairs;   /* pairs a dense causal mask would compute     */
  uint64_t descs;         /* descriptors run by devices                  */
  uint64_t cycles;        /* device busy cycles                          */
  double proj_s;          /* those cycles at the device clock            */
  uint64_t bytes_up, bytes_down; /* incl. the KV appends                */
  uint64_t kv_bytes;      /* int8 K and V bytes the pairs read           */
  uint64_t fallbacks;     /* phases run on the host after a failure      */
  double host_s;          /* wall time on the host (all of the op)       */
  double model_cycles;    /* cycles the cost model predicted             */
} tsr_attn_stats_t;

/* A device as one engine uses it; counters are this engine's share. */
typedef struct tsr_exec_dev {
  tsr_ctx_device_t *cd;      /* borrowed from the context (lock, HAL, caps) */
  tsr_recover_state_t rs;    /* usable, lost, resets, retries, fallbacks */
  bool on;                   /* turned on for this engine (tsr_engine_set_devices) */
  tsr_hal_buffer_t window;   /* the engine's device-memory window (size 0: none) */
  tsr_devmem_t *sub;         /* allocator over the window, NULL without one */
  tsr_km_timing_t timing;    /* cost model from the caps */
  tsr_hal_buffer_t a, c, ring; /* staging of one launch */
  uint64_t a_cap, c_cap, ring_cap;
  uint8_t *ring_host;        /* (ring_cap) descriptors packed on the host */
  /* resident rings (exec.c): a matmul launch's ring stays in this arena of
   * device memory, found again by its content, so the same ring (every
   * decode step's) is uploaded once; rings.size 0: none, each ring is
   * copied into `ring` */
  tsr_hal_buffer_t rings;
  uint8_t *rings_host;       /* (rings_cap) what the arena holds            */
  uint64_t rings_cap, rings_used;
  struct tsr_ring_entry *ring_ents; /* (TSR_RING_ENTRIES) rings in the arena */
  uint32_t n_ring_ents, ring_next;  /* entries; the one a hit is looked for first */
  uint64_t ring_hits, ring_uploads; /* resident rings reused, uploaded       */
  int trace_track;
  uint64_t launches, cycles;
  uint64_t xfers, xfer_bytes; /* host<->device copies (weights excluded) */
  double wait_wall_s;        /* host wall time spent waiting (simulation time for sim) */
  double host_overhead_s;    /* host time around device launches, waits excluded */
  double hal_s;              /* of which inside the backend's write/read/submit */
  uint64_t tiles;            /* descriptors run */
  uint64_t rows;             /* matmul rows it computed */
  uint64_t bytes_rd;         /* device memory bytes its launches read (BYTES_RD) */
  uint64_t bsr_descs;        /* GEMM_BSR descriptors its matmul launches ran */
  uint32_t bsr_mats;         /* weight matrices resident block-sparse */
  uint64_t bsr_stored, bsr_total; /* their tiles: stored, all */
  double submit_us;          /* trace: when the launch in flight was queued */
  /* launches queued ahead (ap_ctrl_chain): host time between a launch's
   * completion and the next submit, less the backend's calls, hides up to
   * one launch latency of the next launch (devio.c, report.c board_time) */
  double done_s, done_hal_s;  /* when the last launch completed; hal_s then */
  double launch_hidden_s;     /* launch latency hidden behind host work    */
  /* queue mode (TSR_HAL_CAP_QUEUE, exec.c): one launch stays running over
   * the staging `ring` as a ring of ring_cap / 64 slots; each matmul group
   * or attention phase is written into the next slots and published with a
   * doorbell. The context's device records the engine holding it
   * (tsr_ctx_device_t.q_holder), and any other user closes it first. */
  uint64_t q_fence;           /* the running queue's launch, 0: none       */
  uint32_t q_tail;            /* descriptors published to it               */
  tsr_hal_result_t q_seen;    /* its counters at the last progress()       */
  uint64_t q_timeout_ns;      /* the context's device timeout              */
  uint64_t doorbells;         /* rings published by a doorbell             */
  uint64_t q_opens;           /* of the launches, queue-mode ones          */
} tsr_exec_dev_t;

/* Scratch of one forward pass (rows of the whole batch). */
typedef struct tsr_offload_scratch {
  int8_t *qa;      /* (R, k) */
  float *qa_scale; /* (R)    */
  int32_t *acc;    /* (R, n) */
  uint16_t *xh;    /* (R, k) bf16 activations (bf16 precision only) */
} tsr_offload_scratch_t;

/* One sequence: its KV store and position (forward.c). */
struct tsr_seq {
  tsr_exec_t *eng;    /* borrowed, must outlive */
  int32_t pos;        /* positions in the cache */
  int32_t max_seq;
  /* reference attention: (layers, n_kv_heads, max_seq, head_dim) each, a
   * head's positions read in order; fp32, fp16 (TSR_KV_F16) or int8
   * (TSR_KV_Q8, with a scale per row of head_dim values) */
  float *key_cache, *value_cache;
  uint16_t *key_cache16, *value_cache16;
  int8_t *key_cache8, *value_cache8;
  float *key_scale8, *value_scale8; /* (layers, n_kv_heads, max_seq) */
  /* int8 attention: host copy per layer, device copy where planned */
  tsr_attn_cache_t *kv8;     /* (n_layers) */
  tsr_hal_buffer_t *kv_buf;  /* (n_layers) */
  int *kv_dev;               /* (n_layers) device holding it, -1 = none */
  bool *kv_ok;               /* device copy complete (an append failed: false) */
  uint64_t id;               /* creation order in the engine */
  int rank;                  /* MPI rank holding its cache (rows split), else 0 */
};

/* The cost model's view of one layer's int8 attention for one row on one
 * device entry (plan.c): host time measured, device and transfer time
 * modeled, density of the pattern. */
typedef struct tsr_attn_cost {
  bool measured;
  double cpu_s, dev_s, xfer_s, density;
} tsr_attn_cost_t;

/* One entry's rows in a forward pass: `n` tokens of `seq` at positions
 * pos0.., rows row0.. of the pass; logits row, or -1 (forward.c). */
typedef struct tsr_pass_entry {
  tsr_seq_t *seq;
  const int32_t *tokens;
  int32_t n, pos0, row0;
  int32_t logit_row;
} tsr_pass_entry_t;

struct tsr_engine {
  tsr_context_t *ctx;
  tsr_model_t *model;
  tsr_precision_t precision;
  tsr_hkernel_t hkern;   /* fp16/bf16 matmul kernel (from the context's ISA) */
  tsr_kv_type_t kv_type; /* the reference attention's cache */
  /* the reference attention's task and, with an fp16 cache, the row
   * conversion: chosen once for the context's ISA (forward.c) */
  tsr_task_fn attn_task;
  void (*kv_f16_row)(float *dst, const uint16_t *src, int32_t n);
  tsr_split_t split;
  int32_t max_rows;    /* rows per forward pass */
  int32_t max_seq;     /* positions per sequence */
  uint64_t window_bytes; /* device-memory window per device, 0 = none */
  tsr_graph_t graph;
  tsr_plan_t *plans;   /* (n_plans), ascending rows; the last has max_rows */
  int n_plans;
  tsr_exec_dev_t *devs; /* (n_devs), one per context device entry */
  int n_devs;
  tsr_hal_buffer_t *weights; /* (n_layers + 1) * TSR_MM_COUNT * n_devs, resident copies */
  bool *weight_on;           /* same index: uploaded */
  tsr_tile_bsr_t *weight_bsr; /* same index: the block-sparse layout of a copy
                                 stored for GEMM_BSR (chunks 0: dense) */
  double *bsr_density;        /* (graph nodes) its matmul's fraction of non-zero
                                 16 x BK tiles (tiles.c), < 0 until measured */
  uint64_t weight_bytes;
  int32_t k_max, group_n_max; /* staging sizes */
  int32_t k_pieces;  /* most K pieces a group takes on any device (tiles.c
                        tsr_tile_k_pieces): a device share's C of a group
                        lies at acc + r0 * n_sum * k_pieces              */
  size_t acc_n;      /* int32 columns of acc per row                      */
  tsr_role_stats_t roles[TSR_MM_COUNT];
  /* int8 attention (attn.kind != TSR_ATTN_REFERENCE) */
  tsr_attn_pattern_t attn;
  tsr_attn_dims_t attn_dims;
  tsr_attn_work_t attn_work; /* scratch of one sequence's call */
  tsr_attn_stats_t attn_stats;
  tsr_attn_cost_t *attn_costs; /* (n_devs + 1): [0] the host alone, [e + 1] entry e */
  double light_s[TSR_NODE_OP_COUNT]; /* host time per light op kind */
  uint64_t light_calls[TSR_NODE_OP_COUNT];
  uint64_t passes, pass_rows;        /* forward passes and their rows */
  uint64_t seq_ids;
  int track_cpu, track_copy;
  pthread_mutex_t lock;      /* one forward pass at a time */
  /* forward-pass scratch for max_rows rows (forward.c) */
  float *x, *xb, *xb2, *hb, *hb2, *q, *k, *v, *att, *logits;
  int32_t *logit_rows;       /* (max_rows) batch row of each logits row */
  int32_t *attn_block_entry; /* (max_rows) pass entry of each attention row block */
  int32_t *attn_block_row;   /* (max_rows) first row of each block            */
  tsr_pass_entry_t *pass;    /* (max_rows) the entries of one pass */
  int8_t *qa;
  float *qa_scale;
  int32_t *acc;
  uint16_t *xh;
  /* mixture of experts (n_experts > 0): router logits (R, E), the rows of
   * one expert gathered (R, dim), the experts' weighted sum (R, dim); per
   * expert the rows routed to it, their weights and their count */
  float *route, *moe_in, *moe_out;
  int32_t *moe_rows; /* (E, R) */
  float *moe_w;      /* (E, R) */
  int32_t *moe_count; /* (E) */
  uint64_t *expert_rows; /* (n_layers, E) rows routed, all passes */
  double *expert_recent; /* (n_layers, E) rows routed, halved at each replan:
                            the popularity the cost model plans with */
  uint64_t next_replan;  /* pass count of the next expert replan */
  uint64_t moe_replans;  /* replans done */
  struct tsr_dist_engine *dist; /* its mirror on the other MPI ranks (dist.c), or NULL */
};

/* A batch (forward.c): entries over one token array, logits after eval. */
typedef struct tsr_batch_entry {
  tsr_seq_t *seq;
  size_t tok0, n;    /* tokens [tok0, tok0 + n) of the batch's token array */
  bool want_logits;
  bool has_logits;   /* set by eval */
  size_t logits_off; /* floats into the batch's logits */
} tsr_batch_entry_t;

struct tsr_batch {
  tsr_batch_entry_t *e;
  size_t n, cap, max_entries;
  int32_t *tokens;
  size_t n_tokens, tok_cap;
  float *logits;     /* (entries wanting logits, vocab) after eval */
  size_t logits_cap;
};

/* Runs graph nodes [first, end) of one pass of R rows (entries pe, the
 * n_logits rows asking for logits listed in o->logit_rows); counts a pass
 * when `first` is 0 (forward.c). */
tsr_status_t tsr_forward_nodes(tsr_exec_t *o, const tsr_pass_entry_t *pe, int n_e, int32_t R,
                               int32_t n_logits, int32_t first, int32_t end);
/* Index of the first node after the last layer (the final norm), or
 * n_nodes if the graph has none (a pipeline rank other than 0). */
int32_t tsr_graph_final_begin(const tsr_graph_t *g);
/* Where the next pass of a batch starts: entry `first`, of which `done`
 * tokens ran already; `pass_first` is the first entry of the pass formed
 * last. */
typedef struct tsr_pass_cursor {
  size_t first, done, pass_first;
} tsr_pass_cursor_t;
/* Forms the next pass of at most `cap` rows at the cursor (entries in
 * order; an entry longer than what is left continues in the next pass)
 * into pe, the logits rows into logit_rows; advances the cursor. Returns
 * the entries of the pass, 0 when the batch is done. */
int tsr_batch_form_pass(const tsr_batch_t *b, tsr_pass_cursor_t *c, int32_t cap,
                        tsr_pass_entry_t *pe, int32_t *logit_rows, int32_t *out_rows,
                        int32_t *out_logits);
/* Copies the logits rows of a pass (entries from batch entry `first`) into
 * the batch. */
void tsr_batch_take_logits(tsr_batch_t *b, size_t first, const tsr_pass_entry_t *pe, int n_e,
                           const float *logits, int32_t vocab);
/* Evaluates a batch on this process only (forward.c); engine lock held. */
tsr_status_t tsr_engine_eval_local(tsr_exec_t *o, tsr_batch_t *b);
/* Grows the batch's logits to hold `n` rows of `vocab`. */
tsr_status_t tsr_batch_logits_reserve(tsr_batch_t *b, size_t n, int32_t vocab);
/* Checks a batch against the engine (its sequences, their room) and lays
 * out its logits (logits_off, has_logits cleared). */
tsr_status_t tsr_batch_prepare(tsr_exec_t *o, tsr_batch_t *b);

/* `opts` as for tsr_engine_create. */
tsr_status_t tsr_exec_create(tsr_model_t *model, const tsr_session_options_t *opts,
                             tsr_exec_t **out);
void tsr_exec_destroy(tsr_exec_t *o);

/* The plan the executor uses for a pass of R rows: the smallest planned
 * batch size >= R (the largest for R above it). */
const tsr_plan_t *tsr_exec_plan(const tsr_exec_t *o, int32_t R);
/* The tile density of matmul node i (tsr_tile_bsr_density), measured once. */
double tsr_exec_bsr_density(tsr_exec_t *o, int32_t i);

/* Runs the matmul group that starts at node `leader` over R rows:
 * outs[i] (R, n_i) = x (R, k) . W_i^T for each member i, placed by `plan`. */
/* Mixture of experts: every TSR_MOE_REPLAN_PASSES passes (auto offload,
 * devices on), the plans are built again from the experts' recent
 * popularity and the newly placed experts' weights uploaded; called before
 * a pass, under the engine's lock. */
#define TSR_MOE_REPLAN_PASSES 64
tsr_status_t tsr_exec_moe_replan(tsr_exec_t *o);

tsr_status_t tsr_exec_matmul_group(tsr_exec_t *o, const tsr_plan_t *plan, int32_t leader,
                                   int32_t R, const float *x, float *const *outs,
                                   const tsr_offload_scratch_t *sc);

/* Device copies of a sequence's int8 KV cache, where the plans put its
 * layers' attention (exec.c). Failure to allocate is not an error with
 * fallback on: that layer's attention runs on the host for the sequence. */
tsr_status_t tsr_exec_seq_attach(tsr_exec_t *o, tsr_seq_t *s);
void tsr_exec_seq_detach(tsr_exec_t *o, tsr_seq_t *s);

/* Appends k, v (T, kv_dim) of positions pos0.. to layer l of the
 * sequence's int8 cache, host and device copies. */
tsr_status_t tsr_exec_kv_append(tsr_exec_t *o, tsr_seq_t *s, int32_t l, int32_t pos0,
                                int32_t T, const float *k, const float *v);

/* int8 attention of layer l for T rows of sequence s at positions pos0..
 * (the cache already holds them): out (T, q_dim), on the plan's device or
 * the host. */
tsr_status_t tsr_exec_attention(tsr_exec_t *o, const tsr_plan_t *plan, int32_t node,
                                tsr_seq_t *s, int32_t pos0, int32_t T, const float *q,
                                float *out);

/* Device `e` takes work of this engine now: on, open and usable. */
static inline bool tsr_exec_dev_live(const tsr_exec_t *o, int e) {
  const tsr_exec_dev_t *d = &o->devs[e];
  return d->cd->hal && d->on && d->rs.usable;
}

/* The engine's window on device entry e: [*base, *base + *size), size 0
 * without one (for tests that forge descriptors). */
void tsr_exec_window(const tsr_exec_t *o, int e, uint64_t *base, uint64_t *size);

/* Host-time accounting and tracing of a light op. */
double tsr_exec_op_begin(tsr_exec_t *o, const tsr_node_t *n);
void tsr_exec_op_end(tsr_exec_t *o, const tsr_node_t *n, double t0);

/* report.c */
void tsr_exec_print_plan(const tsr_exec_t *o, FILE *f);
void tsr_exec_print_graph(const tsr_exec_t *o, FILE *f);
void tsr_exec_print_stats(const tsr_exec_t *o, FILE *f);
void tsr_exec_get_stats(const tsr_exec_t *o, tsr_session_stats_t *out);

/* The engine of a session (forward.c), for tests and reports. */
tsr_exec_t *tsr_session_exec(const tsr_session_t *s);

/* Query rows of one sequence whose reference attention runs together (each
 * key and value row read once for all of them); o->att holds that many
 * score rows per thread. */
#define TSR_ATTN_ROW_BLOCK 8
/* Largest head_dim of an fp16 reference KV cache (a row is converted on
 * the stack). */
#define TSR_ATTN_MAX_HEAD_DIM 1024

#endif
