/*
 * xrt_backend.c - backend "xrt": the tessera kernel on a Xilinx device
 * through XRT's native C API (loaded at run time, see xrt_api.h).
 *
 * open():  loads XRT and the shim asked for (xrt_api.h), opens device
 *          `index` in this process, loads the xclbin (option xclbin=, else the project's own, written from
 *          hw/regmap.def into the cache directory), opens the kernel and
 *          refuses it unless XRT reports every argument at the offset
 *          hw/regmap.def gives. Device memory is one buffer object (the
 *          "arena", option mem=) in the bank the kernel's pointer arguments
 *          connect to; alloc() sub-allocates it with devmem, so buffers keep
 *          fixed device addresses and weights stay resident.
 * submit(): one XRT run per command. Arguments are set with xrtRunSetArg in
 *          the order of the TSR_ARG rows: MEM_BASE and RING as sub-buffers of
 *          the arena (XRT passes their device addresses), MEM_SIZE and N_DESC
 *          as scalars. Runs start at once; up to `inflight` are queued in
 *          XRT, more wait for the oldest. A ring outside the window is
 *          answered on the host with RING_RANGE, exactly as the kernel's
 *          first check would, since XRT cannot pass such a pointer.
 * wait():  the shared command queue (driver/queue.h) polls: runs finish in
 *          order, each with xrtRunWaitFor in slices of at most 1 ms (the
 *          queue's lock is held only for a slice); after ap_done the
 *          kernel's STATUS, ERR_INDEX, DESC_DONE and counters are read with
 *          xrtKernelReadRegister when the CU is opened exclusively and
 *          readable. The status registers hold the last launch only, so on
 *          such a device launches are issued one at a time (inflight=1) to
 *          report every launch's status exactly.
 * Threads: every call is safe from any thread. Submits, polls and resets
 *          are serialized by the queue's lock; a submit that must wait for
 *          room in XRT (inflight) holds it until the oldest run ends.
 *          Opening never writes the process environment (no setenv) and
 *          never forks.
 *
 * No probe process. open() once forked a child that opened the device
 * first, so that an XRT abort would end the child. But the fork happened
 * in a process that already had threads (a context's workers, the
 * application's), and the child then called into XRT (malloc, C++ static
 * initialization, XRT's mutexes): after fork() in a multithreaded process
 * only async-signal-safe calls are allowed, so the child could deadlock on
 * a lock another thread held at the fork. A spawned helper (posix_spawn of
 * a fresh image) would be safe, but a library has no executable of its own
 * to spawn, and a probe in another process says little about this one. The
 * aborts it caught all come from XRT's shim loader, which throws past the
 * C API when XILINX_XRT is unset or lacks the shim; with the shim loaded by
 * xrt_api.c that loader never runs (a missing shim is a dlopen error), the
 * emulation shims that exit() without Vitis are refused before XRT runs,
 * no board means XRT is not touched at all, and XRT's C API turns every
 * other exception into a NULL handle or an error code. So XRT's own open
 * is called directly, in this process.
 *
 * XRT's noop shim is a test harness, not a device: it opens only when asked
 * for by name (xrt:shim=noop), never in place of a missing board (plain
 * "xrt" without a board bound to xocl is UNAVAILABLE with that reason). It
 * runs this whole host flow but computes nothing and refuses register
 * access: the device is named "xrt (noop shim: no compute)", its caps carry
 * TSR_HAL_CAP_NO_COMPUTE (the executor never gives it work),
 * tsr_xrt_device_computes() is false, and the results of its launches are
 * not results (desc_done stays 0). Real boards compute. sw_emu/hw_emu
 * (XCL_EMULATION_MODE) need Vitis and are not prepared here.
 *
 * Options ("xrt:key=value,..."):
 *   shim=board|noop  a board (default) or XRT's noop shim (a test harness)
 *   xclbin=PATH   xclbin to load (default: the project's, generated)
 *   kernel=NAME   kernel name in the xclbin (default tsr_kernel, or the only
 *                 kernel of a given xclbin)
 *   mode=hs|chain control protocol of the generated xclbin (default hs)
 *   mem=SIZE      device memory arena (default 256M; K/M/G suffixes)
 *   inflight=N    runs queued in XRT at once, 1..64 (default 4)
 *   clock=MHZ     kernel clock for the caps (default 300)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/kernel_model.h"

#include "driver/devmem.h"
#include "driver/hal_impl.h"
#include "driver/queue.h"
#include "base/status.h"
#include "tsr_xclbin.h"
#include "xrt_api.h"
#include "xrt_backend.h"

#define XRT_NAME "xrt"

/* What a started command holds in XRT (the queue entry's priv). */
typedef struct xrt_run {
  tsr_xrt_run_h run;      /* NULL once finished                          */
  tsr_xrt_bo_h win_bo;    /* sub-buffer for MEM_BASE (NULL: the arena)   */
  tsr_xrt_bo_h ring_bo;   /* sub-buffer for RING                         */
  bool counted;           /* counted in in_flight                        */
} xrt_run_t;

