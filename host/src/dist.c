/*
 * dist.c - models, engines and sequences mirrored across MPI ranks, the
 * pipeline and data-parallel evaluation of a batch, and the loop the other
 * ranks run (dist.h).
 *
 * Pipeline (TSR_SPLIT_LAYERS): rank 0 cuts a batch into micro-batches (as
 * many as there are ranks, at most the engine's rows per pass each), runs
 * the embedding and its layers on one, sends the residual stream (rows x
 * dim floats) down, and goes on with the next while rank 1 works on the
 * first; the last rank sends the rows back, and rank 0 runs the final norm
 * and the classifier on them. Every rank keeps the KV caches of its own
 * layers; a micro-batch reaches every rank in order, so a sequence's
 * chunks are appended in order everywhere.
 *
 * Data parallelism (TSR_SPLIT_ROWS): sequence i lives on rank i % ranks
 * (its cache there only); a batch's entries go to their ranks as tokens,
 * each rank evaluates its share whole, and the logits come back.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "dist.h"
#include "offload.h"

/* ---- rank 0's side ---- */

typedef struct pass_slot {
  tsr_pass_entry_t *pe; /* (max_rows) */
  int32_t *logit_rows;  /* (max_rows) */
  int n_e;
  int32_t R, n_logits;
  size_t first;         /* batch entry of pe[0] */
  tsr_dist_buf_t out;   /* the message sent down */
  tsr_dist_send_t snd;
} pass_slot_t;

struct tsr_dist_engine {
  uint32_t id;
  int tag;            /* answers to this engine */
  int depth;          /* pipeline: micro-batches in flight */
  pass_slot_t *slots; /* (depth) */
  tsr_dist_buf_t in;
  /* rows split: one message per rank, the local share */
  tsr_dist_buf_t *outs;   /* (size) */
  tsr_dist_send_t *snds;  /* (size) */
  tsr_batch_t *local;
  tsr_dist_buf_t scratch; /* a payload under construction */
  uint64_t tokens;        /* tokens evaluated */
};

static tsr_dist_t *dist_of(const tsr_context_t *ctx) { return ctx ? ctx->dist : NULL; }

static bool is_root(const tsr_dist_t *d) { return d && tsr_dist_rank(d) == 0; }

static bool pipeline(const tsr_dist_t *d) { return tsr_dist_split(d) == TSR_SPLIT_LAYERS; }

void tsr_dist_model_layers(const tsr_context_t *ctx, int32_t n_layers, int32_t *l0, int32_t *l1,
                           bool *ends) {
  const tsr_dist_t *d = dist_of(ctx);
  *l0 = 0;
  *l1 = n_layers;
  *ends = true;
  if (!d || !pipeline(d) || tsr_dist_size(d) == 1) return;
  tsr_dist_layers(n_layers, tsr_dist_rank(d), tsr_dist_size(d), l0, l1);
  *ends = tsr_dist_rank(d) == 0;
}

/* Sends a control message down: in a pipeline to rank 1 (which passes it
 * on), else to every rank (dest < 0) or one. */
static tsr_status_t send_down(tsr_dist_t *d, int dest, const tsr_dist_hdr_t *h,
                              const void *payload, size_t len, const char *what) {
  if (pipeline(d)) return tsr_dist_send(d, 1, TSR_DIST_TAG_DOWN, h, payload, len, false, what);
  for (int k = 1; k < tsr_dist_size(d); k++) {
    if (dest >= 0 && k != dest) continue;
    TSR_RETURN_IF(tsr_dist_send(d, k, TSR_DIST_TAG_DOWN, h, payload, len, false, what));
  }
  return TSR_OK;
}

/* Waits for every other rank's acknowledgement of `what`. */
static tsr_status_t wait_acks(tsr_dist_t *d, tsr_dist_buf_t *buf, const char *what) {
  for (int k = 1; k < tsr_dist_size(d); k++)
    TSR_RETURN_IF(tsr_dist_recv(d, k, TSR_DIST_TAG_STATS, buf, false, what));
  return TSR_OK;
}

tsr_status_t tsr_dist_model_open(tsr_model_t *m, const char *path, const char *tok) {
  tsr_dist_t *d = dist_of(m->ctx);
  if (!is_root(d) || tsr_dist_size(d) == 1) return TSR_OK;
  const size_t lp = strlen(path) + 1, lt = tok ? strlen(tok) + 1 : 1;
  char *payload = malloc(lp + lt);
  if (!payload) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: model paths");
  memcpy(payload, path, lp);
  if (tok) memcpy(payload + lp, tok, lt);
  else payload[lp] = '\0';
  m->dist_id = tsr_dist_next_id(d);
  const tsr_dist_hdr_t h = {.op = TSR_DIST_MODEL_OPEN, .id = m->dist_id};
  tsr_dist_buf_t buf = {0};
  tsr_status_t s = send_down(d, -1, &h, payload, lp + lt, "a model to load");
  if (!s) s = wait_acks(d, &buf, "the model loaded on every rank");
  free(payload);
  tsr_dist_buf_free(&buf);
  if (s) m->dist_id = 0;
  return s;
}

