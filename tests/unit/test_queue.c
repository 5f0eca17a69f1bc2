/*
 * test_queue.c - one device shared by many threads (driver/queue.h).
 *
 * Eight threads allocate, write, submit GEMM rings, wait and free at the
 * same time on one device: "fmodel" always, "sim" when the RTL library
 * loads and "opencl" when an OpenCL device opens (otherwise that case is
 * reported SKIPPED with the reason). Every
 * int32 result is compared for equality with a naive triple loop written
 * here; fences handed out across threads must be distinct and cover
 * 1..N. Worker threads record failures in their own slot; the checks (CUnit
 * assertions are not thread-safe) run on the main thread after the join.
 * Also: several threads waiting for one fence, and a reset while other
 * threads wait. Build with -fsanitize=thread (SANFLAGS) to check for races.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "driver/tsr_regmap.h"

#include "driver/hal.h"
#include "tsr_test.h"

#define N_THREADS 8
#define FOREVER UINT64_MAX
#define MAX_DESC 3

/* What one thread saw. */
typedef struct worker {
  tsr_hal_device_t *dev;
  int id, iters;
  uint32_t max_dim;    /* largest m, n, k of a descriptor                  */
  uint64_t *fences;    /* (2 * iters) every fence this thread got           */
  uint32_t n_fences;
  uint64_t values;     /* int32 results compared                           */
  uint32_t mismatches; /* results that differ from the reference           */
  char error[512];     /* first failure, "" if none                         */
} worker_t;

/* C[i][j] = sum_k A[i][k] * W[j][k], written out the slow way. */
static void naive_gemm(int32_t *c, const int8_t *a, const int8_t *w, uint32_t m, uint32_t n,
                       uint32_t k) {
  for (uint32_t i = 0; i < m; i++)
    for (uint32_t j = 0; j < n; j++) {
      int64_t acc = 0;
      for (uint32_t x = 0; x < k; x++) acc += (int64_t)a[i * k + x] * (int64_t)w[j * k + x];
      c[i * n + j] = (int32_t)acc;
    }
}

/* One launch: a buffer holding a ring of up to MAX_DESC GEMMs, their
 * operands and results. */
typedef struct launch {
  tsr_hal_buffer_t buf;
  uint32_t n_desc;
  uint32_t m[MAX_DESC], n[MAX_DESC], k[MAX_DESC];
  uint64_t a_off[MAX_DESC], w_off[MAX_DESC], c_off[MAX_DESC];
  int8_t *a[MAX_DESC], *w[MAX_DESC];
  uint64_t fence;
} launch_t;

static uint64_t up64(uint64_t x) { return (x + 63) / 64 * 64; }

static void record(worker_t *wk, const char *what, tsr_status_t s) {
  if (!wk->error[0])
    snprintf(wk->error, sizeof wk->error, "thread %d: %s: %s", wk->id, what,
             s ? tsr_status_message(s) : "failed");
  tsr_status_free(s);
}

static void launch_free(tsr_hal_device_t *dev, launch_t *l) {
  for (uint32_t i = 0; i < l->n_desc; i++) {
    free(l->a[i]);
    free(l->w[i]);
  }
  dev->vt->free(dev, &l->buf);
  memset(l, 0, sizeof *l);
}

