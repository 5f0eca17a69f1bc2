/*
 * test_device_api.c - the offload API of tessera.h (devices, buffers, GEMM
 * commands, events) through the public header only: clear errors for bad
 * arguments, int32 results equal to a naive triple loop written here on
 * fmodel (and sim when the RTL library loads), the failure policy under
 * the functional model's fault injection (hang, fail, lost) with fallback
 * on and off, sharing with the context's device list (with a session on
 * the same device when stories260K.gguf is there), and four threads on one
 * device.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tsr_test.h"

static bool g_have_sim;
static char g_sim_reason[400];

/* ---- helpers ---- */

static tsr_context_t *make_ctx(const char *devices, bool fallback, int retries,
                               uint32_t timeout_ms) {
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  o.n_threads = 2;
  o.devices = devices;
  o.fallback = fallback;
  o.retries = retries;
  o.device_timeout_ms = timeout_ms;
  o.quiet = true;
  tsr_context_t *ctx = NULL;
  TSR_ASSERT_OK(tsr_context_create(&o, &ctx));
  return ctx;
}

static tsr_device_t *open_dev(tsr_context_t *ctx, const char *spec) {
  tsr_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_device_open(ctx, spec, &dev));
  return dev;
}

static void fill_random(int8_t *p, size_t n, uint64_t *seed) {
  for (size_t i = 0; i < n; i++) p[i] = (int8_t)(tsr_test_splitmix64(seed) & 0xff);
}

/* C[i*ldc + j] = sum_l A[i*lda + l] * W[j*ldw + l], the naive way. */
static void reference(int32_t *c, size_t ldc, const int8_t *a, size_t lda, const int8_t *w,
                      size_t ldw, size_t m, size_t n, size_t k) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      int32_t s = 0;
      for (size_t l = 0; l < k; l++) s += (int32_t)a[i * lda + l] * (int32_t)w[j * ldw + l];
      c[i * ldc + j] = s;
    }
}

/* A problem in host memory with its own buffers on `dev`: operands with
 * strides and offsets, C with a stride; the untouched parts of C stay 0. */
typedef struct problem {
  size_t m, n, k, lda, ldw, ldc, a_off, w_off, c_off;
  int8_t *a, *w;       /* (a_off + m*lda), (w_off + n*ldw) */
  int32_t *want;       /* (c_off + m*ldc) */
  size_t a_len, w_len, c_len;
  tsr_buffer_t *ba, *bw, *bc;
} problem_t;

static void problem_init(problem_t *p, tsr_device_t *dev, size_t m, size_t n, size_t k,
                         size_t pad, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->m = m; p->n = n; p->k = k;
  p->lda = k + pad; p->ldw = k + 2 * pad; p->ldc = n + pad;
  p->a_off = pad; p->w_off = 3 * pad; p->c_off = pad;
  p->a_len = p->a_off + m * p->lda;
  p->w_len = p->w_off + n * p->ldw;
  p->c_len = p->c_off + m * p->ldc;
  p->a = malloc(p->a_len);
  p->w = malloc(p->w_len);
  p->want = calloc(p->c_len, sizeof(int32_t));
  fill_random(p->a, p->a_len, &seed);
  fill_random(p->w, p->w_len, &seed);
  reference(p->want + p->c_off, p->ldc, p->a + p->a_off, p->lda, p->w + p->w_off, p->ldw, m, n,
            k);
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I8, 1, p->a_len, "A", &p->ba));
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_BYTES, 1, p->w_len, "W", &p->bw));
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I32, 1, p->c_len, "C", &p->bc));
  if (p->ba) TSR_ASSERT_OK(tsr_buffer_write(p->ba, 0, p->a, p->a_len));
  if (p->bw) TSR_ASSERT_OK(tsr_buffer_write(p->bw, 0, p->w, p->w_len));
}

static tsr_gemm_t problem_gemm(const problem_t *p) {
  tsr_gemm_t g = {.m = p->m, .n = p->n, .k = p->k,
                  .a = p->ba, .a_offset = p->a_off, .lda = p->lda,
                  .w = p->bw, .w_offset = p->w_off, .ldw = p->ldw,
                  .c = p->bc, .c_offset = p->c_off, .ldc = p->ldc};
  return g;
}

/* Reads C back and compares it with the reference, the zero gaps included. */
static bool problem_check(const problem_t *p) {
  int32_t *got = malloc(p->c_len * sizeof(int32_t));
  tsr_status_t s = tsr_buffer_read(p->bc, 0, got, p->c_len * sizeof(int32_t));
  bool ok = !s && !memcmp(got, p->want, p->c_len * sizeof(int32_t));
  if (s) fprintf(stderr, "read C: %s\n", tsr_status_message(s));
  else if (!ok) {
    for (size_t i = 0; i < p->c_len; i++)
      if (got[i] != p->want[i]) {
        fprintf(stderr, "C[%zu] = %d, want %d (%zux%zux%zu)\n", i, got[i], p->want[i], p->m,
                p->n, p->k);
        break;
      }
  }
  tsr_status_free(s);
  free(got);
  return ok;
}