void tsr_dist_model_close(tsr_model_t *m) {
  tsr_dist_t *d = dist_of(m->ctx);
  if (!is_root(d) || !m->dist_id || tsr_dist_broken(d)) return;
  const tsr_dist_hdr_t h = {.op = TSR_DIST_MODEL_CLOSE, .id = m->dist_id};
  tsr_status_free(send_down(d, -1, &h, NULL, 0, "a model to close"));
}

static void engine_free(struct tsr_dist_engine *de, int size) {
  if (!de) return;
  for (int i = 0; de->slots && i < de->depth; i++) {
    free(de->slots[i].pe);
    free(de->slots[i].logit_rows);
    tsr_dist_buf_free(&de->slots[i].out);
    free(de->slots[i].snd.req);
  }
  free(de->slots);
  for (int k = 0; de->outs && k < size; k++) tsr_dist_buf_free(&de->outs[k]);
  for (int k = 0; de->snds && k < size; k++) free(de->snds[k].req);
  free(de->outs);
  free(de->snds);
  tsr_batch_destroy(de->local);
  tsr_dist_buf_free(&de->scratch);
  tsr_dist_buf_free(&de->in);
  free(de);
}

tsr_status_t tsr_dist_engine_open(tsr_exec_t *o, const tsr_session_options_t *opts) {
  tsr_dist_t *d = dist_of(o->ctx);
  if (!is_root(d) || tsr_dist_size(d) == 1 || !o->model->dist_id) return TSR_OK;
  const int size = tsr_dist_size(d);
  struct tsr_dist_engine *de = calloc(1, sizeof *de);
  if (!de) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: engine");
  de->id = tsr_dist_next_id(d);
  de->tag = TSR_DIST_TAG_ENGINE + (int)(de->id % TSR_DIST_TAG_SPAN);
  tsr_status_t s = TSR_OK;
  if (pipeline(d)) {
    de->depth = opts->mpi_depth > 0 && opts->mpi_depth < size ? opts->mpi_depth : size;
    de->slots = calloc((size_t)de->depth, sizeof *de->slots);
    if (!de->slots) s = TSR_ERR(RESOURCE_EXHAUSTED, "mpi: %d pipeline slots", de->depth);
    for (int i = 0; !s && i < de->depth; i++) {
      de->slots[i].pe = malloc(sizeof(tsr_pass_entry_t) * (size_t)o->max_rows);
      de->slots[i].logit_rows = malloc(sizeof(int32_t) * (size_t)o->max_rows);
      if (!de->slots[i].pe || !de->slots[i].logit_rows)
        s = TSR_ERR(RESOURCE_EXHAUSTED, "mpi: pipeline slots of %d rows", o->max_rows);
    }
  } else {
    de->outs = calloc((size_t)size, sizeof *de->outs);
    de->snds = calloc((size_t)size, sizeof *de->snds);
    if (!de->outs || !de->snds) s = TSR_ERR(RESOURCE_EXHAUSTED, "mpi: %d ranks", size);
    if (!s) s = tsr_batch_create(0, &de->local);
  }
  const tsr_dist_hdr_t h = {.op = TSR_DIST_ENGINE_CREATE, .id = de->id, .a = o->model->dist_id};
  if (!s) s = send_down(d, -1, &h, opts, sizeof *opts, "an engine to create");
  if (!s) s = wait_acks(d, &de->in, "the engine created on every rank");
  if (s) {
    engine_free(de, size);
    return s;
  }
  o->dist = de;
  return TSR_OK;
}

void tsr_dist_engine_close(tsr_exec_t *o) {
  struct tsr_dist_engine *de = o->dist;
  if (!de) return;
  tsr_dist_t *d = dist_of(o->ctx);
  if (!tsr_dist_broken(d)) {
    const tsr_dist_hdr_t h = {.op = TSR_DIST_ENGINE_DESTROY, .id = de->id};
    tsr_status_free(send_down(d, -1, &h, NULL, 0, "an engine to destroy"));
  }
  engine_free(de, tsr_dist_size(d));
  o->dist = NULL;
}

tsr_status_t tsr_dist_seq_open(tsr_exec_t *o, tsr_seq_t *s) {
  tsr_dist_t *d = dist_of(o->ctx);
  s->rank = tsr_dist_rank(d);
  if (!o->dist) return TSR_OK;
  if (!pipeline(d)) s->rank = (int)(s->id % (uint64_t)tsr_dist_size(d));
  if (s->rank == 0 && !pipeline(d)) return TSR_OK;
  const tsr_dist_hdr_t h = {.op = TSR_DIST_SEQ_CREATE, .id = o->dist->id, .a = s->id};
  return send_down(d, s->rank, &h, NULL, 0, "a sequence to create");
}

static void seq_message(tsr_exec_t *o, tsr_seq_t *s, tsr_dist_op_t op, const char *what) {
  tsr_dist_t *d = dist_of(o->ctx);
  if (!o->dist || tsr_dist_broken(d) || (s->rank == 0 && !pipeline(d))) return;
  const tsr_dist_hdr_t h = {.op = op, .id = o->dist->id, .a = s->id};
  tsr_status_t st = send_down(d, s->rank, &h, NULL, 0, what);
  if (st) {
    tsr_ctx_warn(o->ctx, "%s", tsr_status_message(st));
    tsr_status_free(st);
  }
}

