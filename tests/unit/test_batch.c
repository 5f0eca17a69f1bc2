/*
 * test_batch.c - many sequences in one forward pass give each sequence
 * exactly what it gets alone.
 *
 * A schedule of sequences (odd prompt lengths, prompts in chunks, greedy
 * decode; sequences joining and leaving mid-run, new ones created while
 * others continue) runs as batches on one engine, and each sequence alone on
 * an engine of its own with the same chunks. Every evaluation's logits are
 * compared: int8 bit for bit (also against the host alone, whatever the
 * devices), fp32 within 1e-4 of the logits' range (BLAS may round
 * differently for another number of rows). Devices: cpu, fmodel, sim
 * (the RTL: skipped, and said so, when its library is absent), with the
 * reference attention and int8 block-sparse patterns, and --split rows and
 * layers over two devices. Then 8 threads at once: sequences of one shared
 * engine, and sessions of their own on one shared device, each output
 * checked against the solo run.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "driver/hal.h"
#include "host/src/model_file.h"
#include "tsr_test.h"

#define VOCAB 320
#define MAX_SEQS 8

static char model_path[512], tiny_path[512];
static int have_sim;

static int setup(void) {
  tsr_hal_device_t *d = NULL;
  tsr_status_t s = tsr_hal_open("sim", &d);
  have_sim = s == TSR_OK;
  if (s) fprintf(stderr, "sim unavailable: %s\n", tsr_status_message(s));
  tsr_status_free(s);
  tsr_hal_close(d);
  return tsr_test_gen_model(model_path, sizeof model_path, "batch", 48, 100, 3, 6, 3, VOCAB,
                            128, 7) ||
         tsr_test_gen_model(tiny_path, sizeof tiny_path, "tiny", 32, 64, 2, 4, 2, VOCAB, 64, 9);
}

/* ---- schedules ---- */

/* One sequence of a schedule: it joins the batch at step `join`, feeds its
 * prompt in chunks of `chunk` tokens, then decodes greedily `decode` steps,
 * and leaves. */
typedef struct {
  int join, prompt_len, chunk, decode;
  uint64_t seed;
} seq_spec_t;

/* What one sequence produced: the logits of each evaluation. */
typedef struct {
  int n_evals;
  float *logits; /* (n_evals, vocab) */
} seq_out_t;

static void out_free(seq_out_t *o, int n) {
  for (int i = 0; i < n; i++) free(o[i].logits);
}

static int32_t argmax(const float *l, int n) {
  int32_t b = 0;
  for (int i = 1; i < n; i++)
    if (l[i] > l[b]) b = i;
  return b;
}

static void prompt_of(const seq_spec_t *sp, int32_t *toks) {
  uint64_t s = sp->seed;
  for (int i = 0; i < sp->prompt_len; i++)
    toks[i] = (int32_t)(tsr_test_splitmix64(&s) % (VOCAB - 1)) + 1;
}

/* The evaluations a sequence makes (prompt chunks, then decode steps). */
static int evals_of(const seq_spec_t *sp) {
  return (sp->prompt_len + sp->chunk - 1) / sp->chunk + sp->decode;
}

typedef tsr_test_rig_t rig_t;

/* Runs the schedule as batches on one engine. Sequences are created when
 * they join and destroyed when they leave. */
