/*
 * tessera.h - the public C API of libtessera.
 *
 * This is the only header an application includes. It declares:
 *   - one status type (tsr_status_t) returned by every fallible function;
 *   - opaque, typed handles: tsr_context_t, tsr_model_t, tsr_engine_t,
 *     tsr_seq_t, tsr_batch_t, tsr_session_t, tsr_sampler_t, and for the
 *     offload API tsr_device_t, tsr_buffer_t, tsr_event_t;
 *   - create/destroy pairs with ownership stated on every declaration.
 *
 * Conventions
 *   - A function that can fail returns tsr_status_t. NULL (TSR_OK) means
 *     success; any other value is an error the caller owns and must release
 *     with tsr_status_free() (or hand back to the library in a function that
 *     says it "consumes" a status).
 *   - Constructors take an `out_` parameter and set *out to NULL before doing
 *     anything, so a failed call never leaves a dangling handle.
 *   - "borrowed": the callee does not keep the pointer past the call, or the
 *     returned pointer stays owned by the library (valid for the stated time).
 *     "must outlive": the argument must stay alive until the object created
 *     from it is destroyed.
 *   - The library never calls exit() or abort() on bad input; it returns a
 *     status whose message names the file, offset, field or dimension.
 *
 * Threads
 *   - A context, a model and an engine may be used from several threads at
 *     once: create sequences and sessions, evaluate batches, read stats.
 *     Evaluations of one engine run one at a time (a second caller waits);
 *     engines and sessions on one context share its devices, whose commands
 *     are serialized per device, and its thread pool.
 *   - A sequence, a batch, a session or a sampler is used by one thread at
 *     a time (the caller's to ensure).
 *   - Objects are destroyed after every use of them has returned, in the
 *     reverse order of creation (sequences and sessions before their engine
 *     or model, models before their context).
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_VERSION_MAJOR 0
#define TSR_VERSION_MINOR 1
#define TSR_VERSION_PATCH 0

#if defined(__GNUC__)
#define TSR_API __attribute__((visibility("default")))
#define TSR_MUST_USE __attribute__((warn_unused_result))
#else
#define TSR_API
#define TSR_MUST_USE
#endif

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

/* Status codes. Stable numbering; new codes are appended. */
typedef enum tsr_status_code {
  TSR_STATUS_OK = 0,
  TSR_STATUS_INVALID_ARGUMENT = 1,  /* caller passed something malformed    */
  TSR_STATUS_OUT_OF_RANGE = 2,      /* index / dimension / offset too large */
  TSR_STATUS_FORMAT = 3,            /* a file or stream is malformed        */
  TSR_STATUS_NOT_FOUND = 4,         /* a file, tensor, key, device missing  */
  TSR_STATUS_UNAVAILABLE = 5,       /* backend library/hardware not present */
  TSR_STATUS_DEADLINE_EXCEEDED = 6, /* a wait or watchdog timed out         */
  TSR_STATUS_RESOURCE_EXHAUSTED = 7,/* out of host or device memory         */
  TSR_STATUS_UNIMPLEMENTED = 8,     /* feature not supported (yet/here)     */
  TSR_STATUS_IO = 9,                /* operating-system I/O error           */
  TSR_STATUS_DEVICE = 10,           /* the device reported a fault          */
  TSR_STATUS_INTERNAL = 11,         /* an invariant broke: a bug            */
} tsr_status_code_t;

/* An error: code plus a message. NULL is success. Owned by the receiver. */
typedef struct tsr_status_s *tsr_status_t;
#define TSR_OK ((tsr_status_t)NULL)

/* Code of `s` (TSR_STATUS_OK for NULL). `s` is borrowed. */
TSR_API tsr_status_code_t tsr_status_code(const struct tsr_status_s *s);
/* Message of `s`; "OK" for NULL. Borrowed: valid until `s` is freed. */
TSR_API const char *tsr_status_message(const struct tsr_status_s *s);
/* Human-readable name of a code, e.g. "FORMAT". Static storage. */
TSR_API const char *tsr_status_code_name(tsr_status_code_t code);
/* Releases `s`. NULL is accepted. */
TSR_API void tsr_status_free(tsr_status_t s);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct tsr_context tsr_context_t;

/* Which quantized matmuls go to the devices. */
typedef enum tsr_offload {
  TSR_OFFLOAD_AUTO = 0, /* where the cost model says the device is faster */
  TSR_OFFLOAD_ALL = 1,  /* every matmul a device can run                   */
  TSR_OFFLOAD_NONE = 2, /* none: the CPU reference path                    */
} tsr_offload_t;

/* How a list of several devices shares the work of a batch. */
typedef enum tsr_split {
  TSR_SPLIT_LAYERS = 0, /* each entry takes a contiguous range of layers
                           (model parallelism; activations pass through
                           the host from one entry to the next)           */
  TSR_SPLIT_ROWS = 1,   /* every device entry holds every layer's weights
                           and takes a share of each batch's rows (data
                           parallelism); "cpu" entries take a share on the
                           host                                           */
} tsr_split_t;

