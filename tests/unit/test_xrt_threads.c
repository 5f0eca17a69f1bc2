/* test_xrt_threads.c - the xrt backend opened in a process that already has
 * threads: a context's workers, threads reading the environment, and
 * several threads opening XRT's noop shim (xrt:shim=noop) at once. Opening
 * must not fork, must not write the environment (XRT's variables and the
 * whole environ stay as they were), and every open, launch and close must
 * succeed. Meant for the ThreadSanitizer build too; no case forks. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/tsr_regmap.h"

#include "base/status.h"
#include "driver/hal.h"
#include "tsr_test.h"

extern char **environ;

static const char *const xrt_vars[] = {"XILINX_XRT", "XCL_EMULATION_MODE", "XRT_INI_PATH"};
#define N_VARS (sizeof xrt_vars / sizeof xrt_vars[0])

typedef struct env_snapshot {
  size_t n;               /* entries in environ */
  char *val[N_VARS];      /* XRT's variables (NULL: unset) */
} env_snapshot_t;

static void env_take(env_snapshot_t *e) {
  e->n = 0;
  while (environ[e->n]) e->n++;
  for (size_t i = 0; i < N_VARS; i++) {
    const char *v = getenv(xrt_vars[i]);
    e->val[i] = v ? strdup(v) : NULL;
  }
}

static void env_check_same(const env_snapshot_t *before) {
  env_snapshot_t now;
  env_take(&now);
  CU_ASSERT_EQUAL(now.n, before->n);
  for (size_t i = 0; i < N_VARS; i++) {
    bool same = (!now.val[i] && !before->val[i]) ||
                (now.val[i] && before->val[i] && !strcmp(now.val[i], before->val[i]));
    if (!same)
      fprintf(stderr, "%s was '%s', is '%s' after opening xrt\n", xrt_vars[i],
              before->val[i] ? before->val[i] : "(unset)", now.val[i] ? now.val[i] : "(unset)");
    CU_ASSERT(same);
    free(now.val[i]);
  }
}

static bool xrt_usable(const char **why) {
  if (!dlopen("libxrt_coreutil.so.2", RTLD_NOW | RTLD_LOCAL)) {
    *why = "XRT is not installed here (libxrt_coreutil.so.2 does not load)";
    return false;
  }
  return true;
}

/* ---- threads that keep the process busy while xrt opens ----------------- */

static atomic_bool stop_readers;

static void *env_reader(void *arg) {
  (void)arg;
  unsigned long n = 0;
  while (!atomic_load(&stop_readers)) {
    for (size_t i = 0; i < N_VARS; i++) n += getenv(xrt_vars[i]) != NULL;
    n += getenv("HOME") != NULL;
    void *p = malloc(64 + n % 256);
    free(p);
  }
  return NULL;
}

/* One open, a NOP launch and a close of the noop shim. */
typedef struct opener {
  pthread_t t;
  int id;
  tsr_status_t s;
  bool no_compute;
} opener_t;

static tsr_status_t noop_round(opener_t *o) {
  tsr_hal_device_t *dev = NULL;
  TSR_RETURN_IF(tsr_hal_open("xrt:shim=noop,mem=1M,inflight=2", &dev));
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  o->no_compute = caps.flags & TSR_HAL_CAP_NO_COMPUTE;
  tsr_hal_buffer_t ring;
  tsr_status_t s = dev->vt->alloc(dev, 2 * TSR_HW_DESC_BYTES, 64, &ring);
  if (s) {
    tsr_hal_close(dev);
    return s;
  }
  uint8_t desc[2 * TSR_HW_DESC_BYTES];
  for (int i = 0; i < 2; i++) {
    tsr_desc_t d = {.opcode = TSR_OP_NOP};
    tsr_desc_pack(desc + i * TSR_HW_DESC_BYTES, &d);
  }
  s = dev->vt->write(dev, &ring, 0, desc, sizeof desc);
  tsr_hal_command_t cmd = {.window_base = ring.addr, .window_size = ring.size,
                           .ring = ring.addr, .n_desc = 2};
  uint64_t fence = 0;
  tsr_hal_result_t res;
  if (!s) s = dev->vt->submit(dev, &cmd, &fence);
  if (!s) s = dev->vt->wait(dev, fence, 10000000000ull, &res);
  dev->vt->free(dev, &ring);
  tsr_hal_close(dev);
  return s;
}

