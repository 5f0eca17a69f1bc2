/*
 * attn.h - int8 block-sparse attention: patterns, the int8 KV cache and the
 * pipeline shared by the host reference and every device.
 *
 * Internal header. One call (tsr_attn_forward) evaluates T query rows at
 * positions pos0.. of one layer against the cache:
 *
 *   1. Q is quantized per row and head (tsr_quantize_rows on each head's
 *      slice): Qq (n_heads, T, hs) int8 + scale s_q.
 *   2. The rows are split into segments, one per query block qb = pos / B;
 *      the pattern (attn_pattern.c) gives each (head, segment) its active
 *      key blocks. Every active pair (h, segment, kb) is a "pair".
 *   3. Scores, one GEMM per pair (one device descriptor): C = A . W^T with
 *      A = the segment's Qq rows (m x hs), W = the K cache rows of block kb
 *      that are causal for the segment (nk x hs), int32 m x nk, written
 *      back to back in pair order ("score partials").
 *   4. Host: S = C * s_q[row] * s_k[key] (tsr_dequantize), / sqrt(hs),
 *      causal mask, softmax over the row's active keys; P' = P * s_v[key]
 *      quantized per row (int8 + scale s_p), stored per pair as m x nk.
 *   5. Values, one GEMM per pair: A = the pair's P' block (m x nk), W = the
 *      V^T tile of block kb of kv head g (the cache keeps V transposed in
 *      tiles of hs x B, keys contiguous: a block is one contiguous read of
 *      hs rows of nk keys at stride B), int32 m x hs ("PV partials").
 *   6. Host: the partials of a row are summed in int32 (exact) and
 *      dequantized once with s_p (tsr_dequantize, w_scale = 1).
 *
 * Steps 3 and 5 are what a backend runs (tsr_attn_backend_t); the host
 * backend runs the same descriptors with tsr_qgemm_strided, so every
 * backend yields the same integers and hence the same floats.
 */
#ifndef TSR_ATTN_H
#define TSR_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "driver/kernel_model.h"

#define TSR_ATTN_DEFAULT_BLOCK 16

typedef struct tsr_attn_dims {
  int32_t n_heads, n_kv_heads, head_dim, max_seq, block;
} tsr_attn_dims_t;

static inline int32_t tsr_attn_n_kb(const tsr_attn_dims_t *d) {
  return (d->max_seq + d->block - 1) / d->block;
}

/* ---- patterns (attn_pattern.c) ---- */

tsr_status_t tsr_attn_pattern_check(const tsr_attn_pattern_t *p);
/* For the static kinds (dense, window, strided): is key block kb active for
 * query block qb (kb <= qb)? */
bool tsr_attn_static_active(const tsr_attn_pattern_t *p, int32_t qb, int32_t kb);
/* Active pairs of query block qb for a static pattern (out of qb + 1). */
int32_t tsr_attn_static_count(const tsr_attn_pattern_t *p, int32_t qb);

/* ---- the int8 KV cache of one layer (host copy) ---- */

typedef struct tsr_attn_cache {
  int8_t *k;         /* (n_kv, max_seq, hs): one row per key            */
  int8_t *vt;        /* (n_kv, n_kb, hs, block): V transposed per block, so
                        a block is one contiguous hs x block tile with its
                        keys contiguous */
  float *k_scale;    /* (n_kv, max_seq) */
  float *v_scale;    /* (n_kv, max_seq) */
  int8_t *kmin, *kmax; /* (n_kv, n_kb, hs): per block and channel, over the
                          keys appended so far (topk statistics) */
} tsr_attn_cache_t;

tsr_status_t tsr_attn_cache_init(tsr_attn_cache_t *c, const tsr_attn_dims_t *d);
void tsr_attn_cache_free(tsr_attn_cache_t *c);
/* Quantizes keys k and values v (T, n_kv*hs) of positions pos0.. into the
 * cache (per token and kv head) and updates the block statistics. */
void tsr_attn_cache_append(tsr_attn_cache_t *c, const tsr_attn_dims_t *d, const float *k,
                           const float *v, int32_t pos0, int32_t T);

