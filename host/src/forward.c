/*
 * forward.c - sequences, batches, and the forward pass of a llama model
 * over a batch of many sequences; the session as a one-sequence
 * convenience on top.
 *
 * One pass evaluates R rows: the tokens of every entry of the batch,
 * stacked in entry order. Matmul groups run once over all R rows (one GEMM,
 * or one device launch per device, through the executor); embedding, norms,
 * RoPE, SwiGLU and residuals are row-wise; the KV append and attention run
 * per entry, over that entry's sequence's own cache, at its positions. Light
 * ops follow llama2.c's arithmetic. Nothing a row computes depends on
 * another entry's rows: int8 matmuls are exact per row, activations are
 * quantized per row, and attention reads only its own sequence.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TSR_FWD_X86 1
#endif

#include "compute/dtype.h"
#include "dist.h"
#include "offload.h"

/* Rows per pass: a session's default (its prefill chunk) and an engine's. */
#define TSR_SESSION_ROWS 64
#define TSR_ENGINE_ROWS 256
#define TSR_MAX_BATCH_ROWS 4096

/* Attention of fewer multiply-adds than this runs on the calling thread. */
#define TSR_ATTN_PARALLEL_MIN 65536.0

void tsr_session_options_init(tsr_session_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->precision = TSR_PRECISION_FP32;
  o->max_seq = 0;
  o->attn.kind = TSR_ATTN_REFERENCE;
  o->attn.block = TSR_ATTN_DEFAULT_BLOCK;
  o->attn.local = 1;
  o->max_batch_rows = 0;
  o->device_window_bytes = 0;
  o->device_mask = UINT64_MAX;
}

/* ---- engine ---- */

/* The reference attention's task and fp16 row conversion for an ISA (below). */
static tsr_task_fn attn_fn(tsr_isa_t isa);
typedef void (*f16_row_fn)(float *dst, const uint16_t *src, int32_t n);
static f16_row_fn f16_row(tsr_isa_t isa);

const char *tsr_precision_name(tsr_precision_t p) {
  switch (p) {
    case TSR_PRECISION_FP32: return "fp32";
    case TSR_PRECISION_INT8: return "int8";
    case TSR_PRECISION_FP16: return "fp16";
    case TSR_PRECISION_BF16: return "bf16";
  }
  return "?";
}

static tsr_status_t engine_create(tsr_model_t *model, const tsr_session_options_t *opts,
                                  int32_t default_rows, tsr_engine_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "engine: out pointer is NULL");
  *out = NULL;
  if (!model) return TSR_ERR(INVALID_ARGUMENT, "engine: model is NULL");
  tsr_session_options_t o;
  if (opts) o = *opts;
  else tsr_session_options_init(&o);
  const tsr_model_config_t *c = &model->cfg;
  if (o.precision != TSR_PRECISION_FP32 && o.precision != TSR_PRECISION_INT8 &&
      o.precision != TSR_PRECISION_FP16 && o.precision != TSR_PRECISION_BF16)
    return TSR_ERR(INVALID_ARGUMENT, "precision: unknown value %d", (int)o.precision);
  if (o.max_seq < 0 || o.max_seq > c->seq_len)
    return TSR_ERR(OUT_OF_RANGE, "max_seq %d outside [0, seq_len %d]", o.max_seq, c->seq_len);
  if (o.max_batch_rows < 0 || o.max_batch_rows > TSR_MAX_BATCH_ROWS)
    return TSR_ERR(OUT_OF_RANGE, "max_batch_rows %d outside [0, %d]", o.max_batch_rows,
                   TSR_MAX_BATCH_ROWS);
  if (o.kv_type != TSR_KV_F32 && o.kv_type != TSR_KV_F16 && o.kv_type != TSR_KV_Q8)
    return TSR_ERR(INVALID_ARGUMENT, "kv_type: unknown value %d", (int)o.kv_type);
  if (o.kv_type != TSR_KV_F32 && c->head_dim > TSR_ATTN_MAX_HEAD_DIM)
    return TSR_ERR(OUT_OF_RANGE, "kv_type %s: head_dim %d exceeds %d",
                   o.kv_type == TSR_KV_F16 ? "fp16" : "int8", c->head_dim,
                   TSR_ATTN_MAX_HEAD_DIM);
  if (o.mpi_depth < 0 || o.mpi_depth > 1024)
    return TSR_ERR(OUT_OF_RANGE, "mpi_depth %d outside [0, 1024]", o.mpi_depth);
  TSR_RETURN_IF_ERROR(tsr_attn_pattern_check(&o.attn), "attn");
  if (!o.max_batch_rows) o.max_batch_rows = default_rows;
  if (o.precision == TSR_PRECISION_INT8) TSR_RETURN_IF(tsr_model_ensure_int8(model));
  else if (o.precision == TSR_PRECISION_FP16) TSR_RETURN_IF(tsr_model_ensure_half(model, false));
  else if (o.precision == TSR_PRECISION_BF16) TSR_RETURN_IF(tsr_model_ensure_half(model, true));
  else TSR_RETURN_IF(tsr_model_ensure_fp32(model));
  TSR_RETURN_IF(tsr_exec_create(model, &o, out));
  (*out)->attn_task = attn_fn(model->ctx->isa);
  (*out)->kv_f16_row = o.kv_type == TSR_KV_F16 ? f16_row(model->ctx->isa) : NULL;
  tsr_status_t st = tsr_dist_engine_open(*out, &o);
  if (st) {
    tsr_exec_destroy(*out);
    *out = NULL;
  }
  return st;
}

tsr_status_t tsr_engine_create(tsr_model_t *model, const tsr_session_options_t *opts,
                               tsr_engine_t **out) {
  TSR_RETURN_IF_ERROR(engine_create(model, opts, TSR_ENGINE_ROWS, out), "engine");
  return TSR_OK;
}

void tsr_engine_destroy(tsr_engine_t *e) {
  if (!e) return;
  tsr_dist_engine_close(e);
  tsr_exec_destroy(e);
}

void tsr_engine_print_plan(const tsr_engine_t *e, FILE *f) { tsr_exec_print_plan(e, f); }
void tsr_engine_print_stats(const tsr_engine_t *e, FILE *f) { tsr_exec_print_stats(e, f); }
void tsr_engine_get_stats(const tsr_engine_t *e, tsr_session_stats_t *out) {
  tsr_exec_get_stats(e, out);
}

/* ---- sequences ---- */

