/*
 * sim_backend.c - backend "sim": the Verilated RTL (sim/tsr_sim.h) as a
 * device.
 *
 * The RTL library is loaded with dlopen, so libtessera needs neither
 * Verilator nor libstdc++; a missing library makes open() fail with
 * UNAVAILABLE and the paths tried. Where it is looked for:
 *   1. $TSR_RTL_LIB, if set (and only there);
 *   2. ../lib/libtessera_rtl.so next to the object holding this code (the
 *      shared libtessera in build/lib, or the executable in build/bin),
 *      then next to /proc/self/exe, then the same directory as the object.
 * The library is never unloaded: Verilator keeps process-wide state.
 *
 * The host drives the kernel exactly as XRT would: program MEM_BASE,
 * MEM_SIZE, RING, N_DESC through AXI4-Lite writes, set ap_start, run the
 * clock until ap_done, clear the interrupt, then read STATUS, ERR_INDEX,
 * DESC_DONE and the performance counters. Launches queue in the shared
 * command queue (driver/queue.h) and the next starts when the previous
 * completes; time only advances inside wait(), whose polls run the clock a
 * slice at a time (from 1024 cycles, sized to a few ms of wall time, at most
 * 2^20 cycles) and honour both the wall-clock timeout and a budget of
 * simulated cycles per launch. Buffer
 * copies use the backdoor memory functions (no cycles), like a DMA outside
 * the kernel.
 *
 * Threads: the Verilated model is single-threaded, so every call into it
 * (a poll's slice of cycles, a copy, a register access) runs under the
 * queue's lock; calls from several threads are safe and take turns, a
 * slice at a time.
 *
 * Options ("sim:key=value,..."):
 *   latency=CYC     memory read latency (library default if absent)
 *   bw=BYTES        memory read bytes per cycle
 *   outstanding=N   read bursts in flight the memory accepts
 *   mem=SIZE        device memory bytes; base=ADDR its first address
 *   clock=MHZ       stated kernel clock for projections (default 300)
 *   max_cycles=N    simulated-cycle budget per launch (default 2^40)
 *   waves=FILE      write an FST waveform; wave_start=, wave_end= window
 *                   (cycles), wave_depth= hierarchy depth
 *   coverage=FILE   coverage data written at close (coverage build)
 *   board=NAME      a board profile (driver/board.h): its clock, one memory
 *                   channel's bytes per cycle and latency, its link and
 *                   launch costs (the options above still override); the
 *                   array is the RTL library's as built, the device memory
 *                   the library's default unless mem= says otherwise
 * Fault injection, for the runtime's fallback tests (N counts launches from
 * 1 since open, as fences do):
 *   fail=N          launch N is programmed with a ring address outside its
 *                   window, so the RTL itself refuses it (RING_RANGE)
 *   hang=N          launch N is programmed but ap_start is never raised:
 *                   wait() runs into its timeout until a reset
 *   lost_at=N       from launch N on, every call fails with UNAVAILABLE, as
 *                   a board that fell off the bus
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/kernel_model.h"

#include "../../sim/tsr_sim.h"
#include "base/dl.h"
#include "driver/board.h"
#include "driver/devmem.h"
#include "driver/hal_impl.h"
#include "driver/queue.h"
#include "base/status.h"

#define SIM_NAME "sim"
#define SIM_LIB_FILE "libtessera_rtl.so"


/* The edge where the library's negative return codes become statuses. */
#define SIM_CHECK(expr, ...)                                                  \
  do {                                                                        \
    int sim_rc_ = (expr);                                                     \
    if (sim_rc_ < 0)                                                          \
      return tsr_status_annotate(TSR_ERR(DEVICE, "RTL library returned %d", sim_rc_), \
                                 "sim: " __VA_ARGS__);                        \
  } while (0)

/* A started command keeps the simulator cycle of its ap_start in aux[0],
 * and what fault injection makes of it in aux[1] (SIM_FAULT_*). */
#define START_CYCLE aux[0]
#define FAULT aux[1]
#define SIM_FAULT_FAIL 1u
#define SIM_FAULT_HANG 2u
/* Cycles a poll runs a queue-mode launch between looks at DESC_DONE: from
 * the first after a doorbell, doubling up to the last (a ring of a decode
 * step is a few hundred cycles; the simulator should not run far past it). */
#define SIM_QUEUE_SLICE_FIRST 128u
#define SIM_QUEUE_SLICE 4096u