/* Builds, uploads and submits one launch. False on failure (recorded). */
static bool launch_start(worker_t *wk, launch_t *l, uint64_t *rng) {
  tsr_hal_device_t *dev = wk->dev;
  memset(l, 0, sizeof *l);
  l->n_desc = 1 + (uint32_t)(tsr_test_splitmix64(rng) % MAX_DESC);
  uint64_t off = up64((uint64_t)l->n_desc * TSR_HW_DESC_BYTES);
  for (uint32_t i = 0; i < l->n_desc; i++) {
    l->m[i] = 1 + (uint32_t)(tsr_test_splitmix64(rng) % wk->max_dim);
    l->n[i] = 1 + (uint32_t)(tsr_test_splitmix64(rng) % wk->max_dim);
    l->k[i] = 1 + (uint32_t)(tsr_test_splitmix64(rng) % (2 * wk->max_dim));
    l->a_off[i] = off;
    off = up64(off + (uint64_t)l->m[i] * l->k[i]);
    l->w_off[i] = off;
    off = up64(off + (uint64_t)l->n[i] * l->k[i]);
    l->c_off[i] = off;
    off = up64(off + 4ull * l->m[i] * l->n[i]);
    l->a[i] = malloc((size_t)l->m[i] * l->k[i]);
    l->w[i] = malloc((size_t)l->n[i] * l->k[i]);
    if (!l->a[i] || !l->w[i]) {
      record(wk, "host allocation", NULL);
      return false;
    }
    for (size_t x = 0; x < (size_t)l->m[i] * l->k[i]; x++)
      l->a[i][x] = (int8_t)(tsr_test_splitmix64(rng) >> 56);
    for (size_t x = 0; x < (size_t)l->n[i] * l->k[i]; x++)
      l->w[i][x] = (int8_t)(tsr_test_splitmix64(rng) >> 56);
  }
  tsr_status_t s = dev->vt->alloc(dev, off, 64, &l->buf);
  if (s) {
    record(wk, "alloc", s);
    return false;
  }
  /* Results start as a pattern, so a descriptor that did not run shows. */
  uint8_t *img = malloc(off);
  if (!img) {
    record(wk, "host allocation", NULL);
    return false;
  }
  memset(img, 0x5A, off);
  for (uint32_t i = 0; i < l->n_desc; i++) {
    tsr_desc_t d = {.opcode = TSR_OP_GEMM_I8_I32, .m = l->m[i], .n = l->n[i], .k = l->k[i],
                    .lda = l->k[i], .ldw = l->k[i], .ldc = 4 * l->n[i],
                    .a_addr = l->buf.addr + l->a_off[i], .w_addr = l->buf.addr + l->w_off[i],
                    .c_addr = l->buf.addr + l->c_off[i]};
    tsr_desc_pack(img + (size_t)i * TSR_HW_DESC_BYTES, &d);
    memcpy(img + l->a_off[i], l->a[i], (size_t)l->m[i] * l->k[i]);
    memcpy(img + l->w_off[i], l->w[i], (size_t)l->n[i] * l->k[i]);
  }
  s = dev->vt->write(dev, &l->buf, 0, img, off);
  free(img);
  if (s) {
    record(wk, "write", s);
    return false;
  }
  tsr_hal_command_t cmd = {.window_base = l->buf.addr, .window_size = off,
                           .ring = l->buf.addr, .n_desc = l->n_desc};
  s = dev->vt->submit(dev, &cmd, &l->fence);
  if (s) {
    record(wk, "submit", s);
    return false;
  }
  wk->fences[wk->n_fences++] = l->fence;
  return true;
}

/* Waits for one launch, reads its results back and compares them. */
static void launch_check(worker_t *wk, launch_t *l) {
  tsr_hal_device_t *dev = wk->dev;
  tsr_hal_result_t res;
  tsr_status_t s = dev->vt->wait(dev, l->fence, FOREVER, &res);
  if (s) {
    record(wk, "wait", s);
    return;
  }
  if (res.hw_status != TSR_HWERR_OK || res.desc_done != l->n_desc) {
    char what[128];
    snprintf(what, sizeof what, "fence %" PRIu64 ": hw_status %u, %u of %u descriptors done",
             l->fence, res.hw_status, res.desc_done, l->n_desc);
    record(wk, what, NULL);
    return;
  }
  for (uint32_t i = 0; i < l->n_desc; i++) {
    size_t cn = (size_t)l->m[i] * l->n[i];
    int32_t *got = malloc(cn * 4), *ref = malloc(cn * 4);
    if (!got || !ref) {
      free(got);
      free(ref);
      record(wk, "host allocation", NULL);
      return;
    }
    s = dev->vt->read(dev, &l->buf, l->c_off[i], got, cn * 4);
    if (s) {
      record(wk, "read", s);
    } else {
      naive_gemm(ref, l->a[i], l->w[i], l->m[i], l->n[i], l->k[i]);
      for (size_t x = 0; x < cn; x++) {
        wk->values++;
        if (got[x] == ref[x]) continue;
        if (wk->mismatches++ == 0) {
          char what[160];
          snprintf(what, sizeof what, "fence %" PRIu64 " descriptor %u (%ux%ux%u): C[%zu] = %d, "
                   "reference %d", l->fence, i, l->m[i], l->n[i], l->k[i], x, got[x], ref[x]);
          record(wk, what, NULL);
        }
      }
    }
    free(got);
    free(ref);
  }
}