tsr_status_t tsr_seq_create(tsr_engine_t *e, tsr_seq_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "sequence: out pointer is NULL");
  *out = NULL;
  if (!e) return TSR_ERR(INVALID_ARGUMENT, "sequence: engine is NULL");
  const tsr_model_config_t *c = &e->model->cfg;
  tsr_seq_t *s = calloc(1, sizeof(*s));
  if (!s) return TSR_ERR(RESOURCE_EXHAUSTED, "sequence");
  s->eng = e;
  s->max_seq = e->max_seq;
  pthread_mutex_lock(&e->lock);
  s->id = e->seq_ids++;
  pthread_mutex_unlock(&e->lock);
  /* the caches of this process's layers (all, without a pipeline); none
   * for a sequence another rank holds */
  const size_t L = (size_t)c->n_layers;
  const tsr_model_t *m = e->model;
  tsr_status_t st = tsr_dist_seq_open(e, s);
  const bool here = !st && s->rank == tsr_context_rank(m->ctx);
  if (here && e->attn.kind == TSR_ATTN_REFERENCE) {
    /* fp32 reference attention: the fp32 cache only */
    const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    const size_t n = (size_t)(m->layer1 - m->layer0) * (size_t)s->max_seq * kv_dim;
    if (e->kv_type == TSR_KV_F16) {
      s->key_cache16 = calloc(n, sizeof(uint16_t));
      s->value_cache16 = calloc(n, sizeof(uint16_t));
      if (!s->key_cache16 || !s->value_cache16)
        st = TSR_ERR(RESOURCE_EXHAUSTED, "sequence: fp16 KV cache of %zu values", 2 * n);
    } else if (e->kv_type == TSR_KV_Q8) {
      const size_t rows = n / (size_t)c->head_dim;
      s->key_cache8 = calloc(n, 1);
      s->value_cache8 = calloc(n, 1);
      s->key_scale8 = calloc(rows, sizeof(float));
      s->value_scale8 = calloc(rows, sizeof(float));
      if (!s->key_cache8 || !s->value_cache8 || !s->key_scale8 || !s->value_scale8)
        st = TSR_ERR(RESOURCE_EXHAUSTED, "sequence: int8 KV cache of %zu values", 2 * n);
    } else {
      s->key_cache = calloc(n, sizeof(float));
      s->value_cache = calloc(n, sizeof(float));
      if (!s->key_cache || !s->value_cache)
        st = TSR_ERR(RESOURCE_EXHAUSTED, "sequence: KV cache of %zu floats", 2 * n);
    }
  } else if (here) {
    /* int8 attention: the int8 cache (and its device copies) only */
    s->kv8 = calloc(L, sizeof *s->kv8);
    s->kv_buf = calloc(L, sizeof *s->kv_buf);
    s->kv_dev = malloc(sizeof(int) * L);
    s->kv_ok = calloc(L, sizeof(bool));
    if (!s->kv8 || !s->kv_buf || !s->kv_dev || !s->kv_ok)
      st = TSR_ERR(RESOURCE_EXHAUSTED, "sequence: KV caches of %zu layers", L);
    for (size_t l = 0; !st && l < L; l++) {
      s->kv_dev[l] = -1;
      if ((int32_t)l >= m->layer0 && (int32_t)l < m->layer1)
        st = tsr_attn_cache_init(&s->kv8[l], &e->attn_dims);
    }
    if (!st) st = tsr_exec_seq_attach(e, s);
  }
  if (st) {
    tsr_seq_destroy(s);
    return tsr_status_annotate(st, "sequence");
  }
  *out = s;
  return TSR_OK;
}

void tsr_seq_destroy(tsr_seq_t *s) {
  if (!s) return;
  tsr_dist_seq_close(s->eng, s);
  if (s->kv_dev) tsr_exec_seq_detach(s->eng, s);
  for (int32_t l = 0; s->kv8 && l < s->eng->model->cfg.n_layers; l++)
    tsr_attn_cache_free(&s->kv8[l]);
  free(s->kv8);
  free(s->kv_buf);
  free(s->kv_dev);
  free(s->kv_ok);
  free(s->key_cache);
  free(s->value_cache);
  free(s->key_cache16);
  free(s->value_cache16);
  free(s->key_cache8);
  free(s->value_cache8);
  free(s->key_scale8);
  free(s->value_scale8);
  free(s);
}

void tsr_seq_reset(tsr_seq_t *s) {
  if (!s) return;
  tsr_dist_seq_reset(s->eng, s);
  s->pos = 0;
  /* the device copies are rewritten from position 0 by the next appends */
  for (int32_t l = 0; s->kv_ok && l < s->eng->model->cfg.n_layers; l++)
    s->kv_ok[l] = s->kv_dev[l] >= 0;
}

int32_t tsr_seq_pos(const tsr_seq_t *s) { return s ? s->pos : 0; }

/* ---- batches ---- */

tsr_status_t tsr_batch_create(size_t max_entries, tsr_batch_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "batch: out pointer is NULL");
  *out = NULL;
  tsr_batch_t *b = calloc(1, sizeof *b);
  if (!b) return TSR_ERR(RESOURCE_EXHAUSTED, "batch");
  b->max_entries = max_entries;
  *out = b;
  return TSR_OK;
}

void tsr_batch_destroy(tsr_batch_t *b) {
  if (!b) return;
  free(b->e);
  free(b->tokens);
  free(b->logits);
  free(b);
}

void tsr_batch_clear(tsr_batch_t *b) {
  if (!b) return;
  b->n = 0;
  b->n_tokens = 0;
}

size_t tsr_batch_size(const tsr_batch_t *b) { return b ? b->n : 0; }