void tsr_dist_seq_close(tsr_exec_t *o, tsr_seq_t *s) {
  seq_message(o, s, TSR_DIST_SEQ_DESTROY, "a sequence to destroy");
}

void tsr_dist_seq_reset(tsr_exec_t *o, tsr_seq_t *s) {
  seq_message(o, s, TSR_DIST_SEQ_RESET, "a sequence to reset");
}

/* PASS payload: the entries, then rows x dim floats. */
static tsr_status_t pass_payload(struct tsr_dist_engine *de, const tsr_pass_entry_t *pe, int n_e,
                                 int32_t R, const float *x, int32_t dim, size_t *len) {
  const size_t le = sizeof(tsr_dist_entry_t) * (size_t)n_e, lx = sizeof(float) * (size_t)R * dim;
  TSR_RETURN_IF(tsr_dist_buf_reserve(&de->scratch, le + lx));
  tsr_dist_entry_t *ent = (tsr_dist_entry_t *)de->scratch.p;
  for (int j = 0; j < n_e; j++)
    ent[j] = (tsr_dist_entry_t){pe[j].seq->id, pe[j].n, pe[j].pos0, pe[j].row0, 0};
  memcpy((uint8_t *)de->scratch.p + le, x, lx);
  *len = le + lx;
  return TSR_OK;
}

static tsr_status_t pipe_eval(tsr_exec_t *o, tsr_batch_t *b) {
  tsr_dist_t *d = dist_of(o->ctx);
  struct tsr_dist_engine *de = o->dist;
  const int size = tsr_dist_size(d);
  const int32_t dim = o->model->cfg.dim, vocab = o->model->cfg.vocab_size;
  const int32_t final_at = tsr_graph_final_begin(&o->graph);
  TSR_RETURN_IF(tsr_batch_prepare(o, b));
  /* micro-batches: one per rank when the batch is large enough */
  const size_t total = b->n_tokens;
  size_t cap = (total + (size_t)size - 1) / (size_t)size;
  if (cap < 1) cap = 1;
  if (cap > (size_t)o->max_rows) cap = (size_t)o->max_rows;
  tsr_pass_cursor_t cur = {0};
  int tail = 0, inflight = 0;
  tsr_status_t st = TSR_OK;
  for (;;) {
    while (!st && inflight < de->depth) {
      pass_slot_t *sl = &de->slots[(tail + inflight) % de->depth];
      TSR_RETURN_IF(tsr_dist_send_wait(d, &sl->snd, "a micro-batch"));
      sl->n_e = tsr_batch_form_pass(b, &cur, (int32_t)cap, sl->pe, sl->logit_rows, &sl->R,
                                    &sl->n_logits);
      if (!sl->n_e) break;
      sl->first = cur.pass_first;
      const double t0 = tsr_now_s();
      st = tsr_forward_nodes(o, sl->pe, sl->n_e, sl->R, sl->n_logits, 0, final_at);
      tsr_dist_add_busy(d, tsr_now_s() - t0, 1);
      if (st) break;
      for (int j = 0; j < sl->n_e; j++) sl->pe[j].seq->pos += sl->pe[j].n;
      size_t len = 0;
      const tsr_dist_hdr_t h = {.op = TSR_DIST_PASS, .id = de->id, .n = (uint32_t)sl->n_e,
                                .rows = (uint32_t)sl->R};
      st = pass_payload(de, sl->pe, sl->n_e, sl->R, o->x, dim, &len);
      if (!st)
        st = tsr_dist_send_start(d, 1, TSR_DIST_TAG_DOWN, &h, de->scratch.p, len, true, &sl->out,
                                 &sl->snd);
      if (st) break;
      de->tokens += (uint64_t)sl->R;
      inflight++;
    }
    if (st || !inflight) break;
    /* the oldest micro-batch back from the last rank: the final nodes */
    pass_slot_t *sl = &de->slots[tail];
    st = tsr_dist_recv(d, size - 1, de->tag, &de->in, false, "a micro-batch's activations");
    if (st) break;
    const tsr_dist_hdr_t *h = de->in.p;
    const size_t want = sizeof *h + sizeof(tsr_dist_entry_t) * (size_t)sl->n_e +
                        sizeof(float) * (size_t)sl->R * dim;
    if (h->op != TSR_DIST_PASS || h->id != de->id || h->n != (uint32_t)sl->n_e ||
        h->rows != (uint32_t)sl->R || de->in.len != want) {
      st = tsr_dist_break(d, TSR_ERR(FORMAT, "mpi: rank %d sent op %u of engine %u with %u "
                                             "entries, %u rows, %zu bytes; expected the pass "
                                             "of %d entries, %d rows, %zu bytes",
                                     size - 1, h->op, h->id, h->n, h->rows, de->in.len,
                                     sl->n_e, sl->R, want));
      break;
    }
    memcpy(o->x, (const char *)de->in.p + want - sizeof(float) * (size_t)sl->R * dim,
           sizeof(float) * (size_t)sl->R * dim);
    memcpy(o->logit_rows, sl->logit_rows, sizeof(int32_t) * (size_t)sl->n_logits);
    const double t0 = tsr_now_s();
    st = tsr_forward_nodes(o, sl->pe, sl->n_e, sl->R, sl->n_logits, final_at, o->graph.n_nodes);
    tsr_dist_add_busy(d, tsr_now_s() - t0, 0);
    if (st) break;
    tsr_batch_take_logits(b, sl->first, sl->pe, sl->n_e, o->logits, vocab);
    tail = (tail + 1) % de->depth;
    inflight--;
  }
  if (st) return tsr_dist_break(d, tsr_status_annotate(st, "mpi pipeline"));
  return TSR_OK;
}