/* ---- one call's work ---- */

typedef struct tsr_attn_pair {
  int32_t h;      /* query head */
  int32_t r0, m;  /* rows of the segment (chunk-relative) */
  int32_t qb, kb; /* query block, key block */
  int32_t nk;     /* keys of block kb the segment can see (causal) */
  uint64_t s_off; /* score partial: element offset in s (m x nk) */
  uint64_t p_off; /* P' block: byte offset in p (m x nk) */
  uint64_t o_off; /* PV partial: element offset in o (m x hs) */
} tsr_attn_pair_t;

/* Which key blocks are active, for tests: overrides the pattern. */
typedef bool (*tsr_attn_mask_fn)(void *arg, int32_t head, int32_t qb, int32_t kb);

typedef struct tsr_attn_work {
  tsr_attn_dims_t d;
  tsr_attn_pattern_t pat;
  int32_t max_rows; /* capacity in query rows */
  int n_threads;
  /* this call */
  int32_t T, pos0;
  tsr_attn_pair_t *pairs;
  int32_t n_pairs, cap_pairs;
  int32_t *head_first; /* (n_heads + 1): pairs of head h are [first[h], first[h+1]) */
  uint64_t s_len, o_len; /* int32 elements of s and o in use (p: s_len bytes) */
  uint64_t dense_pairs;  /* pairs the dense causal mask would give */
  int8_t *qq;     /* (n_heads, T, hs) for this call */
  float *sq;      /* (n_heads, max_rows) */
  float *sp;      /* (n_heads, max_rows) P' row scales */
  int32_t *s;     /* score partials */
  float *sf;      /* dequantized scores, same layout */
  int8_t *p;      /* P' blocks */
  int32_t *o;     /* PV partials */
  uint64_t s_cap, o_cap;
  float *row_f;   /* (n_threads, max_seq) */
  int8_t *row_q;  /* (n_threads, max_seq) */
  int32_t *acc;   /* (n_threads, hs) */
  float *ones;    /* (hs) */
  int32_t *kb_tmp;    /* (2, n_kb) mask scratch */
  int64_t *bound_tmp; /* (n_kb) topk bounds */
  tsr_attn_mask_fn mask_fn;
  void *mask_arg;
} tsr_attn_work_t;

/* Scratch for calls of up to max_rows query rows. */
tsr_status_t tsr_attn_work_init(tsr_attn_work_t *w, const tsr_attn_dims_t *d,
                                const tsr_attn_pattern_t *pat, int32_t max_rows,
                                int n_threads);
void tsr_attn_work_free(tsr_attn_work_t *w);

/* Runs phase 0 (scores: fills w->s) or 1 (PV: fills w->o) of `w`. */
typedef struct tsr_attn_backend {
  tsr_status_t (*run)(void *self, tsr_attn_work_t *w, const tsr_attn_cache_t *c, int phase);
  void *self;
} tsr_attn_backend_t;

/* The host backend's phases: the pairs' GEMMs with tsr_qgemm_strided. */
void tsr_attn_run_host(tsr_attn_work_t *w, const tsr_attn_cache_t *c, int phase,
                       tsr_threadpool_t *pool, tsr_isa_t isa);

/* Steps 1-2: quantizes q (T, n_heads*hs), builds the masks and the pairs. */
tsr_status_t tsr_attn_prepare(tsr_attn_work_t *w, const tsr_attn_cache_t *c, const float *q,
                              int32_t pos0, int32_t T);
/* Step 4: score partials -> P' blocks. */
void tsr_attn_softmax(tsr_attn_work_t *w, const tsr_attn_cache_t *c, tsr_threadpool_t *pool);
/* Step 6: PV partials -> out (T, n_heads*hs). */
void tsr_attn_output(tsr_attn_work_t *w, float *out, tsr_threadpool_t *pool);

/* The whole call: prepare, phase 0 on `be` (NULL = host), softmax, phase 1,
 * output. The cache must already hold positions < pos0 + T. */
