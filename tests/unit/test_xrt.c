/* test_xrt.c - the xrt backend on XRT's noop shim (xrt:shim=noop), a board
 * that is not there, and every environment in which XRT cannot be used.
 *
 * Each case runs in a forked child: XRT reads its environment and xrt.ini
 * once per process, and a case that let XRT abort must show up as a failure
 * (killed child), not take the test program down. A child exits 0 when its
 * checks pass, 77 when XRT is not installed here (skip), 1 otherwise. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver/tsr_regmap.h"

#include "driver/hal.h"
#include "tsr_test.h"
#include "driver/xrt/tsr_xclbin.h"
#include "driver/xrt/xrt_api.h"
#include "driver/xrt/xrt_backend.h"

static int failures;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "child %ld: %s:%d: check failed: %s\n", (long)getpid(), \
              __FILE__, __LINE__, #cond);                                    \
      failures++;                                                            \
    }                                                                        \
  } while (0)

/* Checks that `s` is an error with `code` whose message has `needle`;
 * frees it. */
static void check_err(tsr_status_t s, tsr_status_code_t code, const char *needle) {
  CHECK(s != TSR_OK);
  if (!s) return;
  fprintf(stderr, "child %ld: expected error: %s: %s\n", (long)getpid(),
          tsr_status_code_name(tsr_status_code(s)), tsr_status_message(s));
  CHECK(tsr_status_code(s) == code);
  CHECK(strstr(tsr_status_message(s), needle) != NULL);
  tsr_status_free(s);
}

/* Runs fn() in a child; returns its exit status or 128 + signal. */
static int in_child(int (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    failures = 0;
    _exit(fn());
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "child killed by signal %d: XRT ended the process\n", WTERMSIG(st));
    return 128 + WTERMSIG(st);
  }
  return WEXITSTATUS(st);
}

static void expect_child_ok(int (*fn)(void), const char *what) {
  int rc = in_child(fn);
  if (rc == 77) {
    tsr_test_skip("XRT is not installed here (libxrt_coreutil.so.2 does not load)");
    (void)what;
    return;
  }
  CU_ASSERT_EQUAL(rc, 0);
}

/* A clean environment: nothing of XRT's set by the caller (the test's own
 * child process, before any XRT call). */
static void clean_env(void) {
  unsetenv("XILINX_XRT");
  unsetenv("XCL_EMULATION_MODE");
  unsetenv("XRT_INI_PATH");
  unsetenv("TSR_XRT_LIB");
}

/* Whether XRT's library is here at all, without preparing anything (that
 * would fix the environment for the rest of the process). */
static bool xrt_installed(void) {
  void *h = dlopen("libxrt_coreutil.so.2", RTLD_NOW | RTLD_LOCAL);
  return h != NULL; /* stays loaded; the backend gets the same handle */
}

/* ---- the noop flow ------------------------------------------------------- */

static char log_path[512];

/* The driver calls XRT logged, in order; `want` entries must appear as a
 * subsequence. Returns the number of "xclExecBuf" lines (launches). */
static int check_log_sequence(void) {
  FILE *f = fopen(log_path, "r");
  CHECK(f != NULL);
  if (!f) return -1;
  static const char *const want[] = {
      "xclOpen(",        /* xrtDeviceOpen                               */
      "xclLoadXclbin(",  /* xrtDeviceLoadXclbinFile                     */
      "xclOpenContext(", /* xrtPLKernelOpen(Exclusive)                  */
      "xclAllocUserPtrBO(", /* xrtBOAlloc: the arena                    */
      "xclSyncBO(",      /* write: xrtBOWrite + xrtBOSync to device     */
      "xclExecBuf(",     /* xrtRunStart                                 */
      "xclCloseContext(", /* xrtKernelClose                             */
      "xclClose(",       /* xrtDeviceClose                              */
  };
  size_t k = 0;
  int execs = 0, opens = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "xclExecBuf(")) execs++;
    if (strstr(line, "DEBUG: xclOpen(")) opens++;
    if (k < sizeof want / sizeof want[0] && strstr(line, want[k])) k++;
  }
  fclose(f);
  if (k != sizeof want / sizeof want[0])
    fprintf(stderr, "child: runtime log %s: stopped before '%s'\n", log_path, want[k]);
  CHECK(k == sizeof want / sizeof want[0]);
  CHECK(opens >= 1);
  return execs;
}