static void *opener_main(void *arg) {
  opener_t *o = arg;
  o->s = noop_round(o);
  return NULL;
}

static void test_open_among_threads(void) {
  const char *why = NULL;
  if (!xrt_usable(&why)) {
    tsr_test_skip("%s", why);
    return;
  }
  env_snapshot_t before;
  env_take(&before);

  /* A context with worker threads, and threads reading the environment. */
  tsr_context_options_t co;
  tsr_context_options_init(&co);
  co.n_threads = 4;
  co.quiet = true;
  tsr_context_t *ctx = NULL;
  TSR_ASSERT_OK(tsr_context_create(&co, &ctx));
  atomic_store(&stop_readers, false);
  pthread_t readers[2];
  for (int i = 0; i < 2; i++) CU_ASSERT_EQUAL(pthread_create(&readers[i], NULL, env_reader, NULL), 0);

  /* Four threads open the noop shim at once (the first loads XRT). */
  opener_t op[4];
  memset(op, 0, sizeof op);
  for (int i = 0; i < 4; i++) {
    op[i].id = i;
    CU_ASSERT_EQUAL(pthread_create(&op[i].t, NULL, opener_main, &op[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(op[i].t, NULL);
    if (op[i].s) fprintf(stderr, "opener %d: %s\n", i, tsr_status_message(op[i].s));
    CU_ASSERT_PTR_NULL(op[i].s);
    CU_ASSERT(op[i].no_compute);
    tsr_status_free(op[i].s);
  }

  /* The engine never takes the harness for a device that computes. */
  tsr_device_t *d = NULL;
  TSR_ASSERT_ERR(tsr_device_open(ctx, "xrt:shim=noop", &d), TSR_STATUS_UNAVAILABLE,
                 "computes nothing");
  CU_ASSERT_PTR_NULL(d);

  atomic_store(&stop_readers, true);
  for (int i = 0; i < 2; i++) pthread_join(readers[i], NULL);
  tsr_context_destroy(ctx);
  env_check_same(&before);
  for (size_t i = 0; i < N_VARS; i++) free(before.val[i]);
}

/* Plain xrt (a board) after the noop shim: refused by name, and still no
 * write to the environment. */
static void test_board_after_noop(void) {
  const char *why = NULL;
  if (!xrt_usable(&why)) {
    tsr_test_skip("%s", why);
    return;
  }
  env_snapshot_t before;
  env_take(&before);
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("xrt", &dev);
  CU_ASSERT_EQUAL(tsr_status_code(s), TSR_STATUS_UNAVAILABLE);
  if (s) fprintf(stderr, "expected: %s\n", tsr_status_message(s));
  CU_ASSERT_PTR_NULL(dev);
  tsr_status_free(s);
  env_check_same(&before);
  for (size_t i = 0; i < N_VARS; i++) free(before.val[i]);
}

int main(void) {
  /* What the caller set stays the caller's; start from none of XRT's own. */
  for (size_t i = 0; i < N_VARS; i++) unsetenv(xrt_vars[i]);
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("xrt_threads", NULL, NULL);
  CU_add_test(s, "four threads open xrt:shim=noop among running threads; environment unchanged",
              test_open_among_threads);
  CU_add_test(s, "plain xrt after the noop shim is UNAVAILABLE; environment unchanged",
              test_board_after_noop);
  return tsr_test_run_all();
}
