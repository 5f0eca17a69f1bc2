/*
 * forward.c - the forward pass of a llama model and the session that holds
 * its KV cache.
 *
 * One call evaluates T tokens at consecutive positions: T > 1 is a batched
 * prefill (matmuls as GEMM over the T rows), T == 1 a decode step (GEMV).
 * The pass interprets the session's planned graph (graph.h): light ops run
 * here and follow llama2.c's arithmetic (norms, RoPE, softmax, SwiGLU);
 * matmul groups and the int8 attention go through the executor (exec.c),
 * which runs them on the host (fp32 through OpenBLAS, or int8 W8A8 with the
 * shared dequantization routine) or streams them to a device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"

/* Prompt tokens are processed in chunks of at most this many rows, which
 * bounds the scratch memory while keeping GEMM shapes large. */
#define TSR_PREFILL_CHUNK 64

/* Attention of fewer multiply-adds than this runs on the calling thread. */
#define TSR_ATTN_PARALLEL_MIN 65536.0

struct tsr_session {
  tsr_model_t *model; /* borrowed, must outlive */
  tsr_precision_t precision;
  int32_t max_seq;
  int32_t pos;
  float *key_cache;   /* (n_layers, max_seq, kv_dim) */
  float *value_cache; /* (n_layers, max_seq, kv_dim) */
  /* Scratch for up to TSR_PREFILL_CHUNK rows. */
  float *x;   /* (T, dim) residual stream        */
  float *xb;  /* (T, max(dim, q_dim)) normed / attention output */
  float *xb2; /* (T, dim)                         */
  float *hb;  /* (T, hidden_dim)                  */
  float *hb2; /* (T, hidden_dim)                  */
  float *q;   /* (T, q_dim)                       */
  float *k;   /* (T, kv_dim)                      */
  float *v;   /* (T, kv_dim)                      */
  float *att; /* (n_threads, max_seq) attention scores per worker */
  float *logits; /* (vocab)                       */
  int8_t *qa;      /* (T, max in-features) quantized activations */
  float *qa_scale; /* (T)                          */
  int32_t *acc;    /* (T, max out-features) int32 accumulators */
  tsr_exec_t *exec; /* the planned graph and the devices' side (owned) */
};

void tsr_session_options_init(tsr_session_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->precision = TSR_PRECISION_FP32;
  o->max_seq = 0;
  o->attn.kind = TSR_ATTN_REFERENCE;
  o->attn.block = TSR_ATTN_DEFAULT_BLOCK;
  o->attn.local = 1;
}

static int32_t max3(int32_t a, int32_t b, int32_t c) {
  int32_t m = a > b ? a : b;
  return m > c ? m : c;
}