/* Each iteration: two launches in flight, waited for newest first. */
static void *worker_main(void *arg) {
  worker_t *wk = arg;
  uint64_t rng = 0x9e3779b9ull * (uint64_t)(wk->id + 1);
  for (int it = 0; it < wk->iters && !wk->error[0]; it++) {
    launch_t l[2];
    bool ok0 = launch_start(wk, &l[0], &rng);
    bool ok1 = ok0 && launch_start(wk, &l[1], &rng);
    tsr_hal_caps_t caps;
    wk->dev->vt->query_caps(wk->dev, &caps); /* reads while others submit */
    if (ok1) launch_check(wk, &l[1]);
    if (ok0) launch_check(wk, &l[0]);
    launch_free(wk->dev, &l[1]);
    launch_free(wk->dev, &l[0]);
  }
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Runs N_THREADS workers on one device opened from `spec` and checks. */
static void run_threads(const char *spec, int iters, uint32_t max_dim) {
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_hal_open(spec, &dev));
  if (!dev) return;
  worker_t wk[N_THREADS];
  pthread_t th[N_THREADS];
  memset(wk, 0, sizeof wk);
  int started = 0;
  for (int t = 0; t < N_THREADS; t++) {
    wk[t] = (worker_t){.dev = dev, .id = t, .iters = iters, .max_dim = max_dim};
    wk[t].fences = calloc(2 * (size_t)iters, sizeof *wk[t].fences);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wk[t].fences);
    if (pthread_create(&th[t], NULL, worker_main, &wk[t]) == 0) started++;
  }
  CU_ASSERT_EQUAL(started, N_THREADS);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);

  uint64_t total = 0, values = 0;
  uint32_t mismatches = 0;
  for (int t = 0; t < N_THREADS; t++) {
    if (wk[t].error[0]) fprintf(stderr, "%s: %s\n", spec, wk[t].error);
    CU_ASSERT_STRING_EQUAL(wk[t].error, "");
    CU_ASSERT_EQUAL(wk[t].n_fences, 2u * (uint32_t)iters);
    total += wk[t].n_fences;
    values += wk[t].values;
    mismatches += wk[t].mismatches;
  }
  CU_ASSERT_EQUAL(mismatches, 0);
  CU_ASSERT(values > 0);
  /* Fences from all threads: distinct, and exactly 1..total. */
  uint64_t *all = calloc(total ? total : 1, sizeof *all);
  CU_ASSERT_PTR_NOT_NULL_FATAL(all);
  size_t n = 0;
  for (int t = 0; t < N_THREADS; t++)
    for (uint32_t i = 0; i < wk[t].n_fences; i++) all[n++] = wk[t].fences[i];
  qsort(all, n, sizeof *all, cmp_u64);
  bool exact = true;
  for (size_t i = 0; i < n; i++) exact = exact && all[i] == i + 1;
  CU_ASSERT_TRUE(exact);
  printf("REPORT %s: %d threads, %" PRIu64 " launches, %" PRIu64 " int32 results equal to the "
         "naive reference\n", spec, N_THREADS, total, values);
  free(all);
  for (int t = 0; t < N_THREADS; t++) free(wk[t].fences);
  tsr_hal_close(dev);
}

static void test_fmodel_threads(void) { run_threads("fmodel:mem=64M", 40, 40); }

/* The RTL is slow: fewer and smaller launches; skipped when the library is
 * absent. */
static void test_sim_threads(void) {
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("sim:mem=16M", &dev);
  if (s) {
    tsr_test_skip("sim does not open here: %s", tsr_status_message(s));
    tsr_status_free(s);
    return;
  }
  tsr_hal_close(dev);
  run_threads("sim:mem=16M", 3, 20);
}

/* The OpenCL kernel (PoCL here) through the ICD loader; skipped when no
 * OpenCL device opens. */
static void test_opencl_threads(void) {
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("opencl:mem=64M", &dev);
  if (s) {
    tsr_test_skip("opencl does not open here: %s", tsr_status_message(s));
    tsr_status_free(s);
    return;
  }
  tsr_hal_close(dev);
  run_threads("opencl:mem=64M", 6, 24);
}

/* Several threads wait for the same fences while one thread submits. */
typedef struct waiter {
  tsr_hal_device_t *dev;
  uint64_t fence;
  tsr_hal_result_t res;
  tsr_status_code_t code;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  tsr_status_t s = w->dev->vt->wait(w->dev, w->fence, FOREVER, &w->res);
  w->code = tsr_status_code(s);
  tsr_status_free(s);
  return NULL;
}