static void problem_free(problem_t *p) {
  tsr_buffer_destroy(p->ba);
  tsr_buffer_destroy(p->bw);
  tsr_buffer_destroy(p->bc);
  free(p->a);
  free(p->w);
  free(p->want);
}

/* Runs one problem on `spec` through a fresh context; returns the event's info. */
static tsr_event_info_t run_one(tsr_context_t *ctx, const char *spec, size_t m, size_t n,
                                size_t k, size_t pad, uint64_t seed, tsr_status_t *out_wait,
                                bool *ok) {
  tsr_event_info_t info;
  memset(&info, 0, sizeof info);
  *ok = false;
  tsr_device_t *dev = open_dev(ctx, spec);
  if (!dev) return info;
  problem_t p;
  problem_init(&p, dev, m, n, k, pad, seed);
  tsr_gemm_t g = problem_gemm(&p);
  tsr_event_t *ev = NULL;
  TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
  if (ev) {
    *out_wait = tsr_event_wait(ev, TSR_WAIT_FOREVER);
    tsr_event_query(ev, &info);
    if (!*out_wait) *ok = problem_check(&p);
  }
  tsr_event_destroy(ev);
  problem_free(&p);
  tsr_device_close(dev);
  return info;
}

/* ---- enumeration and opening ---- */

static void test_list(void) {
  size_t n = 0;
  TSR_ASSERT_ERR(tsr_device_list(NULL, 0, NULL), TSR_STATUS_INVALID_ARGUMENT, "out_count");
  TSR_ASSERT_ERR(tsr_device_list(NULL, 3, &n), TSR_STATUS_INVALID_ARGUMENT, "infos");
  TSR_ASSERT_OK(tsr_device_list(NULL, 0, &n));
  CU_ASSERT(n >= 1);
  tsr_device_info_t infos[16];
  size_t m = 0;
  TSR_ASSERT_OK(tsr_device_list(infos, 16, &m));
  CU_ASSERT_EQUAL(m, n);
  bool fmodel = false;
  for (size_t i = 0; i < m && i < 16; i++) {
    CU_ASSERT(strcmp(infos[i].name, "cpu") != 0);
    CU_ASSERT(infos[i].available ? infos[i].description[0] != 0 : infos[i].reason[0] != 0);
    if (!strcmp(infos[i].name, "fmodel")) fmodel = infos[i].available;
  }
  CU_ASSERT(fmodel);
  CU_ASSERT_STRING_EQUAL(infos[m - 1].name, "fmodel"); /* the functional model last */
}

static void test_open_errors(void) {
  tsr_context_t *ctx = make_ctx(NULL, true, 1, 10000);
  tsr_device_t *dev = (tsr_device_t *)&dev;
  TSR_ASSERT_ERR(tsr_device_open(ctx, "fmodel", NULL), TSR_STATUS_INVALID_ARGUMENT, "out_dev");
  TSR_ASSERT_ERR(tsr_device_open(NULL, "fmodel", &dev), TSR_STATUS_INVALID_ARGUMENT, "ctx");
  CU_ASSERT_PTR_NULL(dev);
  TSR_ASSERT_ERR(tsr_device_open(ctx, NULL, &dev), TSR_STATUS_INVALID_ARGUMENT, "spec");
  TSR_ASSERT_ERR(tsr_device_open(ctx, "cpu", &dev), TSR_STATUS_INVALID_ARGUMENT, "host");
  TSR_ASSERT_ERR(tsr_device_open(ctx, "nosuch", &dev), TSR_STATUS_NOT_FOUND, "nosuch");
  TSR_ASSERT_ERR(tsr_device_open(ctx, "fmodel:bogus=1", &dev), TSR_STATUS_INVALID_ARGUMENT,
                 "bogus");
  CU_ASSERT_PTR_NULL(dev);
  /* the same spec twice on one context: one device, counted */
  tsr_device_t *d1 = open_dev(ctx, "fmodel:mem=16M"), *d2 = open_dev(ctx, "fmodel:mem=16M");
  CU_ASSERT_PTR_EQUAL(d1, d2);
  CU_ASSERT_STRING_EQUAL(tsr_device_name(d1), "fmodel:mem=16M");
  tsr_device_caps_t caps;
  tsr_device_get_caps(d1, &caps);
  CU_ASSERT(caps.array_rows >= 1 && caps.array_cols >= 1);
  CU_ASSERT_EQUAL(caps.mem_size, 16u << 20);
  CU_ASSERT(caps.clock_hz > 0);
  CU_ASSERT(caps.max_dim >= 1);
  tsr_device_close(d1);
  tsr_device_close(d2);
  tsr_context_destroy(ctx);
}