static tsr_status_t rows_eval(tsr_exec_t *o, tsr_batch_t *b) {
  tsr_dist_t *d = dist_of(o->ctx);
  struct tsr_dist_engine *de = o->dist;
  const int size = tsr_dist_size(d);
  const int32_t vocab = o->model->cfg.vocab_size;
  TSR_RETURN_IF(tsr_batch_prepare(o, b));
  tsr_status_t st = TSR_OK;
  /* each other rank's share, as tokens */
  for (int k = 1; k < size && !st; k++) {
    uint32_t n_e = 0, n_tok = 0;
    for (size_t i = 0; i < b->n; i++)
      if (b->e[i].seq->rank == k) {
        n_e++;
        n_tok += (uint32_t)b->e[i].n;
      }
    if (!n_e) continue;
    const size_t len = sizeof(tsr_dist_entry_t) * n_e + sizeof(int32_t) * n_tok;
    st = tsr_dist_buf_reserve(&de->scratch, len);
    if (st) break;
    tsr_dist_entry_t *ent = (tsr_dist_entry_t *)de->scratch.p;
    int32_t *tok = (int32_t *)((uint8_t *)de->scratch.p + sizeof(tsr_dist_entry_t) * n_e);
    uint32_t j = 0, t = 0;
    for (size_t i = 0; i < b->n; i++) {
      const tsr_batch_entry_t *e = &b->e[i];
      if (e->seq->rank != k) continue;
      ent[j++] = (tsr_dist_entry_t){e->seq->id, (int32_t)e->n, e->seq->pos, (int32_t)t,
                                    e->want_logits};
      memcpy(tok + t, b->tokens + e->tok0, sizeof(int32_t) * e->n);
      t += (uint32_t)e->n;
    }
    const tsr_dist_hdr_t h = {.op = TSR_DIST_EVAL, .id = de->id, .n = n_e, .rows = n_tok};
    st = tsr_dist_send_start(d, k, TSR_DIST_TAG_DOWN, &h, de->scratch.p, len, true, &de->outs[k],
                             &de->snds[k]);
  }
  /* rank 0's share, while the others compute theirs */
  tsr_batch_clear(de->local);
  for (size_t i = 0; i < b->n && !st; i++) {
    const tsr_batch_entry_t *e = &b->e[i];
    if (e->seq->rank == 0)
      st = tsr_batch_add(de->local, e->seq, b->tokens + e->tok0, e->n, e->want_logits, NULL);
  }
  if (!st && de->local->n) {
    const double t0 = tsr_now_s();
    st = tsr_engine_eval_local(o, de->local);
    tsr_dist_add_busy(d, tsr_now_s() - t0, 1);
    for (size_t i = 0, j = 0; i < b->n && !st; i++) {
      tsr_batch_entry_t *e = &b->e[i];
      if (e->seq->rank != 0) continue;
      const float *l = tsr_batch_logits(de->local, j++);
      if (l) {
        memcpy(b->logits + e->logits_off, l, sizeof(float) * (size_t)vocab);
        e->has_logits = true;
      }
    }
  }
  /* the others' logits */
  for (int k = 1; k < size && !st; k++) {
    if (!de->snds[k].active) continue;
    st = tsr_dist_send_wait(d, &de->snds[k], "a share of the batch");
    uint32_t want = 0;
    for (size_t i = 0; i < b->n; i++) want += b->e[i].seq->rank == k && b->e[i].want_logits;
    if (!st) st = tsr_dist_recv(d, k, de->tag, &de->in, false, "the logits of its share");
    if (st) break;
    const tsr_dist_hdr_t *h = de->in.p;
    const size_t expect = sizeof *h + sizeof(float) * (size_t)want * vocab;
    if (h->op != TSR_DIST_LOGITS || h->id != de->id || h->rows != want || de->in.len != expect) {
      st = tsr_dist_break(d, TSR_ERR(FORMAT, "mpi: rank %d answered op %u of engine %u with "
                                             "%u logit rows, %zu bytes; expected %u rows",
                                     k, h->op, h->id, h->rows, de->in.len, want));
      break;
    }
    const float *l = (const float *)((const char *)de->in.p + sizeof *h);
    for (size_t i = 0; i < b->n; i++) {
      tsr_batch_entry_t *e = &b->e[i];
      if (e->seq->rank != k) continue;
      e->seq->pos += (int32_t)e->n;
      if (!e->want_logits) continue;
      memcpy(b->logits + e->logits_off, l, sizeof(float) * (size_t)vocab);
      e->has_logits = true;
      l += vocab;
    }
  }
  if (st) return tsr_dist_break(d, tsr_status_annotate(st, "mpi rows"));
  de->tokens += b->n_tokens;
  return TSR_OK;
}

