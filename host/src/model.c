/*
 * model.c - a loaded model: the weights as the file stores them (views into
 * the mapping), what each precision needs derived from them on first use
 * and only then, and the tokenizer.
 *   fp32  borrowed from the mapping when the file stores F32; converted
 *         copies otherwise, made when the first fp32 engine is created;
 *   fp16, bf16  borrowed from the mapping when the file stores that type;
 *         converted copies otherwise (round to nearest even), made when
 *         the first engine of the precision is created;
 *   int8  quantized per output channel when the first int8 engine is
 *         created, row by row straight from the file's format (no fp32 copy
 *         of a matrix is made); the file's pages of a matrix are then
 *         dropped from memory unless an fp32 engine reads them;
 *   the embedding table is read a row per token from the mapping.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compute/dtype.h"
#include "dist.h"
#include "internal.h"

/* Converts elements [e0, e0 + n) of a view to fp32. Q8_0 ranges start and
 * end on a block (the loaders check that rows are whole blocks). */
static void view_convert(const tsr_tensor_view_t *v, size_t e0, size_t n, float *f) {
  const uint8_t *src = v->data;
  if (v->type == TSR_DTYPE_F32) {
    memcpy(f, src + 4 * e0, sizeof(float) * n);
  } else if (v->type == TSR_DTYPE_F16) {
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, src + 2 * (e0 + i), 2);
      f[i] = tsr_f16_to_f32(h);
    }
  } else if (v->type == TSR_DTYPE_BF16) {
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, src + 2 * (e0 + i), 2);
      f[i] = tsr_bf16_to_f32(h);
    }
  } else { /* TSR_DTYPE_Q8_0 */
    for (size_t b = 0; b < n / 32; b++) {
      const uint8_t *blk = src + (e0 / 32 + b) * 34;
      uint16_t h;
      memcpy(&h, blk, 2);
      float d = tsr_f16_to_f32(h);
      for (int j = 0; j < 32; j++) f[b * 32 + j] = d * (float)(int8_t)blk[2 + j];
    }
  }
}

static tsr_status_t view_check(const tsr_tensor_view_t *v, const char *what) {
  if (v->type == TSR_DTYPE_F32 || v->type == TSR_DTYPE_F16 || v->type == TSR_DTYPE_BF16)
    return TSR_OK;
  if (v->type == TSR_DTYPE_Q8_0 && v->cols % 32 == 0) return TSR_OK;
  if (v->type == TSR_DTYPE_Q8_0)
    return TSR_ERR(FORMAT, "%s: Q8_0 rows of %lld values are not whole blocks of 32", what,
                   (long long)v->cols);
  return TSR_ERR(UNIMPLEMENTED, "%s: tensor type %s", what, tsr_dtype_name(v->type));
}

/* fp32 of a view: borrowed if it is F32 (*owned NULL), else a copy. */
static tsr_status_t view_to_f32(const tsr_tensor_view_t *v, const char *what,
                                const float **out, float **owned) {
  *owned = NULL;
  TSR_RETURN_IF(view_check(v, what));
  size_t n = (size_t)v->rows * (size_t)v->cols;
  if (v->type == TSR_DTYPE_F32) {
    *out = (const float *)v->data;
    return TSR_OK;
  }
  float *f = tsr_weights_alloc(sizeof(float) * n);
  if (!f) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: %zu floats", what, n);
  view_convert(v, 0, n, f);
  *out = f;
  *owned = f;
  return TSR_OK;
}

/* Drops the pages wholly inside rows [r0, r1) of a view's data from this
 * process's memory (a private read-only mapping of the file: touched
 * again, they are read back). */
static void view_drop_rows(const tsr_tensor_view_t *v, int64_t r0, int64_t r1) {
  uint64_t off = 0, end = 0;
  if (!tsr_dtype_nbytes(v->type, (uint64_t)(r0 * v->cols), &off) ||
      !tsr_dtype_nbytes(v->type, (uint64_t)(r1 * v->cols), &end))
    return;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)v->data + (uintptr_t)off + page - 1) & ~(page - 1);
  uintptr_t hi = ((uintptr_t)v->data + (uintptr_t)end) & ~(page - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* A token's row, read from the file with pread when it can be (the table
 * is read a row per token, and a fault on the mapping would map the pages
 * around the row too, so the resident set would grow by some 64 KiB per new
 * token); else from the mapping. */