typedef struct xrt_device {
  tsr_hal_device_t base; /* must be first */
  const tsr_xrt_api_t *x;
  tsr_xrt_device_h dev;
  tsr_xrt_kernel_h kernel;
  tsr_xrt_bo_h arena;
  tsr_devmem_t *dm;
  uint64_t mem_base, mem_size; /* device addresses of the arena */
  bool addr_nominal;           /* the shim gave no real address (noop) */
  bool regs_readable;
  uint32_t ops; /* the kernel's opcodes (tsr_hw_ops), 0 while its registers are unread */
  bool computes;
  tsr_xclbin_ctrl_t ctrl;
  uint32_t rows, cols;
  double clock_hz;
  uint32_t inflight_max, in_flight;
  size_t n_args;
  uint32_t arg_offsets[16];
  char kernel_name[64];
  char xclbin[512];
  /* options */
  uint64_t opt_mem;
  uint32_t opt_inflight;
  tsr_xrt_shim_t opt_shim;
  tsr_xclbin_ctrl_t opt_mode;
  tsr_queue_t q; /* fences, completions, the lock */
} xrt_device_t;

static xrt_device_t *as_xrt(tsr_hal_device_t *d) { return (xrt_device_t *)d; }

/* ---- options ------------------------------------------------------------ */

/* What the option string sets that is not stored as given. */
typedef struct xrt_opts {
  char xclbin[512], kernel[64], mode[8], shim[8];
  uint64_t mem, inflight;
  double clock_mhz;
} xrt_opts_t;

static const tsr_opt_spec_t xrt_options[] = {
    TSR_OPT_ROW_STR(xrt_opts_t, shim, "shim", TSR_OPT_NONEMPTY,
                    "board (default: a board bound to xocl) or noop (XRT's noop shim, a "
                    "test harness that computes nothing)"),
    TSR_OPT_ROW_STR(xrt_opts_t, xclbin, "xclbin", TSR_OPT_NONEMPTY,
                    "xclbin to load (default: the project's, generated)"),
    TSR_OPT_ROW_STR(xrt_opts_t, kernel, "kernel", TSR_OPT_NONEMPTY,
                    "kernel name in the xclbin (default tsr_kernel, or its only kernel)"),
    TSR_OPT_ROW_STR(xrt_opts_t, mode, "mode", TSR_OPT_NONEMPTY,
                    "hs or chain: control protocol of the generated xclbin (default hs)"),
    TSR_OPT_ROW_U64(xrt_opts_t, mem, "mem", 1ull << 16, 1ull << 36,
                    "device memory arena bytes (default 256M; K/M/G suffixes)"),
    TSR_OPT_ROW_U64(xrt_opts_t, inflight, "inflight", 1, 64,
                    "runs queued in XRT at once (default 4)"),
    TSR_OPT_ROW_F64(xrt_opts_t, clock_mhz, "clock", 1, 5000,
                    "kernel clock in MHz for the caps (default 300)"),
};
#define XRT_N_OPTIONS (sizeof xrt_options / sizeof xrt_options[0])

static tsr_status_t parse_options(xrt_device_t *dev, const char *options) {
  xrt_opts_t o = {.mem = dev->opt_mem, .inflight = dev->opt_inflight,
                  .clock_mhz = dev->clock_hz / 1e6};
  snprintf(o.mode, sizeof o.mode, "%s", dev->opt_mode == TSR_XCLBIN_CTRL_CHAIN ? "chain" : "hs");
  snprintf(o.shim, sizeof o.shim, "%s", dev->opt_shim == TSR_XRT_SHIM_NOOP ? "noop" : "board");
  TSR_RETURN_IF(tsr_opts_parse(XRT_NAME, xrt_options, XRT_N_OPTIONS, options, &o));
  if (!strcmp(o.shim, "board")) dev->opt_shim = TSR_XRT_SHIM_BOARD;
  else if (!strcmp(o.shim, "noop")) dev->opt_shim = TSR_XRT_SHIM_NOOP;
  else return TSR_ERR(INVALID_ARGUMENT, "xrt: option shim='%s' is not board or noop", o.shim);
  if (!strcmp(o.mode, "hs")) dev->opt_mode = TSR_XCLBIN_CTRL_HS;
  else if (!strcmp(o.mode, "chain")) dev->opt_mode = TSR_XCLBIN_CTRL_CHAIN;
  else return TSR_ERR(INVALID_ARGUMENT, "xrt: option mode='%s' is not hs or chain", o.mode);
  if (o.xclbin[0]) snprintf(dev->xclbin, sizeof dev->xclbin, "%s", o.xclbin);
  if (o.kernel[0]) snprintf(dev->kernel_name, sizeof dev->kernel_name, "%s", o.kernel);
  dev->opt_mem = o.mem & ~(uint64_t)4095;
  dev->opt_inflight = (uint32_t)o.inflight;
  dev->clock_hz = o.clock_mhz * 1e6;
  return TSR_OK;
}