tsr_status_t tsr_dist_eval(tsr_exec_t *o, tsr_batch_t *b) {
  tsr_dist_t *d = dist_of(o->ctx);
  return pipeline(d) ? pipe_eval(o, b) : rows_eval(o, b);
}

tsr_status_t tsr_dist_gather(const tsr_context_t *ctx, tsr_rank_stats_t *out) {
  tsr_dist_t *d = dist_of(ctx);
  if (!d) return TSR_ERR(INVALID_ARGUMENT, "mpi: the context is not distributed");
  tsr_dist_counters(d, &out[0]);
  snprintf(out[0].devices, sizeof out[0].devices, "%s", ctx->devices);
  if (tsr_dist_size(d) == 1) return TSR_OK;
  const tsr_dist_hdr_t h = {.op = TSR_DIST_STATS};
  TSR_RETURN_IF(send_down(d, -1, &h, NULL, 0, "a statistics request"));
  tsr_dist_buf_t buf = {0};
  tsr_status_t s = TSR_OK;
  for (int k = 1; k < tsr_dist_size(d) && !s; k++) {
    s = tsr_dist_recv(d, k, TSR_DIST_TAG_STATS, &buf, false, "its statistics");
    if (!s && buf.len != sizeof(tsr_dist_hdr_t) + sizeof *out)
      s = TSR_ERR(FORMAT, "mpi: rank %d sent statistics of %zu bytes", k, buf.len);
    if (!s) memcpy(&out[k], (const char *)buf.p + sizeof(tsr_dist_hdr_t), sizeof *out);
  }
  tsr_dist_buf_free(&buf);
  return s;
}

tsr_status_t tsr_context_rank_stats(tsr_context_t *ctx, tsr_rank_stats_t *out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "tsr_context_rank_stats: out is NULL");
  if (!is_root(dist_of(ctx)))
    return TSR_ERR(INVALID_ARGUMENT, "tsr_context_rank_stats: %s",
                   dist_of(ctx) ? "only rank 0 asks the ranks" : "the context is not an mpi one");
  return tsr_dist_gather(ctx, out);
}

void tsr_dist_print_stats(const tsr_exec_t *o, FILE *f) {
  tsr_dist_t *d = dist_of(o->ctx);
  if (!o->dist) return;
  const int size = tsr_dist_size(d);
  tsr_rank_stats_t *r = calloc((size_t)size, sizeof *r);
  if (!r) return;
  tsr_status_t s = tsr_dist_gather(o->ctx, r);
  if (s) {
    fprintf(f, "mpi: statistics unavailable: %s\n", tsr_status_message(s));
    tsr_status_free(s);
    free(r);
    return;
  }
  const double tokens = (double)o->dist->tokens;
  fprintf(f, "mpi: %d ranks, %s; %.0f tokens evaluated by this engine\n", size,
          pipeline(d) ? "pipeline of layers" : "sequences split across ranks (rows)", tokens);
  fprintf(f, "  %4s %-11s %-24s %8s %12s %12s %12s %9s %9s\n", "rank", "layers", "devices",
          "passes", "sent B", "recv B", "act sent B", "busy s", "wait s");
  uint64_t act = 0;
  for (int k = 0; k < size; k++) {
    char layers[32];
    int32_t l0 = r[k].layer0, l1 = r[k].layer1;
    if (k == 0) l0 = o->model->layer0, l1 = o->model->layer1;
    if (!pipeline(d)) snprintf(layers, sizeof layers, "all");
    else if (l1 > l0)
      snprintf(layers, sizeof layers, "%d-%d%s", l0, l1 - 1, k == 0 ? "+ends" : "");
    else snprintf(layers, sizeof layers, "none%s", k == 0 ? "+ends" : "");
    fprintf(f, "  %4d %-11s %-24.24s %8" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64
               " %9.3f %9.3f\n",
            k, layers, r[k].devices, r[k].passes, r[k].bytes_sent, r[k].bytes_recv,
            r[k].act_bytes_sent, r[k].busy_s, r[k].wait_s);
    act += r[k].act_bytes_sent;
  }
  fprintf(f, "  between ranks: %.0f B of activations%s per token (all hops), messages of every "
             "kind included in sent/recv; wait = time blocked on another rank\n",
          tokens > 0 ? (double)act / tokens : 0.0, pipeline(d) ? "" : " and logits");
  free(r);
}

/* ---- the other ranks ---- */

typedef struct w_seq {
  uint64_t id;
  tsr_seq_t *seq;
} w_seq_t;

typedef struct w_engine {
  uint32_t id;
  tsr_engine_t *eng;
  w_seq_t *seqs;
  size_t n_seqs, cap_seqs;
} w_engine_t;

typedef struct w_model {
  uint32_t id;
  tsr_model_t *model;
} w_model_t;

typedef struct worker {
  tsr_context_t *ctx;
  tsr_dist_t *d;
  int up, down; /* upstream rank, downstream rank (-1: none) */
  w_model_t *models;
  size_t n_models;
  w_engine_t *engines;
  size_t n_engines;
  tsr_dist_buf_t in;
  tsr_dist_buf_t out[2]; /* double-buffered sends of passes */
  tsr_dist_send_t snd[2];
  int turn;
  tsr_batch_t *batch;
  tsr_dist_buf_t scratch; /* a payload under construction */
} worker_t;