void tsr_model_embed(const tsr_model_t *m, int32_t token, float *out) {
  const int32_t dim = m->cfg.dim;
  const tsr_tensor_view_t *v = &m->tok_embd_src;
  uint64_t off = 0, n = 0;
  uint8_t row[16384];
  if (tsr_dtype_nbytes(v->type, (uint64_t)token * (uint64_t)dim, &off) &&
      tsr_dtype_nbytes(v->type, (uint64_t)dim, &n) && n <= sizeof row &&
      tsr_file_pread(&m->file->file, (const uint8_t *)v->data + off, (size_t)n, row)) {
    if (v->type == TSR_DTYPE_F32) {
      memcpy(out, row, sizeof(float) * (size_t)dim);
      return;
    }
    const tsr_tensor_view_t one = {v->type, 1, dim, row};
    view_convert(&one, 0, (size_t)dim, out);
    return;
  }
  if (m->tok_embd) memcpy(out, m->tok_embd + (size_t)token * dim, sizeof(float) * dim);
  else view_convert(v, (size_t)token * dim, (size_t)dim, out);
}

static tsr_status_t vector_to_f32(tsr_model_t *m, const tsr_tensor_view_t *v,
                                  const char *what, const float **out) {
  float *owned = NULL;
  TSR_RETURN_IF(view_to_f32(v, what, out, &owned));
  if (owned) {
    float **list = realloc(m->owned_vectors, sizeof(float *) * (size_t)(m->n_owned_vectors + 1));
    if (!list) {
      free(owned);
      return TSR_ERR(RESOURCE_EXHAUSTED, "%s", what);
    }
    m->owned_vectors = list;
    m->owned_vectors[m->n_owned_vectors++] = owned;
  }
  return TSR_OK;
}

static tsr_status_t linear_init(tsr_linear_t *l, const tsr_tensor_view_t *v, const char *what) {
  memset(l, 0, sizeof(*l));
  l->rows = (int32_t)v->rows;
  l->cols = (int32_t)v->cols;
  l->src = *v;
  TSR_RETURN_IF(view_check(v, what));
  if (v->type == TSR_DTYPE_F32) l->f32 = (const float *)v->data; /* in place */
  if (v->type == TSR_DTYPE_F16) l->f16 = (const uint16_t *)v->data;
  if (v->type == TSR_DTYPE_BF16) l->bf16 = (const uint16_t *)v->data;
  return TSR_OK;
}

/* Rows [r0, r0 + rows) of a view, as a view. */
static tsr_tensor_view_t view_rows(const tsr_tensor_view_t *v, int64_t r0, int64_t rows) {
  tsr_tensor_view_t out = *v;
  uint64_t off = 0;
  (void)tsr_dtype_nbytes(v->type, (uint64_t)(r0 * v->cols), &off); /* the loader checked it */
  out.data = (const uint8_t *)v->data + off;
  out.rows = rows;
  return out;
}

/* The router and the experts of a MoE layer. */
static tsr_status_t experts_init(tsr_layer_t *y, const tsr_layer_views_t *v, int32_t n) {
  y->n_experts = n;
  y->exp_gate = calloc((size_t)n, sizeof(tsr_linear_t));
  y->exp_down = calloc((size_t)n, sizeof(tsr_linear_t));
  y->exp_up = calloc((size_t)n, sizeof(tsr_linear_t));
  if (!y->exp_gate || !y->exp_down || !y->exp_up)
    return TSR_ERR(RESOURCE_EXHAUSTED, "%d experts", n);
  TSR_RETURN_IF(linear_init(&y->router, &v->router, "ffn_gate_inp"));
  const int64_t hid = v->w1.rows / n, dim = v->w2.rows / n;
  for (int32_t e = 0; e < n; e++) {
    tsr_tensor_view_t g = view_rows(&v->w1, e * hid, hid), d = view_rows(&v->w2, e * dim, dim),
                      u = view_rows(&v->w3, e * hid, hid);
    TSR_RETURN_IF(linear_init(&y->exp_gate[e], &g, "ffn_gate_exps"));
    TSR_RETURN_IF(linear_init(&y->exp_down[e], &d, "ffn_down_exps"));
    TSR_RETURN_IF(linear_init(&y->exp_up[e], &u, "ffn_up_exps"));
  }
  return TSR_OK;
}

static void linear_free(tsr_linear_t *l) {
  free(l->f32_owned);
  free(l->f16_owned);
  free(l->bf16_owned);
  tsr_qsparse_free(&l->qs);
  tsr_qmatrix_free(&l->q);
}