typedef struct tsr_context_options {
  /* Worker threads for CPU kernels; 0 = one per online CPU. */
  int n_threads;
  /* Comma-separated device list; layers are split across the entries in
   * order (model parallelism), or rows with `split`. "cpu" is the host; other entries are device
   * backends with optional options: "sim", "sim:latency=80", "opencl",
   * "xrt", "usb", "fmodel" (the functional model of the kernel).
   * Examples: "cpu", "sim", "sim,sim", "sim,cpu". NULL = "cpu". Borrowed. */
  const char *devices;
  /* When a device is absent or fails, reset it, retry, then run the op on
   * the CPU (default true). false turns every device failure into an error
   * status. Fallbacks are reported on stderr and in the session stats. */
  bool fallback;
  /* Retries of a failed device command before falling back (default 1). */
  int retries;
  /* Watchdog: longest wait for one device command in ms (default 10000). */
  uint32_t device_timeout_ms;
  tsr_offload_t offload;
  /* Per-op placement overrides, "op=where,..." with op one of attn_q,
   * attn_k, attn_v, attn_out, ffn_gate, ffn_up, ffn_down, output, attention
   * (the int8 attention of sessions with an attention pattern), or the
   * groups attn, ffn, all; where = cpu, a device name or devN (index in the
   * device list). NULL = none. Borrowed. */
  const char *placement;
  /* Chrome trace (JSON) of every session of this context, or NULL. */
  const char *trace_path;
  /* No warnings on stderr (fallbacks are still counted in the stats). */
  bool quiet;
  /* How several devices share a batch (default TSR_SPLIT_LAYERS). */
  tsr_split_t split;
  /* Run across the ranks of an MPI job (the program started by mpirun on
   * every rank, each creating its context with the same options):
   * rank 0 is the application, every other rank calls
   * tsr_context_serve_ranks() and serves it. With `mpi_split`
   * TSR_SPLIT_LAYERS the model's layers are split across the ranks in order
   * (a pipeline: each rank maps the file and loads its layers only; rank 0
   * also the embedding and the classifier) and activations pass from rank to
   * rank; with TSR_SPLIT_ROWS every rank holds the whole model and takes a
   * share of each batch's sequences. `devices` may give one list per rank,
   * separated by ';' ("fmodel;sim;cpu": rank 0 fmodel, rank 1 sim, rank 2
   * and any further cpu; a list without ';' is every rank's). Every rank
   * must be able to open the model files at the paths rank 0 gives. */
  bool mpi;
  tsr_split_t mpi_split;
  /* Longest wait for another rank, in ms (default 60000): a rank that does
   * not answer within it is reported by number and the job is broken. */
  uint32_t mpi_timeout_ms;
} tsr_context_options_t;

/* Fills `opts` with defaults (all threads, "cpu", fallback on). */
TSR_API void tsr_context_options_init(tsr_context_options_t *opts);

/* Creates a context: thread pool and device list. `opts` borrowed, may be
 * NULL for defaults. On success *out_ctx is owned by the caller and must be
 * released with tsr_context_destroy() after every model created from it. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_context_create(const tsr_context_options_t *opts, tsr_context_t **out_ctx);
/* Releases `ctx`. NULL is accepted. */
TSR_API void tsr_context_destroy(tsr_context_t *ctx);
/* Entries of the context's device list, and entry e's spec as it was given
 * ("cpu", "sim:latency=80,bw=32"); NULL for e out of range. Borrowed: valid
 * while the context lives. */
TSR_API int tsr_context_device_count(const tsr_context_t *ctx);
TSR_API const char *tsr_context_device_spec(const tsr_context_t *ctx, int e);
/* This process's rank and the number of ranks (0 and 1 without mpi). */
TSR_API int tsr_context_rank(const tsr_context_t *ctx);
TSR_API int tsr_context_ranks(const tsr_context_t *ctx);
/* On ranks other than 0 of an mpi context: loads the models and runs the
 * engines, sequences and passes rank 0 asks for, until rank 0 destroys its
 * context; then returns TSR_OK (an error if the job broke: a rank stopped
 * answering, a message was malformed). Returns TSR_OK at once on rank 0 and
 * without mpi. */
TSR_API TSR_MUST_USE tsr_status_t tsr_context_serve_ranks(tsr_context_t *ctx);

/* What one rank of an mpi context did since its context was created. */
typedef struct tsr_rank_stats {
  int32_t rank;
  int32_t layer0, layer1;  /* its layers [layer0, layer1) of the last model
                              loaded (a pipeline; all of them with rows)   */
  int32_t ends;            /* it holds the embedding and the classifier   */
  uint64_t msgs_sent, msgs_recv;
  uint64_t bytes_sent, bytes_recv; /* every message, headers included     */
  uint64_t act_bytes_sent; /* activations, tokens and logits only         */
  uint64_t passes;         /* micro-batches or batch shares it computed    */
  double wait_s;           /* blocked on a message or a send to complete   */
  double busy_s;           /* computing passes                             */
  char devices[128];       /* its device list                              */
} tsr_rank_stats_t;

/* Rank 0 of an mpi context: out[r] for every rank r < tsr_context_ranks()
 * (asked of each rank, with the timeout). Without mpi: INVALID_ARGUMENT. */
TSR_API TSR_MUST_USE tsr_status_t tsr_context_rank_stats(tsr_context_t *ctx,
                                                         tsr_rank_stats_t *out);