/* A NOP ring of `n` descriptors in `buf`. */
static tsr_hal_command_t nop_ring(tsr_hal_device_t *dev, tsr_hal_buffer_t *buf, uint32_t n) {
  uint8_t *img = calloc(n, TSR_HW_DESC_BYTES);
  CU_ASSERT_PTR_NOT_NULL_FATAL(img);
  for (uint32_t i = 0; i < n; i++) {
    tsr_desc_t d = {.opcode = TSR_OP_NOP};
    tsr_desc_pack(img + (size_t)i * TSR_HW_DESC_BYTES, &d);
  }
  TSR_ASSERT_OK(dev->vt->write(dev, buf, 0, img, (size_t)n * TSR_HW_DESC_BYTES));
  free(img);
  return (tsr_hal_command_t){.window_base = buf->addr, .window_size = buf->size,
                             .ring = buf->addr, .n_desc = n};
}

static void test_shared_fence(void) {
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_hal_open("fmodel:mem=4M", &dev));
  if (!dev) return;
  tsr_hal_buffer_t buf;
  TSR_ASSERT_OK(dev->vt->alloc(dev, 4096, 64, &buf));
  tsr_hal_command_t cmd = nop_ring(dev, &buf, 8);
  for (int round = 0; round < 50; round++) {
    uint64_t f = 0;
    TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &f));
    waiter_t w[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
      w[t] = (waiter_t){.dev = dev, .fence = f};
      CU_ASSERT_EQUAL_FATAL(pthread_create(&th[t], NULL, waiter_main, &w[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
      pthread_join(th[t], NULL);
      CU_ASSERT_EQUAL(w[t].code, TSR_STATUS_OK);
      CU_ASSERT_EQUAL(w[t].res.desc_done, 8);
    }
  }
  dev->vt->free(dev, &buf);
  tsr_hal_close(dev);
}

/* A hung command; threads wait for it and for a command queued behind it;
 * a reset from another thread aborts both, and the device works again. */
static void test_reset_while_waiting(void) {
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_hal_open("fmodel:mem=4M,hang=2", &dev));
  if (!dev) return;
  tsr_hal_buffer_t buf;
  TSR_ASSERT_OK(dev->vt->alloc(dev, 4096, 64, &buf));
  tsr_hal_command_t cmd = nop_ring(dev, &buf, 2);
  uint64_t f[3] = {0};
  for (int i = 0; i < 3; i++) TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &f[i]));
  tsr_hal_result_t r;
  TSR_ASSERT_OK(dev->vt->wait(dev, f[0], FOREVER, &r));
  TSR_ASSERT_ERR(dev->vt->wait(dev, f[1], 1000000, &r), TSR_STATUS_DEADLINE_EXCEEDED, "hung");
  waiter_t w[4];
  pthread_t th[4];
  for (int t = 0; t < 4; t++) {
    w[t] = (waiter_t){.dev = dev, .fence = f[1 + t % 2]};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th[t], NULL, waiter_main, &w[t]), 0);
  }
  TSR_ASSERT_OK(dev->vt->reset(dev));
  for (int t = 0; t < 4; t++) {
    pthread_join(th[t], NULL);
    CU_ASSERT_EQUAL(w[t].code, TSR_STATUS_DEVICE); /* aborted by the reset */
  }
  TSR_ASSERT_ERR(dev->vt->wait(dev, f[2], 0, &r), TSR_STATUS_DEVICE, "aborted by a reset");
  uint64_t g = 0;
  TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &g));
  CU_ASSERT_EQUAL(g, 4);
  TSR_ASSERT_OK(dev->vt->wait(dev, g, FOREVER, &r));
  CU_ASSERT_EQUAL(r.desc_done, 2);
  dev->vt->free(dev, &buf);
  tsr_hal_close(dev);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("one device, many threads", NULL, NULL);
  CU_add_test(s, "fmodel: 8 threads alloc/write/submit/wait/free", test_fmodel_threads);
  CU_add_test(s, "sim: 8 threads alloc/write/submit/wait/free", test_sim_threads);
  CU_add_test(s, "opencl: 8 threads alloc/write/submit/wait/free", test_opencl_threads);
  CU_add_test(s, "fmodel: 4 threads wait for one fence", test_shared_fence);
  CU_add_test(s, "fmodel: reset while threads wait", test_reset_while_waiting);
  return tsr_test_run_all();
}