tsr_status_t tsr_batch_add(tsr_batch_t *b, tsr_seq_t *seq, const int32_t *tokens, size_t n,
                           bool want_logits, size_t *out_index) {
  if (!b || !seq || (!tokens && n)) return TSR_ERR(INVALID_ARGUMENT, "batch_add: NULL argument");
  if (n == 0) return TSR_ERR(INVALID_ARGUMENT, "batch_add: entry %zu has no tokens", b->n);
  if (b->max_entries && b->n >= b->max_entries)
    return TSR_ERR(OUT_OF_RANGE, "batch_add: the batch holds at most %zu entries",
                   b->max_entries);
  for (size_t i = 0; i < b->n; i++)
    if (b->e[i].seq == seq)
      return TSR_ERR(INVALID_ARGUMENT, "batch_add: the sequence is already entry %zu of the "
                                       "batch (one entry per sequence)", i);
  if (n > (size_t)(seq->max_seq - seq->pos))
    return TSR_ERR(OUT_OF_RANGE, "batch_add: entry %zu: %zu tokens at position %d exceed the "
                                 "context of %d", b->n, n, seq->pos, seq->max_seq);
  const int32_t vocab = seq->eng->model->cfg.vocab_size;
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return TSR_ERR(OUT_OF_RANGE, "batch_add: entry %zu: token %zu is %d, outside [0, %d)",
                     b->n, i, tokens[i], vocab);
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 16;
    tsr_batch_entry_t *e = realloc(b->e, cap * sizeof *e);
    if (!e) return TSR_ERR(RESOURCE_EXHAUSTED, "batch: %zu entries", cap);
    b->e = e;
    b->cap = cap;
  }
  if (b->n_tokens + n > b->tok_cap) {
    size_t cap = b->tok_cap ? b->tok_cap : 256;
    while (cap < b->n_tokens + n) cap *= 2;
    int32_t *t = realloc(b->tokens, cap * sizeof *t);
    if (!t) return TSR_ERR(RESOURCE_EXHAUSTED, "batch: %zu tokens", cap);
    b->tokens = t;
    b->tok_cap = cap;
  }
  memcpy(b->tokens + b->n_tokens, tokens, n * sizeof *tokens);
  b->e[b->n] = (tsr_batch_entry_t){seq, b->n_tokens, n, want_logits, false, 0};
  b->n_tokens += n;
  if (out_index) *out_index = b->n;
  b->n++;
  return TSR_OK;
}

const float *tsr_batch_logits(const tsr_batch_t *b, size_t index) {
  if (!b || index >= b->n || !b->e[index].has_logits) return NULL;
  return b->logits + b->e[index].logits_off;
}

/* ---- the forward pass ---- */

/* Reference attention of the rows of one pass. One task per (block of up
 * to TSR_ATTN_ROW_BLOCK consecutive rows of one entry, head): every row
 * over its own sequence's cache up to its position, each key and value row
 * read once for the whole block. A row's scores, softmax and weighted sum
 * are computed in the same order as for a row alone. */
typedef struct {
  tsr_exec_t *o;
  const tsr_pass_entry_t *pe;
  const int32_t *block_entry; /* (blocks) entry of each row block */
  const int32_t *block_row;   /* (blocks) first row of each block  */
  int32_t layer;
  f16_row_fn f16; /* the cache is fp16: its rows converted with this */
  bool q8;        /* the cache is int8 (TSR_KV_Q8) */
} attn_args_t;

/* q . k over n floats in 8 independent lanes (vectorized by the compiler;
 * the lanes are summed in a fixed order, so the result is the same on every
 * machine and every run). */
static inline __attribute__((always_inline)) float dot_lanes(const float *a, const float *b,
                                                            int32_t n) {
  float acc[8] = {0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

/* y += w x over n floats (elementwise; blocks of 8 the compiler
 * vectorizes). */
static inline __attribute__((always_inline)) void axpy(float *restrict y,
                                                      const float *restrict x, float w,
                                                      int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) y[i + l] += w * x[i + l];
  for (; i < n; i++) y[i] += w * x[i];
}

/* x[i] /= d over n floats, in blocks of 8 the compiler vectorizes. */
static inline __attribute__((always_inline)) void divide_lanes(float *x, float d, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) x[i + l] /= d;
  for (; i < n; i++) x[i] /= d;
}

/* dot_lanes and axpy over an int8 row widened on the fly: the same
 * arithmetic as widening the row first (exact), without the round trip. */
static inline __attribute__((always_inline)) float dot_lanes_i8(const float *a, const int8_t *b,
                                                               int32_t n) {
  float acc[8] = {0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * (float)b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) s += a[i] * (float)b[i];
  return s;
}

static inline __attribute__((always_inline)) void axpy_i8(float *restrict y,
                                                         const int8_t *restrict x, float w,
                                                         int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) y[i + l] += w * (float)x[i + l];
  for (; i < n; i++) y[i] += w * (float)x[i];
}

/* The cache row kinds the vector loops read: fp32, int8 (times a scale per
 * row) and fp16 (widened with F16C: only in functions built for it). */
typedef float v8f_t __attribute__((vector_size(32)));
typedef int8_t v8i8_t __attribute__((vector_size(8)));
enum { ROW_F32, ROW_I8, ROW_F16, ROW_TYPE = 3, ROW_X86 = 4 /* built for AVX2 and F16C */ };

#ifdef TSR_FWD_X86
/* Not always_inline: it inlines only into functions built for F16C. */
__attribute__((target("avx2,f16c"))) static inline void load8_f16(v8f_t *out,
                                                                    const uint16_t *p) {
  __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
  memcpy(out, &x, sizeof *out);
}

__attribute__((target("avx2,f16c"))) static inline void load8_i8(v8f_t *out, const int8_t *p) {
  __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
  memcpy(out, &x, sizeof *out);
}
#endif

/* Eight values of a cache row as fp32 (the widening is exact); through a
 * pointer, since a vector return would be an ABI change in the baseline
 * build. */
static inline __attribute__((always_inline)) void load8(v8f_t *out, int kind, const void *row,
                                                       size_t i) {
#ifdef TSR_FWD_X86
  if (kind == (ROW_I8 | ROW_X86)) {
    load8_i8(out, (const int8_t *)row + i);
    return;
  }
#endif
  if ((kind & ROW_TYPE) == ROW_I8) {
    v8i8_t x8;
    memcpy(&x8, (const int8_t *)row + i, sizeof x8);
    *out = __builtin_convertvector(x8, v8f_t);
    return;
  }
#ifdef TSR_FWD_X86
  if ((kind & ROW_TYPE) == ROW_F16) { /* only in functions built for F16C */
    load8_f16(out, (const uint16_t *)row + i);
    return;
  }
#endif
  memcpy(out, (const float *)row + i, sizeof *out);
}

/* y[i] += w[p] * V[p][i] for p < n_pos, i < hs, over rows of hs values of
 * `kind` (int8 rows times their scale): the same operations in the same
 * order as axpy per position, with y held in registers 64 values at a time
 * instead of loaded and stored for every position. */