tsr_status_t tsr_model_load(tsr_context_t *ctx, const char *path, const char *tokenizer_path,
                            tsr_model_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "model: out_model is NULL");
  *out = NULL;
  if (!ctx) return TSR_ERR(INVALID_ARGUMENT, "model: ctx is NULL");
  if (!path) return TSR_ERR(INVALID_ARGUMENT, "model: path is NULL");
  tsr_model_t *m = calloc(1, sizeof(*m));
  if (!m) return TSR_ERR(RESOURCE_EXHAUSTED, "model");
  m->ctx = ctx;
  pthread_mutex_init(&m->quant_lock, NULL);
  tsr_status_t s = tsr_model_file_open(path, tokenizer_path, &m->file);
  if (s) {
    tsr_model_destroy(m);
    return s;
  }
  const tsr_model_file_t *f = m->file;
  m->cfg = f->config;
  int32_t L = m->cfg.n_layers;
  m->layers = calloc((size_t)L, sizeof(tsr_layer_t));
  if (!m->layers) s = TSR_ERR(RESOURCE_EXHAUSTED, "model: %d layers", L);
  tsr_dist_model_layers(ctx, L, &m->layer0, &m->layer1, &m->ends);
  if (!s && m->ends) {
    m->tok_embd_src = f->tok_embd;
    s = view_check(&f->tok_embd, "token_embd");
    if (f->tok_embd.type == TSR_DTYPE_F32) m->tok_embd = (const float *)f->tok_embd.data;
    if (!s) s = vector_to_f32(m, &f->rms_final, "output_norm", &m->rms_final);
    if (!s) s = linear_init(&m->output, &f->output, "output");
  }
  for (int32_t l = m->layer0; l < m->layer1 && !s; l++) {
    const tsr_layer_views_t *v = &f->layers[l];
    tsr_layer_t *y = &m->layers[l];
    s = vector_to_f32(m, &v->rms_att, "attn_norm", &y->rms_att);
    if (!s) s = vector_to_f32(m, &v->rms_ffn, "ffn_norm", &y->rms_ffn);
    if (!s) s = linear_init(&y->wq, &v->wq, "attn_q");
    if (!s) s = linear_init(&y->wk, &v->wk, "attn_k");
    if (!s) s = linear_init(&y->wv, &v->wv, "attn_v");
    if (!s) s = linear_init(&y->wo, &v->wo, "attn_output");
    if (!s && m->cfg.n_experts) {
      s = experts_init(y, v, m->cfg.n_experts);
    } else {
      if (!s) s = linear_init(&y->w1, &v->w1, "ffn_gate");
      if (!s) s = linear_init(&y->w2, &v->w2, "ffn_down");
      if (!s) s = linear_init(&y->w3, &v->w3, "ffn_up");
    }
    if (s) s = tsr_status_annotate(s, "layer %d", l);
  }
  if (!s) s = tsr_tokenizer_init(&m->tok, &f->vocab);
  if (!s) s = tsr_dist_model_open(m, path, tokenizer_path);
  if (s) {
    tsr_model_destroy(m);
    return tsr_status_annotate(s, "%s", path);
  }
  *out = m;
  return TSR_OK;
}

void tsr_model_destroy(tsr_model_t *m) {
  if (!m) return;
  tsr_dist_model_close(m);
  if (m->layers) {
    for (int32_t l = 0; l < m->cfg.n_layers; l++) {
      tsr_layer_t *y = &m->layers[l];
      linear_free(&y->wq);
      linear_free(&y->wk);
      linear_free(&y->wv);
      linear_free(&y->wo);
      linear_free(&y->w1);
      linear_free(&y->w2);
      linear_free(&y->w3);
      linear_free(&y->router);
      for (int32_t e = 0; e < y->n_experts; e++) {
        if (y->exp_gate) linear_free(&y->exp_gate[e]);
        if (y->exp_down) linear_free(&y->exp_down[e]);
        if (y->exp_up) linear_free(&y->exp_up[e]);
      }
      free(y->exp_gate);
      free(y->exp_down);
      free(y->exp_up);
    }
    free(m->layers);
  }
  linear_free(&m->output);
  for (int i = 0; i < m->n_owned_vectors; i++) free(m->owned_vectors[i]);
  free(m->owned_vectors);
  tsr_tokenizer_free(&m->tok);
  tsr_model_file_close(m->file);
  pthread_mutex_destroy(&m->quant_lock);
  free(m);
}