static w_engine_t *find_engine(worker_t *w, uint32_t id) {
  for (size_t i = 0; i < w->n_engines; i++)
    if (w->engines[i].id == id) return &w->engines[i];
  return NULL;
}

static tsr_seq_t *find_seq(w_engine_t *we, uint64_t id) {
  for (size_t i = 0; i < we->n_seqs; i++)
    if (we->seqs[i].id == id) return we->seqs[i].seq;
  return NULL;
}

static tsr_status_t w_model_open(worker_t *w, const tsr_dist_hdr_t *h, const char *p, size_t n) {
  const char *path = p, *nul = memchr(p, '\0', n);
  if (!nul || !memchr(nul + 1, '\0', n - (size_t)(nul + 1 - p)))
    return TSR_ERR(FORMAT, "mpi: a model message without its two paths");
  const char *tok = nul + 1;
  w_model_t *m = realloc(w->models, sizeof *m * (w->n_models + 1));
  if (!m) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: models");
  w->models = m;
  tsr_model_t *model = NULL;
  TSR_RETURN_IF(tsr_model_load(w->ctx, path, *tok ? tok : NULL, &model));
  w->models[w->n_models++] = (w_model_t){h->id, model};
  tsr_dist_set_layers(w->d, model->layer0, model->layer1, model->ends);
  return TSR_OK;
}

static void w_model_close(worker_t *w, uint32_t id) {
  for (size_t i = 0; i < w->n_models; i++) {
    if (w->models[i].id != id) continue;
    tsr_model_destroy(w->models[i].model);
    w->models[i] = w->models[--w->n_models];
    return;
  }
}

static tsr_status_t w_engine_create(worker_t *w, const tsr_dist_hdr_t *h, const void *p,
                                    size_t n) {
  if (n != sizeof(tsr_session_options_t))
    return TSR_ERR(FORMAT, "mpi: engine options of %zu bytes (expected %zu)", n,
                   sizeof(tsr_session_options_t));
  tsr_model_t *model = NULL;
  for (size_t i = 0; i < w->n_models; i++)
    if (w->models[i].id == (uint32_t)h->a) model = w->models[i].model;
  if (!model) return TSR_ERR(NOT_FOUND, "mpi: engine %u on unknown model %" PRIu64, h->id, h->a);
  w_engine_t *e = realloc(w->engines, sizeof *e * (w->n_engines + 1));
  if (!e) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: engines");
  w->engines = e;
  tsr_session_options_t opts;
  memcpy(&opts, p, sizeof opts);
  tsr_engine_t *eng = NULL;
  TSR_RETURN_IF(tsr_engine_create(model, &opts, &eng));
  w->engines[w->n_engines++] = (w_engine_t){h->id, eng, NULL, 0, 0};
  return TSR_OK;
}

static void w_engine_destroy(worker_t *w, uint32_t id) {
  for (size_t i = 0; i < w->n_engines; i++) {
    w_engine_t *e = &w->engines[i];
    if (e->id != id) continue;
    for (size_t j = 0; j < e->n_seqs; j++) tsr_seq_destroy(e->seqs[j].seq);
    free(e->seqs);
    tsr_engine_destroy(e->eng);
    w->engines[i] = w->engines[--w->n_engines];
    return;
  }
}

static tsr_status_t w_seq_op(worker_t *w, const tsr_dist_hdr_t *h) {
  w_engine_t *we = find_engine(w, h->id);
  if (!we) return TSR_ERR(NOT_FOUND, "mpi: a sequence of unknown engine %u", h->id);
  if (h->op == TSR_DIST_SEQ_CREATE) {
    if (we->n_seqs == we->cap_seqs) {
      size_t cap = we->cap_seqs ? 2 * we->cap_seqs : 16;
      w_seq_t *s = realloc(we->seqs, sizeof *s * cap);
      if (!s) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: %zu sequences", cap);
      we->seqs = s;
      we->cap_seqs = cap;
    }
    tsr_seq_t *seq = NULL;
    TSR_RETURN_IF(tsr_seq_create(we->eng, &seq));
    we->seqs[we->n_seqs++] = (w_seq_t){h->a, seq};
    return TSR_OK;
  }
  for (size_t i = 0; i < we->n_seqs; i++) {
    if (we->seqs[i].id != h->a) continue;
    if (h->op == TSR_DIST_SEQ_RESET) {
      tsr_seq_reset(we->seqs[i].seq);
    } else {
      tsr_seq_destroy(we->seqs[i].seq);
      we->seqs[i] = we->seqs[--we->n_seqs];
    }
    return TSR_OK;
  }
  return TSR_ERR(NOT_FOUND, "mpi: engine %u has no sequence %" PRIu64, h->id, h->a);
}

/* Checks the entries of a PASS or EVAL against the engine and maps them
 * to its sequences into o->pass. */