/* A device in the context's list is that entry's: the same HAL device. */
static void test_shared_with_context(void) {
  tsr_context_t *ctx = make_ctx("fmodel:mem=32M", true, 1, 10000);
  if (!ctx) return;
  bool ok = false;
  tsr_status_t w = TSR_OK;
  tsr_event_info_t info = run_one(ctx, "fmodel:mem=32M", 33, 17, 40, 3, 77, &w, &ok);
  TSR_ASSERT_OK(w);
  CU_ASSERT(ok);
  CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
  CU_ASSERT(info.cycles > 0);
  tsr_context_destroy(ctx);
}

/* ---- a worker: 6 commands on one device, checked ---- */

typedef struct {
  tsr_device_t *dev;
  int id;
  int good, bad;
} worker_t;

static void *worker(void *arg) {
  worker_t *wk = arg;
  for (int r = 0; r < 6; r++) {
    problem_t p;
    problem_init(&p, wk->dev, 17 + (size_t)wk->id, 23 + (size_t)r, 64 + 5 * (size_t)r,
                 (size_t)r % 2, 1000 * (uint64_t)wk->id + (uint64_t)r);
    tsr_gemm_t g = problem_gemm(&p);
    tsr_event_t *ev = NULL;
    tsr_status_t s = tsr_gemm_enqueue(wk->dev, &g, &ev);
    if (!s) s = tsr_event_wait(ev, TSR_WAIT_FOREVER);
    if (!s && problem_check(&p)) wk->good++;
    else wk->bad++;
    tsr_status_free(s);
    tsr_event_destroy(ev);
    problem_free(&p);
  }
  return NULL;
}

/* The context's device used by a session and by this API in turn: the
 * session's logits do not change, and neither do the API's buffers. */
static void test_with_session(void) {
  const char *model_path = tsr_test_model_or_skip("stories260K.gguf");
  if (!model_path) return;
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  o.n_threads = 2;
  o.devices = "fmodel";
  o.offload = TSR_OFFLOAD_ALL;
  o.fallback = false;
  tsr_context_t *ctx = NULL;
  tsr_model_t *model = NULL;
  tsr_session_t *sess = NULL;
  TSR_ASSERT_OK(tsr_context_create(&o, &ctx));
  if (ctx) TSR_ASSERT_OK(tsr_model_load(ctx, model_path, NULL, &model));
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = TSR_PRECISION_INT8;
  if (model) TSR_ASSERT_OK(tsr_session_create(model, &so, &sess));
  tsr_device_t *dev = sess ? open_dev(ctx, "fmodel") : NULL;
  if (dev) {
    tsr_model_config_t cfg;
    tsr_model_config(model, &cfg);
    int32_t tokens[16];
    size_t nt = 0;
    TSR_ASSERT_OK(tsr_model_tokenize(model, "Once upon a time", true, false, tokens, 16, &nt));
    float *first = calloc((size_t)cfg.vocab_size, sizeof(float));
    const float *logits = NULL;
    problem_t p;
    problem_init(&p, dev, 40, 24, 64, 2, 31);
    for (int round = 0; round < 3; round++) {
      tsr_session_reset(sess);
      TSR_ASSERT_OK(tsr_session_eval(sess, tokens, nt, &logits));
      if (!logits) break;
      if (round == 0) memcpy(first, logits, (size_t)cfg.vocab_size * sizeof(float));
      else CU_ASSERT(!memcmp(first, logits, (size_t)cfg.vocab_size * sizeof(float)));
      tsr_gemm_t g = problem_gemm(&p);
      tsr_event_t *ev = NULL;
      TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
      TSR_ASSERT_OK(tsr_event_wait(ev, TSR_WAIT_FOREVER));
      tsr_event_info_t info;
      tsr_event_query(ev, &info);
      CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
      CU_ASSERT(problem_check(&p));
      tsr_event_destroy(ev);
    }
    /* and at the same time: commands from another thread during evals */
    worker_t wk = {.dev = dev, .id = 9};
    pthread_t th;
    pthread_create(&th, NULL, worker, &wk);
    for (int round = 0; round < 3 && logits; round++) {
      tsr_session_reset(sess);
      TSR_ASSERT_OK(tsr_session_eval(sess, tokens, nt, &logits));
      if (logits) CU_ASSERT(!memcmp(first, logits, (size_t)cfg.vocab_size * sizeof(float)));
    }
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(wk.good, 6);
    CU_ASSERT_EQUAL(wk.bad, 0);
    tsr_session_stats_t st;
    tsr_session_get_stats(sess, &st);
    CU_ASSERT(st.device_calls > 0);
    CU_ASSERT_EQUAL(st.fallbacks, 0);
    problem_free(&p);
    free(first);
    tsr_device_close(dev);
  }
  tsr_session_destroy(sess);
  tsr_model_destroy(model);
  tsr_context_destroy(ctx);
}