tsr_status_t tsr_session_create(tsr_model_t *model, const tsr_session_options_t *opts,
                                tsr_session_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "session: out_session is NULL");
  *out = NULL;
  if (!model) return TSR_ERR(INVALID_ARGUMENT, "session: model is NULL");
  tsr_session_options_t defaults;
  if (!opts) {
    tsr_session_options_init(&defaults);
    opts = &defaults;
  }
  const tsr_model_config_t *c = &model->cfg;
  if (opts->precision != TSR_PRECISION_FP32 && opts->precision != TSR_PRECISION_INT8)
    return TSR_ERR(INVALID_ARGUMENT, "session: unknown precision %d", (int)opts->precision);
  if (opts->max_seq < 0 || opts->max_seq > c->seq_len)
    return TSR_ERR(OUT_OF_RANGE, "session: max_seq %d outside [0, seq_len %d]", opts->max_seq,
                   c->seq_len);
  TSR_RETURN_IF_ERROR(tsr_attn_pattern_check(&opts->attn), "session: attn");
  if (opts->precision == TSR_PRECISION_INT8) TSR_RETURN_IF(tsr_model_ensure_int8(model));
  tsr_session_t *s = calloc(1, sizeof(*s));
  if (!s) return TSR_ERR(RESOURCE_EXHAUSTED, "session");
  s->model = model;
  s->precision = opts->precision;
  s->max_seq = opts->max_seq ? opts->max_seq : c->seq_len;
  const size_t T = TSR_PREFILL_CHUNK;
  const size_t q_dim = (size_t)c->n_heads * c->head_dim;
  const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
  const size_t cache = (size_t)c->n_layers * (size_t)s->max_seq * kv_dim;
  const size_t widest_in = (size_t)max3(c->dim, c->hidden_dim, (int32_t)q_dim);
  const size_t widest_out = (size_t)max3(c->hidden_dim, c->vocab_size, c->dim);
  const int n_threads = tsr_threadpool_size(model->ctx->pool);
  s->key_cache = calloc(cache, sizeof(float));
  s->value_cache = calloc(cache, sizeof(float));
  s->x = malloc(sizeof(float) * T * (size_t)c->dim);
  s->xb = malloc(sizeof(float) * T * widest_in);
  s->xb2 = malloc(sizeof(float) * T * (size_t)c->dim);
  s->hb = malloc(sizeof(float) * T * (size_t)c->hidden_dim);
  s->hb2 = malloc(sizeof(float) * T * (size_t)c->hidden_dim);
  s->q = malloc(sizeof(float) * T * q_dim);
  s->k = malloc(sizeof(float) * T * kv_dim);
  s->v = malloc(sizeof(float) * T * kv_dim);
  s->att = malloc(sizeof(float) * (size_t)n_threads * (size_t)s->max_seq);
  s->logits = malloc(sizeof(float) * (size_t)c->vocab_size);
  s->qa = malloc(T * widest_in);
  s->qa_scale = malloc(sizeof(float) * T);
  s->acc = malloc(sizeof(int32_t) * T * widest_out);
  if (!s->key_cache || !s->value_cache || !s->x || !s->xb || !s->xb2 || !s->hb || !s->hb2 ||
      !s->q || !s->k || !s->v || !s->att || !s->logits || !s->qa || !s->qa_scale || !s->acc) {
    tsr_session_destroy(s);
    return TSR_ERR(RESOURCE_EXHAUSTED, "session: KV cache of %zu floats and scratch", 2 * cache);
  }
  tsr_status_t st = tsr_exec_create(model->ctx, model, s->precision, TSR_PREFILL_CHUNK,
                                    &opts->attn, s->max_seq, &s->exec);
  if (st) {
    tsr_session_destroy(s);
    return tsr_status_annotate(st, "session");
  }
  *out = s;
  return TSR_OK;
}

void tsr_session_destroy(tsr_session_t *s) {
  if (!s) return;
  tsr_exec_destroy(s->exec);
  free(s->key_cache);
  free(s->value_cache);
  free(s->x);
  free(s->xb);
  free(s->xb2);
  free(s->hb);
  free(s->hb2);
  free(s->q);
  free(s->k);
  free(s->v);
  free(s->att);
  free(s->logits);
  free(s->qa);
  free(s->qa_scale);
  free(s->acc);
  free(s);
}

int32_t tsr_session_pos(const tsr_session_t *s) { return s->pos; }
void tsr_session_reset(tsr_session_t *s) { s->pos = 0; }

/* Attention of T query rows at positions pos0.. over the cache of one layer,
 * one task per (row, head). */
typedef struct {
  tsr_session_t *s;
  int32_t layer, pos0, T;
} attn_args_t;