/* ---- commands ----------------------------------------------------------- */

static void release_run(xrt_device_t *dev, xrt_run_t *r) {
  const tsr_xrt_api_t *x = dev->x;
  if (r->run) x->runClose(r->run);
  if (r->ring_bo) x->boFree(r->ring_bo);
  if (r->win_bo) x->boFree(r->win_bo);
  r->run = r->ring_bo = r->win_bo = NULL;
  if (r->counted && dev->in_flight) dev->in_flight--;
  r->counted = false;
}

static uint64_t read_reg64(xrt_device_t *dev, uint32_t off, int *rc) {
  uint32_t lo = 0, hi = 0;
  *rc |= dev->x->kernelReadRegister(dev->kernel, off, &lo);
  *rc |= dev->x->kernelReadRegister(dev->kernel, off + 4, &hi);
  return (uint64_t)hi << 32 | lo;
}

/* The kernel's status and counters after ap_done (exclusive CU only). */
static tsr_status_t read_result(xrt_device_t *dev, tsr_hal_result_t *r) {
  memset(r, 0, sizeof *r);
  if (!dev->regs_readable) return TSR_OK; /* noop: nothing ran, nothing to read */
  int rc = 0;
  uint32_t v = 0;
  rc |= dev->x->kernelReadRegister(dev->kernel, TSR_STAT_STATUS, &v);
  r->hw_status = v;
  rc |= dev->x->kernelReadRegister(dev->kernel, TSR_STAT_ERR_INDEX, &v);
  r->err_index = v;
  rc |= dev->x->kernelReadRegister(dev->kernel, TSR_STAT_DESC_DONE, &v);
  r->desc_done = v;
  r->cycles = read_reg64(dev, TSR_STAT_CYC_BUSY, &rc);
  r->stall_cycles = read_reg64(dev, TSR_STAT_CYC_STALL, &rc);
  r->bytes_rd = read_reg64(dev, TSR_STAT_BYTES_RD, &rc);
  r->bytes_wr = read_reg64(dev, TSR_STAT_BYTES_WR, &rc);
  r->macs = read_reg64(dev, TSR_STAT_MACS, &rc);
  if (rc) return tsr_xrt_status(rc, "xrt: reading the kernel's status registers");
  return TSR_OK;
}

static const char *ert_name(int s) {
  switch (s) {
    case TSR_ERT_NEW: return "new";
    case TSR_ERT_QUEUED: return "queued";
    case TSR_ERT_RUNNING: return "running";
    case TSR_ERT_COMPLETED: return "completed";
    case TSR_ERT_ERROR: return "error";
    case TSR_ERT_ABORT: return "abort";
    case TSR_ERT_SUBMITTED: return "submitted";
    case TSR_ERT_TIMEOUT: return "timeout";
    case TSR_ERT_NORESPONSE: return "no response";
    default: return "unknown";
  }
}

/* Waits for command `fence` (STARTED) up to `timeout_ms` (0 = poll only)
 * and records its outcome in the queue. *done tells whether it ended. */
static tsr_status_t finish_run(xrt_device_t *dev, uint64_t fence, unsigned timeout_ms,
                               bool *done) {
  *done = true;
  tsr_queue_cmd_t *c = tsr_queue_cmd(&dev->q, fence);
  if (!c || c->state != TSR_QUEUE_STARTED || !c->priv) return TSR_OK;
  xrt_run_t *r = c->priv;
  const tsr_xrt_api_t *x = dev->x;
  /* xrtRunWaitFor takes milliseconds, and 0 means forever. */
  int st = timeout_ms ? x->runWaitFor(r->run, timeout_ms) : x->runState(r->run);
  if (st == TSR_ERT_COMPLETED) {
    tsr_hal_result_t res;
    tsr_status_t s = read_result(dev, &res);
    release_run(dev, r);
    if (s) tsr_queue_fail(&dev->q, fence, tsr_status_annotate(s, "xrt: command %" PRIu64, fence));
    else tsr_queue_complete(&dev->q, fence, &res);
    return TSR_OK;
  }
  if (st == TSR_ERT_ERROR || st == TSR_ERT_ABORT || st == TSR_ERT_TIMEOUT ||
      st == TSR_ERT_NORESPONSE || st <= 0 || st > 11) {
    release_run(dev, r);
    tsr_queue_fail(&dev->q, fence, TSR_ERR(DEVICE, "xrt: command %" PRIu64 " ended in XRT "
                                           "state %d (%s)", fence, st, ert_name(st)));
    return TSR_OK;
  }
  *done = false;
  c->aux[0] = (uint64_t)st; /* for the deadline message */
  return TSR_OK;
}