/* ---- bad arguments ---- */

static void test_bad_buffers(void) {
  tsr_context_t *ctx = make_ctx(NULL, true, 1, 10000);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=16M");
  if (!dev) goto out;
  tsr_buffer_t *b = (tsr_buffer_t *)&b, *c = NULL;
  TSR_ASSERT_ERR(tsr_buffer_create(dev, TSR_BUFFER_I8, 0, 5, "Z", &b),
                 TSR_STATUS_INVALID_ARGUMENT, "rows 0");
  CU_ASSERT_PTR_NULL(b);
  TSR_ASSERT_ERR(tsr_buffer_create(dev, TSR_BUFFER_I8, 5, 0, "Z", &b),
                 TSR_STATUS_INVALID_ARGUMENT, "cols 0");
  TSR_ASSERT_ERR(tsr_buffer_create(NULL, TSR_BUFFER_I8, 5, 5, "Z", &b),
                 TSR_STATUS_INVALID_ARGUMENT, "dev");
  TSR_ASSERT_ERR(tsr_buffer_create(dev, TSR_BUFFER_I8, 5, 5, "Z", NULL),
                 TSR_STATUS_INVALID_ARGUMENT, "out_buf");
  TSR_ASSERT_ERR(tsr_buffer_create(dev, (tsr_buffer_type_t)9, 5, 5, "Z", &b),
                 TSR_STATUS_INVALID_ARGUMENT, "type");
  TSR_ASSERT_ERR(tsr_buffer_create(dev, TSR_BUFFER_I32, 1u << 20, 1u << 10, "huge", &b),
                 TSR_STATUS_OUT_OF_RANGE, "memory");
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I8, 4, 8, "small", &b));
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I32, 4, 8, NULL, &c));
  if (b && c) {
    CU_ASSERT_EQUAL(tsr_buffer_size(b), 32);
    CU_ASSERT_EQUAL(tsr_buffer_size(c), 128);
    uint8_t data[256] = {0};
    TSR_ASSERT_ERR(tsr_buffer_write(b, 30, data, 4), TSR_STATUS_OUT_OF_RANGE, "offset 30");
    TSR_ASSERT_ERR(tsr_buffer_write(b, 30, data, 4), TSR_STATUS_OUT_OF_RANGE, "'small'");
    TSR_ASSERT_ERR(tsr_buffer_write(b, 33, data, 0), TSR_STATUS_OUT_OF_RANGE, "offset 33");
    TSR_ASSERT_ERR(tsr_buffer_read(b, 0, data, 33), TSR_STATUS_OUT_OF_RANGE, "33 bytes");
    TSR_ASSERT_ERR(tsr_buffer_write(b, 0, NULL, 4), TSR_STATUS_INVALID_ARGUMENT, "NULL");
    TSR_ASSERT_ERR(tsr_buffer_read(NULL, 0, data, 4), TSR_STATUS_INVALID_ARGUMENT, "buf");
    TSR_ASSERT_ERR(tsr_buffer_write(c, 2, data, 4), TSR_STATUS_INVALID_ARGUMENT,
                   "multiples of 4");
    TSR_ASSERT_ERR(tsr_buffer_read(c, 0, data, 6), TSR_STATUS_INVALID_ARGUMENT, "buffer 1");
    /* a round trip, in parts */
    uint8_t in[32], back[32];
    for (int i = 0; i < 32; i++) in[i] = (uint8_t)(i * 7 + 1);
    TSR_ASSERT_OK(tsr_buffer_write(b, 0, in, 32));
    TSR_ASSERT_OK(tsr_buffer_write(b, 5, in, 3));
    memcpy(in + 5, in, 3);
    TSR_ASSERT_OK(tsr_buffer_read(b, 0, back, 32));
    CU_ASSERT(!memcmp(in, back, 32));
    TSR_ASSERT_OK(tsr_buffer_read(b, 8, back, 8));
    CU_ASSERT(!memcmp(in + 8, back, 8));
  }
  tsr_buffer_destroy(b);
  tsr_buffer_destroy(c);
  tsr_device_close(dev);
out:
  tsr_context_destroy(ctx);
}