typedef struct sim_device {
  tsr_hal_device_t base; /* must be first */
  tsr_sim_api_t api;
  tsr_sim_t *sim;
  tsr_sim_config_t cfg;
  char wave_path[512], coverage_path[512], lib_path[PATH_MAX];
  tsr_devmem_t *dm;
  uint32_t rows, cols;
  uint32_t ops; /* HW_OPS of the RTL (interface version 3), or NOP and GEMM */
  double clock_hz;
  uint64_t max_cycles;
  tsr_queue_t q;   /* fences, completions, and the lock of the model */
  uint64_t chunk;  /* cycles the next poll runs (grows per launch)   */
  uint64_t qchunk; /* queue mode: cycles the next poll runs (grows per ring) */
  uint64_t fail_at, hang_at, lost_at; /* fault injection, 0 = never */
  uint64_t subs;   /* submissions (launches, doorbells) so far, under the lock */
  bool queue_hw;   /* the RTL runs queue mode (HW_FEAT, interface version 4) */
  int queue_opt;   /* option queue=: -1 absent, else 0 or 1               */
  bool queue;      /* queue mode offered to the host                     */
  atomic_bool lost;
  tsr_board_t board; /* option board=; board.name[0] == 0 when none */
} sim_device_t;

static tsr_status_t lost_status(void) {
  return TSR_ERR(UNAVAILABLE, "sim: device lost (fault injection option 'lost_at')");
}

static sim_device_t *as_sim(tsr_hal_device_t *d) { return (sim_device_t *)d; }

/* Appends "dir/../lib/FILE" and "dir/FILE" candidates for `file_path`. */
static void add_candidates_near(const char *file_path, char cands[][PATH_MAX], int *n,
                                int max) {
  char dir[PATH_MAX - 64];
  if (strlen(file_path) >= sizeof dir) return;
  snprintf(dir, sizeof dir, "%s", file_path);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = '\0';
  char paths[2][PATH_MAX];
  snprintf(paths[0], PATH_MAX, "%s/../lib/%s", dir, SIM_LIB_FILE);
  snprintf(paths[1], PATH_MAX, "%s/%s", dir, SIM_LIB_FILE);
  for (int p = 0; p < 2; p++) {
    bool seen = false;
    for (int i = 0; i < *n; i++) seen = seen || !strcmp(cands[i], paths[p]);
    if (!seen && *n < max) memcpy(cands[(*n)++], paths[p], PATH_MAX);
  }
}

/* Loads the RTL library; on failure the message lists every path tried. */
static tsr_status_t load_library(sim_device_t *dev, void **out_handle) {
  *out_handle = NULL;
  enum { MAX_CANDS = 6 };
  char cands[MAX_CANDS][PATH_MAX];
  int n = 0;
  const char *env = getenv("TSR_RTL_LIB");
  if (env && *env) {
    snprintf(cands[n++], PATH_MAX, "%s", env);
  } else {
    Dl_info info;
    if (dladdr((void *)&load_library, &info) && info.dli_fname && info.dli_fname[0] == '/')
      add_candidates_near(info.dli_fname, cands, &n, MAX_CANDS);
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
      exe[len] = '\0';
      add_candidates_near(exe, cands, &n, MAX_CANDS);
    }
  }
  const char *paths[MAX_CANDS];
  for (int i = 0; i < n; i++) paths[i] = cands[i];
  size_t which = 0;
  TSR_RETURN_IF(tsr_dl_open(SIM_NAME, paths, (size_t)n, RTLD_NOW | RTLD_LOCAL,
                            env && *env ? "from TSR_RTL_LIB"
                                        : "build it with `make rtl`, or set TSR_RTL_LIB",
                            out_handle, &which));
  snprintf(dev->lib_path, sizeof dev->lib_path, "%s", cands[which]);
  return TSR_OK;
}

static tsr_status_t load_api(sim_device_t *dev) {
  void *h = NULL;
  TSR_RETURN_IF(load_library(dev, &h));
  tsr_sim_api_t *a = &dev->api;
  const char *missing = tsr_sim_api_resolve(h, dlsym, a);
  if (missing)
    return TSR_ERR(UNAVAILABLE, "sim: %s lacks symbol %s (stale build?)", dev->lib_path, missing);
  int v = a->abi_version();
  if (v != TSR_SIM_ABI_VERSION)
    return TSR_ERR(UNAVAILABLE, "sim: %s has ABI version %d, this driver speaks %d",
                   dev->lib_path, v, TSR_SIM_ABI_VERSION);
  return TSR_OK;
}

/* What the option string sets; defaults come from the library's config
 * and sim_open. */