tsr_status_t tsr_attn_forward(tsr_attn_work_t *w, const tsr_attn_cache_t *c, const float *q,
                              int32_t pos0, int32_t T, float *out,
                              const tsr_attn_backend_t *be, tsr_threadpool_t *pool,
                              tsr_isa_t isa);

/* ---- descriptors ---- */

/* Device layout of a layer's cache: K (n_kv*max_seq*hs) then the V^T tiles
 * (n_kv*n_kb*hs*block), as on the host. */
static inline uint64_t tsr_attn_kv_bytes(const tsr_attn_dims_t *d) {
  return (uint64_t)d->n_kv_heads * (uint64_t)d->head_dim *
         ((uint64_t)d->max_seq + (uint64_t)tsr_attn_n_kb(d) * (uint64_t)d->block);
}
/* Bytes of the A operand (Qq for phase 0, P' for phase 1) and of C. */
void tsr_attn_phase_bytes(const tsr_attn_work_t *w, int phase, uint64_t *a_bytes,
                          uint64_t *c_bytes);
/* Host source of the A operand of a phase (what is uploaded). */
const void *tsr_attn_phase_a(const tsr_attn_work_t *w, int phase);
/* Host destination of a phase's C (what is read back). */
void *tsr_attn_phase_c(tsr_attn_work_t *w, int phase);
/* Writes the phase's n_pairs descriptors (64 bytes each) with the operands
 * at the given device addresses (kv = the layer's cache buffer). */
void tsr_attn_pack(const tsr_attn_work_t *w, int phase, uint64_t a_addr, uint64_t kv_addr,
                   uint64_t c_addr, uint8_t *ring);
/* K and V^T bytes the phase's descriptors read from the cache. */
uint64_t tsr_attn_kv_read(const tsr_attn_work_t *w, int phase);

/* Byte ranges of the cache's device layout that positions [pos0, pos0+T)
 * occupy: calls emit(arg, offset, host source, bytes) for each: per kv head
 * the new K rows, and the V^T tiles of the blocks they fall in (the new
 * columns and the block's earlier ones, one contiguous range). */
typedef tsr_status_t (*tsr_attn_emit_fn)(void *arg, uint64_t off, const void *src, size_t n);
tsr_status_t tsr_attn_cache_ranges(const tsr_attn_cache_t *c, const tsr_attn_dims_t *d,
                                   int32_t pos0, int32_t T, tsr_attn_emit_fn emit, void *arg);

/* ---- a standalone device for `tessera attn` and the tests: one buffer
 * holding the cache and staging, no engine, hence no retry and no
 * fallback: a failure is returned as is. Models' attention runs through the
 * engine's launch path (exec.c) like its matmuls. ---- */
typedef struct tsr_attn_hal {
  tsr_hal_device_t *dev; /* borrowed */
  uint64_t timeout_ns;   /* longest wait for one launch */
  tsr_hal_buffer_t buf;  /* [ring][A][C][kv] */
  uint64_t ring_off, a_off, c_off, kv_off;
  tsr_hal_result_t total; /* counters summed over launches */
  uint64_t launches;
} tsr_attn_hal_t;

/* Allocates the buffer for work `w` (max_rows rows at max_seq); waits for
 * a launch at most timeout_ms. */
tsr_status_t tsr_attn_hal_init(tsr_attn_hal_t *h, tsr_hal_device_t *dev,
                               const tsr_attn_work_t *w, uint32_t timeout_ms);
void tsr_attn_hal_free(tsr_attn_hal_t *h);
/* Writes the cache's positions [pos0, pos0+T) to the device. */
tsr_status_t tsr_attn_hal_append(tsr_attn_hal_t *h, const tsr_attn_cache_t *c,
                                 const tsr_attn_dims_t *d, int32_t pos0, int32_t T);
/* A backend over it (self = h). */
tsr_attn_backend_t tsr_attn_hal_backend(tsr_attn_hal_t *h);

/* Modeled device cycles of the pairs of the current call (both phases, two
 * launches). */
uint64_t tsr_attn_model_cycles(const tsr_attn_work_t *w, const tsr_km_timing_t *t);

#endif