/* ------------------------------------------------------------------------ */
/* Model                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct tsr_model tsr_model_t;

typedef enum tsr_model_format {
  TSR_MODEL_FORMAT_AUTO = 0,   /* decided from the file's magic            */
  TSR_MODEL_FORMAT_LLAMA2C = 1,/* llama2.c legacy .bin checkpoint          */
  TSR_MODEL_FORMAT_GGUF = 2,   /* GGUF v3, llama architecture              */
} tsr_model_format_t;

typedef struct tsr_model_config {
  int32_t dim;          /* embedding width                                 */
  int32_t hidden_dim;   /* FFN inner width                                 */
  int32_t n_layers;
  int32_t n_heads;      /* query heads                                     */
  int32_t n_kv_heads;   /* key/value heads (grouped-query attention)       */
  int32_t head_dim;     /* dim / n_heads                                   */
  int32_t vocab_size;
  int32_t seq_len;      /* maximum context length                          */
  float rms_eps;        /* RMSNorm epsilon                                 */
  float rope_theta;     /* RoPE frequency base                             */
  bool shared_classifier; /* output projection shares token embedding      */
  tsr_model_format_t format;
  int32_t n_experts;      /* Mixture-of-Experts FFN: experts per layer (0 =
                             a dense FFN of hidden_dim)                      */
  int32_t n_experts_used; /* experts each token is routed to (top-k)         */
} tsr_model_config_t;

/* Loads a model file. `tokenizer_path` may be NULL for GGUF (the tokenizer
 * is embedded); llama2.c checkpoints need a llama2.c tokenizer file. The file
 * is memory-mapped where the format allows. `ctx` must outlive the model.
 * Paths are borrowed. On success the caller owns *out_model
 * (tsr_model_destroy). Malformed files give TSR_STATUS_FORMAT with the field
 * and byte offset in the message. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_model_load(tsr_context_t *ctx, const char *path, const char *tokenizer_path,
               tsr_model_t **out_model);
/* Releases `model`. Every session on it must be destroyed first. */
TSR_API void tsr_model_destroy(tsr_model_t *model);
/* Copies the model's configuration into *out. */
TSR_API void tsr_model_config(const tsr_model_t *model, tsr_model_config_t *out);

/* Tokenizes UTF-8 `text` (borrowed) into `tokens` (capacity `cap`), adding
 * BOS/EOS if asked. *n_tokens receives the count. Fails with OUT_OF_RANGE if
 * `cap` is too small. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_model_tokenize(const tsr_model_t *model, const char *text, bool add_bos,
                   bool add_eos, int32_t *tokens, size_t cap, size_t *n_tokens);
/* Text of `token` following `prev_token` (the leading space after BOS is
 * dropped, byte tokens become their byte). Borrowed: valid while the model
 * lives. Returns NULL for an out-of-range token. */
TSR_API const char *tsr_model_token_piece(const tsr_model_t *model,
                                          int32_t prev_token, int32_t token);
TSR_API int32_t tsr_model_bos(const tsr_model_t *model);
TSR_API int32_t tsr_model_eos(const tsr_model_t *model);

/* ------------------------------------------------------------------------ */
/* Session: one sequence, its KV cache and scratch buffers                   */
/* ------------------------------------------------------------------------ */

typedef struct tsr_session tsr_session_t;

typedef enum tsr_precision {
  TSR_PRECISION_FP32 = 0, /* fp32 matmuls through BLAS                      */
  TSR_PRECISION_INT8 = 1, /* W8A8: int8 weights per channel, int8 acts per row */
  TSR_PRECISION_FP16 = 2, /* fp16 weights (the file's, or converted), fp32
                             activations and sums; CPU only                */
  TSR_PRECISION_BF16 = 3, /* bf16 weights and activations (rounded to nearest
                             even per matmul), fp32 sums; CPU only         */
} tsr_precision_t;

/* "fp32", "int8", "fp16", "bf16" (the --precision spellings), or "?". */
TSR_API const char *tsr_precision_name(tsr_precision_t p);

/* Storage of the reference attention's KV cache (TSR_ATTN_REFERENCE). */
typedef enum tsr_kv_type {
  TSR_KV_F32 = 0, /* fp32: the attention as the reference computes it        */
  TSR_KV_F16 = 1, /* fp16 (round to nearest even): half the memory and the
                     bytes read per decoded token; keys and values are
                     rounded, the arithmetic stays fp32                     */
  TSR_KV_Q8 = 2,  /* int8 with one fp32 scale per position and KV head (the
                     int8 path's quantization rule): a quarter of the bytes
                     of fp32; rows widened to fp32 for the arithmetic      */
} tsr_kv_type_t;

/* Attention paths. TSR_ATTN_REFERENCE is the fp32 attention of the
 * reference implementation. Every other kind runs int8 block-sparse
 * attention: per head, Q and the KV cache are quantized per token (int8 +
 * one scale per row), the KV cache is split into blocks of `block` keys and
 * a pattern decides which (query block, key block) pairs are computed; the
 * others are never fetched nor computed (probability 0). Scores S = Q.K^T
 * and O = P.V of the active pairs run as int8 GEMMs on a device or on the
 * host (the same integers either way); scaling by 1/sqrt(head_dim), the
 * causal mask, softmax and the quantization of P run on the host.
 * All sizes below are in blocks; key blocks after the query's block never
 * count (causal). */