static tsr_status_t w_entries(w_engine_t *we, const tsr_dist_entry_t *ent, uint32_t n_e,
                              uint32_t rows, bool pass) {
  tsr_exec_t *o = we->eng;
  if (n_e == 0 || n_e > rows || (pass && rows > (uint32_t)o->max_rows))
    return TSR_ERR(FORMAT, "mpi: a pass of %u entries and %u rows (engine: at most %d rows)",
                   n_e, rows, o->max_rows);
  int32_t row = 0;
  for (uint32_t j = 0; j < n_e; j++) {
    tsr_seq_t *s = find_seq(we, ent[j].seq);
    if (!s) return TSR_ERR(NOT_FOUND, "mpi: entry %u: no sequence %" PRIu64, j, ent[j].seq);
    if (ent[j].n < 1 || ent[j].row0 != row || ent[j].n > (int32_t)rows - row)
      return TSR_ERR(FORMAT, "mpi: entry %u: %d rows from row %d of %u", j, ent[j].n,
                     ent[j].row0, rows);
    if (ent[j].pos0 != s->pos || ent[j].n > s->max_seq - s->pos)
      return TSR_ERR(INTERNAL, "mpi: sequence %" PRIu64 " is at position %d here, %d on rank "
                               "0 (%d tokens, context %d)",
                     ent[j].seq, s->pos, ent[j].pos0, ent[j].n, s->max_seq);
    if (pass) o->pass[j] = (tsr_pass_entry_t){s, NULL, ent[j].n, ent[j].pos0, row, -1};
    row += ent[j].n;
  }
  if ((uint32_t)row != rows)
    return TSR_ERR(FORMAT, "mpi: entries cover %d of %u rows", row, rows);
  return TSR_OK;
}

static tsr_status_t w_pass(worker_t *w, const tsr_dist_hdr_t *h, const uint8_t *p, size_t n) {
  w_engine_t *we = find_engine(w, h->id);
  if (!we) return TSR_ERR(NOT_FOUND, "mpi: a pass of unknown engine %u", h->id);
  tsr_exec_t *o = we->eng;
  const int32_t dim = o->model->cfg.dim;
  const size_t le = sizeof(tsr_dist_entry_t) * h->n, lx = sizeof(float) * (size_t)h->rows * dim;
  if (n != le + lx)
    return TSR_ERR(FORMAT, "mpi: a pass of %u entries and %u rows in %zu bytes (expected %zu)",
                   h->n, h->rows, n, le + lx);
  TSR_RETURN_IF(w_entries(we, (const tsr_dist_entry_t *)p, h->n, h->rows, true));
  const int32_t R = (int32_t)h->rows;
  memcpy(o->x, p + le, lx);
  const double t0 = tsr_now_s();
  pthread_mutex_lock(&o->lock);
  tsr_status_t st = tsr_forward_nodes(o, o->pass, (int)h->n, R, 0, 0, o->graph.n_nodes);
  if (!st)
    for (uint32_t j = 0; j < h->n; j++) o->pass[j].seq->pos += o->pass[j].n;
  pthread_mutex_unlock(&o->lock);
  tsr_dist_add_busy(w->d, tsr_now_s() - t0, 1);
  TSR_RETURN_IF(st);
  tsr_dist_fault_point(w->d);
  /* on down, or back to rank 0 from the last rank */
  tsr_dist_send_t *snd = &w->snd[w->turn];
  tsr_dist_buf_t *out = &w->out[w->turn];
  w->turn ^= 1;
  TSR_RETURN_IF(tsr_dist_send_wait(w->d, snd, "a micro-batch"));
  TSR_RETURN_IF(tsr_dist_buf_reserve(&w->scratch, n));
  memcpy(w->scratch.p, p, le);
  memcpy((uint8_t *)w->scratch.p + le, o->x, lx);
  const int dest = w->down >= 0 ? w->down : 0;
  const int tag = w->down >= 0 ? TSR_DIST_TAG_DOWN
                               : TSR_DIST_TAG_ENGINE + (int)(h->id % TSR_DIST_TAG_SPAN);
  return tsr_dist_send_start(w->d, dest, tag, h, w->scratch.p, n, true, out, snd);
}

static tsr_status_t w_eval(worker_t *w, const tsr_dist_hdr_t *h, const uint8_t *p, size_t n) {
  w_engine_t *we = find_engine(w, h->id);
  if (!we) return TSR_ERR(NOT_FOUND, "mpi: a batch of unknown engine %u", h->id);
  tsr_exec_t *o = we->eng;
  const size_t le = sizeof(tsr_dist_entry_t) * h->n, lt = sizeof(int32_t) * (size_t)h->rows;
  if (n != le + lt)
    return TSR_ERR(FORMAT, "mpi: a batch of %u entries and %u tokens in %zu bytes", h->n,
                   h->rows, n);
  const tsr_dist_entry_t *ent = (const tsr_dist_entry_t *)p;
  const int32_t *tok = (const int32_t *)(p + le);
  TSR_RETURN_IF(w_entries(we, ent, h->n, h->rows, false));
  tsr_batch_clear(w->batch);
  uint32_t want = 0;
  for (uint32_t j = 0; j < h->n; j++) {
    TSR_RETURN_IF(tsr_batch_add(w->batch, find_seq(we, ent[j].seq), tok + ent[j].row0,
                                (size_t)ent[j].n, ent[j].want_logits != 0, NULL));
    want += ent[j].want_logits != 0;
  }
  const double t0 = tsr_now_s();
  TSR_RETURN_IF(tsr_engine_eval(o, w->batch));
  tsr_dist_add_busy(w->d, tsr_now_s() - t0, 1);
  tsr_dist_fault_point(w->d);
  const int32_t vocab = o->model->cfg.vocab_size;
  const size_t ll = sizeof(float) * (size_t)want * vocab;
  TSR_RETURN_IF(tsr_dist_buf_reserve(&w->scratch, ll));
  for (uint32_t j = 0, r = 0; j < h->n; j++)
    if (ent[j].want_logits)
      memcpy((uint8_t *)w->scratch.p + sizeof(float) * (size_t)(r++) * vocab, tsr_batch_logits(w->batch, j),
             sizeof(float) * (size_t)vocab);
  const tsr_dist_hdr_t a = {.op = TSR_DIST_LOGITS, .id = h->id, .rows = want};
  return tsr_dist_send(w->d, 0, TSR_DIST_TAG_ENGINE + (int)(h->id % TSR_DIST_TAG_SPAN), &a,
                       w->scratch.p, ll, true, "logits");
}