typedef struct sim_opts {
  uint64_t latency, bw, outstanding, mem, base, max_cycles, wave_start, wave_end, wave_depth;
  uint64_t fail, hang, lost_at, queue;
  double clock_mhz;
  char waves[512], coverage[512], board[256];
} sim_opts_t;

static const tsr_opt_spec_t sim_options[] = {
    TSR_OPT_ROW_U64(sim_opts_t, latency, "latency", 0, 100000,
                    "memory read latency in cycles (library default if absent)"),
    TSR_OPT_ROW_U64(sim_opts_t, bw, "bw", 1, 4096, "memory read bytes per cycle"),
    TSR_OPT_ROW_U64(sim_opts_t, outstanding, "outstanding", 1, 1024,
                    "read bursts in flight the memory accepts"),
    TSR_OPT_ROW_U64(sim_opts_t, mem, "mem", 4096, 1ull << 36,
                    "device memory bytes (K/M/G suffixes)"),
    TSR_OPT_ROW_U64(sim_opts_t, base, "base", 0, 1ull << 62,
                    "device address of the first byte, 4096-aligned"),
    TSR_OPT_ROW_F64(sim_opts_t, clock_mhz, "clock", 1, 5000,
                    "stated kernel clock in MHz for projections (default 300)"),
    TSR_OPT_ROW_U64(sim_opts_t, max_cycles, "max_cycles", 1, UINT64_MAX,
                    "simulated-cycle budget per launch (default 2^40)"),
    TSR_OPT_ROW_STR(sim_opts_t, waves, "waves", TSR_OPT_NONEMPTY,
                    "write an FST waveform to this file"),
    TSR_OPT_ROW_U64(sim_opts_t, wave_start, "wave_start", 0, UINT64_MAX,
                    "first cycle of the waveform window"),
    TSR_OPT_ROW_U64(sim_opts_t, wave_end, "wave_end", 0, UINT64_MAX,
                    "last cycle of the waveform window (0 = start + 100k)"),
    TSR_OPT_ROW_U64(sim_opts_t, wave_depth, "wave_depth", 0, 1000,
                    "hierarchy depth to trace (0 = all)"),
    TSR_OPT_ROW_STR(sim_opts_t, coverage, "coverage", TSR_OPT_NONEMPTY,
                    "coverage data written at close (coverage build)"),
    TSR_OPT_ROW_U64(sim_opts_t, queue, "queue", 0, 1,
                    "queue mode: 1 on, 0 off (default: on where the board has doorbell_us)"),
    TSR_OPT_ROW_U64(sim_opts_t, fail, "fail", 1, UINT64_MAX,
                    "fault: submission N (launch, or doorbell in queue mode) is refused by the "
                    "RTL (a ring outside its window; a tail past the ring)"),
    TSR_OPT_ROW_U64(sim_opts_t, hang, "hang", 1, UINT64_MAX,
                    "fault: submission N never reaches the RTL (ap_start or Q_TAIL not written)"),
    TSR_OPT_ROW_U64(sim_opts_t, lost_at, "lost_at", 1, UINT64_MAX,
                    "fault: from launch N on every call fails UNAVAILABLE"),
    TSR_OPT_ROW_STR(sim_opts_t, board, "board", TSR_OPT_NONEMPTY,
                    "board profile: built-in name or .board file (sets the defaults)"),
};
#define SIM_N_OPTIONS (sizeof sim_options / sizeof sim_options[0])