void tsr_model_config(const tsr_model_t *m, tsr_model_config_t *out) { *out = m->cfg; }

static void linear_row(void *ctx, int32_t r, float *dst) {
  const tsr_linear_t *l = ctx;
  if (l->f32) memcpy(dst, l->f32 + (size_t)r * l->cols, sizeof(float) * (size_t)l->cols);
  else view_convert(&l->src, (size_t)r * (size_t)l->cols, (size_t)l->cols, dst);
}

static void linear_rows_done(void *ctx, int32_t r0, int32_t r1) {
  view_drop_rows(&((const tsr_linear_t *)ctx)->src, r0, r1);
}

/* int8 of one linear; the file's pages of the rows done go as it proceeds,
 * unless fp32 reads them (peak memory: the int8 weights and a few rows). */
static tsr_status_t quantize_linear(tsr_model_t *m, tsr_linear_t *l, const char *what,
                                    int32_t layer) {
  if (l->q.data) return TSR_OK;
  /* the pages stay while an engine of another precision may read them */
  const bool keep = m->fp32_ready || m->f16_ready || m->bf16_ready;
  tsr_status_t s = tsr_qmatrix_quantize_rows(m->ctx->pool, &l->q, l->rows, l->cols, linear_row,
                                             keep ? NULL : linear_rows_done, l);
  if (!s && tsr_qsparse_density(&l->q) <= TSR_QSPARSE_USE_DENSITY)
    s = tsr_qsparse_build(&l->q, &l->qs);
  return tsr_status_annotate(s, "quantizing layer %d %s", layer, what);
}

static tsr_status_t f32_linear(tsr_linear_t *l, const char *what, int32_t layer) {
  if (l->f32) return TSR_OK;
  return tsr_status_annotate(view_to_f32(&l->src, what, &l->f32, &l->f32_owned),
                             "layer %d", layer);
}

/* fp16 or bf16 copy of a linear, converted from the file's type through
 * fp32 (exact for every type but F32 -> half, which rounds to nearest
 * even), blocks of rows on the pool. */
typedef struct {
  tsr_linear_t *l;
  uint16_t *h;
  bool bf16;
  bool drop;   /* drop the file's pages of each block once converted */
  float *rows; /* (threads, cols) */
} half_job_t;

enum { HALF_BLOCK_ROWS = 64 };

static void half_task(void *arg, int task, int thread) {
  const half_job_t *j = arg;
  const size_t cols = (size_t)j->l->cols;
  float *row = j->rows + (size_t)thread * cols;
  const int32_t r1 = (task + 1) * HALF_BLOCK_ROWS < j->l->rows ? (task + 1) * HALF_BLOCK_ROWS
                                                               : j->l->rows;
  for (int32_t r = task * HALF_BLOCK_ROWS; r < r1; r++) {
    linear_row(j->l, r, row);
    uint16_t *dst = j->h + (size_t)r * cols;
    for (size_t c = 0; c < cols; c++)
      dst[c] = j->bf16 ? tsr_f32_to_bf16(row[c]) : tsr_f32_to_f16(row[c]);
  }
  if (j->drop) view_drop_rows(&j->l->src, task * HALF_BLOCK_ROWS, r1);
}

static tsr_status_t half_linear(tsr_model_t *m, tsr_linear_t *l, bool bf16, const char *what,
                                int32_t layer) {
  if (bf16 ? l->bf16 != NULL : l->f16 != NULL) return TSR_OK;
  const size_t rows = (size_t)l->rows, cols = (size_t)l->cols;
  const int threads = m->ctx->pool ? tsr_threadpool_size(m->ctx->pool) : 1;
  /* the file's pages go as rows are converted, unless an engine of another
   * precision may read them in place */
  const bool drop = !m->fp32_ready && !m->f16_ready && !m->bf16_ready;
  half_job_t j = {l, tsr_weights_alloc(sizeof(uint16_t) * rows * cols), bf16, drop,
                  malloc(sizeof(float) * cols * (size_t)threads)};
  if (!j.h || !j.rows) {
    free(j.h);
    free(j.rows);
    return TSR_ERR(RESOURCE_EXHAUSTED, "layer %d %s: %s weights (%zu x %zu)", layer, what,
                   bf16 ? "bf16" : "fp16", rows, cols);
  }
  const int tasks = (int)((rows + HALF_BLOCK_ROWS - 1) / HALF_BLOCK_ROWS);
  if (m->ctx->pool) tsr_threadpool_run(m->ctx->pool, tasks, half_task, &j);
  else
    for (int t = 0; t < tasks; t++) half_task(&j, t, 0);
  free(j.rows);
  if (bf16) {
    l->bf16 = j.h;
    l->bf16_owned = j.h;
  } else {
    l->f16 = j.h;
    l->f16_owned = j.h;
  }
  return TSR_OK;
}