static tsr_status_t run_batched(rig_t *r, const tsr_session_options_t *so,
                                const seq_spec_t *sp, int n, seq_out_t *out) {
  tsr_engine_t *e = NULL;
  tsr_batch_t *b = NULL;
  tsr_seq_t *seq[MAX_SEQS] = {0};
  int fed[MAX_SEQS] = {0}, evals[MAX_SEQS] = {0};
  int32_t toks[MAX_SEQS][256], next[MAX_SEQS];
  bool left[MAX_SEQS] = {false};
  memset(out, 0, sizeof *out * (size_t)n);
  tsr_status_t s = tsr_engine_create(r->model, so, &e);
  if (!s) s = tsr_batch_create(0, &b);
  for (int i = 0; !s && i < n; i++) {
    prompt_of(&sp[i], toks[i]);
    out[i].logits = malloc(sizeof(float) * (size_t)evals_of(&sp[i]) * (size_t)r->vocab);
    if (!out[i].logits) s = TSR_ERR(RESOURCE_EXHAUSTED, "test");
  }
  for (int step = 0; !s; step++) {
    int active = 0;
    size_t idx[MAX_SEQS];
    tsr_batch_clear(b);
    for (int i = 0; i < n && !s; i++) {
      if (left[i] || step < sp[i].join) {
        active += !left[i];
        continue;
      }
      active++;
      if (!seq[i]) s = tsr_seq_create(e, &seq[i]);
      if (s) break;
      if (fed[i] < sp[i].prompt_len) {
        int take = sp[i].prompt_len - fed[i] < sp[i].chunk ? sp[i].prompt_len - fed[i]
                                                            : sp[i].chunk;
        s = tsr_batch_add(b, seq[i], toks[i] + fed[i], (size_t)take, true, &idx[i]);
        fed[i] += take;
      } else {
        s = tsr_batch_add(b, seq[i], &next[i], 1, true, &idx[i]);
      }
    }
    if (s || !active) break;
    if (tsr_batch_size(b)) s = tsr_engine_eval(e, b);
    for (int i = 0; i < n && !s; i++) {
      if (!seq[i] || left[i]) continue;
      const float *l = tsr_batch_logits(b, idx[i]);
      if (!l) {
        s = TSR_ERR(INTERNAL, "test: no logits for sequence %d", i);
        break;
      }
      memcpy(out[i].logits + (size_t)evals[i] * r->vocab, l, sizeof(float) * (size_t)r->vocab);
      evals[i]++;
      out[i].n_evals = evals[i];
      next[i] = argmax(l, r->vocab);
      if (evals[i] == evals_of(&sp[i])) { /* done: leave while others continue */
        tsr_seq_destroy(seq[i]);
        seq[i] = NULL;
        left[i] = true;
      }
    }
  }
  for (int i = 0; i < n; i++) tsr_seq_destroy(seq[i]);
  tsr_batch_destroy(b);
  tsr_engine_destroy(e);
  return s;
}

/* Each sequence alone, with the same chunks. */
static tsr_status_t run_solo(rig_t *r, const tsr_session_options_t *so, const seq_spec_t *sp,
                             int n, seq_out_t *out) {
  memset(out, 0, sizeof *out * (size_t)n);
  tsr_status_t s = TSR_OK;
  for (int i = 0; i < n && !s; i++) {
    seq_spec_t one = sp[i];
    one.join = 0;
    s = run_batched(r, so, &one, 1, &out[i]);
  }
  return s;
}

/* Compares two runs: bit for bit (tol 0) or within tol of each logits
 * row's range. Returns the largest relative difference. */
static double compare(const seq_out_t *a, const seq_out_t *b, int n, int vocab, double tol,
                      const char *what) {
  double worst = 0;
  for (int i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(a[i].n_evals, b[i].n_evals);
    const int ne = a[i].n_evals < b[i].n_evals ? a[i].n_evals : b[i].n_evals;
    for (int e = 0; e < ne; e++) {
      const float *x = a[i].logits + (size_t)e * vocab, *y = b[i].logits + (size_t)e * vocab;
      if (tol == 0) {
        if (memcmp(x, y, sizeof(float) * (size_t)vocab)) {
          fprintf(stderr, "%s: sequence %d evaluation %d differs\n", what, i, e);
          CU_FAIL("logits differ");
          worst = INFINITY;
          e = ne;
        }
        continue;
      }
      float lo = x[0], hi = x[0];
      double d = 0;
      for (int v = 0; v < vocab; v++) {
        if (x[v] < lo) lo = x[v];
        if (x[v] > hi) hi = x[v];
        double dv = fabs((double)x[v] - y[v]);
        if (dv > d) d = dv;
      }
      double rel = d / (hi - lo > 0 ? hi - lo : 1);
      if (rel > worst) worst = rel;
    }
    if (tol > 0) {
      if (worst > tol) fprintf(stderr, "%s: relative difference %.3g > %.3g\n", what, worst, tol);
      CU_ASSERT_TRUE(worst <= tol);
    }
  }
  return worst;
}