static tsr_status_t parse_options(sim_device_t *dev, const char *options) {
  tsr_sim_config_t *c = &dev->cfg;
  /* a board first: its figures are the defaults the other options override */
  sim_opts_t b = {.bw = 1, .outstanding = 1, .mem = c->mem_size, .clock_mhz = 1};
  TSR_RETURN_IF(tsr_opts_parse(SIM_NAME, sim_options, SIM_N_OPTIONS, options, &b));
  if (b.board[0]) {
    TSR_RETURN_IF_ERROR(tsr_board_load(b.board, &dev->board), "sim: option board=%s", b.board);
    const double bpc = tsr_board_bytes_per_cycle(&dev->board);
    c->mem_bytes_per_cycle = bpc < 1 ? 1 : (uint32_t)bpc; /* the memory model's unit */
    c->mem_latency = dev->board.mem_latency;
    dev->clock_hz = dev->board.clock_hz;
  }
  sim_opts_t o = {.latency = c->mem_latency, .bw = c->mem_bytes_per_cycle,
                  .outstanding = c->mem_max_outstanding, .mem = c->mem_size,
                  .base = c->mem_base, .max_cycles = dev->max_cycles,
                  .wave_start = c->wave_start, .wave_end = c->wave_end,
                  .wave_depth = (uint64_t)(c->wave_depth > 0 ? c->wave_depth : 0),
                  .clock_mhz = dev->clock_hz / 1e6, .queue = 2};
  TSR_RETURN_IF(tsr_opts_parse(SIM_NAME, sim_options, SIM_N_OPTIONS, options, &o));
  dev->queue_opt = o.queue == 2 ? -1 : (int)o.queue;
  if (o.base % 4096)
    return TSR_ERR(INVALID_ARGUMENT, "sim: option base=0x%" PRIx64
                   " must be 4096-byte aligned", o.base);
  c->mem_latency = (uint32_t)o.latency;
  c->mem_bytes_per_cycle = (uint32_t)o.bw;
  c->mem_max_outstanding = (uint32_t)o.outstanding;
  c->mem_size = o.mem;
  c->mem_base = o.base;
  c->wave_start = o.wave_start;
  c->wave_end = o.wave_end;
  c->wave_depth = (int)o.wave_depth;
  dev->clock_hz = o.clock_mhz * 1e6;
  dev->max_cycles = o.max_cycles;
  dev->fail_at = o.fail;
  dev->hang_at = o.hang;
  dev->lost_at = o.lost_at;
  if (o.waves[0]) {
    snprintf(dev->wave_path, sizeof dev->wave_path, "%s", o.waves);
    c->wave_path = dev->wave_path;
  }
  if (o.coverage[0]) {
    snprintf(dev->coverage_path, sizeof dev->coverage_path, "%s", o.coverage);
    c->coverage_path = dev->coverage_path;
  }
  return TSR_OK;
}

static void sim_close(tsr_hal_device_t *d) {
  sim_device_t *dev = as_sim(d);
  if (!dev) return;
  tsr_queue_destroy(&dev->q);
  if (dev->sim) dev->api.destroy(dev->sim);
  tsr_devmem_destroy(dev->dm);
  free(dev);
}

/* Enables the ap_done interrupt so the harness can stop on it. */
static tsr_status_t enable_irq(sim_device_t *dev) {
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_GIE, 1), "writing GIE");
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_IER, 1), "writing IER");
  return TSR_OK;
}

static const tsr_queue_ops_t sim_queue_ops;

static tsr_status_t sim_open(const tsr_hal_open_params_t *params, tsr_hal_device_t **out) {
  *out = NULL;
  if (params && params->index != 0)
    return TSR_ERR(NOT_FOUND, "sim: one simulated device per open (index 0), not %d",
                   params->index);
  sim_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return TSR_ERR(RESOURCE_EXHAUSTED, "sim: out of host memory");
  dev->base.vt = &tsr_hal_sim_vtable;
  dev->clock_hz = 300e6;
  dev->max_cycles = 1ull << 40;
  tsr_status_t s = load_api(dev);
  if (!s) {
    dev->api.config_init(&dev->cfg);
    s = parse_options(dev, params ? params->options : NULL);
  }
  if (!s) {
    char err[512] = "";
    int rc = dev->api.create(&dev->cfg, &dev->sim, err, sizeof err);
    if (rc < 0 || !dev->sim) {
      dev->sim = NULL;
      s = TSR_ERR(UNAVAILABLE, "sim: creating the RTL model failed (%d): %s", rc,
                  err[0] ? err : "no reason given");
    }
  }
  if (!s) {
    dev->api.geometry(dev->sim, &dev->rows, &dev->cols);
    /* the opcodes the RTL as built runs */
    uint32_t info = 0, ops = 0;
    if (dev->api.reg_read(dev->sim, TSR_STAT_HW_INFO, &info) != 0 ||
        dev->api.reg_read(dev->sim, TSR_STAT_HW_OPS, &ops) != 0)
      info = 0;
    dev->ops = tsr_hw_ops(info, ops);
    uint32_t feat = 0;
    dev->queue_hw = (info >> 16 & 0xff) >= 4 &&
                    dev->api.reg_read(dev->sim, TSR_STAT_HW_FEAT, &feat) == 0 &&
                    (feat & TSR_HW_FEAT_QUEUE);
    dev->queue = dev->queue_opt >= 0 ? dev->queue_opt == 1
                                     : dev->board.doorbell_latency_s > 0;
    if (dev->queue && !dev->queue_hw) {
      if (dev->queue_opt == 1)
        s = TSR_ERR(UNAVAILABLE, "sim: option queue=1: %s has no queue mode (HW_INFO "
                    "interface version %u, HW_FEAT 0x%x; rebuild it)", dev->lib_path,
                    info >> 16 & 0xff, feat);
      dev->queue = false;
    }
    if (!s) s = tsr_devmem_create(dev->cfg.mem_base, dev->cfg.mem_size, &dev->dm);
  }
  if (!s) s = enable_irq(dev);
  tsr_queue_config_t qc = {.name = SIM_NAME, .ops = &sim_queue_ops, .impl = dev,
                           .queue_mode = dev->queue};
  if (!s) s = tsr_queue_init(&dev->q, &qc);
  if (s) {
    sim_close(&dev->base);
    return s;
  }
  *out = &dev->base;
  return TSR_OK;
}