static void attn_task(void *arg, int task, int thread) {
  const attn_args_t *a = arg;
  tsr_session_t *s = a->s;
  const tsr_model_config_t *c = &s->model->cfg;
  const int32_t hs = c->head_dim, kv_dim = c->n_kv_heads * hs, q_dim = c->n_heads * hs;
  const int32_t kv_mul = c->n_heads / c->n_kv_heads;
  const int32_t t = task / c->n_heads, h = task % c->n_heads;
  const int32_t pos = a->pos0 + t;
  const size_t loff = (size_t)a->layer * (size_t)s->max_seq * (size_t)kv_dim;
  const float *q = s->q + (size_t)t * q_dim + (size_t)h * hs;
  float *att = s->att + (size_t)thread * (size_t)s->max_seq;
  const float scale = sqrtf((float)hs);
  for (int32_t p = 0; p <= pos; p++) {
    const float *k = s->key_cache + loff + (size_t)p * kv_dim + (size_t)(h / kv_mul) * hs;
    float score = 0.0f;
    for (int32_t i = 0; i < hs; i++) score += q[i] * k[i];
    att[p] = score / scale;
  }
  tsr_softmax(att, pos + 1);
  float *xb = s->xb + (size_t)t * q_dim + (size_t)h * hs;
  memset(xb, 0, sizeof(float) * (size_t)hs);
  for (int32_t p = 0; p <= pos; p++) {
    const float *v = s->value_cache + loff + (size_t)p * kv_dim + (size_t)(h / kv_mul) * hs;
    const float w = att[p];
    for (int32_t i = 0; i < hs; i++) xb[i] += w * v[i];
  }
}

/* Evaluates T <= TSR_PREFILL_CHUNK tokens at s->pos.. by interpreting the
 * planned graph: light ops here, matmul groups through the executor. */
static tsr_status_t forward_chunk(tsr_session_t *s, const int32_t *tokens, int32_t T,
                                  bool want_logits) {
  const tsr_model_t *m = s->model;
  const tsr_model_config_t *c = &m->cfg;
  const int32_t dim = c->dim, hd = c->hidden_dim, hs = c->head_dim;
  const int32_t kv_dim = c->n_kv_heads * hs, q_dim = c->n_heads * hs;
  const int32_t pos0 = s->pos;
  const tsr_graph_t *g = tsr_exec_graph(s->exec, T);
  /* Tensor storage; the attention output reuses xb, which is dead by then. */
  float *buf[TSR_T_COUNT] = {
      [TSR_T_X] = s->x,     [TSR_T_XB] = s->xb,   [TSR_T_Q] = s->q,
      [TSR_T_K] = s->k,     [TSR_T_V] = s->v,     [TSR_T_ATT] = s->xb,
      [TSR_T_XB2] = s->xb2, [TSR_T_HB] = s->hb,   [TSR_T_HB2] = s->hb2,
      [TSR_T_LOGITS] = s->logits};
  const tsr_offload_scratch_t sc = {s->qa, s->qa_scale, s->acc};
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    const bool final = n->layer < 0 && n->op != TSR_NODE_EMBED; /* norm + classifier */
    if (final && !want_logits) break;
    if (n->op == TSR_NODE_MATMUL) {
      if (n->group != i) continue; /* ran with its group's first node */
      float *outs[8];
      for (int j = 0; j < n->group_size; j++) outs[j] = buf[g->nodes[i + j].out];
      TSR_RETURN_IF(tsr_exec_matmul_group(s->exec, g, i, final ? 1 : T, buf[n->in], outs, &sc));
      continue;
    }
    double t0 = tsr_exec_op_begin(s->exec, n);
    switch (n->op) {
      case TSR_NODE_EMBED:
        for (int32_t t = 0; t < T; t++)
          memcpy(s->x + (size_t)t * dim, m->tok_embd + (size_t)tokens[t] * dim,
                 sizeof(float) * dim);
        break;
      case TSR_NODE_RMSNORM:
        if (final) /* the classifier needs the last row only */
          tsr_rmsnorm(s->xb, s->x + (size_t)(T - 1) * dim, n->norm_w, dim, c->rms_eps);
        else
          for (int32_t t = 0; t < T; t++)
            tsr_rmsnorm(s->xb + (size_t)t * dim, s->x + (size_t)t * dim, n->norm_w, dim,
                        c->rms_eps);
        break;
      case TSR_NODE_ROPE: {
        const size_t loff = (size_t)n->layer * (size_t)s->max_seq * (size_t)kv_dim;
        for (int32_t t = 0; t < T; t++) {
          tsr_rope(s->q + (size_t)t * q_dim, c->n_heads, hs, pos0 + t, c->rope_theta);
          tsr_rope(s->k + (size_t)t * kv_dim, c->n_kv_heads, hs, pos0 + t, c->rope_theta);
          memcpy(s->key_cache + loff + (size_t)(pos0 + t) * kv_dim, s->k + (size_t)t * kv_dim,
                 sizeof(float) * kv_dim);
          memcpy(s->value_cache + loff + (size_t)(pos0 + t) * kv_dim,
                 s->v + (size_t)t * kv_dim, sizeof(float) * kv_dim);
        }
        break;
      }
      case TSR_NODE_ATTENTION: {
        if (s->exec->attn.kind != TSR_ATTN_REFERENCE) {
          /* int8 block-sparse: the executor places it (host or device) */
          tsr_status_t st = tsr_exec_attention(s->exec, g, i, pos0, T, s->q, s->k, s->v, s->xb);
          if (st) {
            tsr_exec_op_end(s->exec, n, t0);
            return st;
          }
          break;
        }
        attn_args_t aa = {s, n->layer, pos0, T};
        /* Waking workers costs microseconds: only worth it for enough work. */
        const double work = (double)T * c->n_heads * (pos0 + T) * hs;
        tsr_threadpool_run(work >= TSR_ATTN_PARALLEL_MIN ? m->ctx->pool : NULL,
                           T * c->n_heads, attn_task, &aa);
        break;
      }
      case TSR_NODE_ADD: {
        const float *in = buf[n->in];
        for (size_t j = 0; j < (size_t)T * dim; j++) s->x[j] += in[j];
        break;
      }
      case TSR_NODE_SWIGLU:
        tsr_swiglu(s->hb, s->hb2, T * hd);
        break;
      case TSR_NODE_MATMUL:
        break;
    }
    tsr_exec_op_end(s->exec, n, t0);
  }
  s->pos += T;
  return TSR_OK;
}