static int child_noop_flow(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  /* XRT logs every driver call with verbosity 7. */
  char ini[600];
  snprintf(ini, sizeof ini, "%s/xrt.ini", tsr_test_tmpdir());
  FILE *f = fopen(ini, "w");
  CHECK(f != NULL);
  if (!f) return 1;
  fprintf(f, "[Runtime]\nruntime_log=%s\nverbosity=7\n", log_path);
  fclose(f);
  unlink(log_path);
  setenv("XRT_INI_PATH", ini, 1);

  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("xrt:shim=noop,inflight=4,mem=16M", &dev);
  if (s) fprintf(stderr, "child: open: %s\n", tsr_status_message(s));
  CHECK(s == TSR_OK);
  tsr_status_free(s);
  if (!dev) return 1;

  /* The environment is left as it was: the shim was loaded, not named. */
  CHECK(getenv("XCL_EMULATION_MODE") == NULL);
  CHECK(getenv("XILINX_XRT") == NULL);
  const char *ini_now = getenv("XRT_INI_PATH");
  CHECK(ini_now && !strcmp(ini_now, ini));

  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  CHECK(strstr(caps.name, "noop shim: no compute") != NULL);
  CHECK(!tsr_xrt_device_computes(dev));
  CHECK(caps.mem_size == 16u << 20);

  /* Argument offsets XRT reported == hw/regmap.def. */
  size_t n = 0;
  const tsr_regmap_arg_t *ra = tsr_regmap_args(&n);
  uint32_t offs[16];
  CHECK(tsr_xrt_device_arg_offsets(dev, offs, 16) == n);
  for (size_t i = 0; i < n; i++) CHECK(offs[i] == ra[i].offset);
  CHECK(offs[0] == TSR_ARG_MEM_BASE && offs[1] == TSR_ARG_MEM_SIZE &&
        offs[2] == TSR_ARG_RING && offs[3] == TSR_ARG_N_DESC);

  /* Buffers: write, sync, read back. */
  tsr_hal_buffer_t a, b, ring;
  CHECK(dev->vt->alloc(dev, 4096, 64, &a) == TSR_OK);
  CHECK(dev->vt->alloc(dev, 100000, 4096, &b) == TSR_OK);
  CHECK(dev->vt->alloc(dev, 4 * TSR_HW_DESC_BYTES, 64, &ring) == TSR_OK);
  CHECK(b.addr % 4096 == 0 && a.addr != b.addr);
  uint8_t src[100000], dst[100000];
  uint64_t seed = 7;
  for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)tsr_test_splitmix64(&seed);
  CHECK(dev->vt->write(dev, &b, 0, src, sizeof src) == TSR_OK);
  CHECK(dev->vt->write(dev, &a, 100, src, 64) == TSR_OK);
  memset(dst, 0, sizeof dst);
  CHECK(dev->vt->read(dev, &b, 0, dst, sizeof dst) == TSR_OK);
  CHECK(memcmp(src, dst, sizeof src) == 0);
  memset(dst, 0, 64);
  CHECK(dev->vt->read(dev, &a, 100, dst, 64) == TSR_OK);
  CHECK(memcmp(src, dst, 64) == 0);
  check_err(dev->vt->read(dev, &a, 4090, dst, 64), TSR_STATUS_OUT_OF_RANGE, "overruns");

  /* Descriptors (NOPs) and several runs in flight. */
  uint8_t desc[4 * TSR_HW_DESC_BYTES];
  for (int i = 0; i < 4; i++) {
    tsr_desc_t d = {.opcode = TSR_OP_NOP};
    tsr_desc_pack(desc + i * TSR_HW_DESC_BYTES, &d);
  }
  CHECK(dev->vt->write(dev, &ring, 0, desc, sizeof desc) == TSR_OK);
  uint64_t lo = a.addr, hi = a.addr + a.size;
  const tsr_hal_buffer_t *bufs[] = {&b, &ring};
  for (int i = 0; i < 2; i++) {
    if (bufs[i]->addr < lo) lo = bufs[i]->addr;
    if (bufs[i]->addr + bufs[i]->size > hi) hi = bufs[i]->addr + bufs[i]->size;
  }
  tsr_hal_command_t cmd = {.window_base = lo, .window_size = hi - lo, .ring = ring.addr,
                           .n_desc = 4};
  uint64_t fences[3];
  for (int i = 0; i < 3; i++) CHECK(dev->vt->submit(dev, &cmd, &fences[i]) == TSR_OK);
  CHECK(tsr_xrt_device_runs_in_flight(dev) == 3);
  tsr_hal_result_t res;
  for (int i = 2; i >= 0; i--) { /* out of order: earlier runs finish first */
    CHECK(dev->vt->wait(dev, fences[i], 5000000000ull, &res) == TSR_OK);
    CHECK(res.hw_status == TSR_HWERR_OK);
  }
  CHECK(tsr_xrt_device_runs_in_flight(dev) == 0);
  /* More than `inflight` submissions: the oldest are finished on the way. */
  uint64_t more[6];
  for (int i = 0; i < 6; i++) CHECK(dev->vt->submit(dev, &cmd, &more[i]) == TSR_OK);
  CHECK(tsr_xrt_device_runs_in_flight(dev) <= 4);
  for (int i = 0; i < 6; i++) CHECK(dev->vt->wait(dev, more[i], UINT64_MAX, NULL) == TSR_OK);

  /* A ring outside the window: refused the way the kernel refuses it. */
  tsr_hal_command_t bad = cmd;
  bad.ring = hi;
  uint64_t fb = 0;
  CHECK(dev->vt->submit(dev, &bad, &fb) == TSR_OK);
  CHECK(dev->vt->wait(dev, fb, 0, &res) == TSR_OK);
  CHECK(res.hw_status == TSR_HWERR_RING_RANGE);
  bad = cmd;
  bad.window_base = lo - 4096 * 1024;
  check_err(dev->vt->submit(dev, &bad, &fb), TSR_STATUS_OUT_OF_RANGE, "window");
  check_err(dev->vt->wait(dev, 999, 0, &res), TSR_STATUS_INVALID_ARGUMENT, "never issued");
  CHECK(dev->vt->submit(dev, &cmd, &fb) == TSR_OK);
  CHECK(dev->vt->reset(dev) == TSR_OK);

  dev->vt->free(dev, &a);
  dev->vt->free(dev, &b);
  dev->vt->free(dev, &ring);
  tsr_hal_close(dev);

  return failures ? 1 : 0;
}