static void sim_query_caps(tsr_hal_device_t *d, tsr_hal_caps_t *out) {
  sim_device_t *dev = as_sim(d);
  memset(out, 0, sizeof *out);
  if (dev->board.name[0]) tsr_board_apply_caps(&dev->board, out);
  else tsr_hal_caps_pcie_defaults(out); /* the simulated device stands for a PCIe board */
  /* the RTL as built: its read masters (tsr_sim_ports, additive to ABI v1) */
  out->mem_ports = dev->api.ports ? dev->api.ports(dev->sim) : 1;
  snprintf(out->name, sizeof out->name, "sim (Verilator RTL, %ux%u%s%s)", dev->rows, dev->cols,
           dev->board.name[0] ? ", " : "", dev->board.name);
  out->array_rows = dev->rows;
  out->array_cols = dev->cols;
  out->max_dim = TSR_HW_MAX_DIM;
  out->mem_size = dev->cfg.mem_size;
  out->clock_hz = dev->clock_hz;
  out->mem_bytes_per_cycle = dev->cfg.mem_bytes_per_cycle;
  out->ops = dev->ops;
  if (dev->queue) {
    out->flags |= TSR_HAL_CAP_QUEUE;
    if (!out->doorbell_latency_s) tsr_hal_caps_queue_defaults(out);
  }
}

static tsr_status_t sim_alloc(tsr_hal_device_t *d, uint64_t size, uint64_t align,
                              tsr_hal_buffer_t *out) {
  sim_device_t *dev = as_sim(d);
  memset(out, 0, sizeof *out);
  if (atomic_load(&dev->lost)) return lost_status();
  return tsr_devmem_buffer_alloc(dev->dm, SIM_NAME, size, align, out);
}

static void sim_free(tsr_hal_device_t *d, tsr_hal_buffer_t *buf) {
  tsr_devmem_buffer_free(as_sim(d)->dm, buf);
}

static tsr_status_t sim_write(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf,
                              uint64_t offset, const void *src, size_t n) {
  sim_device_t *dev = as_sim(d);
  if (atomic_load(&dev->lost)) return lost_status();
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, SIM_NAME, buf, offset, n, "write"));
  if (!n) return TSR_OK;
  tsr_queue_lock(&dev->q);
  int rc = dev->api.mem_write(dev->sim, buf->addr + offset, src, n);
  tsr_queue_unlock(&dev->q);
  SIM_CHECK(rc, "backdoor write of %zu bytes at 0x%" PRIx64, n, buf->addr + offset);
  return TSR_OK;
}

static tsr_status_t sim_read(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf,
                             uint64_t offset, void *dst, size_t n) {
  sim_device_t *dev = as_sim(d);
  if (atomic_load(&dev->lost)) return lost_status();
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, SIM_NAME, buf, offset, n, "read"));
  if (!n) return TSR_OK;
  tsr_queue_lock(&dev->q);
  int rc = dev->api.mem_read(dev->sim, buf->addr + offset, dst, n);
  tsr_queue_unlock(&dev->q);
  SIM_CHECK(rc, "backdoor read of %zu bytes at 0x%" PRIx64, n, buf->addr + offset);
  return TSR_OK;
}

static tsr_status_t write64(sim_device_t *dev, uint32_t off, uint64_t v) {
  SIM_CHECK(dev->api.reg_write(dev->sim, off, (uint32_t)v), "writing register 0x%02x", off);
  SIM_CHECK(dev->api.reg_write(dev->sim, off + 4, (uint32_t)(v >> 32)),
            "writing register 0x%02x", off + 4);
  return TSR_OK;
}

static tsr_status_t read32(sim_device_t *dev, uint32_t off, uint32_t *v) {
  SIM_CHECK(dev->api.reg_read(dev->sim, off, v), "reading register 0x%02x", off);
  return TSR_OK;
}