tsr_status_t tsr_session_eval(tsr_session_t *s, const int32_t *tokens, size_t n,
                              const float **out_logits) {
  if (out_logits) *out_logits = NULL;
  if (!s || (!tokens && n)) return TSR_ERR(INVALID_ARGUMENT, "eval: NULL argument");
  if (n == 0) return TSR_ERR(INVALID_ARGUMENT, "eval: no tokens");
  if (n > (size_t)(s->max_seq - s->pos))
    return TSR_ERR(OUT_OF_RANGE, "eval: %zu tokens at position %d exceed the context of %d", n,
                   s->pos, s->max_seq);
  const int32_t vocab = s->model->cfg.vocab_size;
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return TSR_ERR(OUT_OF_RANGE, "eval: token %zu is %d, outside [0, %d)", i, tokens[i],
                     vocab);
  for (size_t done = 0; done < n;) {
    int32_t T = (int32_t)(n - done < TSR_PREFILL_CHUNK ? n - done : TSR_PREFILL_CHUNK);
    tsr_status_t st = forward_chunk(s, tokens + done, T, done + (size_t)T == n);
    if (st) {
      /* The cache holds a partial chunk: the session restarts from the
       * last complete position. */
      return tsr_status_annotate(st, "evaluating positions %d..%d", s->pos,
                                 s->pos + T - 1);
    }
    done += (size_t)T;
  }
  if (out_logits) *out_logits = s->logits;
  return TSR_OK;
}

void tsr_session_print_plan(const tsr_session_t *s, FILE *f) { tsr_exec_print_plan(s->exec, f); }

void tsr_session_get_stats(const tsr_session_t *s, tsr_session_stats_t *out) {
  tsr_exec_get_stats(s->exec, out);
}

void tsr_session_print_stats(const tsr_session_t *s, FILE *f) { tsr_exec_print_stats(s->exec, f); }

void tsr_session_print_graph(const tsr_session_t *s, FILE *f) {
  const char *names[64];
  int n = s->exec->n_devs < 64 ? s->exec->n_devs : 64;
  for (int i = 0; i < n; i++) names[i] = s->exec->devs[i].cd->name;
  tsr_graph_print(&s->exec->decode, f, names);
  tsr_graph_print(&s->exec->prefill, f, names);
}

tsr_exec_t *tsr_session_exec(const tsr_session_t *s) { return s->exec; }