/* Queue hook: starts command `fence` as an XRT run. */
static tsr_status_t xrt_start(void *impl, tsr_queue_t *q, uint64_t fence, tsr_queue_cmd_t *c) {
  xrt_device_t *dev = impl;
  const tsr_xrt_api_t *x = dev->x;
  const tsr_hal_command_t *cmd = &c->cmd;
  if (!tsr_km_inside(cmd->window_base, cmd->window_size, dev->mem_base, dev->mem_size) ||
      cmd->window_size == 0)
    return TSR_ERR(OUT_OF_RANGE, "xrt: submit: window [0x%" PRIx64 ", +0x%" PRIx64 ") is empty "
                   "or not inside device memory [0x%" PRIx64 ", +0x%" PRIx64 ")",
                   cmd->window_base, cmd->window_size, dev->mem_base, dev->mem_size);
  /* Keep at most inflight_max runs in XRT: finish the oldest first (its
   * outcome is what a wait for that fence reports). */
  while (dev->in_flight >= dev->inflight_max) {
    uint64_t oldest = tsr_queue_oldest_pending(q);
    if (!oldest || oldest == fence) break;
    bool done = false;
    TSR_RETURN_IF(finish_run(dev, oldest, 0xFFFFFFFEu, &done));
  }
  /* The kernel's first check (kernel_model.h: RING_RANGE), answered here
   * because XRT can only pass pointers into buffers it knows. */
  uint64_t ring_len = (uint64_t)cmd->n_desc * TSR_HW_DESC_BYTES;
  if (cmd->ring % TSR_HW_DESC_BYTES ||
      !tsr_km_inside(cmd->ring, ring_len, cmd->window_base, cmd->window_size)) {
    tsr_hal_result_t res = {.hw_status = TSR_HWERR_RING_RANGE};
    tsr_queue_complete(q, fence, &res);
    return TSR_OK;
  }
  uint64_t win_off = cmd->window_base - dev->mem_base;
  uint64_t ring_off = cmd->ring - dev->mem_base;
  uint64_t ring_bo_len = ring_len ? ring_len : TSR_HW_DESC_BYTES;
  if (ring_bo_len > dev->mem_size - ring_off) ring_bo_len = dev->mem_size - ring_off;
  if (ring_bo_len == 0) { /* N_DESC 0 at the very end: nothing to run */
    tsr_queue_complete(q, fence, NULL);
    return TSR_OK;
  }
  xrt_run_t *r = calloc(1, sizeof *r);
  if (!r) return TSR_ERR(RESOURCE_EXHAUSTED, "xrt: submit: out of host memory");
  c->priv = r; /* released by the queue (xrt_release) if this fails */
  tsr_status_t s = TSR_OK;
  bool whole = win_off == 0 && cmd->window_size == dev->mem_size;
  if (!whole && !(r->win_bo = x->boSubAlloc(dev->arena, cmd->window_size, win_off)))
    s = tsr_xrt_status(errno, "xrt: submit: xrtBOSubAlloc for the window");
  if (!s && !(r->ring_bo = x->boSubAlloc(dev->arena, ring_bo_len, ring_off)))
    s = tsr_xrt_status(errno, "xrt: submit: xrtBOSubAlloc for the ring");
  if (!s && !(r->run = x->runOpen(dev->kernel)))
    s = tsr_xrt_status(errno, "xrt: submit: xrtRunOpen");
  /* Arguments in the order of the TSR_ARG rows. Scalars are passed as
   * 64-bit values: XRT reads scalar varargs as size_t. */
  size_t n = 0;
  const tsr_regmap_arg_t *ra = tsr_regmap_args(&n);
  for (size_t i = 0; !s && i < n; i++) {
    int rc;
    switch (ra[i].offset) {
      case TSR_ARG_MEM_BASE:
        rc = x->runSetArg(r->run, (int)i, r->win_bo ? r->win_bo : dev->arena);
        break;
      case TSR_ARG_MEM_SIZE:
        rc = x->runSetArg(r->run, (int)i, (uint64_t)cmd->window_size);
        break;
      case TSR_ARG_RING:
        rc = x->runSetArg(r->run, (int)i, r->ring_bo);
        break;
      case TSR_ARG_N_DESC:
        rc = x->runSetArg(r->run, (int)i, (uint64_t)cmd->n_desc);
        break;
      default:
        s = TSR_ERR(INTERNAL, "xrt: hw/regmap.def argument '%s' has no value in this "
                    "backend", ra[i].name);
        continue;
    }
    if (rc) s = tsr_xrt_status(rc, "xrt: submit: xrtRunSetArg(%zu, %s)", i, ra[i].name);
  }
  if (!s) {
    int rc = x->runStart(r->run);
    if (rc) s = tsr_xrt_status(rc, "xrt: submit: xrtRunStart");
  }
  if (s) return s;
  c->state = TSR_QUEUE_STARTED;
  r->counted = true;
  dev->in_flight++;
  return TSR_OK;
}