typedef enum tsr_attn_kind {
  TSR_ATTN_REFERENCE = 0, /* fp32, dense, the default                     */
  TSR_ATTN_DENSE = 1,     /* int8, every causal block                     */
  TSR_ATTN_WINDOW = 2,    /* the last `window` blocks (the query's own
                             included) plus the first `sinks` blocks
                             (sliding window with attention sinks)          */
  TSR_ATTN_STRIDED = 3,   /* the last `local` blocks plus every block kb
                             with kb % stride == stride - 1 (the fixed
                             pattern of the Sparse Transformer)             */
  TSR_ATTN_TOPK = 4,      /* per query block, the query's own block plus the
                             topk - 1 blocks of highest upper bound
                             sum_d max(q_d min_d, q_d max_d) over the int8
                             per-channel key minima and maxima of the block
                             (Quest); ties go to the later block            */
} tsr_attn_kind_t;

typedef struct tsr_attn_pattern {
  tsr_attn_kind_t kind;
  int32_t block;  /* keys per block, >= 1 (default 16)                    */
  int32_t window; /* TSR_ATTN_WINDOW: blocks in the window, >= 1          */
  int32_t sinks;  /* TSR_ATTN_WINDOW: leading sink blocks, >= 0           */
  int32_t stride; /* TSR_ATTN_STRIDED: >= 1                               */
  int32_t local;  /* TSR_ATTN_STRIDED: recent blocks kept, >= 1 (default 1) */
  int32_t topk;   /* TSR_ATTN_TOPK: blocks per query block, >= 1          */
} tsr_attn_pattern_t;

/* Parses a pattern: "ref", "dense", "window:W[,sinks:S]", "strided:S[,local:L]"
 * or "topk:K", each optionally followed by ",block:B". Errors name the
 * field and the value. `spec` borrowed. */
TSR_API TSR_MUST_USE tsr_status_t tsr_attn_pattern_parse(const char *spec,
                                                         tsr_attn_pattern_t *out);
/* Writes the canonical spec of `p` (as parse accepts it) into buf. */
TSR_API void tsr_attn_pattern_format(const tsr_attn_pattern_t *p, char *buf, size_t cap);

#define TSR_WINDOW_AUTO UINT64_MAX

typedef struct tsr_session_options {
  tsr_precision_t precision;
  /* Context length of the KV cache; 0 = the model's seq_len. */
  int32_t max_seq;
  /* Attention path (default: TSR_ATTN_REFERENCE, fp32). The int8 paths
   * are placed on a device or the host by the partitioner's cost model,
   * independently of `precision`. */
  tsr_attn_pattern_t attn;
  /* Rows (tokens of all sequences together) per forward pass; larger
   * batches run as several passes. 0 = 64 for a session, 256 for an
   * engine. Range [1, 4096]. */
  int32_t max_batch_rows;
  /* Device-memory window per device, in bytes. 0 (default): the engine's
   * buffers come from the whole device memory and each launch's window
   * covers the buffers it touches. > 0: on every device it uses the engine
   * reserves one region of this size; all its buffers (weights, staging,
   * KV caches) lie inside, and every launch passes the region as the
   * kernel's window (MEM_BASE, MEM_SIZE), so the kernel itself refuses a
   * descriptor that points outside it: engines with windows are isolated
   * from each other by the kernel. The partitioner's memory budget is the
   * window. A device without room for the window is not used (fallback on)
   * or fails the engine. TSR_WINDOW_AUTO: sized per device for the most
   * the engine could keep there (staging, every matmul's weights, the KV
   * caches the partitioner reserves room for). */
  uint64_t device_window_bytes;
  /* Context device entries the engine starts with (bit e = entry e; see
   * tsr_engine_set_devices). Default (tsr_session_options_init): all. */
  uint64_t device_mask;
  /* In an mpi context split into a pipeline of layers: micro-batches in
   * flight at once (each rank works on one while the next rank works on
   * the one before). 0 (default) = one per rank; 1 = one at a time (the
   * ranks never compute together). Range [0, 1024]; more than the ranks
   * count as the ranks. */
  int32_t mpi_depth;
  /* The reference attention's KV cache (default TSR_KV_F32). The int8
   * attention patterns keep their own int8 cache and ignore it. */
  tsr_kv_type_t kv_type;
} tsr_session_options_t;

TSR_API void tsr_session_options_init(tsr_session_options_t *opts);

/* Creates a session on `model` (must outlive the session). `opts` borrowed,
 * NULL for defaults. The caller owns *out_session. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_session_create(tsr_model_t *model, const tsr_session_options_t *opts,
                   tsr_session_t **out_session);
TSR_API void tsr_session_destroy(tsr_session_t *session);

/* Runs `n` tokens (borrowed) at the session's next positions: n > 1 is a
 * batched prefill, n == 1 a decode step. *out_logits (optional) receives the
 * logits of the last token, vocab_size floats, borrowed until the next call
 * on this session. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_session_eval(tsr_session_t *session, const int32_t *tokens, size_t n,
                 const float **out_logits);
/* Prints how the session's graph is placed: every node with its device and
 * the cause, and the projected time split (CPU, transfers, device) per
 * evaluation, for the decode (1 row) and prefill (`prefill_rows`) shapes. */
TSR_API void tsr_session_print_plan(const tsr_session_t *session, FILE *f);

/* Prints both graphs node by node, light ops included, with placements. */
TSR_API void tsr_session_print_graph(const tsr_session_t *session, FILE *f);