/* The mixed schedule: odd lengths, chunks, joins and leaves. */
static const seq_spec_t mixed[] = {
    {0, 11, 5, 9, 101}, {0, 1, 1, 14, 102}, {2, 23, 8, 6, 103}, {3, 7, 7, 10, 104},
    {5, 17, 3, 4, 105}, {9, 2, 2, 8, 106},
};
#define N_MIXED ((int)(sizeof mixed / sizeof mixed[0]))

static void check_case(const char *path, const char *devices, tsr_split_t split,
                       tsr_precision_t prec, const char *pattern, const seq_spec_t *sp,
                       int n, int32_t max_rows) {
  char what[160];
  snprintf(what, sizeof what, "%s %s %s attn %s rows<=%d%s", devices,
           split == TSR_SPLIT_ROWS ? "split rows" : "split layers",
           prec == TSR_PRECISION_INT8 ? "int8" : "fp32", pattern, max_rows,
           path == tiny_path ? " (tiny model)" : "");
  rig_t r, host;
  tsr_status_t s = tsr_test_rig_open(&r, path, devices, split, 0);
  if (!s) s = tsr_test_rig_open(&host, path, "cpu", TSR_SPLIT_LAYERS, 0);
  TSR_ASSERT_OK(s);
  if (s) return;
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = prec;
  so.max_batch_rows = max_rows;
  TSR_ASSERT_OK(tsr_attn_pattern_parse(pattern, &so.attn));
  seq_out_t bat[MAX_SEQS], solo[MAX_SEQS], ref[MAX_SEQS];
  TSR_ASSERT_OK(run_batched(&r, &so, sp, n, bat));
  TSR_ASSERT_OK(run_solo(&r, &so, sp, n, solo));
  double d = compare(bat, solo, n, r.vocab, prec == TSR_PRECISION_INT8 ? 0 : 1e-4, what);
  double dh = 0;
  if (prec == TSR_PRECISION_INT8) {
    /* contract 1: the same integers on every backend, so the host alone
     * gives the same logits too */
    TSR_ASSERT_OK(run_solo(&host, &so, sp, n, ref));
    dh = compare(bat, ref, n, r.vocab, 0, what);
    out_free(ref, n);
  }
  int evals = 0;
  for (int i = 0; i < n; i++) evals += bat[i].n_evals;
  char diff[64];
  if (d == 0) snprintf(diff, sizeof diff, "identical");
  else snprintf(diff, sizeof diff, "max relative difference %.3g (bound 1e-4)", d);
  printf("REPORT batch vs solo, %s: %d sequences, %d evaluations: %s%s\n", what, n, evals, diff,
         prec != TSR_PRECISION_INT8 ? ""
         : dh == 0                  ? " (and identical to the host alone)"
                                    : " (the host alone differs)");
  out_free(bat, n);
  out_free(solo, n);
  tsr_test_rig_close(&host);
  tsr_test_rig_close(&r);
}

static void test_cpu(void) {
  check_case(model_path, "cpu", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "ref", mixed, N_MIXED, 256);
  check_case(model_path, "cpu", TSR_SPLIT_LAYERS, TSR_PRECISION_FP32, "ref", mixed, N_MIXED, 256);
  check_case(model_path, "cpu", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "window:2,sinks:1,block:4",
             mixed, N_MIXED, 256);
  check_case(model_path, "cpu", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "topk:2,block:4", mixed,
             N_MIXED, 256);
  /* batches larger than a pass: entries continue in the next pass */
  check_case(model_path, "cpu", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "strided:2,block:4",
             mixed, N_MIXED, 9);
}