/* Calls fn on every linear the model holds, in order, until one fails. */
#define FOR_EACH_LINEAR(m, s, CALL)                                   \
  do {                                                                \
    for (int32_t l_ = (m)->layer0; l_ < (m)->layer1 && !(s); l_++) {  \
      tsr_layer_t *y_ = &(m)->layers[l_];                             \
      s = CALL(&y_->wq, "attn_q", l_);                                \
      if (!(s)) s = CALL(&y_->wk, "attn_k", l_);                      \
      if (!(s)) s = CALL(&y_->wv, "attn_v", l_);                      \
      if (!(s)) s = CALL(&y_->wo, "attn_output", l_);                 \
      if (!(s) && !y_->n_experts) s = CALL(&y_->w1, "ffn_gate", l_);  \
      if (!(s) && !y_->n_experts) s = CALL(&y_->w2, "ffn_down", l_);  \
      if (!(s) && !y_->n_experts) s = CALL(&y_->w3, "ffn_up", l_);    \
      if (!(s) && y_->n_experts) s = CALL(&y_->router, "ffn_gate_inp", l_); \
      for (int32_t e_ = 0; e_ < y_->n_experts && !(s); e_++) {        \
        s = CALL(&y_->exp_gate[e_], "ffn_gate_exps", l_);             \
        if (!(s)) s = CALL(&y_->exp_down[e_], "ffn_down_exps", l_);   \
        if (!(s)) s = CALL(&y_->exp_up[e_], "ffn_up_exps", l_);       \
      }                                                               \
    }                                                                 \
    if (!(s) && (m)->ends) s = CALL(&(m)->output, "output", -1);      \
  } while (0)

tsr_status_t tsr_model_ensure_int8(tsr_model_t *m) {
  pthread_mutex_lock(&m->quant_lock);
  tsr_status_t s = TSR_OK;
  if (!m->quantized) {
#define Q(l, what, layer) quantize_linear(m, l, what, layer)
    FOR_EACH_LINEAR(m, s, Q);
#undef Q
    m->quantized = s == TSR_OK;
  }
  pthread_mutex_unlock(&m->quant_lock);
  return s;
}

tsr_status_t tsr_model_ensure_fp32(tsr_model_t *m) {
  pthread_mutex_lock(&m->quant_lock);
  tsr_status_t s = TSR_OK;
  if (!m->fp32_ready) {
    FOR_EACH_LINEAR(m, s, f32_linear);
    m->fp32_ready = s == TSR_OK;
  }
  pthread_mutex_unlock(&m->quant_lock);
  return s;
}

tsr_status_t tsr_model_ensure_half(tsr_model_t *m, bool bf16) {
  pthread_mutex_lock(&m->quant_lock);
  tsr_status_t s = TSR_OK;
  bool *ready = bf16 ? &m->bf16_ready : &m->f16_ready;
  if (!*ready) {
#define H(l, what, layer) half_linear(m, l, bf16, what, layer)
    FOR_EACH_LINEAR(m, s, H);
#undef H
    *ready = s == TSR_OK;
  }
  pthread_mutex_unlock(&m->quant_lock);
  return s;
}

tsr_status_t tsr_model_tokenize(const tsr_model_t *m, const char *text, bool add_bos,
                                bool add_eos, int32_t *tokens, size_t cap, size_t *n) {
  if (!m || !n || (!tokens && cap))
    return TSR_ERR(INVALID_ARGUMENT, "tokenize: NULL argument");
  return tsr_tokenizer_encode(&m->tok, text, add_bos, add_eos, tokens, cap, n);
}

const char *tsr_model_token_piece(const tsr_model_t *m, int32_t prev, int32_t token) {
  return m ? tsr_tokenizer_piece(&m->tok, prev, token) : NULL;
}

int32_t tsr_model_bos(const tsr_model_t *m) { return m->file->vocab.bos; }
int32_t tsr_model_eos(const tsr_model_t *m) { return m->file->vocab.eos; }