static tsr_status_t read64(sim_device_t *dev, uint32_t off, uint64_t *v) {
  uint32_t lo = 0, hi = 0;
  TSR_RETURN_IF(read32(dev, off, &lo));
  TSR_RETURN_IF(read32(dev, off + 4, &hi));
  *v = (uint64_t)hi << 32 | lo;
  return TSR_OK;
}

/* Queue mode: Q_TAIL and Q_CTRL as the host last left them for command c. */
static tsr_status_t write_queue(sim_device_t *dev, const tsr_queue_cmd_t *c) {
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_Q_TAIL, c->q_tail), "writing Q_TAIL");
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_Q_CTRL,
                               TSR_HW_Q_CTRL_QUEUE | (c->q_close ? TSR_HW_Q_CTRL_CLOSE : 0)),
            "writing Q_CTRL");
  return TSR_OK;
}

/* What fault injection makes of the next submission (fail=, hang=). */
static uint64_t next_fault(sim_device_t *dev) {
  const uint64_t n = ++dev->subs;
  return n == dev->hang_at ? SIM_FAULT_HANG : n == dev->fail_at ? SIM_FAULT_FAIL : 0;
}

/* Programs the arguments of command `fence` and raises ap_start. */
static tsr_status_t start_cmd(sim_device_t *dev, uint64_t fence, tsr_queue_cmd_t *c) {
  (void)fence;
  /* fail=N: a ring just past the window, which the kernel must refuse. */
  uint64_t ring = c->FAULT == SIM_FAULT_FAIL ? c->cmd.window_base + c->cmd.window_size
                                             : c->cmd.ring;
  TSR_RETURN_IF(write64(dev, TSR_ARG_MEM_BASE, c->cmd.window_base));
  TSR_RETURN_IF(write64(dev, TSR_ARG_MEM_SIZE, c->cmd.window_size));
  TSR_RETURN_IF(write64(dev, TSR_ARG_RING, ring));
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_ARG_N_DESC, c->cmd.n_desc), "writing N_DESC");
  if (c->cmd.flags & TSR_HAL_CMD_QUEUE) TSR_RETURN_IF(write_queue(dev, c));
  else if (dev->queue_hw)
    SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_Q_CTRL, 0), "writing Q_CTRL");
  c->START_CYCLE = dev->api.cycles(dev->sim);
  dev->chunk = 1024;
  c->state = TSR_QUEUE_STARTED;
  if (c->FAULT == SIM_FAULT_HANG) return TSR_OK; /* hang=N: never started, never done */
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_CTRL, TSR_CTRL_AP_START), "writing ap_start");
  return TSR_OK;
}

/* The counters of the command under way (live in queue mode; final after
 * ap_done). */
static tsr_status_t read_live(sim_device_t *dev, tsr_hal_result_t *r) {
  memset(r, 0, sizeof *r);
  TSR_RETURN_IF(read32(dev, TSR_STAT_DESC_DONE, &r->desc_done));
  TSR_RETURN_IF(read64(dev, TSR_STAT_CYC_BUSY, &r->cycles));
  TSR_RETURN_IF(read64(dev, TSR_STAT_CYC_STALL, &r->stall_cycles));
  TSR_RETURN_IF(read64(dev, TSR_STAT_BYTES_RD, &r->bytes_rd));
  TSR_RETURN_IF(read64(dev, TSR_STAT_BYTES_WR, &r->bytes_wr));
  TSR_RETURN_IF(read64(dev, TSR_STAT_MACS, &r->macs));
  return TSR_OK;
}

/* After ap_done of command `fence`: acknowledges it, collects the status
 * registers and completes it. */
static tsr_status_t finish_cmd(sim_device_t *dev, uint64_t fence) {
  uint32_t ctrl = 0, isr = 0;
  TSR_RETURN_IF(read32(dev, TSR_REG_CTRL, &ctrl)); /* clears ap_done (COR) */
  TSR_RETURN_IF(read32(dev, TSR_REG_ISR, &isr));
  if (isr) SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_ISR, isr), "clearing ISR");
  /* ap_ctrl_chain: the kernel holds its outputs until ap_continue. */
  SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE),
            "writing ap_continue");
  tsr_hal_result_t r;
  TSR_RETURN_IF(read_live(dev, &r));
  TSR_RETURN_IF(read32(dev, TSR_STAT_STATUS, &r.hw_status));
  TSR_RETURN_IF(read32(dev, TSR_STAT_ERR_INDEX, &r.err_index));
  tsr_queue_complete(&dev->q, fence, &r);
  return TSR_OK;
}