static void test_fmodel(void) {
  check_case(model_path, "fmodel", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "ref", mixed, N_MIXED,
             256);
  check_case(model_path, "fmodel", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8,
             "window:2,sinks:1,block:4", mixed, N_MIXED, 256);
  check_case(model_path, "fmodel", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "topk:2,block:4", mixed,
             N_MIXED, 256);
  check_case(model_path, "fmodel", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "dense,block:4", mixed,
             N_MIXED, 7);
}

static void test_split(void) {
  check_case(model_path, "fmodel,fmodel", TSR_SPLIT_ROWS, TSR_PRECISION_INT8,
             "window:2,sinks:1,block:4", mixed, N_MIXED, 256);
  check_case(model_path, "fmodel,fmodel", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8,
             "window:2,sinks:1,block:4", mixed, N_MIXED, 256);
  check_case(model_path, "fmodel,cpu,fmodel", TSR_SPLIT_ROWS, TSR_PRECISION_INT8, "ref", mixed,
             N_MIXED, 256);
}

/* The RTL: fewer, shorter sequences on a tiny model (simulation is slow). */
static const seq_spec_t short_mix[] = {
    {0, 5, 3, 4, 201}, {1, 3, 3, 5, 202}, {2, 9, 4, 2, 203},
};
#define N_SHORT ((int)(sizeof short_mix / sizeof short_mix[0]))

static void test_sim(void) {
  if (!have_sim) {
    tsr_test_skip("the sim backend does not open (RTL library missing)");
    return;
  }
  check_case(tiny_path, "sim", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "window:2,sinks:1,block:4",
             short_mix, N_SHORT, 256);
  check_case(tiny_path, "sim,sim", TSR_SPLIT_ROWS, TSR_PRECISION_INT8, "ref", short_mix,
             N_SHORT, 256);
  check_case(tiny_path, "sim,sim", TSR_SPLIT_LAYERS, TSR_PRECISION_INT8, "topk:2,block:4",
             short_mix, N_SHORT, 256);
}

/* A sequence reset while another continues evaluates exactly as a new one. */
static void test_reset(void) {
  rig_t r;
  TSR_ASSERT_OK(tsr_test_rig_open(&r, model_path, "fmodel", TSR_SPLIT_LAYERS, 0));
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = TSR_PRECISION_INT8;
  TSR_ASSERT_OK(tsr_attn_pattern_parse("topk:2,block:4", &so.attn));
  tsr_engine_t *e = NULL;
  tsr_seq_t *a = NULL, *b = NULL, *fresh = NULL;
  tsr_batch_t *bt = NULL;
  TSR_ASSERT_OK(tsr_engine_create(r.model, &so, &e));
  TSR_ASSERT_OK(tsr_seq_create(e, &a));
  TSR_ASSERT_OK(tsr_seq_create(e, &b));
  TSR_ASSERT_OK(tsr_seq_create(e, &fresh));
  TSR_ASSERT_OK(tsr_batch_create(0, &bt));
  int32_t p1[13], p2[9];
  for (int i = 0; i < 13; i++) p1[i] = 3 + 7 * i;
  for (int i = 0; i < 9; i++) p2[i] = 11 + 5 * i;
  float *want = malloc(sizeof(float) * (size_t)r.vocab);
  CU_ASSERT_PTR_NOT_NULL_FATAL(want);
  /* the fresh sequence alone on p2 */
  TSR_ASSERT_OK(tsr_batch_add(bt, fresh, p2, 9, true, NULL));
  TSR_ASSERT_OK(tsr_engine_eval(e, bt));
  memcpy(want, tsr_batch_logits(bt, 0), sizeof(float) * (size_t)r.vocab);
  /* a and b on p1, then a reset and fed p2 while b decodes */
  tsr_batch_clear(bt);
  TSR_ASSERT_OK(tsr_batch_add(bt, a, p1, 13, true, NULL));
  TSR_ASSERT_OK(tsr_batch_add(bt, b, p1, 13, true, NULL));
  TSR_ASSERT_OK(tsr_engine_eval(e, bt));
  tsr_seq_reset(a);
  CU_ASSERT_EQUAL(tsr_seq_pos(a), 0);
  tsr_batch_clear(bt);
  TSR_ASSERT_OK(tsr_batch_add(bt, b, p1, 1, true, NULL));
  TSR_ASSERT_OK(tsr_batch_add(bt, a, p2, 9, true, NULL));
  TSR_ASSERT_OK(tsr_engine_eval(e, bt));
  const float *got = tsr_batch_logits(bt, 1);
  CU_ASSERT_PTR_NOT_NULL(got);
  if (got) CU_ASSERT_EQUAL(memcmp(got, want, sizeof(float) * (size_t)r.vocab), 0);
  CU_ASSERT_EQUAL(tsr_seq_pos(a), 9);
  CU_ASSERT_EQUAL(tsr_seq_pos(b), 14);
  free(want);
  tsr_batch_destroy(bt);
  tsr_seq_destroy(a);
  tsr_seq_destroy(b);
  tsr_seq_destroy(fresh);
  tsr_engine_destroy(e);
  tsr_test_rig_close(&r);
}