/* Queue hook: runs of one CU finish in order, so finishing earlier ones
 * first keeps their results (and the registers they are read from) in
 * step; each poll waits at most 1 ms in XRT. */
static tsr_status_t xrt_poll(void *impl, tsr_queue_t *q, uint64_t fence, uint64_t budget_ns,
                             bool *idle) {
  xrt_device_t *dev = impl;
  uint64_t f = tsr_queue_oldest_pending(q);
  if (!f || f > fence) {
    *idle = true;
    return TSR_OK;
  }
  bool done = false;
  TSR_RETURN_IF(finish_run(dev, f, budget_ns >= 1000000 ? 1 : 0, &done));
  *idle = !done && budget_ns < 1000000; /* a 1 ms wait in XRT was the pause */
  return TSR_OK;
}

static void xrt_note(void *impl, tsr_queue_t *q, uint64_t fence, char *buf, size_t cap) {
  const tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (c && c->state == TSR_QUEUE_STARTED && c->aux[0])
    snprintf(buf, cap, " (XRT state %s)", ert_name((int)c->aux[0]));
}

/* Queue hook: XRT's C API cannot abort a run: let queued runs drain
 * (bounded), then forget them (the queue reports them aborted). A run that
 * never completes means a hung kernel. */
static tsr_status_t xrt_reset_hook(void *impl, tsr_queue_t *q) {
  xrt_device_t *dev = impl;
  tsr_status_t first = TSR_OK;
  for (uint64_t f = tsr_queue_oldest_pending(q); f && f <= tsr_queue_last_fence(q); f++) {
    tsr_queue_cmd_t *c = tsr_queue_cmd(q, f);
    if (!c || c->state != TSR_QUEUE_STARTED || !c->priv) continue;
    xrt_run_t *r = c->priv;
    int st = dev->x->runWaitFor(r->run, 5000);
    if (st != TSR_ERT_COMPLETED && st != TSR_ERT_ERROR && st != TSR_ERT_ABORT) {
      first = tsr_status_join(first, TSR_ERR(DEADLINE_EXCEEDED, "xrt: reset: command %" PRIu64
                                             " does not finish (XRT state %s); reload the "
                                             "xclbin", f, ert_name(st)));
      continue;
    }
    tsr_queue_abort(q, f);
  }
  return first;
}

static void xrt_release(void *impl, tsr_queue_cmd_t *c) {
  release_run(impl, c->priv);
  free(c->priv);
}

static const tsr_queue_ops_t xrt_queue_ops = {
    .start = xrt_start,
    .poll = xrt_poll,
    .reset = xrt_reset_hook,
    .release = xrt_release,
    .pending_note = xrt_note,
};

static tsr_status_t xrt_submit(tsr_hal_device_t *d, const tsr_hal_command_t *cmd,
                               uint64_t *out_fence) {
  return tsr_queue_submit(&as_xrt(d)->q, cmd, out_fence);
}

static tsr_status_t xrt_wait(tsr_hal_device_t *d, uint64_t fence, uint64_t timeout_ns,
                             tsr_hal_result_t *out) {
  return tsr_queue_wait(&as_xrt(d)->q, fence, timeout_ns, out);
}

static tsr_status_t xrt_reset(tsr_hal_device_t *d) { return tsr_queue_reset(&as_xrt(d)->q); }

/* ---- memory ------------------------------------------------------------- */

static tsr_status_t xrt_alloc(tsr_hal_device_t *d, uint64_t size, uint64_t align,
                              tsr_hal_buffer_t *out) {
  return tsr_devmem_buffer_alloc(as_xrt(d)->dm, XRT_NAME, size, align, out);
}

static void xrt_free(tsr_hal_device_t *d, tsr_hal_buffer_t *buf) {
  tsr_devmem_buffer_free(as_xrt(d)->dm, buf);
}