/* What ran where so far. */
typedef struct tsr_session_stats {
  uint64_t device_calls;      /* launches sent to devices                 */
  uint64_t device_tiles;      /* descriptors executed by devices          */
  uint64_t device_cycles;     /* busy cycles reported by the devices      */
  double device_projected_s;  /* those cycles at each device's clock      */
  double board_projected_s;   /* what the devices would take on their
                                 boards: cycles at the clock, plus each
                                 launch's latency, plus every host<->device
                                 copy at the link's latency and bandwidth,
                                 plus the runtime's host work around the
                                 launches (not the backend's own copy and
                                 submit time, which the link model stands
                                 for)                                     */
  uint64_t bytes_to_device;   /* activations + descriptors (not weights)  */
  uint64_t bytes_from_device; /* results                                  */
  uint64_t weight_bytes;      /* weights resident on the devices now       */
  uint64_t fallbacks;         /* ops (tiles) run on the CPU after a device failure */
  uint64_t retries;           /* device commands retried                  */
  double cpu_s;               /* wall time of ops run on the host         */
  double light_s;             /* of which the light ops (everything but the
                                 matmuls: norms, RoPE, attention, SwiGLU,
                                 residuals, the classifier's softmax)     */
  /* int8 block-sparse attention (zero with the reference path) */
  uint64_t attn_blocks;       /* (query block, key block) pairs computed  */
  uint64_t attn_dense_blocks; /* pairs a dense causal mask would compute  */
  uint64_t attn_kv_bytes;     /* int8 K and V bytes the pairs read        */
  uint64_t attn_rows;         /* query rows (tokens x layers)             */
} tsr_session_stats_t;

TSR_API void tsr_session_get_stats(const tsr_session_t *session, tsr_session_stats_t *out);
/* Prints per-op placement, bytes moved, device cycles and projected time,
 * and CPU time. */
TSR_API void tsr_session_print_stats(const tsr_session_t *session, FILE *f);

/* Number of positions already in the KV cache. */
TSR_API int32_t tsr_session_pos(const tsr_session_t *session);
/* Forgets the KV cache (position 0). */
TSR_API void tsr_session_reset(tsr_session_t *session);

/* ------------------------------------------------------------------------ */
/* Engine, sequences and batches: many sequences in one forward pass         */
/* ------------------------------------------------------------------------ */

/* An engine holds what the sequences of one model share: the planned
 * graph, the weights resident on the devices, the staging buffers. A
 * sequence is one stream of tokens: its KV cache and position. A batch is
 * any mix of prefill chunks and decode steps of many sequences, evaluated
 * in one forward pass: matmuls take the rows of every entry stacked (one
 * GEMM, one device launch per matmul group), attention runs per sequence
 * over its own cache.
 *
 * Equality: an entry's logits do not depend on the other entries of its
 * batch. With int8 precision they are bit-identical to those of the same
 * sequence evaluated alone with the same chunks; with fp32 the BLAS kernel
 * may round differently for a different number of rows (observed: a few
 * 1e-7 of the logits' range; the tests allow 1e-4). With the
 * topk attention pattern the key blocks chosen for a query block depend on
 * the rows of that block evaluated together, so equality holds for the same
 * chunking of the sequence (any other pattern: any chunking). */
typedef struct tsr_engine tsr_engine_t;
typedef struct tsr_seq tsr_seq_t;
typedef struct tsr_batch tsr_batch_t;

/* Creates an engine on `model` (must outlive it) with the precision,
 * attention pattern, context length per sequence and rows per pass of
 * `opts` (borrowed, NULL for defaults; tsr_session_options_init). Weights
 * are quantized and uploaded here. The caller owns *out_engine. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_engine_create(tsr_model_t *model, const tsr_session_options_t *opts,
                  tsr_engine_t **out_engine);
/* Releases `engine`; its sequences must be destroyed first. NULL accepted. */
TSR_API void tsr_engine_destroy(tsr_engine_t *engine);

/* A new sequence at position 0 with a KV cache of the engine's max_seq
 * positions (host, and device memory where the plan runs attention on a
 * device). The caller owns *out_seq; the engine must outlive it. */
TSR_API TSR_MUST_USE tsr_status_t tsr_seq_create(tsr_engine_t *engine, tsr_seq_t **out_seq);
/* Releases `seq` (NULL accepted). Other sequences are unaffected. */
TSR_API void tsr_seq_destroy(tsr_seq_t *seq);
/* Forgets the sequence's cache (position 0); the sequence then evaluates
 * exactly as a new one. */
TSR_API void tsr_seq_reset(tsr_seq_t *seq);
/* Positions already in the sequence's cache. */
TSR_API int32_t tsr_seq_pos(const tsr_seq_t *seq);

/* A batch of up to `max_entries` entries (grows as needed if 0). The
 * caller owns *out_batch (tsr_batch_destroy). */