static void test_bad_gemms(void) {
  tsr_context_t *ctx = make_ctx(NULL, true, 1, 10000);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=16M"), *other = open_dev(ctx, "fmodel:mem=8M");
  if (!dev || !other) goto out;
  tsr_buffer_t *a = NULL, *w = NULL, *c = NULL, *c8 = NULL, *oa = NULL;
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I8, 8, 16, "A", &a));
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I8, 4, 16, "W", &w));
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I32, 8, 4, "C", &c));
  TSR_ASSERT_OK(tsr_buffer_create(dev, TSR_BUFFER_I8, 8, 4, "C8", &c8));
  TSR_ASSERT_OK(tsr_buffer_create(other, TSR_BUFFER_I8, 8, 16, "otherA", &oa));
  tsr_gemm_t ok = {.m = 8, .n = 4, .k = 16, .a = a, .w = w, .c = c};
  tsr_event_t *ev = (tsr_event_t *)&ev;
  tsr_gemm_t g;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, NULL, &ev), TSR_STATUS_INVALID_ARGUMENT, "NULL");
  CU_ASSERT_PTR_NULL(ev);
  TSR_ASSERT_ERR(tsr_gemm_enqueue(NULL, &ok, &ev), TSR_STATUS_INVALID_ARGUMENT, "dev");
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &ok, NULL), TSR_STATUS_INVALID_ARGUMENT, "out_event");
  g = ok; g.m = 0;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT, "m 0");
  g = ok; g.k = 0;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT, "k 0");
  g = ok; g.a = NULL;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT, "a is NULL");
  g = ok; g.a = c;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT, "a must be int8");
  g = ok; g.c = c8;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT,
                 "c must be int32");
  g = ok; g.a = oa;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT, "belongs to");
  g = ok; g.lda = 8;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_INVALID_ARGUMENT, "lda 8");
  g = ok; g.m = 9; /* A has 8 rows of 16 */
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_OUT_OF_RANGE, "'A'");
  g = ok; g.w_offset = 1;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_OUT_OF_RANGE, "offset 1");
  g = ok; g.ldc = 5; /* C is 8x4 */
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_OUT_OF_RANGE, "ldc 5");
  g = ok; g.c_offset = 32;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_OUT_OF_RANGE, "offset 32");
  g = ok; g.k = 70000; g.lda = 70000;
  TSR_ASSERT_ERR(tsr_gemm_enqueue(dev, &g, &ev), TSR_STATUS_OUT_OF_RANGE, "max_dim");
  CU_ASSERT_PTR_NULL(ev);
  TSR_ASSERT_ERR(tsr_event_wait(NULL, 0), TSR_STATUS_INVALID_ARGUMENT, "ev");
  tsr_device_stats_t st;
  tsr_device_get_stats(dev, &st);
  CU_ASSERT_EQUAL(st.commands, 0);
  tsr_buffer_destroy(a);
  tsr_buffer_destroy(w);
  tsr_buffer_destroy(c);
  tsr_buffer_destroy(c8);
  tsr_buffer_destroy(oa);
out:
  tsr_device_close(dev);
  tsr_device_close(other);
  tsr_context_destroy(ctx);
}

/* ---- results ---- */

static void results_on(const char *spec) {
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 60000);
  tsr_device_t *dev = open_dev(ctx, spec);
  if (!dev) goto out;
  static const size_t shapes[][4] = {
      {1, 1, 1, 0}, {16, 16, 16, 0}, {37, 5, 100, 3}, {1, 70, 33, 1}, {50, 61, 130, 7}};
  uint64_t cycles = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    problem_t p;
    problem_init(&p, dev, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 100 + s);
    tsr_gemm_t g = problem_gemm(&p);
    tsr_event_t *ev = NULL;
    TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
    TSR_ASSERT_OK(tsr_event_wait(ev, TSR_WAIT_FOREVER));
    TSR_ASSERT_OK(tsr_event_wait(ev, 0)); /* again: still fine */
    tsr_event_info_t info;
    tsr_event_query(ev, &info);
    CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
    CU_ASSERT(info.cycles > 0);
    CU_ASSERT_EQUAL(info.descriptors, 1);
    cycles += info.cycles;
    if (!problem_check(&p)) {
      fprintf(stderr, "%s: mismatch in shape %zu\n", spec, s);
      CU_FAIL("result differs from the reference");
    }
    tsr_event_destroy(ev);
    problem_free(&p);
  }
  tsr_device_stats_t st;
  tsr_device_get_stats(dev, &st);
  CU_ASSERT_EQUAL(st.commands, 5);
  CU_ASSERT_EQUAL(st.launches, 5);
  CU_ASSERT_EQUAL(st.fallbacks, 0);
  CU_ASSERT_EQUAL(st.cycles, cycles);
  CU_ASSERT(st.bytes_to_device > 0 && st.bytes_from_device > 0);
  printf("REPORT test_device_api: %s: 5 shapes bit-exact, %llu cycles\n", spec,
         (unsigned long long)cycles);
  tsr_device_close(dev);