/* Queue hook: a command was submitted. It starts at once if the kernel is
 * idle, so the launch overlaps with the host's work (cycles run in wait). */
static tsr_status_t sim_start(void *impl, tsr_queue_t *q, uint64_t fence, tsr_queue_cmd_t *c) {
  sim_device_t *dev = impl;
  if (dev->lost_at && fence >= dev->lost_at) atomic_store(&dev->lost, true);
  if (atomic_load(&dev->lost)) return lost_status();
  c->FAULT = next_fault(dev);
  if (tsr_queue_oldest_pending(q) == fence) TSR_RETURN_IF(start_cmd(dev, fence, c));
  return TSR_OK;
}


/* Queue hook: the host raised the tail or closed. A started launch sees it
 * at once (the register writes); one still queued gets it when it starts.
 * fail=N makes doorbell N raise Q_TAIL past the ring (the RTL refuses it
 * with QUEUE_TAIL), hang=N loses it (the doorbell never reaches the RTL). */
static tsr_status_t sim_doorbell_hook(void *impl, tsr_queue_t *q, uint64_t fence,
                                      tsr_queue_cmd_t *c) {
  (void)q;
  (void)fence;
  sim_device_t *dev = impl;
  if (atomic_load(&dev->lost)) return lost_status();
  const bool more = c->q_tail != c->live.desc_done;
  const uint64_t fault = more ? next_fault(dev) : 0;
  if (c->state != TSR_QUEUE_STARTED || c->FAULT == SIM_FAULT_HANG) return TSR_OK;
  if (fault == SIM_FAULT_HANG) return TSR_OK;
  dev->qchunk = SIM_QUEUE_SLICE_FIRST;
  if (fault == SIM_FAULT_FAIL) {
    SIM_CHECK(dev->api.reg_write(dev->sim, TSR_REG_Q_TAIL,
                                 c->live.desc_done + c->cmd.n_desc + 1), "writing Q_TAIL");
    return TSR_OK;
  }
  return write_queue(dev, c);
}

/* Queue hook: runs one slice of cycles for the oldest unfinished launch
 * (launches run in order, so that is the way to `fence`). */
static tsr_status_t sim_poll(void *impl, tsr_queue_t *q, uint64_t fence, uint64_t budget_ns,
                             bool *idle) {
  sim_device_t *dev = impl;
  uint64_t head = tsr_queue_oldest_pending(q);
  tsr_queue_cmd_t *h = head ? tsr_queue_cmd(q, head) : NULL;
  if (!h) {
    *idle = true;
    return TSR_OK;
  }
  if (h->state == TSR_QUEUE_QUEUED) TSR_RETURN_IF(start_cmd(dev, head, h));
  const bool queue = h->cmd.flags & TSR_HAL_CMD_QUEUE;
  uint64_t used = dev->api.cycles(dev->sim) - h->START_CYCLE;
  if (queue) used = h->live.cycles; /* CYC_BUSY: its waits for the doorbell do not count */
  if (used >= dev->max_cycles)
    return TSR_ERR(DEADLINE_EXCEEDED,
                   "sim: command %" PRIu64 " not done after %" PRIu64
                   " simulated cycles (max_cycles budget)", head, used);
  if (budget_ns == 0) { /* no wall time left: no cycles either */
    *idle = true;
    return TSR_OK;
  }
  uint64_t budget = dev->chunk < dev->max_cycles - used ? dev->chunk : dev->max_cycles - used;
  if (queue) {
    if (dev->qchunk < SIM_QUEUE_SLICE_FIRST) dev->qchunk = SIM_QUEUE_SLICE_FIRST;
    if (budget > dev->qchunk) budget = dev->qchunk;
    if (dev->qchunk < SIM_QUEUE_SLICE) dev->qchunk *= 2;
  }
  uint64_t ran = 0, t0 = tsr_hal_now_ns();
  int rc = dev->api.run(dev->sim, budget, 1, &ran);
  uint64_t took = tsr_hal_now_ns() - t0;
  if (rc < 0) {
    const char *why = dev->api.last_error ? dev->api.last_error(dev->sim) : NULL;
    return TSR_ERR(DEVICE, "sim: running command %" PRIu64 " failed at cycle %" PRIu64
                   " (%d): %s", head, dev->api.cycles(dev->sim), rc,
                   why && *why ? why : "the RTL model reported an error");
  }
  /* Size the slice to a few ms of wall time: long launches spend little
   * time in polls, the wall-clock deadline is noticed promptly, and the
   * lock (which other threads' copies and submits need) is never held for
   * long. */
  if (took < 2000000 && dev->chunk < (1u << 20)) dev->chunk *= 2;
  else if (took > 8000000 && dev->chunk > 1024) dev->chunk /= 2;
  if (rc == 1) {
    TSR_RETURN_IF(finish_cmd(dev, head));
    uint64_t next = tsr_queue_oldest_pending(q);
    if (next) TSR_RETURN_IF(start_cmd(dev, next, tsr_queue_cmd(q, next)));
  } else if (queue) {
    /* DESC_DONE every slice; the other counters when it moved */
    tsr_hal_result_t live = h->live;
    TSR_RETURN_IF(read32(dev, TSR_STAT_DESC_DONE, &live.desc_done));
    if (live.desc_done != h->live.desc_done) {
      TSR_RETURN_IF(read_live(dev, &live));
      tsr_queue_set_live(q, head, &live);
    }
    /* caught up with the doorbell: nothing to run until the host rings */
    if (live.desc_done == h->q_tail && !h->q_close) *idle = true;
  }
  return TSR_OK;
}