TSR_API TSR_MUST_USE tsr_status_t tsr_batch_create(size_t max_entries, tsr_batch_t **out_batch);
TSR_API void tsr_batch_destroy(tsr_batch_t *batch);
/* Empties the batch (entries and logits). */
TSR_API void tsr_batch_clear(tsr_batch_t *batch);
/* Adds an entry: `n` tokens (copied) of `seq` (borrowed: it must stay alive
 * until the batch is cleared or destroyed) at its next positions;
 * n == 1 is a decode step, n > 1 a prefill chunk. `want_logits` asks for
 * the logits of the entry's last token. A sequence appears at most once
 * per batch. *out_index (optional) receives the entry's index. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_batch_add(tsr_batch_t *batch, tsr_seq_t *seq, const int32_t *tokens, size_t n,
              bool want_logits, size_t *out_index);
/* Entries in the batch. */
TSR_API size_t tsr_batch_size(const tsr_batch_t *batch);

/* Evaluates every entry of `batch` on `engine` (the engine of each entry's
 * sequence) in one forward pass, or several when the batch has more rows
 * than the engine's max_batch_rows; each sequence's position advances by
 * its entry's tokens. On error no sequence of the failed pass advances
 * (passes before it did; the message names the entries of the failed
 * pass). */
TSR_API TSR_MUST_USE tsr_status_t tsr_engine_eval(tsr_engine_t *engine, tsr_batch_t *batch);
/* Logits (vocab_size floats) of entry `index`'s last token after
 * tsr_engine_eval, or NULL if the entry did not ask for them or the index
 * is out of range. Borrowed: valid until the batch is cleared, destroyed
 * or evaluated again. */
TSR_API const float *tsr_batch_logits(const tsr_batch_t *batch, size_t index);

/* Turns the engine's use of the context's device entries on or off from
 * its next evaluation on: bit e of `mask` is entry e (entries beyond 63 are
 * always on; "cpu" entries are the host and always on). A device turned on
 * gets the weights its plans need uploaded now (into the engine's window)
 * unless they are still there; one turned off is drained (no launch of the
 * engine is in flight between evaluations) and its weights are released
 * unless its bit is set in `keep` (a device left idle for a while keeps
 * them, a device given back does not). The work the plans give a
 * device that is off runs on the other devices of a rows split that are on,
 * or on the host; the results are the same either way (int8 work is
 * bit-exact on every device and the host). A sequence's int8 KV copy on a
 * device that was turned off is not updated again: that sequence's
 * attention runs on the host from then on. Safe while other threads
 * evaluate (it waits for their pass). */
TSR_API TSR_MUST_USE tsr_status_t tsr_engine_set_devices(tsr_engine_t *engine, uint64_t mask,
                                                         uint64_t keep);
/* Bit e set: the engine uses entry e now (on, open, not given up after
 * failures). */
TSR_API uint64_t tsr_engine_devices(const tsr_engine_t *engine);

/* Like the tsr_session_* reports, for the engine (all its sequences). The
 * plan shows the placement for every batch size the partitioner costed,
 * so where the devices start to pay as the batch grows. */
TSR_API void tsr_engine_print_plan(const tsr_engine_t *engine, FILE *f);
TSR_API void tsr_engine_print_stats(const tsr_engine_t *engine, FILE *f);
TSR_API void tsr_engine_get_stats(const tsr_engine_t *engine, tsr_session_stats_t *out);

/* ------------------------------------------------------------------------ */
/* Offload: devices, buffers and int8 GEMM commands for any application     */
/* ------------------------------------------------------------------------ */

/* The co-processor without a model. An application opens a device through
 * a context, keeps int8 and int32 matrices in its memory and queues GEMMs:
 *
 *   C (M x N, int32) = A (M x K, int8) . W (N x K, int8)^T
 *   C[i*ldc + j] = sum_{l<K} A[i*lda + l] * W[j*ldw + l]
 *
 * (W holds one output column per row, as the runtime's weights do.) The
 * integers are bit-identical on every device and on the host, so the
 * context's policy applies as it does to models: a command that fails or
 * outlives `device_timeout_ms` (the watchdog: the time waited on it while
 * it is the oldest unfinished command of its device) makes the device
 * reset, and the command is retried `retries` times, then computed on the
 * host; every
 * fallback is counted in the device stats and reported on stderr unless the
 * context is `quiet`. With `fallback` off the failure is the command's
 * status instead. A device that reports itself gone (UNAVAILABLE) is not
 * retried, nor is one that failed 3 commands in a row: with fallback on,
 * its later commands run on the host.
 *
 * Host shadow: to compute a failed command on the host, the library keeps a
 * host copy of every buffer (what tsr_buffer_write wrote, and the results
 * of commands once they are read back or needed): a buffer costs its size
 * in host memory as well as in device memory.
 *
 * Attention: the descriptor format has one compute opcode (GEMM_I8_I32 in
 * hw/regmap.def), so attention tiles are ordinary GEMMs here: the scores
 * S = Q . K^T with A = Q and W = K, and O = P . V with A = the int8
 * probabilities and W = V transposed (one row per head channel). There is
 * no separate attention command.
 *
 * Threads: a device, its buffers and its events may be used from several
 * threads at once; calls on one device are serialized inside (the device's
 * lock), and a wait lets other threads' calls in while it waits. Destroying
 * an object must not race with other calls on that object.
 *
 * Ordering: commands of one device run in the order they were queued. A
 * read of a buffer first finishes the queued commands that write it, a
 * write first finishes those that use it, so copies never race with the
 * device. Waiting on an event finishes the earlier commands too (their
 * outcome stays in their events). */

typedef struct tsr_device tsr_device_t;
typedef struct tsr_buffer tsr_buffer_t;
typedef struct tsr_event tsr_event_t;

