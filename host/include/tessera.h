/*
 * tessera.h - the public C API of libtessera.
 *
 * This is the only header an application includes. It declares:
 *   - one status type (tsr_status_t) returned by every fallible function;
 *   - opaque, typed handles: tsr_context_t, tsr_model_t, tsr_session_t,
 *     tsr_sampler_t;
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

typedef struct tsr_context_options {
  /* Worker threads for CPU kernels; 0 = one per online CPU. */
  int n_threads;
  /* Comma-separated device list; layers are split across the entries in
   * order (model parallelism). "cpu" is the host; other entries are device
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
} tsr_precision_t;

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

typedef struct tsr_session_options {
  tsr_precision_t precision;
  /* Context length of the KV cache; 0 = the model's seq_len. */
  int32_t max_seq;
  /* Attention path (default: TSR_ATTN_REFERENCE, fp32). The int8 paths
   * are placed on a device or the host by the partitioner's cost model,
   * independently of `precision`. */
  tsr_attn_pattern_t attn;
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
                                 plus the host's work around the tiles    */
  uint64_t bytes_to_device;   /* activations + descriptors (not weights)  */
  uint64_t bytes_from_device; /* results                                  */
  uint64_t weight_bytes;      /* weights uploaded at session creation     */
  uint64_t fallbacks;         /* ops (tiles) run on the CPU after a device failure */
  uint64_t retries;           /* device commands retried                  */
  double cpu_s;               /* wall time of ops run on the host         */
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