static void test_noop_flow(void) {
  /* The path is fixed before the fork (tsr_test_tmpdir() is per process);
   * the log is read after the child exits, when XRT has flushed it. */
  snprintf(log_path, sizeof log_path, "%s/xrt-runtime.log", tsr_test_tmpdir());
  int rc = in_child(child_noop_flow);
  if (rc == 77) {
    tsr_test_skip("XRT is not installed here (libxrt_coreutil.so.2 does not load)");
    return;
  }
  CU_ASSERT_EQUAL(rc, 0);
  /* 3 + 6 + 1 launches reached XRT; the host-side RING_RANGE did not. */
  int execs = check_log_sequence();
  if (execs != 10) fprintf(stderr, "%d xclExecBuf lines in the runtime log, expected 10\n", execs);
  CU_ASSERT_EQUAL(execs, 10);
  CU_ASSERT_EQUAL(failures, 0);
}

/* A chain xclbin, with none of XRT's variables set (XRT's own shim loader
 * would throw "XILINX_XRT not set" and end the process), and the
 * environment still empty of them after the open. */
static int child_noop_chain(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("xrt:shim=noop,mode=chain", &dev);
  if (s) fprintf(stderr, "child: open: %s\n", tsr_status_message(s));
  CHECK(s == TSR_OK);
  tsr_status_free(s);
  if (!dev) return 1;
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  CHECK(strstr(caps.name, "noop") != NULL);
  CHECK(getenv("XRT_INI_PATH") == NULL && getenv("XILINX_XRT") == NULL &&
        getenv("XCL_EMULATION_MODE") == NULL);
  /* The generated xclbin is the chain variant and passes our reader. */
  tsr_xclbin_info_t *info = NULL;
  CHECK(tsr_xclbin_read_file(tsr_xrt_device_xclbin(dev), &info) == TSR_OK);
  if (info) {
    const tsr_xclbin_kernel_t *k = tsr_xclbin_find_kernel(info, NULL);
    CHECK(k && tsr_xclbin_kernel_ctrl(info, k) == TSR_XCLBIN_CTRL_CHAIN);
    tsr_xclbin_info_free(info);
  }
  tsr_hal_close(dev);
  return failures ? 1 : 0;
}