out:
  tsr_context_destroy(ctx);
}

static void test_results_fmodel(void) { results_on("fmodel:mem=16M"); }

static void test_results_sim(void) {
  if (!g_have_sim) {
    tsr_test_skip("sim: %s", g_sim_reason);
    return;
  }
  results_on("sim:mem=16M");
}

/* M and N above max_dim: one command, several descriptors. */
static void test_split(void) {
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 60000);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=64M");
  if (dev) {
    tsr_device_caps_t caps;
    tsr_device_get_caps(dev, &caps);
    static const size_t shapes[][3] = {{1, 1, 2}, {1, 1, 2}, {2, 1, 3}};
    for (int i = 0; i < 3; i++) {
      size_t m = shapes[i][0] * caps.max_dim + 2, n = shapes[i][1] * 3, k = shapes[i][2];
      if (i == 1) { size_t t = m; m = n; n = t; } /* N split */
      problem_t p;
      problem_init(&p, dev, m, n, k, 1, 70 + (uint64_t)i);
      tsr_gemm_t g = problem_gemm(&p);
      tsr_event_t *ev = NULL;
      TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
      TSR_ASSERT_OK(tsr_event_wait(ev, TSR_WAIT_FOREVER));
      tsr_event_info_t info;
      tsr_event_query(ev, &info);
      CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
      CU_ASSERT_EQUAL(info.descriptors, i == 2 ? 3 : 2);
      CU_ASSERT(problem_check(&p));
      tsr_event_destroy(ev);
      problem_free(&p);
    }
    tsr_device_close(dev);
  }
  tsr_context_destroy(ctx);
}

/* A wait long after the enqueue is no timeout: the watchdog counts time
 * waited (the simulated device only runs inside waits). */
static void test_late_wait(void) {
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 100);
  bool ok = false;
  const char *spec = g_have_sim ? "sim:mem=16M" : "fmodel:mem=16M";
  tsr_device_t *dev = open_dev(ctx, spec);
  if (dev) {
    problem_t p;
    problem_init(&p, dev, 16, 16, 32, 0, 61);
    tsr_gemm_t g = problem_gemm(&p);
    tsr_event_t *ev = NULL;
    TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    TSR_ASSERT_OK(tsr_event_wait(ev, TSR_WAIT_FOREVER));
    ok = problem_check(&p);
    CU_ASSERT(ok);
    tsr_event_destroy(ev);
    problem_free(&p);
    tsr_device_close(dev);
  }
  tsr_context_destroy(ctx);
}

/* Many commands queued before any wait, waited newest first; a read of C
 * finishes the commands that write it without a wait. */
static void test_queue_order(void) {
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 60000);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=64M");
  if (!dev) goto out;
  enum { N = 20 };
  problem_t p[N];
  tsr_event_t *ev[N];
  for (int i = 0; i < N; i++) {
    problem_init(&p[i], dev, 10 + (size_t)i, 20, 30 + (size_t)i, (size_t)i % 3, 500 + (uint64_t)i);
    tsr_gemm_t g = problem_gemm(&p[i]);
    ev[i] = NULL;
    TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev[i]));
  }
  CU_ASSERT(problem_check(&p[N / 2])); /* without waiting for its event */
  for (int i = N - 1; i >= 0; i--) {
    TSR_ASSERT_OK(tsr_event_wait(ev[i], TSR_WAIT_FOREVER));
    CU_ASSERT(problem_check(&p[i]));
    tsr_event_destroy(ev[i]);
    problem_free(&p[i]);
  }
  /* the same C twice: the second result wins; an event destroyed early */
  problem_t q;
  problem_init(&q, dev, 8, 8, 8, 0, 9);
  tsr_gemm_t g = problem_gemm(&q);
  tsr_event_t *e1 = NULL, *e2 = NULL;
  int8_t zeros[64] = {0};
  TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &e1));
  tsr_event_destroy(e1);
  TSR_ASSERT_OK(tsr_buffer_write(q.ba, 0, zeros, sizeof zeros)); /* after e1 ran */
  TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &e2));
  TSR_ASSERT_OK(tsr_event_wait(e2, TSR_WAIT_FOREVER));
  memset(q.want, 0, q.c_len * sizeof(int32_t));
  CU_ASSERT(problem_check(&q));
  tsr_event_destroy(e2);
  problem_free(&q);
  tsr_device_close(dev);