static tsr_status_t w_ack(worker_t *w, const tsr_dist_hdr_t *h) {
  const tsr_dist_hdr_t a = {.op = h->op, .id = h->id};
  return tsr_dist_send(w->d, 0, TSR_DIST_TAG_STATS, &a, NULL, 0, false, "an acknowledgement");
}

tsr_status_t tsr_context_serve_ranks(tsr_context_t *ctx) {
  if (!ctx) return TSR_ERR(INVALID_ARGUMENT, "serve_ranks: ctx is NULL");
  tsr_dist_t *d = ctx->dist;
  if (!d || tsr_dist_rank(d) == 0) return TSR_OK;
  const int rank = tsr_dist_rank(d), size = tsr_dist_size(d);
  worker_t w = {.ctx = ctx, .d = d};
  w.up = pipeline(d) ? rank - 1 : 0;
  w.down = pipeline(d) && rank + 1 < size ? rank + 1 : -1;
  tsr_dist_set_devices(d, ctx->devices);
  tsr_status_t st = tsr_batch_create(0, &w.batch);
  bool done = false;
  while (!st && !done) {
    st = tsr_dist_recv(d, w.up, TSR_DIST_TAG_DOWN, &w.in, true, "the next request");
    if (st) break;
    const tsr_dist_hdr_t h = *(const tsr_dist_hdr_t *)w.in.p;
    const uint8_t *p = (const uint8_t *)w.in.p + sizeof h;
    const size_t n = w.in.len - sizeof h;
    /* what is not a pass goes on down first (the next rank works on it too) */
    if (w.down >= 0 && h.op != TSR_DIST_PASS) {
      st = tsr_dist_send(d, w.down, TSR_DIST_TAG_DOWN, &h, p, n, false, "a request");
      if (st) break;
    }
    tsr_status_t r = TSR_OK;
    switch (h.op) {
      case TSR_DIST_MODEL_OPEN:
        r = w_model_open(&w, &h, (const char *)p, n);
        if (!r) r = w_ack(&w, &h);
        break;
      case TSR_DIST_MODEL_CLOSE: w_model_close(&w, h.id); break;
      case TSR_DIST_ENGINE_CREATE:
        r = w_engine_create(&w, &h, p, n);
        if (!r) r = w_ack(&w, &h);
        break;
      case TSR_DIST_ENGINE_DESTROY: w_engine_destroy(&w, h.id); break;
      case TSR_DIST_SEQ_CREATE:
      case TSR_DIST_SEQ_DESTROY:
      case TSR_DIST_SEQ_RESET: r = w_seq_op(&w, &h); break;
      case TSR_DIST_PASS: r = w_pass(&w, &h, p, n); break;
      case TSR_DIST_EVAL: r = w_eval(&w, &h, p, n); break;
      case TSR_DIST_STATS: {
        tsr_rank_stats_t c;
        tsr_dist_counters(d, &c);
        const tsr_dist_hdr_t a = {.op = TSR_DIST_STATS};
        r = tsr_dist_send(d, 0, TSR_DIST_TAG_STATS, &a, &c, sizeof c, false, "statistics");
        break;
      }
      case TSR_DIST_SHUTDOWN: done = true; break;
      default:
        r = TSR_ERR(FORMAT, "mpi: unknown op %u from rank %d", h.op, w.up);
        break;
    }
    if (r) {
      /* rank 0 hears of it at its next wait and breaks the job */
      r = tsr_status_annotate(r, "rank %d (op %u)", rank, h.op);
      if (tsr_dist_broken(d)) {
        st = r;
        break;
      }
      tsr_dist_report(d, r);
      tsr_status_free(r);
    }
  }
  for (int i = 0; i < 2 && !st; i++) st = tsr_dist_send_wait(d, &w.snd[i], "a micro-batch");
  while (w.n_engines) w_engine_destroy(&w, w.engines[0].id);
  while (w.n_models) w_model_close(&w, w.models[0].id);
  free(w.engines);
  free(w.models);
  tsr_batch_destroy(w.batch);
  for (int i = 0; i < 2; i++) {
    tsr_dist_buf_free(&w.out[i]);
    free(w.snd[i].req);
  }
  tsr_dist_buf_free(&w.in);
  tsr_dist_buf_free(&w.scratch);
  return st;
}