/* ---- the API's checks ---- */

static void test_errors(void) {
  rig_t r;
  TSR_ASSERT_OK(tsr_test_rig_open(&r, model_path, "cpu", TSR_SPLIT_LAYERS, 0));
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = TSR_PRECISION_INT8;
  so.max_seq = 16;
  tsr_engine_t *e = NULL, *e2 = NULL;
  tsr_seq_t *a = NULL, *b = NULL, *c = NULL;
  tsr_batch_t *bt = NULL;
  TSR_ASSERT_OK(tsr_engine_create(r.model, &so, &e));
  TSR_ASSERT_OK(tsr_engine_create(r.model, &so, &e2));
  TSR_ASSERT_OK(tsr_seq_create(e, &a));
  TSR_ASSERT_OK(tsr_seq_create(e, &b));
  TSR_ASSERT_OK(tsr_seq_create(e2, &c));
  TSR_ASSERT_OK(tsr_batch_create(2, &bt));
  int32_t t[20] = {1, 2, 3};
  TSR_ASSERT_ERR(tsr_engine_eval(e, bt), TSR_STATUS_INVALID_ARGUMENT, "empty");
  TSR_ASSERT_ERR(tsr_batch_add(bt, a, t, 0, true, NULL), TSR_STATUS_INVALID_ARGUMENT,
                 "no tokens");
  TSR_ASSERT_ERR(tsr_batch_add(bt, a, t, 17, true, NULL), TSR_STATUS_OUT_OF_RANGE, "context");
  int32_t bad = VOCAB;
  TSR_ASSERT_ERR(tsr_batch_add(bt, a, &bad, 1, true, NULL), TSR_STATUS_OUT_OF_RANGE, "token 0");
  TSR_ASSERT_OK(tsr_batch_add(bt, a, t, 3, true, NULL));
  TSR_ASSERT_ERR(tsr_batch_add(bt, a, t, 1, true, NULL), TSR_STATUS_INVALID_ARGUMENT,
                 "already entry 0");
  TSR_ASSERT_OK(tsr_batch_add(bt, c, t, 1, false, NULL));
  TSR_ASSERT_ERR(tsr_batch_add(bt, b, t, 1, true, NULL), TSR_STATUS_OUT_OF_RANGE, "at most 2");
  /* a sequence of another engine: nothing advances */
  TSR_ASSERT_ERR(tsr_engine_eval(e, bt), TSR_STATUS_INVALID_ARGUMENT, "another engine");
  CU_ASSERT_EQUAL(tsr_seq_pos(a), 0);
  CU_ASSERT_EQUAL(tsr_seq_pos(c), 0);
  tsr_batch_clear(bt);
  TSR_ASSERT_OK(tsr_batch_add(bt, a, t, 3, true, NULL));
  TSR_ASSERT_OK(tsr_batch_add(bt, b, t, 2, false, NULL));
  TSR_ASSERT_OK(tsr_engine_eval(e, bt));
  CU_ASSERT_EQUAL(tsr_seq_pos(a), 3);
  CU_ASSERT_EQUAL(tsr_seq_pos(b), 2);
  CU_ASSERT_PTR_NOT_NULL(tsr_batch_logits(bt, 0));
  CU_ASSERT_PTR_NULL(tsr_batch_logits(bt, 1)); /* did not ask */
  CU_ASSERT_PTR_NULL(tsr_batch_logits(bt, 2)); /* no such entry */
  /* the context is full after 16 positions; the rest of the batch is kept */
  tsr_batch_clear(bt);
  TSR_ASSERT_ERR(tsr_batch_add(bt, a, t, 14, true, NULL), TSR_STATUS_OUT_OF_RANGE,
                 "position 3");
  tsr_seq_reset(a);
  CU_ASSERT_EQUAL(tsr_seq_pos(a), 0);
  tsr_seq_t *none = NULL;
  TSR_ASSERT_ERR(tsr_seq_create(NULL, &none), TSR_STATUS_INVALID_ARGUMENT, "engine is NULL");
  CU_ASSERT_PTR_NULL(none);
  so.max_batch_rows = -1;
  tsr_engine_t *e3 = NULL;
  TSR_ASSERT_ERR(tsr_engine_create(r.model, &so, &e3), TSR_STATUS_OUT_OF_RANGE,
                 "max_batch_rows");
  CU_ASSERT_PTR_NULL(e3);
  tsr_batch_destroy(bt);
  tsr_seq_destroy(a);
  tsr_seq_destroy(b);
  tsr_seq_destroy(c);
  tsr_engine_destroy(e);
  tsr_engine_destroy(e2);
  tsr_test_rig_close(&r);
  /* --split rows with per-op placement is contradictory */
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  o.split = TSR_SPLIT_ROWS;
  o.placement = "ffn=dev0";
  tsr_context_t *ctx = NULL;
  TSR_ASSERT_ERR(tsr_context_create(&o, &ctx), TSR_STATUS_INVALID_ARGUMENT, "split rows");
  o.split = (tsr_split_t)7;
  o.placement = NULL;
  TSR_ASSERT_ERR(tsr_context_create(&o, &ctx), TSR_STATUS_INVALID_ARGUMENT, "unknown split");
  /* a malformed device spec is an error even with fallback on (no silent CPU) */
  o.split = TSR_SPLIT_LAYERS;
  o.fallback = true;
  o.devices = "fmodel:rows=0";
  TSR_ASSERT_ERR(tsr_context_create(&o, &ctx), TSR_STATUS_OUT_OF_RANGE, "rows=0");
  CU_ASSERT_PTR_NULL(ctx);
}