out:
  tsr_context_destroy(ctx);
}

/* ---- the failure policy ---- */

static void test_hang(void) {
  bool ok = false;
  tsr_status_t w = TSR_OK;
  /* fallback off, no retries: the watchdog's DEADLINE_EXCEEDED is the status */
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 200);
  tsr_event_info_t info = run_one(ctx, "fmodel:mem=16M,hang=1", 20, 30, 40, 1, 1, &w, &ok);
  CU_ASSERT_EQUAL(tsr_status_code(w), TSR_STATUS_DEADLINE_EXCEEDED);
  CU_ASSERT_PTR_NOT_NULL(w ? strstr(tsr_status_message(w), "fallback is off") : NULL);
  CU_ASSERT_EQUAL(info.state, TSR_EVENT_FAILED);
  tsr_status_free(w);
  tsr_context_destroy(ctx);

  /* a short wait on a hung command: DEADLINE_EXCEEDED, still queued; then
   * the watchdog, then the host (fallback on) */
  ctx = make_ctx(NULL, true, 0, 300);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=16M,hang=1");
  if (dev) {
    problem_t p;
    problem_init(&p, dev, 21, 31, 41, 2, 2);
    tsr_gemm_t g = problem_gemm(&p);
    tsr_event_t *ev = NULL;
    TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
    TSR_ASSERT_ERR(tsr_event_wait(ev, 20), TSR_STATUS_DEADLINE_EXCEEDED, "stays queued");
    tsr_event_query(ev, &info);
    CU_ASSERT_EQUAL(info.state, TSR_EVENT_PENDING);
    TSR_ASSERT_OK(tsr_event_wait(ev, TSR_WAIT_FOREVER));
    tsr_event_query(ev, &info);
    CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE_HOST);
    CU_ASSERT(problem_check(&p));
    tsr_device_stats_t st;
    tsr_device_get_stats(dev, &st);
    CU_ASSERT_EQUAL(st.fallbacks, 1);
    CU_ASSERT_EQUAL(st.resets, 1);
    CU_ASSERT_EQUAL(st.launches, 0);
    /* the device works again after the reset */
    tsr_event_destroy(ev);
    ev = NULL;
    TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev));
    TSR_ASSERT_OK(tsr_event_wait(ev, TSR_WAIT_FOREVER));
    tsr_event_query(ev, &info);
    CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
    CU_ASSERT(problem_check(&p));
    tsr_event_destroy(ev);
    problem_free(&p);
    tsr_device_close(dev);
  }
  tsr_context_destroy(ctx);

  /* one retry: the second launch succeeds on the device */
  ctx = make_ctx(NULL, false, 1, 200);
  info = run_one(ctx, "fmodel:mem=16M,hang=1", 5, 6, 7, 0, 3, &w, &ok);
  TSR_ASSERT_OK(w);
  CU_ASSERT(ok);
  CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
  CU_ASSERT_EQUAL(info.retries, 1);
  tsr_context_destroy(ctx);
}

/* A hang with commands queued behind it: all of them come out right. */
static void test_hang_queue(void) {
  tsr_context_t *ctx = make_ctx(NULL, true, 1, 200);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=16M,hang=2");
  if (!dev) goto out;
  enum { N = 4 };
  problem_t p[N];
  tsr_event_t *ev[N];
  for (int i = 0; i < N; i++) {
    problem_init(&p[i], dev, 9, 10, 11 + (size_t)i, 1, 40 + (uint64_t)i);
    tsr_gemm_t g = problem_gemm(&p[i]);
    ev[i] = NULL;
    TSR_ASSERT_OK(tsr_gemm_enqueue(dev, &g, &ev[i]));
  }
  TSR_ASSERT_OK(tsr_event_wait(ev[N - 1], TSR_WAIT_FOREVER));
  for (int i = 0; i < N; i++) {
    tsr_event_info_t info;
    tsr_event_query(ev[i], &info);
    CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE);
    CU_ASSERT(problem_check(&p[i]));
    tsr_event_destroy(ev[i]);
    problem_free(&p[i]);
  }
  tsr_device_stats_t st;
  tsr_device_get_stats(dev, &st);
  CU_ASSERT_EQUAL(st.retries, 1);
  CU_ASSERT_EQUAL(st.fallbacks, 0);
  CU_ASSERT_EQUAL(st.launches, N);
  tsr_device_close(dev);
out:
  tsr_context_destroy(ctx);
}