static inline __attribute__((always_inline)) void weighted_rows(int kind, float *restrict y,
                                                               const void *restrict v,
                                                               const float *scale,
                                                               const float *w, int32_t n_pos,
                                                               int32_t hs) {
  int32_t i0 = 0;
  for (; i0 + 64 <= hs; i0 += 64) {
    v8f_t acc[8];
    memcpy(acc, y + i0, sizeof acc);
    for (int32_t p = 0; p < n_pos; p++) {
      const size_t at = (size_t)p * (size_t)hs + (size_t)i0;
      const float wp = (kind & ROW_TYPE) == ROW_I8 ? w[p] * scale[p] : w[p];
      const v8f_t wv = {wp, wp, wp, wp, wp, wp, wp, wp};
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) {
        v8f_t x;
        load8(&x, kind, v, at + 8 * (size_t)c);
        acc[c] += wv * x;
      }
    }
    memcpy(y + i0, acc, sizeof acc);
  }
  if (i0 < hs) { /* hs % 64 lanes: 8 at a time, hs % 8 == 0 */
    for (int32_t p = 0; p < n_pos; p++) {
      const float wp = (kind & ROW_TYPE) == ROW_I8 ? w[p] * scale[p] : w[p];
      const v8f_t wv = {wp, wp, wp, wp, wp, wp, wp, wp};
      for (int32_t i = i0; i < hs; i += 8) {
        v8f_t acc;
        memcpy(&acc, y + i, sizeof acc);
        v8f_t x;
        load8(&x, kind, v, (size_t)p * (size_t)hs + (size_t)i);
        acc += wv * x;
        memcpy(y + i, &acc, sizeof acc);
      }
    }
  }
}