static void test_noop_chain(void) { expect_child_ok(child_noop_chain, "chain"); }

/* ---- environments where XRT must not be touched ------------------------- */

static int child_xilinx_xrt_usr(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  setenv("XILINX_XRT", "/usr", 1); /* XRT itself would abort on this */
  tsr_hal_device_t *dev = NULL;
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "XILINX_XRT='/usr'");
  CHECK(dev == NULL);
  return failures ? 1 : 0;
}

static int child_xilinx_xrt_bogus(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/no-such-xrt", tsr_test_tmpdir());
  setenv("XILINX_XRT", dir, 1);
  tsr_hal_device_t *dev = NULL;
  check_err(tsr_hal_open("xrt:shim=noop", &dev), TSR_STATUS_UNAVAILABLE, "lib/libxrt_noop.so.2");
  CHECK(dev == NULL);
  return failures ? 1 : 0;
}

/* Plain "xrt" is a board: without one it is UNAVAILABLE with the reason,
 * never XRT's noop shim; XCL_EMULATION_MODE=noop does not make it one
 * either. The noop shim still opens when asked for by name. */
static int child_no_board(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  if (access("/sys/bus/pci/drivers/xocl", F_OK) == 0) return 77; /* a board may be here */
  tsr_hal_device_t *dev = NULL;
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "no Xilinx board");
  CHECK(dev == NULL);
  check_err(tsr_hal_open("xrt:shim=board,mem=16M", &dev), TSR_STATUS_UNAVAILABLE,
            "xrt:shim=noop");
  setenv("XCL_EMULATION_MODE", "noop", 1);
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "xrt:shim=noop");
  unsetenv("XCL_EMULATION_MODE");
  tsr_status_t s = tsr_hal_open("xrt:shim=noop", &dev);
  if (s) fprintf(stderr, "child: open: %s\n", tsr_status_message(s));
  CHECK(s == TSR_OK);
  tsr_status_free(s);
  if (!dev) return 1;
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  CHECK(caps.flags & TSR_HAL_CAP_NO_COMPUTE);
  tsr_hal_close(dev);
  return failures ? 1 : 0;
}

static int child_library_missing(void) {
  clean_env();
  setenv("TSR_XRT_LIB", "/nonexistent/libxrt_coreutil.so.2", 1);
  tsr_hal_device_t *dev = NULL;
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "cannot load");
  CHECK(dev == NULL);
  /* And the environment was left alone. */
  CHECK(getenv("XILINX_XRT") == NULL && getenv("XCL_EMULATION_MODE") == NULL);
  return failures ? 1 : 0;
}

static int child_emulation_without_vitis(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  unsetenv("XILINX_VITIS");
  setenv("XCL_EMULATION_MODE", "sw_emu", 1); /* XRT would exit() or hang */
  tsr_hal_device_t *dev = NULL;
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "needs Vitis");
  setenv("XCL_EMULATION_MODE", "bogus", 1);
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "XCL_EMULATION_MODE");
  return failures ? 1 : 0;
}

/* XRT runs one shim per process: after the noop shim, a board is refused
 * and says why. */