/* One backend compiled into this library, probed on this machine. */
typedef struct tsr_device_info {
  char name[16];         /* spec name: "fmodel", "sim", "opencl", "xrt", "usb" */
  bool available;        /* it opens here and computes                  */
  char description[64];  /* when available, e.g. "sim (Verilator RTL, 16x16)" */
  char reason[320];      /* when not: why (the open error, or "computes
                            nothing" for a host-flow-only shim)          */
} tsr_device_info_t;

/* Probes every backend (opens and closes it) in preference order, the
 * functional model last, as `tessera devices` does. Fills up to `cap`
 * entries of `infos` (borrowed; may be NULL when cap is 0) and sets
 * *out_count to the number of backends. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_device_list(tsr_device_info_t *infos, size_t cap, size_t *out_count);

/* Opens a device by spec: "fmodel", "sim", "sim:latency=80", "opencl",
 * "fmodel:hang=2", ... (the names and options of the context's `devices`;
 * "cpu" is the host, not a device). `ctx` must outlive the device; its
 * fallback, retries, device_timeout_ms and quiet options apply to every
 * command. If `ctx` was created with the same spec in its device list, the
 * device is that entry's: one HAL device and one lock shared with the
 * context's sessions (a board opens once, and its memory is one budget;
 * a reset after a failure also drops the sessions' queued launches, which
 * they retry); otherwise a new instance is opened. Opening a spec already open through
 * this API on `ctx` returns the same device with its reference count
 * raised. UNAVAILABLE (with the reason) when the backend is absent here or
 * computes nothing; fallback does not apply to opening. `spec` borrowed.
 * On success the caller owns *out_dev (tsr_device_close). */
TSR_API TSR_MUST_USE tsr_status_t
tsr_device_open(tsr_context_t *ctx, const char *spec, tsr_device_t **out_dev);
/* Drops one reference; the last one finishes every queued command, then
 * releases the device. Its buffers and events must be destroyed first.
 * NULL is accepted. */
TSR_API void tsr_device_close(tsr_device_t *dev);
/* The spec the device was opened with. Borrowed: valid while it is open. */
TSR_API const char *tsr_device_name(const tsr_device_t *dev);

typedef struct tsr_device_caps {
  char name[64];          /* e.g. "fmodel (functional model, 16x16)"      */
  uint32_t array_rows;    /* MAC array rows (M direction)                 */
  uint32_t array_cols;    /* MAC array columns (N direction)              */
  uint32_t max_dim;       /* largest M, N, K of one descriptor; a command
                             splits M and N, K must not exceed it          */
  uint64_t mem_size;      /* device memory in bytes                        */
  double clock_hz;        /* the clock cycle counts refer to (stated)      */
} tsr_device_caps_t;

/* Copies the device's capabilities into *out. */
TSR_API void tsr_device_get_caps(const tsr_device_t *dev, tsr_device_caps_t *out);

/* What the device did through this API since it was opened (every handle
 * of a shared device; model sessions count their own work). */
typedef struct tsr_device_stats {
  uint64_t commands;          /* GEMM commands queued                      */
  uint64_t launches;          /* commands finished on the device           */
  uint64_t descriptors;       /* descriptors those launches ran            */
  uint64_t cycles;            /* device busy cycles of those launches      */
  uint64_t fallbacks;         /* commands computed on the host instead     */
  uint64_t retries;           /* launches retried after a reset            */
  uint64_t resets;            /* device resets                             */
  uint64_t bytes_to_device;   /* host -> device copies, descriptors included */
  uint64_t bytes_from_device; /* device -> host copies                     */
} tsr_device_stats_t;

TSR_API void tsr_device_get_stats(tsr_device_t *dev, tsr_device_stats_t *out);

/* Number of the context's device entries, and the engine's own use of entry
 * e since it was created (launches, descriptors, cycles, retries, resets,
 * host fallbacks; `commands` counts launches; bytes_to_device counts the
 * copies of both directions, bytes_from_device is 0). false for an entry
 * out of range or the host. */
TSR_API int tsr_engine_device_count(const tsr_engine_t *engine);
TSR_API bool tsr_engine_device_stats(const tsr_engine_t *engine, int e, tsr_device_stats_t *out);

/* Element type of a buffer. */
typedef enum tsr_buffer_type {
  TSR_BUFFER_BYTES = 0, /* raw bytes; usable as an int8 operand (A, W)    */
  TSR_BUFFER_I8 = 1,    /* int8 matrix: A or W of a GEMM                  */
  TSR_BUFFER_I32 = 2,   /* int32 matrix: C of a GEMM                      */
} tsr_buffer_type_t;

/* Allocates rows x cols elements of `type` (row-major, rows of `cols`
 * elements; for BYTES, rows x cols bytes) in the device's memory and as
 * many bytes of host shadow, both zeroed. `label` (borrowed, copied; NULL
 * for "buffer N") names it in error messages. If the device memory cannot
 * be had (full, or the device is gone) and fallback is on, the buffer lives
 * on the host only (warned) and every command using it runs on the host.
 * `dev` must outlive the buffer. The caller owns *out_buf. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_buffer_create(tsr_device_t *dev, tsr_buffer_type_t type, size_t rows, size_t cols,
                  const char *label, tsr_buffer_t **out_buf);
/* Finishes the queued commands that use `buf`, then releases it. NULL is
 * accepted. */