/* 8 lanes of 8 vectors transposed: out[l][i] = in[i][l]. */
static inline __attribute__((always_inline)) void transpose8(v8f_t *a) {
  v8f_t t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(a[i], a[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(a[i], a[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int g = 0; g < 8; g += 4) { /* t[g], t[g+2] pair; t[g+1], t[g+3] pair */
    u[g] = __builtin_shufflevector(t[g], t[g + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[g + 1] = __builtin_shufflevector(t[g], t[g + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[g + 2] = __builtin_shufflevector(t[g + 1], t[g + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[g + 3] = __builtin_shufflevector(t[g + 1], t[g + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int l = 0; l < 4; l++) {
    a[l] = __builtin_shufflevector(u[l], u[l + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    a[l + 4] = __builtin_shufflevector(u[l], u[l + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

/* The dot of q with one cache row of `kind` in 8 lanes, summed as
 * dot_lanes sums them (hs % 8 == 0). */
static inline __attribute__((always_inline)) float dot_row(int kind, const float *q,
                                                          const void *k, size_t at,
                                                          int32_t hs) {
  v8f_t acc = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int32_t c = 0; c < hs; c += 8) {
    v8f_t qv;
    memcpy(&qv, q + c, sizeof qv);
    v8f_t x;
    load8(&x, kind, k, at + (size_t)c);
    acc += qv * x;
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* att[p] = dot_lanes(q, K[p], hs) * scale[p] (int8 rows; other kinds
 * unscaled) for p < n_pos, hs % 8 == 0: 8 positions at a time, their lane
 * sums transposed so one vector tree gives the 8 sums dot_lanes would, with
 * the same additions in the same order. */
static inline __attribute__((always_inline)) void scores_rows(int kind, float *att,
                                                             const float *q, const void *k,
                                                             const float *scale,
                                                             int32_t n_pos, int32_t hs) {
  int32_t p0 = 0;
  for (; p0 + 8 <= n_pos; p0 += 8) {
    v8f_t acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = (v8f_t){0, 0, 0, 0, 0, 0, 0, 0};
    const size_t at = (size_t)p0 * (size_t)hs;
    for (int32_t c = 0; c < hs; c += 8) {
      v8f_t qv;
      memcpy(&qv, q + c, sizeof qv);
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        v8f_t x;
        load8(&x, kind, k, at + (size_t)i * (size_t)hs + (size_t)c);
        acc[i] += qv * x;
      }
    }
    transpose8(acc);
    v8f_t sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    if ((kind & ROW_TYPE) == ROW_I8) {
      v8f_t sv;
      memcpy(&sv, scale + p0, sizeof sv);
      sum *= sv;
    }
    memcpy(att + p0, &sum, sizeof sum);
  }
  for (int32_t p = p0; p < n_pos; p++) {
    const float d = dot_row(kind, q, k, (size_t)p * (size_t)hs, hs);
    att[p] = (kind & ROW_TYPE) == ROW_I8 ? d * scale[p] : d;
  }
}

/* fp16 cache rows to fp32 (exact either way). */
static void f16_row_portable(float *dst, const uint16_t *src, int32_t n) {
  for (int32_t i = 0; i < n; i++) dst[i] = tsr_f16_to_f32(src[i]);
}

#ifdef TSR_FWD_X86
__attribute__((target("f16c,avx"))) static void f16_row_f16c(float *dst, const uint16_t *src,
                                                             int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = tsr_f16_to_f32(src[i]);
}

/* F16C where the context's ISA is AVX2 or more (its detection checked the
 * OS saves ymm state) and the CPU has the F16C bit (CPUID 1, ECX bit 29). */
static bool avx2_f16c(tsr_isa_t isa) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return isa >= TSR_ISA_AVX2 && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

static f16_row_fn f16_row(tsr_isa_t isa) {
  return avx2_f16c(isa) ? f16_row_f16c : f16_row_portable;
}
#else
static f16_row_fn f16_row(tsr_isa_t isa) {
  (void)isa;
  return f16_row_portable;
}

#endif

/* f16v: the function is built for F16C, so fp16 rows take the vector
 * loops (the same values as converting each row first). */
static inline __attribute__((always_inline)) void attn_body(void *arg, int task, int thread,
                                                           bool f16v) {
  const attn_args_t *a = arg;
  tsr_exec_t *o = a->o;
  const tsr_model_config_t *c = &o->model->cfg;
  const int32_t hs = c->head_dim, kv_dim = c->n_kv_heads * hs, q_dim = c->n_heads * hs;
  const int32_t kv_mul = c->n_heads / c->n_kv_heads;
  const int32_t blk = task / c->n_heads, h = task % c->n_heads;
  const tsr_pass_entry_t *pe = &a->pe[a->block_entry[blk]];
  const tsr_seq_t *s = pe->seq;
  const int32_t r0 = a->block_row[blk];
  const int32_t left = pe->row0 + pe->n - r0;
  const int32_t nb = left < TSR_ATTN_ROW_BLOCK ? left : TSR_ATTN_ROW_BLOCK;
  const int32_t pos0 = pe->pos0 + (r0 - pe->row0); /* position of the first row */
  const size_t loff =
      (size_t)(a->layer - o->model->layer0) * (size_t)s->max_seq * (size_t)kv_dim;
  const size_t ms = (size_t)o->max_seq;
  /* this head's keys and values: s->max_seq positions of hs floats in order */
  const size_t hoff = (size_t)(h / kv_mul) * (size_t)s->max_seq * hs;
  float *att = o->att + (size_t)thread * TSR_ATTN_ROW_BLOCK * ms;
  const float scale = sqrtf((float)hs);
  float kf[TSR_ATTN_MAX_HEAD_DIM]; /* an fp16 cache row, converted */
  const float *q[TSR_ATTN_ROW_BLOCK];
  for (int32_t j = 0; j < nb; j++) q[j] = o->q + (size_t)(r0 + j) * q_dim + (size_t)h * hs;
  /* scores: row j sees positions 0 .. pos0 + j */
  const int32_t last = pos0 + nb - 1;
  const bool vec = (!a->f16 || f16v) && hs % 8 == 0; /* 8 positions at a time */
  const int x86 = f16v ? ROW_X86 : 0;
  if (vec) {
    const size_t base = loff + hoff;
    for (int32_t j = 0; j < nb; j++) {
      float *r = att + (size_t)j * ms;
      if (a->q8)
        scores_rows(ROW_I8 | x86, r, q[j], s->key_cache8 + base, s->key_scale8 + base / (size_t)hs,
                    pos0 + j + 1, hs);
      else if (a->f16)
        scores_rows(ROW_F16 | x86, r, q[j], s->key_cache16 + base, NULL, pos0 + j + 1, hs);
      else
        scores_rows(ROW_F32 | x86, r, q[j], s->key_cache + base, NULL, pos0 + j + 1, hs);
    }
  }
  for (int32_t p = 0; p <= last && !vec; p++) {
    const size_t at = loff + hoff + (size_t)p * hs;
    const float *k = s->key_cache ? s->key_cache + at : NULL; /* NULL: fp16 or int8 */
    float ks = 1.0f; /* int8: the dot of the widened row, times the row's scale */
    if (a->f16) a->f16(kf, s->key_cache16 + at, hs), k = kf;
    if (a->q8) {
      const int8_t *k8 = s->key_cache8 + at;
      ks = s->key_scale8[at / hs];
      for (int32_t j = p > pos0 ? p - pos0 : 0; j < nb; j++)
        att[(size_t)j * ms + (size_t)p] = dot_lanes_i8(q[j], k8, hs) * ks;
      continue;
    }
    for (int32_t j = p > pos0 ? p - pos0 : 0; j < nb; j++)
      att[(size_t)j * ms + (size_t)p] = dot_lanes(q[j], k, hs) * ks;
  }
  float *xb[TSR_ATTN_ROW_BLOCK];
  for (int32_t j = 0; j < nb; j++) {
    /* the scores over sqrt(hs), 8 divisions at a time (each correctly
     * rounded: the same values as one by one) */
    divide_lanes(att + (size_t)j * ms, scale, pos0 + j + 1);
    tsr_softmax(att + (size_t)j * ms, pos0 + j + 1);
    xb[j] = o->xb + (size_t)(r0 + j) * q_dim + (size_t)h * hs;
    memset(xb[j], 0, sizeof(float) * (size_t)hs);
  }
  if (vec) { /* each row's sum in registers */
    for (int32_t j = 0; j < nb; j++) {
      const size_t base = loff + hoff;
      const float *w = att + (size_t)j * ms;
      if (a->q8)
        weighted_rows(ROW_I8 | x86, xb[j], s->value_cache8 + base,
                      s->value_scale8 + base / (size_t)hs, w, pos0 + j + 1, hs);
      else if (a->f16)
        weighted_rows(ROW_F16 | x86, xb[j], s->value_cache16 + base, NULL, w, pos0 + j + 1, hs);
      else
        weighted_rows(ROW_F32 | x86, xb[j], s->value_cache + base, NULL, w, pos0 + j + 1, hs);
    }
    return;
  }
  for (int32_t p = 0; p <= last; p++) {
    const size_t at = loff + hoff + (size_t)p * hs;
    const float *v = s->value_cache ? s->value_cache + at : NULL;
    float vs = 1.0f;
    if (a->f16) a->f16(kf, s->value_cache16 + at, hs), v = kf;
    if (a->q8) {
      const int8_t *v8 = s->value_cache8 + at;
      vs = s->value_scale8[at / hs];
      for (int32_t j = p > pos0 ? p - pos0 : 0; j < nb; j++)
        axpy_i8(xb[j], v8, att[(size_t)j * ms + (size_t)p] * vs, hs);
      continue;
    }
    for (int32_t j = p > pos0 ? p - pos0 : 0; j < nb; j++)
      axpy(xb[j], v, att[(size_t)j * ms + (size_t)p] * vs, hs);
  }
}

static void attn_task(void *arg, int task, int thread) { attn_body(arg, task, thread, false); }

#ifdef TSR_FWD_X86
/* The same attention built for AVX2 and F16C (chosen at run time where the
 * CPU has both): 8-wide vectors for the same lanes and no FMA (the function
 * is not built for it), so its results equal the baseline's. */
__attribute__((target("avx2,f16c"))) static void attn_task_avx2(void *arg, int task,
                                                                 int thread) {
  attn_body(arg, task, thread, true);
}
#endif

static tsr_task_fn attn_fn(tsr_isa_t isa) {
#ifdef TSR_FWD_X86
  if (avx2_f16c(isa)) return attn_task_avx2;
#else
  (void)isa;
#endif
  return attn_task;
}

/* The light ops of a pass, a task per row (or per block of rows): the same
 * arithmetic per row as on one thread, shared among the pool's threads when
 * the pass has enough rows to pay for waking them. */
#define TSR_LIGHT_PARALLEL_ROWS 8

typedef struct {
  tsr_exec_t *o;
  const tsr_node_t *n;
  const tsr_pass_entry_t *pe;
  int n_e;
  int32_t R;
} light_args_t;

static void rmsnorm_task(void *arg, int r, int thread) {
  const light_args_t *a = arg;
  const tsr_model_config_t *c = &a->o->model->cfg;
  tsr_rmsnorm(a->o->xb + (size_t)r * c->dim, a->o->x + (size_t)r * c->dim, a->n->norm_w, c->dim,
              c->rms_eps);
}

static void swiglu_task(void *arg, int r, int thread) {
  const light_args_t *a = arg;
  const size_t hd = (size_t)a->o->model->cfg.hidden_dim;
  tsr_swiglu(a->o->hb + (size_t)r * hd, a->o->hb2 + (size_t)r * hd, (int32_t)hd);
}

static void rope_task(void *arg, int r, int thread) {
  const light_args_t *a = arg;
  const tsr_model_config_t *c = &a->o->model->cfg;
  int lo = 0, hi = a->n_e - 1; /* the entry holding row r (entries are in row order) */
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a->pe[mid].row0 <= r) lo = mid;
    else hi = mid - 1;
  }
  const int e = lo;
  const int32_t pos = a->pe[e].pos0 + (r - a->pe[e].row0), hs = c->head_dim;
  float *q = a->o->q + (size_t)r * c->n_heads * hs, *k = a->o->k + (size_t)r * c->n_kv_heads * hs;
  if (hs <= TSR_ATTN_MAX_HEAD_DIM) { /* the row's angles once for q and k */
    float cs[TSR_ATTN_MAX_HEAD_DIM];
    tsr_rope_angles(cs, hs, pos, c->rope_theta);
    tsr_rope_apply(q, c->n_heads, hs, cs);
    tsr_rope_apply(k, c->n_kv_heads, hs, cs);
  } else {
    tsr_rope(q, c->n_heads, hs, pos, c->rope_theta);
    tsr_rope(k, c->n_kv_heads, hs, pos, c->rope_theta);
  }
}

static void light_run(const light_args_t *a, void (*fn)(void *, int, int)) {
  tsr_threadpool_run(a->R >= TSR_LIGHT_PARALLEL_ROWS ? a->o->model->ctx->pool : NULL, a->R, fn,
                     (void *)a);
}

/* Routing of R rows (TSR_NODE_MOE_ROUTE): per row, the softmax of the
 * router's logits, the n_experts_used largest (the lower index first on
 * ties) and their probabilities divided by their sum; each expert's list of
 * rows in row order. moe_out is cleared for the experts' sums. */
static void moe_route(tsr_exec_t *o, int32_t layer, int32_t R) {
  const tsr_model_config_t *c = &o->model->cfg;
  const int32_t E = c->n_experts, K = c->n_experts_used;
  memset(o->moe_count, 0, sizeof(int32_t) * (size_t)E);
  memset(o->moe_out, 0, sizeof(float) * (size_t)R * (size_t)c->dim);
  for (int32_t r = 0; r < R; r++) {
    float *p = o->route + (size_t)r * E;
    tsr_softmax(p, E);
    int32_t pick[TSR_MODEL_MAX_EXPERTS];
    float sum = 0;
    for (int32_t k = 0; k < K; k++) {
      int32_t best = -1;
      for (int32_t e = 0; e < E; e++) {
        bool taken = false;
        for (int32_t j = 0; j < k && !taken; j++) taken = pick[j] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      pick[k] = best;
      sum += p[best];
    }
    for (int32_t k = 0; k < K; k++) {
      const int32_t e = pick[k];
      const int32_t at = o->moe_count[e]++;
      o->moe_rows[(size_t)e * o->max_rows + at] = r;
      o->moe_w[(size_t)e * o->max_rows + at] = p[e] / sum;
    }
  }
  for (int32_t e = 0; e < E; e++) {
    o->expert_rows[(size_t)layer * E + e] += (uint64_t)o->moe_count[e];
    o->expert_recent[(size_t)layer * E + e] += (double)o->moe_count[e];
  }
}

int32_t tsr_graph_final_begin(const tsr_graph_t *g) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (tsr_node_is_final(&g->nodes[i])) return i;
  return g->n_nodes;
}

/* Evaluates nodes [first, end) of one pass of R <= max_rows rows by
 * interpreting the graph. */
tsr_status_t tsr_forward_nodes(tsr_exec_t *o, const tsr_pass_entry_t *pe, int n_e, int32_t R,
                               int32_t n_logits, int32_t first, int32_t end) {
  const tsr_model_t *m = o->model;
  const tsr_model_config_t *c = &m->cfg;
  const int32_t dim = c->dim, hs = c->head_dim;
  const int32_t kv_dim = c->n_kv_heads * hs, q_dim = c->n_heads * hs;
  const tsr_graph_t *g = &o->graph;
  const tsr_plan_t *plan = tsr_exec_plan(o, R);
  /* Tensor storage; the attention output reuses xb, which is dead by then. */
  float *buf[TSR_T_COUNT] = {
      [TSR_T_X] = o->x,     [TSR_T_XB] = o->xb,   [TSR_T_Q] = o->q,
      [TSR_T_K] = o->k,     [TSR_T_V] = o->v,     [TSR_T_ATT] = o->xb,
      [TSR_T_XB2] = o->xb2, [TSR_T_HB] = o->hb,   [TSR_T_HB2] = o->hb2,
      [TSR_T_LOGITS] = o->logits, [TSR_T_ROUTE] = o->route, [TSR_T_MOE_IN] = o->moe_in,
      [TSR_T_MOE_OUT] = o->moe_out};
  const tsr_offload_scratch_t sc = {o->qa, o->qa_scale, o->acc, o->xh};
  if (first == 0) {
    o->passes++;
    o->pass_rows += (uint64_t)R;
  }
  for (int32_t i = first; i < end; i++) {
    const tsr_node_t *n = &g->nodes[i];
    const bool final = tsr_node_is_final(n); /* norm + classifier: logits rows */
    if (final && !n_logits) break;
    /* an expert's nodes: on the rows routed to it, none when none is */
    const int32_t rows = n->expert >= 0 ? o->moe_count[n->expert] : final ? n_logits : R;
    if (!rows) continue;
    if (n->op == TSR_NODE_MATMUL) {
      if (n->group != i) continue; /* ran with its group's first node */
      if (n->expert >= 0 && n->in == TSR_T_MOE_IN) /* gather the expert's rows */
        for (int32_t j = 0; j < rows; j++)
          memcpy(o->moe_in + (size_t)j * dim,
                 o->xb + (size_t)o->moe_rows[(size_t)n->expert * o->max_rows + j] * dim,
                 sizeof(float) * (size_t)dim);
      float *outs[8];
      for (int j = 0; j < n->group_size; j++) outs[j] = buf[g->nodes[i + j].out];
      TSR_RETURN_IF(tsr_exec_matmul_group(o, plan, i, rows, buf[n->in], outs, &sc));
      continue;
    }
    double t0 = tsr_exec_op_begin(o, n);
    tsr_status_t st = TSR_OK;
    switch (n->op) {
      case TSR_NODE_EMBED:
        for (int e = 0; e < n_e; e++)
          for (int32_t t = 0; t < pe[e].n; t++)
            tsr_model_embed(m, pe[e].tokens[t], o->x + (size_t)(pe[e].row0 + t) * dim);
        break;
      case TSR_NODE_RMSNORM:
        if (final) { /* the classifier's rows: the last of each entry asking */
          for (int32_t j = 0; j < n_logits; j++)
            tsr_rmsnorm(o->xb + (size_t)j * dim, o->x + (size_t)o->logit_rows[j] * dim,
                        n->norm_w, dim, c->rms_eps);
        } else {
          const light_args_t la = {o, n, pe, n_e, R};
          light_run(&la, rmsnorm_task);
        }
        break;
      case TSR_NODE_ROPE: {
        const light_args_t la = {o, n, pe, n_e, R};
        light_run(&la, rope_task);
        break;
      }
      case TSR_NODE_KV_APPEND:
        for (int e = 0; e < n_e && !st; e++) {
          tsr_seq_t *s = pe[e].seq;
          const float *k = o->k + (size_t)pe[e].row0 * kv_dim;
          const float *v = o->v + (size_t)pe[e].row0 * kv_dim;
          if (o->attn.kind != TSR_ATTN_REFERENCE) {
            st = tsr_exec_kv_append(o, s, n->layer, pe[e].pos0, pe[e].n, k, v);
            continue;
          }
          /* per layer and KV head, the positions in order (hs floats each) */
          const size_t ms = (size_t)s->max_seq;
          const size_t loff = (size_t)(n->layer - m->layer0) * ms * (size_t)kv_dim;
          for (int32_t t = 0; t < pe[e].n; t++)
            for (int32_t kh = 0; kh < c->n_kv_heads; kh++) {
              const size_t at = loff + ((size_t)kh * ms + (size_t)(pe[e].pos0 + t)) * hs;
              const size_t from = (size_t)t * kv_dim + (size_t)kh * hs;
              if (o->kv_type == TSR_KV_F16) {
                for (int32_t j = 0; j < hs; j++) {
                  s->key_cache16[at + (size_t)j] = tsr_f32_to_f16(k[from + (size_t)j]);
                  s->value_cache16[at + (size_t)j] = tsr_f32_to_f16(v[from + (size_t)j]);
                }
                continue;
              }
              if (o->kv_type == TSR_KV_Q8) {
                tsr_quantize_rows(s->key_cache8 + at, s->key_scale8 + at / (size_t)hs,
                                  k + from, 1, hs);
                tsr_quantize_rows(s->value_cache8 + at, s->value_scale8 + at / (size_t)hs,
                                  v + from, 1, hs);
                continue;
              }
              memcpy(s->key_cache + at, k + from, sizeof(float) * (size_t)hs);
              memcpy(s->value_cache + at, v + from, sizeof(float) * (size_t)hs);
            }
        }
        break;
      case TSR_NODE_ATTENTION: {
        if (o->attn.kind != TSR_ATTN_REFERENCE) {
          /* int8 block-sparse, per sequence: the executor places it */
          for (int e = 0; e < n_e && !st; e++)
            st = tsr_exec_attention(o, plan, i, pe[e].seq, pe[e].pos0, pe[e].n,
                                    o->q + (size_t)pe[e].row0 * q_dim,
                                    o->xb + (size_t)pe[e].row0 * q_dim);
          break;
        }
        /* row blocks: consecutive rows of one entry */
        int32_t n_blocks = 0;
        for (int e = 0; e < n_e; e++)
          for (int32_t t = 0; t < pe[e].n; t += TSR_ATTN_ROW_BLOCK) {
            o->attn_block_entry[n_blocks] = e;
            o->attn_block_row[n_blocks++] = pe[e].row0 + t;
          }
        attn_args_t aa = {o, pe, o->attn_block_entry, o->attn_block_row, n->layer,
                          o->kv_f16_row, o->kv_type == TSR_KV_Q8};
        /* Waking workers costs microseconds: only worth it for enough work. */
        double work = 0;
        for (int e = 0; e < n_e; e++)
          work += (double)pe[e].n * c->n_heads * (pe[e].pos0 + pe[e].n) * hs;
        tsr_threadpool_run(work >= TSR_ATTN_PARALLEL_MIN ? m->ctx->pool : NULL,
                           n_blocks * c->n_heads, o->attn_task, &aa);
        break;
      }
      case TSR_NODE_ADD: {
        const float *in = buf[n->in];
        for (size_t j = 0; j < (size_t)R * dim; j++) o->x[j] += in[j];
        break;
      }
      case TSR_NODE_SWIGLU: {
        const light_args_t la = {o, n, pe, n_e, rows};
        light_run(&la, swiglu_task);
        break;
      }
      case TSR_NODE_MOE_ROUTE:
        moe_route(o, n->layer, R);
        break;
      case TSR_NODE_MOE_COMBINE: {
        const int32_t e = n->expert;
        const int32_t *rr = o->moe_rows + (size_t)e * o->max_rows;
        const float *ww = o->moe_w + (size_t)e * o->max_rows;
        for (int32_t j = 0; j < rows; j++) {
          float *dst = o->moe_out + (size_t)rr[j] * dim;
          const float *src = o->xb2 + (size_t)j * dim;
          for (int32_t t = 0; t < dim; t++) dst[t] += ww[j] * src[t];
        }
        break;
      }
      case TSR_NODE_MATMUL:
      case TSR_NODE_OP_COUNT:
        break;
    }
    tsr_exec_op_end(o, n, t0);
    if (st) return st;
  }
  return TSR_OK;
}

tsr_status_t tsr_batch_logits_reserve(tsr_batch_t *b, size_t n, int32_t vocab) {
  size_t need = n * (size_t)vocab;
  if (need <= b->logits_cap) return TSR_OK;
  float *l = realloc(b->logits, need * sizeof(float));
  if (!l) return TSR_ERR(RESOURCE_EXHAUSTED, "batch: logits of %zu rows", n);
  b->logits = l;
  b->logits_cap = need;
  return TSR_OK;
}

tsr_status_t tsr_batch_prepare(tsr_exec_t *o, tsr_batch_t *b) {
  const int32_t vocab = o->model->cfg.vocab_size;
  size_t want = 0;
  for (size_t i = 0; i < b->n; i++) {
    tsr_batch_entry_t *e = &b->e[i];
    e->has_logits = false;
    if (e->seq->eng != o)
      return TSR_ERR(INVALID_ARGUMENT, "eval: entry %zu's sequence belongs to another engine", i);
    if (e->n > (size_t)(e->seq->max_seq - e->seq->pos))
      return TSR_ERR(OUT_OF_RANGE, "eval: entry %zu: %zu tokens at position %d exceed the "
                                   "context of %d", i, e->n, e->seq->pos, e->seq->max_seq);
    if (e->want_logits) e->logits_off = want++ * (size_t)vocab;
  }
  return tsr_batch_logits_reserve(b, want, vocab);
}

int tsr_batch_form_pass(const tsr_batch_t *b, tsr_pass_cursor_t *c, int32_t cap,
                        tsr_pass_entry_t *pe, int32_t *logit_rows, int32_t *out_rows,
                        int32_t *out_logits) {
  int n_e = 0;
  int32_t R = 0, n_logits = 0;
  c->pass_first = c->first;
  for (size_t i = c->first; i < b->n && R < cap; i++) {
    const tsr_batch_entry_t *e = &b->e[i];
    const size_t skip = i == c->first ? c->done : 0, left = e->n - skip;
    const int32_t take = (int32_t)(left < (size_t)(cap - R) ? left : (size_t)(cap - R));
    pe[n_e] = (tsr_pass_entry_t){e->seq, b->tokens + e->tok0 + skip, take, e->seq->pos, R, -1};
    if (e->want_logits && skip + (size_t)take == e->n) {
      pe[n_e].logit_row = n_logits;
      logit_rows[n_logits++] = R + take - 1;
    }
    n_e++;
    R += take;
  }
  if (n_e) {
    /* the last entry of the pass may be partial */
    const size_t last = c->first + (size_t)n_e - 1;
    const size_t last_done = (n_e == 1 ? c->done : 0) + (size_t)pe[n_e - 1].n;
    if (last_done == b->e[last].n) {
      c->first = last + 1;
      c->done = 0;
    } else {
      c->first = last;
      c->done = last_done;
    }
  }
  *out_rows = R;
  *out_logits = n_logits;
  return n_e;
}

void tsr_batch_take_logits(tsr_batch_t *b, size_t first, const tsr_pass_entry_t *pe, int n_e,
                           const float *logits, int32_t vocab) {
  for (int j = 0; j < n_e; j++) {
    tsr_batch_entry_t *e = &b->e[first + (size_t)j];
    if (pe[j].logit_row < 0) continue;
    memcpy(b->logits + e->logits_off, logits + (size_t)pe[j].logit_row * vocab,
           sizeof(float) * (size_t)vocab);
    e->has_logits = true;
  }
}

tsr_status_t tsr_engine_eval_local(tsr_exec_t *o, tsr_batch_t *b) {
  TSR_RETURN_IF(tsr_batch_prepare(o, b));
  /* Passes of at most max_rows rows, entries in order; an entry longer than
   * what is left of a pass continues in the next. */
  tsr_pass_entry_t *pe = o->pass;
  tsr_pass_cursor_t cur = {0};
  int n_e;
  int32_t R, n_logits;
  while ((n_e = tsr_batch_form_pass(b, &cur, o->max_rows, pe, o->logit_rows, &R, &n_logits))) {
    TSR_RETURN_IF(tsr_exec_moe_replan(o));
    tsr_status_t st = tsr_forward_nodes(o, pe, n_e, R, n_logits, 0, o->graph.n_nodes);
    if (st)
      return tsr_status_annotate(st, "evaluating %d row(s) of entries %zu..%zu", R,
                                 cur.pass_first, cur.pass_first + (size_t)n_e - 1);
    for (int j = 0; j < n_e; j++) pe[j].seq->pos += pe[j].n;
    tsr_batch_take_logits(b, cur.pass_first, pe, n_e, o->logits, o->model->cfg.vocab_size);
  }
  return TSR_OK;
}

tsr_status_t tsr_engine_eval(tsr_engine_t *o, tsr_batch_t *b) {
  if (!o || !b) return TSR_ERR(INVALID_ARGUMENT, "eval: NULL argument");
  if (!b->n) return TSR_ERR(INVALID_ARGUMENT, "eval: the batch is empty");
  pthread_mutex_lock(&o->lock);
  tsr_status_t st = o->dist ? tsr_dist_eval(o, b) : tsr_engine_eval_local(o, b);
  pthread_mutex_unlock(&o->lock);
  return st;
}

/* ---- session: one sequence on an engine of its own ---- */

struct tsr_session {
  tsr_engine_t *eng;
  tsr_seq_t *seq;
  tsr_batch_t *batch;
};

tsr_status_t tsr_session_create(tsr_model_t *model, const tsr_session_options_t *opts,
                                tsr_session_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "session: out_session is NULL");
  *out = NULL;
  tsr_session_t *s = calloc(1, sizeof(*s));
  if (!s) return TSR_ERR(RESOURCE_EXHAUSTED, "session");
  tsr_status_t st = engine_create(model, opts, TSR_SESSION_ROWS, &s->eng);
  if (!st) st = tsr_seq_create(s->eng, &s->seq);
  if (!st) st = tsr_batch_create(1, &s->batch);
  if (st) {
    tsr_session_destroy(s);
    return tsr_status_annotate(st, "session");
  }
  *out = s;
  return TSR_OK;
}

void tsr_session_destroy(tsr_session_t *s) {
  if (!s) return;
  tsr_batch_destroy(s->batch);
  tsr_seq_destroy(s->seq);
  tsr_engine_destroy(s->eng);
  free(s);
}

int32_t tsr_session_pos(const tsr_session_t *s) { return s->seq->pos; }
void tsr_session_reset(tsr_session_t *s) { tsr_seq_reset(s->seq); }

tsr_status_t tsr_session_eval(tsr_session_t *s, const int32_t *tokens, size_t n,
                              const float **out_logits) {
  if (out_logits) *out_logits = NULL;
  if (!s || (!tokens && n)) return TSR_ERR(INVALID_ARGUMENT, "eval: NULL argument");
  if (n == 0) return TSR_ERR(INVALID_ARGUMENT, "eval: no tokens");
  tsr_batch_clear(s->batch);
  tsr_status_t st = tsr_batch_add(s->batch, s->seq, tokens, n, true, NULL);
  if (st) return tsr_status_annotate(st, "eval");
  st = tsr_engine_eval(s->eng, s->batch);
  if (st) return st;
  if (out_logits) *out_logits = tsr_batch_logits(s->batch, 0);
  return TSR_OK;
}

void tsr_session_print_plan(const tsr_session_t *s, FILE *f) { tsr_exec_print_plan(s->eng, f); }

void tsr_session_get_stats(const tsr_session_t *s, tsr_session_stats_t *out) {
  tsr_exec_get_stats(s->eng, out);
}

void tsr_session_print_stats(const tsr_session_t *s, FILE *f) { tsr_exec_print_stats(s->eng, f); }

void tsr_session_print_graph(const tsr_session_t *s, FILE *f) { tsr_exec_print_graph(s->eng, f); }

tsr_exec_t *tsr_session_exec(const tsr_session_t *s) { return s->eng; }