static tsr_status_t xrt_write(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf, uint64_t offset,
                              const void *src, size_t n) {
  xrt_device_t *dev = as_xrt(d);
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, XRT_NAME, buf, offset, n, "write"));
  if (!n) return TSR_OK;
  size_t at = (size_t)(buf->addr - dev->mem_base + offset);
  int rc = dev->x->boWrite(dev->arena, src, n, at);
  if (rc) return tsr_xrt_status(rc, "xrt: write: xrtBOWrite of %zu bytes at 0x%" PRIx64, n,
                                buf->addr + offset);
  rc = dev->x->boSync(dev->arena, TSR_XRT_SYNC_TO_DEVICE, n, at);
  if (rc) return tsr_xrt_status(rc, "xrt: write: xrtBOSync to device, %zu bytes at 0x%" PRIx64,
                                n, buf->addr + offset);
  return TSR_OK;
}

static tsr_status_t xrt_read(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf, uint64_t offset,
                             void *dst, size_t n) {
  xrt_device_t *dev = as_xrt(d);
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, XRT_NAME, buf, offset, n, "read"));
  if (!n) return TSR_OK;
  size_t at = (size_t)(buf->addr - dev->mem_base + offset);
  int rc = dev->x->boSync(dev->arena, TSR_XRT_SYNC_FROM_DEVICE, n, at);
  if (rc) return tsr_xrt_status(rc, "xrt: read: xrtBOSync from device, %zu bytes at 0x%" PRIx64,
                                n, buf->addr + offset);
  rc = dev->x->boRead(dev->arena, dst, n, at);
  if (rc) return tsr_xrt_status(rc, "xrt: read: xrtBORead of %zu bytes at 0x%" PRIx64, n,
                                buf->addr + offset);
  return TSR_OK;
}

/* ---- open / close ------------------------------------------------------- */

static void xrt_close(tsr_hal_device_t *d) {
  xrt_device_t *dev = as_xrt(d);
  if (!dev) return;
  if (dev->x && dev->q.ready) {
    /* Runs must be finished before their buffers and the kernel go. */
    tsr_queue_lock(&dev->q);
    for (uint64_t f = tsr_queue_oldest_pending(&dev->q); f && f <= tsr_queue_last_fence(&dev->q);
         f++) {
      bool done = false;
      tsr_status_free(finish_run(dev, f, 5000, &done));
    }
    tsr_queue_unlock(&dev->q);
  }
  tsr_queue_destroy(&dev->q); /* releases the runs left */
  if (dev->x) {
    if (dev->arena) dev->x->boFree(dev->arena);
    if (dev->kernel) dev->x->kernelClose(dev->kernel);
    if (dev->dev) dev->x->deviceClose(dev->dev);
  }
  tsr_devmem_destroy(dev->dm);
  free(dev);
}

/* Writes the project's xclbin into the cache directory (named by its
 * content, so concurrent processes agree) and returns its path. */
static tsr_status_t default_xclbin(xrt_device_t *dev, char *path, size_t cap) {
  tsr_xclbin_write_opts_t o;
  tsr_xclbin_write_opts_init(&o);
  o.ctrl = dev->opt_mode;
  if (dev->kernel_name[0]) o.kernel_name = dev->kernel_name;
  uint8_t *data = NULL;
  size_t size = 0;
  TSR_RETURN_IF_ERROR(tsr_xclbin_build(&o, &data, &size), "xrt: building the xclbin");
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ull;
  free(data);
  if ((size_t)snprintf(path, cap, "%s/tessera-%s-%s-%016" PRIx64 ".xclbin", dev->x->cache_dir,
                       o.kernel_name, o.ctrl == TSR_XCLBIN_CTRL_CHAIN ? "chain" : "hs", h) >= cap)
    return TSR_ERR(INVALID_ARGUMENT, "xrt: cache directory path too long");
  if (access(path, R_OK) == 0) return TSR_OK;
  TSR_RETURN_IF_ERROR(tsr_xclbin_write_file(&o, path), "xrt: writing the xclbin");
  return TSR_OK;
}