TSR_API void tsr_buffer_destroy(tsr_buffer_t *buf);
/* Size in bytes. */
TSR_API size_t tsr_buffer_size(const tsr_buffer_t *buf);

/* Host -> device copy of `bytes` bytes from `src` (borrowed) to byte
 * `offset` of the buffer (and its shadow). Offset and length must lie in
 * the buffer and, for int32 buffers, be multiples of 4; OUT_OF_RANGE or
 * INVALID_ARGUMENT name the buffer, offset and size. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_buffer_write(tsr_buffer_t *buf, size_t offset, const void *src, size_t bytes);
/* Device -> host copy of `bytes` bytes at byte `offset` into `dst`
 * (borrowed); same checks. Reads the device copy, or the host shadow when
 * the latest contents are there (a command computed on the host). */
TSR_API TSR_MUST_USE tsr_status_t
tsr_buffer_read(tsr_buffer_t *buf, size_t offset, void *dst, size_t bytes);

/* One GEMM command: C = A . W^T as above. Offsets and leading dimensions
 * count elements of the buffer (bytes for int8 and BYTES buffers, int32
 * for C); a leading dimension of 0 means packed (lda = ldw = k, ldc = n).
 * Every operand must lie in its buffer; all three belong to one device. */
typedef struct tsr_gemm {
  size_t m, n, k;          /* each >= 1; k <= the device's max_dim       */
  tsr_buffer_t *a;         /* int8 or BYTES: A[i][l] at a_offset + i*lda + l */
  size_t a_offset, lda;    /* lda >= k                                  */
  tsr_buffer_t *w;         /* int8 or BYTES: W[j][l] at w_offset + j*ldw + l */
  size_t w_offset, ldw;    /* ldw >= k                                  */
  tsr_buffer_t *c;         /* int32: C[i][j] at c_offset + i*ldc + j      */
  size_t c_offset, ldc;    /* ldc >= n                                  */
} tsr_gemm_t;

/* Queues `g` (borrowed; the buffers must outlive the command) on `dev` and
 * returns at once with *out_event (owned by the caller: tsr_event_destroy)
 * for it. Argument errors name the operand and dimension. Device failures
 * are not reported here but by tsr_event_wait (with fallback off), except
 * that a device already gone gives UNAVAILABLE at once. A command that must
 * run on the host (host-only buffer, device gone) runs before this returns,
 * after the commands queued before it. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_gemm_enqueue(tsr_device_t *dev, const tsr_gemm_t *g, tsr_event_t **out_event);

typedef enum tsr_event_state {
  TSR_EVENT_PENDING = 0,   /* queued or running                            */
  TSR_EVENT_DONE = 1,      /* finished on the device                       */
  TSR_EVENT_DONE_HOST = 2, /* computed on the host after the device failed
                              (or could not hold a buffer): a fallback      */
  TSR_EVENT_FAILED = 3,    /* failed with fallback off: tsr_event_wait says why;
                              C's region is undefined                       */
} tsr_event_state_t;

typedef struct tsr_event_info {
  tsr_event_state_t state;
  uint64_t cycles;       /* device busy cycles of the launch that finished it
                            (0 unless DONE)                                */
  uint32_t descriptors;  /* GEMM descriptors of the command                */
  uint32_t retries;      /* retries this command took                      */
} tsr_event_info_t;

/* Waits until the command finished or `timeout_ms` passed
 * (TSR_WAIT_FOREVER: no limit; 0: only look). TSR_OK when it finished on
 * the device or on the host; DEADLINE_EXCEEDED when the time ran out first
 * (the command stays queued: wait again); the command's failure (the same
 * status on every call) when it FAILED. A device failure found here is
 * recovered here (reset, retries, host fallback), which can take up to
 * (retries + 1) x device_timeout_ms beyond `timeout_ms`. */
#define TSR_WAIT_FOREVER UINT32_MAX
TSR_API TSR_MUST_USE tsr_status_t tsr_event_wait(tsr_event_t *ev, uint32_t timeout_ms);
/* Copies the event's state and counters into *out without waiting (a
 * finished launch is noticed; a simulated device advances only inside
 * waits). */
TSR_API void tsr_event_query(tsr_event_t *ev, tsr_event_info_t *out);
/* Releases `ev`. A command still queued keeps running and is finished by
 * later calls on the device. NULL is accepted. */
TSR_API void tsr_event_destroy(tsr_event_t *ev);

/* ------------------------------------------------------------------------ */
/* Sampler                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct tsr_sampler tsr_sampler_t;

/* temperature 0 = greedy (argmax); otherwise softmax(logits / temperature),
 * then nucleus sampling when 0 < top_p < 1. The RNG is seeded with `seed`
 * (xorshift64*, as llama2.c) so a seed always gives the same tokens. */
TSR_API TSR_MUST_USE tsr_status_t
tsr_sampler_create(int32_t vocab_size, float temperature, float top_p,
                   uint64_t seed, tsr_sampler_t **out_sampler);
TSR_API void tsr_sampler_destroy(tsr_sampler_t *sampler);
/* Picks a token from `logits` (vocab_size floats). The logits are used as
 * scratch and modified. */
TSR_API int32_t tsr_sampler_sample(tsr_sampler_t *sampler, float *logits);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