static int child_one_shim(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("xrt:shim=noop", &dev);
  CHECK(s == TSR_OK);
  tsr_status_free(s);
  tsr_hal_close(dev);
  dev = NULL;
  check_err(tsr_hal_open("xrt", &dev), TSR_STATUS_UNAVAILABLE, "one shim per process");
  const tsr_xrt_api_t *x = NULL;
  check_err(tsr_xrt_api_get(TSR_XRT_SHIM_BOARD, &x), TSR_STATUS_UNAVAILABLE, "");
  CHECK(x == NULL);
  s = tsr_xrt_api_get(TSR_XRT_SHIM_NOOP, &x);
  CHECK(s == TSR_OK && x && !strcmp(x->mode, "noop") && strstr(x->shim_path, "libxrt_noop"));
  tsr_status_free(s);
  return failures ? 1 : 0;
}

static int child_bad_xclbin_and_options(void) {
  clean_env();
  if (!xrt_installed()) return 77;
  tsr_hal_device_t *dev = NULL;
  check_err(tsr_hal_open("xrt:colour=blue", &dev), TSR_STATUS_INVALID_ARGUMENT, "colour");
  check_err(tsr_hal_open("xrt:shim=emu", &dev), TSR_STATUS_INVALID_ARGUMENT, "shim");
  check_err(tsr_hal_open("xrt:inflight=0", &dev), TSR_STATUS_OUT_OF_RANGE, "inflight");
  /* An xclbin whose argument offsets are not the register map's. */
  uint8_t *d = NULL;
  size_t size = 0;
  CHECK(tsr_xclbin_build(NULL, &d, &size) == TSR_OK);
  if (!d) return 1;
  char *p = memmem(d, size, "offset=\"0x28\"", 13);
  CHECK(p != NULL);
  if (p) memcpy(p, "offset=\"0x30\"", 13);
  char path[600], spec[700];
  snprintf(path, sizeof path, "%s/moved.xclbin", tsr_test_tmpdir());
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(d, 1, size, f) == size);
  if (f) fclose(f);
  snprintf(spec, sizeof spec, "xrt:shim=noop,xclbin=%s", path);
  check_err(tsr_hal_open(spec, &dev), TSR_STATUS_FORMAT, "refusing");
  /* A file that is not an xclbin at all. */
  d[0] = 'X';
  f = fopen(path, "wb");
  CHECK(f && fwrite(d, 1, size, f) == size);
  if (f) fclose(f);
  check_err(tsr_hal_open(spec, &dev), TSR_STATUS_FORMAT, "bad magic");
  free(d);
  CHECK(dev == NULL);
  return failures ? 1 : 0;
}

static void test_xilinx_xrt_usr(void) { expect_child_ok(child_xilinx_xrt_usr, "XILINX_XRT=/usr"); }
static void test_xilinx_xrt_bogus(void) { expect_child_ok(child_xilinx_xrt_bogus, "bogus"); }
static void test_no_board(void) {
  int rc = in_child(child_no_board);
  if (rc == 77) {
    tsr_test_skip("XRT is not installed here, or a Xilinx board may be present");
    return;
  }
  CU_ASSERT_EQUAL(rc, 0);
}
static void test_library_missing(void) { CU_ASSERT_EQUAL(in_child(child_library_missing), 0); }
static void test_emulation(void) { expect_child_ok(child_emulation_without_vitis, "emu"); }
static void test_one_shim(void) { expect_child_ok(child_one_shim, "one shim"); }
static void test_bad_inputs(void) { expect_child_ok(child_bad_xclbin_and_options, "inputs"); }

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("xrt", NULL, NULL);
  CU_add_test(s, "noop flow: buffers, runs in flight, runtime log, offsets", test_noop_flow);
  CU_add_test(s, "noop with a chain xclbin and no XRT variables set", test_noop_chain);
  CU_add_test(s, "XILINX_XRT=/usr is UNAVAILABLE, not an abort", test_xilinx_xrt_usr);
  CU_add_test(s, "XILINX_XRT without the shims is UNAVAILABLE", test_xilinx_xrt_bogus);
  CU_add_test(s, "plain xrt without a board is UNAVAILABLE, never the noop shim", test_no_board);
  CU_add_test(s, "library missing is UNAVAILABLE", test_library_missing);
  CU_add_test(s, "sw_emu without Vitis is UNAVAILABLE", test_emulation);
  CU_add_test(s, "one shim per process", test_one_shim);
  CU_add_test(s, "bad options and xclbins are refused", test_bad_inputs);
  return tsr_test_run_all();
}