/* ---- threads ---- */

#define N_THREADS 8
#define PER_THREAD 3

typedef struct {
  rig_t *r;
  tsr_engine_t *shared; /* NULL: a session of its own */
  const tsr_session_options_t *so;
  int id;
  const seq_out_t *expect; /* (N_THREADS * PER_THREAD) solo outputs */
  const seq_spec_t *specs;
  int mismatches;
  tsr_status_t err;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  for (int j = 0; j < PER_THREAD && !w->err; j++) {
    const int k = w->id * PER_THREAD + j;
    const seq_spec_t *sp = &w->specs[k];
    int32_t toks[64], next = 0;
    prompt_of(sp, toks);
    const int vocab = w->r->vocab;
    tsr_seq_t *seq = NULL;
    tsr_session_t *sess = NULL;
    tsr_batch_t *b = NULL;
    tsr_status_t s = w->shared ? tsr_seq_create(w->shared, &seq)
                               : tsr_session_create(w->r->model, w->so, &sess);
    if (!s && w->shared) s = tsr_batch_create(1, &b);
    int ev = 0, fed = 0;
    while (!s && ev < evals_of(sp)) {
      const int32_t *in = &next;
      size_t n = 1;
      if (fed < sp->prompt_len) {
        n = (size_t)(sp->prompt_len - fed < sp->chunk ? sp->prompt_len - fed : sp->chunk);
        in = toks + fed;
        fed += (int)n;
      }
      const float *l = NULL;
      if (w->shared) {
        tsr_batch_clear(b);
        s = tsr_batch_add(b, seq, in, n, true, NULL);
        if (!s) s = tsr_engine_eval(w->shared, b);
        if (!s) l = tsr_batch_logits(b, 0);
      } else {
        s = tsr_session_eval(sess, in, n, &l);
      }
      if (s) break;
      if (memcmp(l, w->expect[k].logits + (size_t)ev * vocab, sizeof(float) * (size_t)vocab))
        w->mismatches++;
      next = argmax(l, vocab);
      ev++;
    }
    tsr_batch_destroy(b);
    tsr_seq_destroy(seq);
    tsr_session_destroy(sess);
    w->err = s;
  }
  return NULL;
}