static tsr_status_t open_device(xrt_device_t *dev, unsigned index) {
  const tsr_xrt_api_t *x = dev->x;

  /* The xclbin: validated by our reader and held to hw/regmap.def before
   * XRT sees it (XRT itself checks little beyond the magic). */
  if (!dev->xclbin[0]) TSR_RETURN_IF(default_xclbin(dev, dev->xclbin, sizeof dev->xclbin));
  tsr_xclbin_info_t *info = NULL;
  TSR_RETURN_IF_ERROR(tsr_xclbin_read_file(dev->xclbin, &info), "xrt");
  const tsr_xclbin_kernel_t *k =
      tsr_xclbin_find_kernel(info, dev->kernel_name[0] ? dev->kernel_name : NULL);
  if (!k && !dev->kernel_name[0]) k = tsr_xclbin_find_kernel(info, TSR_XCLBIN_KERNEL_NAME);
  if (!k) {
    tsr_status_t s = TSR_ERR(NOT_FOUND, "xrt: xclbin '%s' has no kernel '%s' (%zu kernels)",
                             dev->xclbin, dev->kernel_name[0] ? dev->kernel_name
                                                              : TSR_XCLBIN_KERNEL_NAME,
                             info->n_kernels);
    tsr_xclbin_info_free(info);
    return s;
  }
  snprintf(dev->kernel_name, sizeof dev->kernel_name, "%s", k->name);
  tsr_status_t s = tsr_xclbin_check_regmap(k);
  if (s) {
    tsr_xclbin_info_free(info);
    return tsr_status_annotate(s, "xrt: refusing xclbin '%s'", dev->xclbin);
  }
  dev->ctrl = tsr_xclbin_kernel_ctrl(info, k);
  uint64_t bank_base = 0;
  for (size_t i = 0; i < info->n_conn; i++)
    if (info->conn[i].arg_index == 0) bank_base = info->mem[info->conn[i].mem_index].base;
  tsr_xclbin_info_free(info);

  errno = 0;
  dev->dev = x->deviceOpen(index);
  if (!dev->dev) {
    tsr_status_t e = tsr_xrt_status(errno, "xrt: xrtDeviceOpen(%u) (mode %s)", index, x->mode);
    tsr_status_t u = TSR_ERR(UNAVAILABLE, "%s", tsr_status_message(e));
    tsr_status_free(e);
    return u;
  }
  int rc = x->deviceLoadXclbinFile(dev->dev, dev->xclbin);
  if (rc) return tsr_xrt_status(rc, "xrt: xrtDeviceLoadXclbinFile('%s')", dev->xclbin);
  unsigned char uuid[16];
  rc = x->deviceGetXclbinUUID(dev->dev, uuid);
  if (rc) return tsr_xrt_status(rc, "xrt: xrtDeviceGetXclbinUUID");
  /* Exclusive access lets the host read the status registers; fall back
   * to a shared CU if another process holds it. */
  errno = 0;
  dev->kernel = x->plKernelOpenExclusive(dev->dev, uuid, dev->kernel_name);
  if (!dev->kernel) dev->kernel = x->plKernelOpen(dev->dev, uuid, dev->kernel_name);
  if (!dev->kernel)
    return tsr_xrt_status(errno, "xrt: xrtPLKernelOpen('%s')", dev->kernel_name);

  /* The offsets XRT will write the arguments to must be the register map's. */
  size_t n = 0;
  const tsr_regmap_arg_t *ra = tsr_regmap_args(&n);
  if (n > sizeof dev->arg_offsets / sizeof dev->arg_offsets[0])
    return TSR_ERR(INTERNAL, "xrt: %zu kernel arguments is more than this backend keeps", n);
  dev->n_args = n;
  int grp = -1;
  for (size_t i = 0; i < n; i++) {
    dev->arg_offsets[i] = x->kernelArgOffset(dev->kernel, (int)i);
    if (dev->arg_offsets[i] != ra[i].offset)
      return TSR_ERR(FORMAT, "xrt: refusing kernel '%s': XRT places argument %zu (%s) at "
                     "offset 0x%x, hw/regmap.def at 0x%x", dev->kernel_name, i, ra[i].name,
                     dev->arg_offsets[i], ra[i].offset);
    if (!ra[i].is_ptr) continue;
    int g = x->kernelArgGroupId(dev->kernel, (int)i);
    if (g < 0) return tsr_xrt_status(g, "xrt: xrtKernelArgGroupId(%zu, %s)", i, ra[i].name);
    if (grp >= 0 && g != grp)
      return TSR_ERR(UNIMPLEMENTED, "xrt: kernel '%s' connects its pointer arguments to "
                     "different memory banks (%d and %d); one bank is supported",
                     dev->kernel_name, grp, g);
    grp = g;
  }
  if (grp < 0) grp = 0;

  /* The arena: all device memory the HAL hands out. */
  errno = 0;
  dev->arena = x->boAlloc(dev->dev, dev->opt_mem, 0 /* XRT_BO_FLAGS_NONE */, (uint32_t)grp);
  if (!dev->arena)
    return tsr_xrt_status(errno ? errno : ENOMEM, "xrt: xrtBOAlloc of %" PRIu64 " bytes in bank %d",
                          dev->opt_mem, grp);
  uint64_t addr = x->boAddress(dev->arena);
  dev->mem_size = dev->opt_mem;
  /* The noop shim hands out a placeholder address (0xdeadbeef): use the
   * bank's base from the xclbin as the nominal device address. */
  dev->addr_nominal = addr % 4096 != 0 || addr == 0 || addr > (1ull << 62);
  dev->mem_base = dev->addr_nominal ? (bank_base ? bank_base : 0x4000000000ull) : addr;
  TSR_RETURN_IF(tsr_devmem_create(dev->mem_base, dev->mem_size, &dev->dm));

  dev->computes = strcmp(x->mode, "noop") != 0;
  if (dev->computes) {
    uint32_t info_reg = 0;
    if (x->kernelReadRegister(dev->kernel, TSR_STAT_HW_INFO, &info_reg) == 0) {
      dev->regs_readable = true;
      if (info_reg & 0xFF) dev->rows = info_reg & 0xFF;
      if (info_reg >> 8 & 0xFF) dev->cols = info_reg >> 8 & 0xFF;
      uint32_t ops = 0; /* the opcodes the kernel runs */
      if (x->kernelReadRegister(dev->kernel, TSR_STAT_HW_OPS, &ops) != 0) ops = 0;
      dev->ops = tsr_hw_ops(info_reg, ops);
    }
  }
  dev->inflight_max = dev->regs_readable ? 1 : dev->opt_inflight;
  return TSR_OK;
}