static void test_fail(void) {
  bool ok = false;
  tsr_status_t w = TSR_OK;
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 5000);
  tsr_event_info_t info = run_one(ctx, "fmodel:mem=16M,fail=1", 12, 13, 14, 0, 4, &w, &ok);
  CU_ASSERT_EQUAL(tsr_status_code(w), TSR_STATUS_DEVICE);
  CU_ASSERT_PTR_NOT_NULL(w ? strstr(tsr_status_message(w), "AXI_ERROR") : NULL);
  CU_ASSERT_EQUAL(info.state, TSR_EVENT_FAILED);
  tsr_status_free(w);
  tsr_context_destroy(ctx);

  ctx = make_ctx(NULL, true, 0, 5000);
  info = run_one(ctx, "fmodel:mem=16M,fail=1", 12, 13, 14, 2, 5, &w, &ok);
  TSR_ASSERT_OK(w);
  CU_ASSERT(ok);
  CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE_HOST);
  tsr_context_destroy(ctx);
}

static void test_lost(void) {
  tsr_context_t *ctx = make_ctx(NULL, false, 1, 5000);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=16M,lost");
  if (dev) {
    tsr_buffer_t *b = NULL;
    TSR_ASSERT_ERR(tsr_buffer_create(dev, TSR_BUFFER_I8, 4, 4, "A", &b),
                   TSR_STATUS_UNAVAILABLE, "fallback is off");
    CU_ASSERT_PTR_NULL(b);
    tsr_device_close(dev);
  }
  tsr_context_destroy(ctx);

  bool ok = false;
  tsr_status_t w = TSR_OK;
  ctx = make_ctx(NULL, true, 1, 5000);
  tsr_event_info_t info = run_one(ctx, "fmodel:mem=16M,lost", 7, 8, 9, 1, 6, &w, &ok);
  TSR_ASSERT_OK(w);
  CU_ASSERT(ok);
  CU_ASSERT_EQUAL(info.state, TSR_EVENT_DONE_HOST);
  tsr_context_destroy(ctx);
}

/* ---- threads ---- */

static void test_threads(void) {
  tsr_context_t *ctx = make_ctx(NULL, false, 0, 60000);
  tsr_device_t *dev = open_dev(ctx, "fmodel:mem=64M");
  if (!dev) goto out;
  enum { T = 4 };
  pthread_t th[T];
  worker_t wk[T];
  for (int i = 0; i < T; i++) {
    wk[i] = (worker_t){.dev = dev, .id = i};
    pthread_create(&th[i], NULL, worker, &wk[i]);
  }
  int good = 0, bad = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    good += wk[i].good;
    bad += wk[i].bad;
  }
  CU_ASSERT_EQUAL(good, T * 6);
  CU_ASSERT_EQUAL(bad, 0);
  tsr_device_stats_t st;
  tsr_device_get_stats(dev, &st);
  CU_ASSERT_EQUAL(st.launches, T * 6);
  printf("REPORT test_device_api: %d threads x 6 commands on one device, %d correct\n", T,
         good);
  tsr_device_close(dev);
out:
  tsr_context_destroy(ctx);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  size_t n = 0;
  tsr_device_info_t infos[16];
  tsr_status_t s = tsr_device_list(infos, 16, &n);
  snprintf(g_sim_reason, sizeof g_sim_reason, "not compiled in");
  for (size_t i = 0; !s && i < n && i < 16; i++)
    if (!strcmp(infos[i].name, "sim")) {
      g_have_sim = infos[i].available;
      snprintf(g_sim_reason, sizeof g_sim_reason, "%s", infos[i].reason);
    }
  tsr_status_free(s);
  if (!g_have_sim) printf("REPORT test_device_api: sim skipped (%s)\n", g_sim_reason);
  CU_pSuite su = CU_add_suite("device api", NULL, NULL);
  CU_add_test(su, "list backends", test_list);
  CU_add_test(su, "open: errors, same spec twice, caps", test_open_errors);
  CU_add_test(su, "a device of the context's list", test_shared_with_context);
  CU_add_test(su, "a session and this API on one device in turn", test_with_session);
  CU_add_test(su, "buffers: bad arguments, round trip", test_bad_buffers);
  CU_add_test(su, "gemm: bad arguments", test_bad_gemms);
  CU_add_test(su, "results on fmodel", test_results_fmodel);
  CU_add_test(su, "results on sim", test_results_sim);
  CU_add_test(su, "queue order, implicit waits", test_queue_order);
  CU_add_test(su, "a wait long after the enqueue", test_late_wait);
  CU_add_test(su, "m and n above max_dim", test_split);
  CU_add_test(su, "hang: timeout, watchdog, fallback, retry", test_hang);
  CU_add_test(su, "hang with commands queued behind", test_hang_queue);
  CU_add_test(su, "fail", test_fail);
  CU_add_test(su, "lost", test_lost);
  CU_add_test(su, "4 threads on one device", test_threads);
  return tsr_test_run_all();
}