static void threads_case(const char *path, const char *devices, const char *pattern) {
  rig_t r, host;
  tsr_status_t s = tsr_test_rig_open(&r, path, devices, TSR_SPLIT_LAYERS, 0);
  if (!s) s = tsr_test_rig_open(&host, path, "cpu", TSR_SPLIT_LAYERS, 0);
  TSR_ASSERT_OK(s);
  if (s) return;
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = TSR_PRECISION_INT8;
  so.max_seq = 32;
  TSR_ASSERT_OK(tsr_attn_pattern_parse(pattern, &so.attn));
  seq_spec_t specs[N_THREADS * PER_THREAD];
  for (int k = 0; k < N_THREADS * PER_THREAD; k++)
    specs[k] = (seq_spec_t){0, 2 + k % 5, 3, 3 + k % 4, 300 + (uint64_t)k};
  /* the solo outputs, on the host */
  seq_out_t expect[N_THREADS * PER_THREAD];
  TSR_ASSERT_OK(run_solo(&host, &so, specs, N_THREADS * PER_THREAD, expect));
  for (int mode = 0; mode < 2; mode++) {
    tsr_engine_t *shared = NULL;
    if (mode == 0) TSR_ASSERT_OK(tsr_engine_create(r.model, &so, &shared));
    worker_t w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
      w[i] = (worker_t){&r, shared, &so, i, expect, specs, 0, TSR_OK};
      pthread_create(&th[i], NULL, worker, &w[i]);
    }
    int bad = 0;
    for (int i = 0; i < N_THREADS; i++) {
      pthread_join(th[i], NULL);
      TSR_ASSERT_OK(w[i].err);
      bad += w[i].mismatches;
    }
    CU_ASSERT_EQUAL(bad, 0);
    printf("REPORT threads: %d threads x %d sequences on %s (%s, attn %s): %d of %d outputs "
           "differ from the solo run on the host\n", N_THREADS, PER_THREAD, devices,
           mode == 0 ? "one shared engine" : "a session each, one shared device", pattern, bad,
           N_THREADS * PER_THREAD);
    tsr_engine_destroy(shared);
  }
  out_free(expect, N_THREADS * PER_THREAD);
  tsr_test_rig_close(&host);
  tsr_test_rig_close(&r);
}

static void test_threads_fmodel(void) {
  threads_case(model_path, "fmodel", "window:2,sinks:1,block:4");
}

static void test_threads_sim(void) {
  if (!have_sim) {
    tsr_test_skip("the sim backend does not open (RTL library missing)");
    return;
  }
  threads_case(tiny_path, "sim", "window:2,sinks:1,block:4");
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("batch", setup, NULL);
  CU_add_test(s, "batch = solo on cpu (int8, fp32, patterns, passes)", test_cpu);
  CU_add_test(s, "batch = solo on fmodel", test_fmodel);
  CU_add_test(s, "--split rows and layers on fmodel,fmodel", test_split);
  CU_add_test(s, "batch = solo on sim (RTL)", test_sim);
  CU_add_test(s, "a sequence reset mid-run = a new one", test_reset);
  CU_add_test(s, "API checks", test_errors);
  CU_add_test(s, "8 threads on fmodel", test_threads_fmodel);
  CU_add_test(s, "8 threads on sim", test_threads_sim);
  return tsr_test_run_all();
}