static void sim_note(void *impl, tsr_queue_t *q, uint64_t fence, char *buf, size_t cap) {
  sim_device_t *dev = impl;
  uint64_t head = tsr_queue_oldest_pending(q);
  const tsr_queue_cmd_t *h = head ? tsr_queue_cmd(q, head) : NULL;
  if (h && h->state == TSR_QUEUE_STARTED)
    snprintf(buf, cap, " of wall time (%" PRIu64 " cycles simulated so far)",
             dev->api.cycles(dev->sim) - h->START_CYCLE);
}

static tsr_status_t sim_reset_hook(void *impl, tsr_queue_t *q) {
  sim_device_t *dev = impl;
  dev->api.reset(dev->sim);
  return enable_irq(dev);
}

static const tsr_queue_ops_t sim_queue_ops = {
    .start = sim_start,
    .poll = sim_poll,
    .reset = sim_reset_hook,
    .pending_note = sim_note,
    .doorbell = sim_doorbell_hook,
};

static tsr_status_t sim_submit(tsr_hal_device_t *d, const tsr_hal_command_t *cmd,
                               uint64_t *out_fence) {
  sim_device_t *dev = as_sim(d);
  *out_fence = 0;
  if (atomic_load(&dev->lost)) return lost_status();
  return tsr_queue_submit(&dev->q, cmd, out_fence);
}

static tsr_status_t sim_wait(tsr_hal_device_t *d, uint64_t fence, uint64_t timeout_ns,
                             tsr_hal_result_t *out) {
  sim_device_t *dev = as_sim(d);
  if (out) memset(out, 0, sizeof *out);
  if (atomic_load(&dev->lost)) return lost_status();
  return tsr_queue_wait(&dev->q, fence, timeout_ns, out);
}

static tsr_status_t sim_doorbell(tsr_hal_device_t *d, uint64_t fence, uint32_t tail, int close) {
  sim_device_t *dev = as_sim(d);
  if (atomic_load(&dev->lost)) return lost_status();
  return tsr_queue_doorbell(&dev->q, fence, tail, close);
}

static tsr_status_t sim_progress(tsr_hal_device_t *d, uint64_t fence, uint32_t done,
                                 uint64_t timeout_ns, tsr_hal_result_t *out) {
  sim_device_t *dev = as_sim(d);
  if (out) memset(out, 0, sizeof *out);
  if (atomic_load(&dev->lost)) return lost_status();
  return tsr_queue_progress(&dev->q, fence, done, timeout_ns, out);
}

static tsr_status_t sim_reset(tsr_hal_device_t *d) {
  sim_device_t *dev = as_sim(d);
  if (atomic_load(&dev->lost)) return lost_status();
  return tsr_queue_reset(&dev->q);
}

const tsr_hal_vtable_t tsr_hal_sim_vtable = {
    .name = SIM_NAME,
    .open = sim_open,
    .close = sim_close,
    .query_caps = sim_query_caps,
    .alloc = sim_alloc,
    .free = sim_free,
    .write = sim_write,
    .read = sim_read,
    .submit = sim_submit,
    .wait = sim_wait,
    .reset = sim_reset,
    .doorbell = sim_doorbell,
    .progress = sim_progress,
    .options = sim_options,
    .n_options = SIM_N_OPTIONS,
};