static tsr_status_t xrt_open(const tsr_hal_open_params_t *params, tsr_hal_device_t **out) {
  *out = NULL;
  int index = params ? params->index : 0;
  if (index < 0) return TSR_ERR(INVALID_ARGUMENT, "xrt: device index %d", index);
  xrt_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return TSR_ERR(RESOURCE_EXHAUSTED, "xrt: out of host memory");
  dev->base.vt = &tsr_hal_xrt_vtable;
  dev->opt_mem = 256ull << 20;
  dev->opt_inflight = 4;
  dev->opt_mode = TSR_XCLBIN_CTRL_HS;
  dev->clock_hz = 300e6;
  dev->rows = dev->cols = 16;
  tsr_status_t s = parse_options(dev, params ? params->options : NULL);
  if (!s) s = tsr_xrt_api_get(dev->opt_shim, &dev->x);
  tsr_queue_config_t qc = {.name = XRT_NAME, .ops = &xrt_queue_ops, .impl = dev};
  if (!s) s = tsr_queue_init(&dev->q, &qc);
  if (!s) s = open_device(dev, (unsigned)index);
  if (s) {
    xrt_close(&dev->base);
    return s;
  }
  *out = &dev->base;
  return TSR_OK;
}

static void xrt_query_caps(tsr_hal_device_t *d, tsr_hal_caps_t *out) {
  xrt_device_t *dev = as_xrt(d);
  memset(out, 0, sizeof *out);
  if (!dev->computes)
    snprintf(out->name, sizeof out->name, "xrt (noop shim: no compute)");
  else
    snprintf(out->name, sizeof out->name, "xrt (%s, %s, %ux%u)", dev->x->mode,
             tsr_xclbin_ctrl_name(dev->ctrl), dev->rows, dev->cols);
  out->array_rows = dev->rows;
  out->array_cols = dev->cols;
  out->max_dim = TSR_HW_MAX_DIM;
  out->mem_size = dev->mem_size;
  out->clock_hz = dev->clock_hz;
  out->mem_bytes_per_cycle = 64;
  tsr_hal_caps_pcie_defaults(out); /* a PCIe board through XRT */
  out->ops = tsr_hw_ops(0, 0) | dev->ops;
  if (!dev->computes) out->flags |= TSR_HAL_CAP_NO_COMPUTE;
}

/* ---- extras (xrt_backend.h) -------------------------------------------- */

size_t tsr_xrt_device_arg_offsets(tsr_hal_device_t *d, uint32_t *out, size_t cap) {
  xrt_device_t *dev = as_xrt(d);
  for (size_t i = 0; i < dev->n_args && i < cap; i++) out[i] = dev->arg_offsets[i];
  return dev->n_args;
}

bool tsr_xrt_device_computes(tsr_hal_device_t *d) { return as_xrt(d)->computes; }

const char *tsr_xrt_device_xclbin(tsr_hal_device_t *d) { return as_xrt(d)->xclbin; }

uint32_t tsr_xrt_device_runs_in_flight(tsr_hal_device_t *d) {
  xrt_device_t *dev = as_xrt(d);
  tsr_queue_lock(&dev->q);
  uint32_t n = dev->in_flight;
  tsr_queue_unlock(&dev->q);
  return n;
}

const tsr_hal_vtable_t tsr_hal_xrt_vtable = {
    .name = XRT_NAME,
    .open = xrt_open,
    .close = xrt_close,
    .query_caps = xrt_query_caps,
    .alloc = xrt_alloc,
    .free = xrt_free,
    .write = xrt_write,
    .read = xrt_read,
    .submit = xrt_submit,
    .wait = xrt_wait,
    .reset = xrt_reset,
    .options = xrt_options,
    .n_options = XRT_N_OPTIONS,
};
