/*
 * fmodel_backend.c - backend "fmodel": the functional model (driver/kernel_model.h)
 * as a device.
 *
 * The device owns a host allocation that plays device memory, a devmem
 * allocator over it, the shared command queue (driver/queue.h: fences,
 * completions, deadlines, reset) and one worker thread that takes the
 * queue's launches in order and executes them, like a kernel draining its
 * command queue. Every call is safe from any thread: the queue and the
 * allocator have their own locks, copies are plain memcpy (touching memory
 * a running launch uses is the caller's race, as on hardware). Cycle counts are
 * modeled; link and launch costs in the caps describe a PCIe board, since
 * the model stands in for one.
 *
 * Options ("fmodel:key=value,..."):
 *   mem=SIZE       device memory (default 256M; K/M/G suffixes)
 *   base=ADDR      device address of the first byte (default 0x80000000)
 *   rows=, cols=   modeled array geometry (default 16x16)
 *   clock=MHZ      modeled kernel clock (default 300)
 *   bw=BYTES       modeled memory bytes per cycle (default 64)
 *   latency=CYC    modeled memory latency in cycles (default 40)
 *   ports=N        read ports, each on its own memory channel of bw= (default 1)
 *   board=NAME     a board profile (driver/board.h: built-in name or a
 *                  .board file) sets memory, array, clock, channels, link
 *                  and launch costs; the options above still override it
 *   threads=N      host threads executing GEMMs (default 1: the worker
 *                  alone; 0 = one per online CPU)
 *   queue=0|1      queue mode (hw/regmap.def Q_CTRL): TSR_HAL_CMD_QUEUE
 *                  launches, doorbell() and progress() (default: the
 *                  board's `doorbell_us`, else off)
 *   fail=N         submission N (counting launches and, in queue mode,
 *                  doorbells from 1) completes with hw_status AXI_ERROR,
 *                  having done nothing (a doorbell: its queue ends so)
 *   hang=N         submission N never completes: wait() (progress())
 *                  times out, later commands queue behind it, reset()
 *                  recovers
 *   lost           open succeeds, then every call fails with UNAVAILABLE
 *                  (a device that fell off the bus)
 *   fail_rate=P    each command fails like fail=N with probability P,
 *   seed=S         decided by a hash of (S, command number): random-looking
 *                  and reproducible (soak tests)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/kernel_model.h"

#include <sys/mman.h>

#include "driver/board.h"
#include "driver/devmem.h"
#include "driver/hal_impl.h"
#include "driver/queue.h"
#include "base/splitmix.h"
#include "base/status.h"

typedef struct fm_device {
  tsr_hal_device_t base; /* must be first */
  tsr_km_timing_t timing;
  tsr_km_memory_t mem; /* data owned (an anonymous mapping, touched lazily) */
  tsr_board_t board;    /* option board=; board.name[0] == 0 when none     */
  tsr_devmem_t *dm;
  int threads;            /* option threads=                            */
  tsr_threadpool_t *pool; /* owned; NULL when threads == 1              */
  uint64_t fail_at, hang_at; /* 1-based command numbers, 0 = never */
  double fail_rate;          /* probability that a command fails        */
  uint64_t fail_seed;
  bool lost;              /* set at open only                           */
  bool queue;             /* queue mode offered (option queue=, board)  */
  uint64_t subs;          /* submissions so far (launches, doorbells),
                             under the queue's lock: fail=/hang= count them */

  tsr_queue_t q;          /* fences, completions, the lock (queue.h)    */
  pthread_t worker;
  bool worker_started;
} fm_device_t;

#define FM_NAME "fmodel"

static fm_device_t *as_fm(tsr_hal_device_t *d) { return (fm_device_t *)d; }

static tsr_status_t lost_status(void) {
  return TSR_ERR(UNAVAILABLE, "fmodel: device lost (fault injection option 'lost')");
}

/* Whether command `fence` fails under fail_rate: splitmix64 of (seed,
 * fence) against the rate. */
static bool random_fail(const fm_device_t *dev, uint64_t fence) {
  if (dev->fail_rate <= 0) return false;
  /* the fence-th output of the stream seeded with fail_seed */
  uint64_t st = dev->fail_seed + (fence - 1) * 0x9E3779B97F4A7C15ull;
  uint64_t z = tsr_splitmix64(&st);
  return (double)(z >> 11) * 0x1.0p-53 < dev->fail_rate;
}

/* What fault injection makes of submission n (aux[1] of a command, and of
 * a queue's latest doorbell). */
#define FM_FAULT_FAIL 1u
#define FM_FAULT_HANG 2u
static uint64_t fault_of(fm_device_t *dev) {
  const uint64_t n = ++dev->subs;
  if (dev->hang_at == n) return FM_FAULT_HANG;
  if (dev->fail_at == n || random_fail(dev, n)) return FM_FAULT_FAIL;
  return 0;
}

/* Queue hook: a submission; its fault decided now, in submission order. */
static tsr_status_t fm_start(void *impl, tsr_queue_t *q, uint64_t fence, tsr_queue_cmd_t *c) {
  (void)q;
  (void)fence;
  c->aux[1] = fault_of(impl);
  return TSR_OK;
}

/* Queue hook: a doorbell; its batch's fault decided now (aux[1]). */
static tsr_status_t fm_doorbell_hook(void *impl, tsr_queue_t *q, uint64_t fence,
                                     tsr_queue_cmd_t *c) {
  (void)q;
  (void)fence;
  if (!c->q_close || c->q_tail != c->live.desc_done) c->aux[1] |= fault_of(impl);
  return TSR_OK;
}

static uint64_t cmd_fault(fm_device_t *dev, uint64_t fence) {
  tsr_queue_lock(&dev->q);
  const tsr_queue_cmd_t *c = tsr_queue_cmd(&dev->q, fence);
  const uint64_t f = c ? c->aux[1] : 0;
  tsr_queue_unlock(&dev->q);
  return f;
}

static void add_result(tsr_hal_result_t *acc, const tsr_hal_result_t *r) {
  acc->desc_done += r->desc_done;
  acc->cycles += r->cycles;
  acc->stall_cycles += r->stall_cycles;
  acc->bytes_rd += r->bytes_rd;
  acc->bytes_wr += r->bytes_wr;
  acc->macs += r->macs;
}

/* A queue-mode launch: runs the descriptors the host publishes, slot
 * i % n_desc for descriptor i, until it is closed or one is refused. The
 * cycles are the model's for each doorbell's descriptors as one ring, less
 * the launch's fixed cycles (the queue was started once). */
static void run_queue(fm_device_t *dev, uint64_t fence, const tsr_hal_command_t *cmd) {
  tsr_hal_result_t acc;
  memset(&acc, 0, sizeof acc);
  const uint64_t fixed = tsr_km_launch_cycles(&dev->timing);
  uint32_t tail = 0;
  int close = 0;
  uint64_t fault = 0;
  if (cmd_fault(dev, fence) == FM_FAULT_HANG) { /* the launch itself never starts */
    tsr_queue_worker_hang(&dev->q, fence);
    return;
  }
  while (tsr_queue_worker_park(&dev->q, fence, &acc, &tail, &close, &fault)) {
    if (acc.desc_done == tail && close) break;
    if (fault == FM_FAULT_HANG) {
      tsr_queue_worker_hang(&dev->q, fence);
      return;
    }
    if (fault == FM_FAULT_FAIL) {
      acc.hw_status = TSR_HWERR_AXI_ERROR;
      acc.err_index = acc.desc_done;
      break;
    }
    while (acc.desc_done != tail) {
      const uint32_t slot = acc.desc_done % cmd->n_desc;
      uint32_t run = tail - acc.desc_done;
      if (run > cmd->n_desc - slot) run = cmd->n_desc - slot;
      tsr_hal_command_t part = *cmd;
      part.flags = 0;
      part.ring = cmd->ring + (uint64_t)slot * TSR_HW_DESC_BYTES;
      part.n_desc = run;
      tsr_hal_result_t r;
      tsr_km_execute(&dev->timing, &dev->mem, &part, dev->pool, &r);
      r.cycles = r.cycles > fixed ? r.cycles - fixed : 0;
      if (r.hw_status) {
        acc.hw_status = r.hw_status;
        acc.err_index = acc.desc_done + r.err_index;
      }
      add_result(&acc, &r);
      if (r.hw_status) break;
    }
    if (acc.hw_status) break;
  }
  tsr_queue_worker_done(&dev->q, fence, &acc);
}

/* The worker: executes launches in fence order, like a kernel draining its
 * command queue. The model runs without the queue's lock. */
static void *worker_main(void *arg) {
  fm_device_t *dev = arg;
  uint64_t fence = 0;
  tsr_hal_command_t cmd;
  while (tsr_queue_worker_next(&dev->q, &fence, &cmd)) {
    if (cmd.flags & TSR_HAL_CMD_QUEUE) {
      run_queue(dev, fence, &cmd);
      continue;
    }
    const uint64_t fault = cmd_fault(dev, fence);
    if (fault == FM_FAULT_HANG) { /* stays hung until reset() */
      tsr_queue_worker_hang(&dev->q, fence);
      continue;
    }
    tsr_hal_result_t res;
    if (fault == FM_FAULT_FAIL) {
      memset(&res, 0, sizeof res);
      res.hw_status = TSR_HWERR_AXI_ERROR;
      res.cycles = tsr_km_launch_cycles(&dev->timing);
    } else {
      tsr_km_execute(&dev->timing, &dev->mem, &cmd, dev->pool, &res);
    }
    tsr_queue_worker_done(&dev->q, fence, &res);
  }
  return NULL;
}

static void hang_note(void *impl, tsr_queue_t *q, uint64_t fence, char *buf, size_t cap) {
  const tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (c && c->state == TSR_QUEUE_STARTED && q->stalled)
    snprintf(buf, cap, " (the device hung; reset it)");
}

static const tsr_queue_ops_t fm_queue_ops = {
    .start = fm_start, .pending_note = hang_note, .doorbell = fm_doorbell_hook};

static void fm_close(tsr_hal_device_t *d) {
  fm_device_t *dev = as_fm(d);
  if (!dev) return;
  if (dev->worker_started) {
    tsr_queue_stop(&dev->q);
    pthread_join(dev->worker, NULL);
  }
  tsr_queue_destroy(&dev->q);
  tsr_threadpool_destroy(dev->pool);
  tsr_devmem_destroy(dev->dm);
  if (dev->mem.data) munmap(dev->mem.data, dev->mem.size);
  free(dev);
}

/* What the option string sets (defaults in fm_open). */
typedef struct fm_opts {
  uint64_t mem, base, rows, cols, latency, threads, fail, hang, seed, ports, queue;
  double clock_mhz, bw, fail_rate;
  bool lost;
  char board[256];
} fm_opts_t;

static const tsr_opt_spec_t fm_options[] = {
    TSR_OPT_ROW_U64(fm_opts_t, mem, "mem", 4096, 1ull << 36,
                    "device memory bytes (default 256M; K/M/G suffixes)"),
    TSR_OPT_ROW_U64(fm_opts_t, base, "base", 0, 1ull << 62,
                    "device address of the first byte, 4096-aligned (default 0x80000000)"),
    TSR_OPT_ROW_U64(fm_opts_t, rows, "rows", 1, 255, "modeled MAC array rows (default 16)"),
    TSR_OPT_ROW_U64(fm_opts_t, cols, "cols", 1, 255, "modeled MAC array columns (default 16)"),
    TSR_OPT_ROW_F64(fm_opts_t, clock_mhz, "clock", 1, 5000,
                    "modeled kernel clock in MHz (default 300)"),
    TSR_OPT_ROW_F64(fm_opts_t, bw, "bw", 1.0 / 64, 4096,
                    "modeled memory bytes per cycle (default 64)"),
    TSR_OPT_ROW_U64(fm_opts_t, latency, "latency", 0, 100000,
                    "modeled memory latency in cycles (default 40)"),
    TSR_OPT_ROW_U64(fm_opts_t, ports, "ports", 1, 1024,
                    "read ports, each on its own memory channel of bw= (default 1)"),
    TSR_OPT_ROW_STR(fm_opts_t, board, "board", TSR_OPT_NONEMPTY,
                    "board profile: built-in name or .board file (sets the defaults)"),
    TSR_OPT_ROW_U64(fm_opts_t, queue, "queue", 0, 1,
                    "queue mode: 1 on, 0 off (default: on where the board has doorbell_us)"),
    TSR_OPT_ROW_U64(fm_opts_t, threads, "threads", 0, 1024,
                    "host threads executing GEMMs (default 1; 0 = one per online CPU)"),
    TSR_OPT_ROW_U64(fm_opts_t, fail, "fail", 1, UINT64_MAX,
                    "fault: launch N completes with AXI_ERROR, having done nothing"),
    TSR_OPT_ROW_U64(fm_opts_t, hang, "hang", 1, UINT64_MAX,
                    "fault: launch N never completes until a reset"),
    TSR_OPT_ROW_BOOL(fm_opts_t, lost, "lost", "fault: every call after open fails UNAVAILABLE"),
    TSR_OPT_ROW_F64(fm_opts_t, fail_rate, "fail_rate", 0, 1,
                    "fault: each launch fails with this probability (default 0)"),
    TSR_OPT_ROW_U64(fm_opts_t, seed, "seed", 0, UINT64_MAX,
                    "seed of fail_rate's choice of launches (default 1)"),
};
#define FM_N_OPTIONS (sizeof fm_options / sizeof fm_options[0])

static tsr_status_t parse_options(fm_device_t *dev, const char *options) {
  /* a board first: its figures are the defaults the other options override */
  fm_opts_t b = {.mem = dev->mem.size, .base = dev->mem.base, .rows = 1, .cols = 1,
                 .clock_mhz = 1, .bw = 1, .ports = 1};
  TSR_RETURN_IF(tsr_opts_parse(FM_NAME, fm_options, FM_N_OPTIONS, options, &b));
  if (b.board[0]) {
    TSR_RETURN_IF_ERROR(tsr_board_load(b.board, &dev->board), "fmodel: option board=%s", b.board);
    const tsr_board_t *bd = &dev->board;
    dev->mem.size = bd->mem_size;
    dev->timing.rows = bd->array_rows;
    dev->timing.cols = bd->array_cols;
    dev->timing.clock_hz = bd->clock_hz;
    dev->timing.mem_bytes_per_cycle = tsr_board_bytes_per_cycle(bd);
    dev->timing.mem_latency = bd->mem_latency;
    dev->timing.ports = bd->ports;
    dev->queue = bd->doorbell_latency_s > 0;
  }
  fm_opts_t o = {.queue = dev->queue,.ports = dev->timing.ports ? dev->timing.ports : 1,.mem = dev->mem.size, .base = dev->mem.base, .rows = dev->timing.rows,
                 .cols = dev->timing.cols, .latency = dev->timing.mem_latency,
                 .threads = (uint64_t)dev->threads, .clock_mhz = dev->timing.clock_hz / 1e6,
                 .bw = dev->timing.mem_bytes_per_cycle, .seed = 1};
  TSR_RETURN_IF(tsr_opts_parse(FM_NAME, fm_options, FM_N_OPTIONS, options, &o));
  if (o.base % 4096)
    return TSR_ERR(INVALID_ARGUMENT, "fmodel: option base=0x%" PRIx64
                   " must be 4096-byte aligned", o.base);
  dev->mem.size = o.mem;
  dev->mem.base = o.base;
  dev->timing.rows = (uint32_t)o.rows;
  dev->timing.cols = (uint32_t)o.cols;
  dev->timing.clock_hz = o.clock_mhz * 1e6;
  dev->timing.mem_bytes_per_cycle = o.bw;
  dev->timing.mem_latency = (uint32_t)o.latency;
  dev->timing.ports = (uint32_t)o.ports;
  dev->threads = (int)o.threads;
  dev->queue = o.queue != 0;
  dev->fail_at = o.fail;
  dev->hang_at = o.hang;
  dev->lost = o.lost;
  dev->fail_rate = o.fail_rate;
  dev->fail_seed = o.seed;
  return TSR_OK;
}

static tsr_status_t fm_open(const tsr_hal_open_params_t *params, tsr_hal_device_t **out) {
  *out = NULL;
  if (params && params->index != 0)
    return TSR_ERR(NOT_FOUND, "fmodel: there is one fmodel device (index 0), not index %d",
                   params->index);
  fm_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return TSR_ERR(RESOURCE_EXHAUSTED, "fmodel: out of host memory");
  dev->base.vt = &tsr_hal_fmodel_vtable;
  tsr_km_timing_init(&dev->timing);
  dev->mem.base = 0x80000000ull;
  dev->mem.size = 256ull << 20;
  dev->threads = 1;
  tsr_status_t s = parse_options(dev, params ? params->options : NULL);
  if (!s && dev->threads != 1) s = tsr_threadpool_create(dev->threads, &dev->pool);
  if (s) {
    fm_close(&dev->base);
    return s;
  }
  dev->mem.size &= ~(uint64_t)4095;
  /* zero pages on first touch: a board's gigabytes cost only what is used */
  void *map = mmap(NULL, dev->mem.size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  dev->mem.data = map == MAP_FAILED ? NULL : map;
  if (!dev->mem.data) {
    fm_close(&dev->base);
    return TSR_ERR(RESOURCE_EXHAUSTED, "fmodel: cannot allocate %" PRIu64
                   " bytes of device memory on the host", dev->mem.size);
  }
  s = tsr_devmem_create(dev->mem.base, dev->mem.size, &dev->dm);
  tsr_queue_config_t qc = {.name = FM_NAME, .ops = &fm_queue_ops, .impl = dev,
                           .queue_mode = dev->queue};
  if (!s) s = tsr_queue_init(&dev->q, &qc);
  if (s) {
    fm_close(&dev->base);
    return s;
  }
  int rc = pthread_create(&dev->worker, NULL, worker_main, dev);
  if (rc) {
    fm_close(&dev->base);
    return TSR_ERR(RESOURCE_EXHAUSTED, "fmodel: cannot start the worker thread (%s)",
                   strerror(rc));
  }
  dev->worker_started = true;
  *out = &dev->base;
  return TSR_OK;
}

static void fm_query_caps(tsr_hal_device_t *d, tsr_hal_caps_t *out) {
  fm_device_t *dev = as_fm(d);
  memset(out, 0, sizeof *out);
  if (dev->board.name[0]) tsr_board_apply_caps(&dev->board, out);
  else tsr_hal_caps_pcie_defaults(out); /* the model stands for a PCIe board */
  snprintf(out->name, sizeof out->name, "fmodel (functional model, %ux%u%s%s)%s",
           dev->timing.rows, dev->timing.cols, dev->board.name[0] ? ", " : "", dev->board.name,
           dev->lost ? " [lost]" : "");
  out->array_rows = dev->timing.rows;
  out->array_cols = dev->timing.cols;
  out->max_dim = TSR_HW_MAX_DIM;
  out->mem_size = dev->mem.size;
  out->clock_hz = dev->timing.clock_hz;
  out->mem_bytes_per_cycle = dev->timing.mem_bytes_per_cycle;
  out->mem_ports = dev->timing.ports;
  out->mem_latency = dev->timing.mem_latency;
  out->ops = dev->timing.ops ? dev->timing.ops : TSR_KM_OPS_ALL;
  if (dev->queue) {
    out->flags |= TSR_HAL_CAP_QUEUE;
    if (!out->doorbell_latency_s) tsr_hal_caps_queue_defaults(out);
  }
}

static tsr_status_t fm_alloc(tsr_hal_device_t *d, uint64_t size, uint64_t align,
                              tsr_hal_buffer_t *out) {
  fm_device_t *dev = as_fm(d);
  memset(out, 0, sizeof *out);
  if (dev->lost) return lost_status();
  return tsr_devmem_buffer_alloc(dev->dm, FM_NAME, size, align, out);
}

static void fm_free(tsr_hal_device_t *d, tsr_hal_buffer_t *buf) {
  fm_device_t *dev = as_fm(d);
  if (dev->lost) {
    /* Leave the allocator alone on a lost device; only empty the buffer. */
    if (buf && buf->size) {
      buf->addr = 0;
      buf->size = 0;
    }
    return;
  }
  tsr_devmem_buffer_free(dev->dm, buf);
}

static tsr_status_t fm_write(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf,
                              uint64_t offset, const void *src, size_t n) {
  fm_device_t *dev = as_fm(d);
  if (dev->lost) return lost_status();
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, FM_NAME, buf, offset, n, "write"));
  if (n) memcpy(dev->mem.data + (buf->addr - dev->mem.base) + offset, src, n);
  return TSR_OK;
}

static tsr_status_t fm_read(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf,
                             uint64_t offset, void *dst, size_t n) {
  fm_device_t *dev = as_fm(d);
  if (dev->lost) return lost_status();
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, FM_NAME, buf, offset, n, "read"));
  if (n) memcpy(dst, dev->mem.data + (buf->addr - dev->mem.base) + offset, n);
  return TSR_OK;
}

static tsr_status_t fm_submit(tsr_hal_device_t *d, const tsr_hal_command_t *cmd,
                              uint64_t *out_fence) {
  fm_device_t *dev = as_fm(d);
  *out_fence = 0;
  if (dev->lost) return lost_status();
  return tsr_queue_submit(&dev->q, cmd, out_fence);
}

static tsr_status_t fm_wait(tsr_hal_device_t *d, uint64_t fence, uint64_t timeout_ns,
                            tsr_hal_result_t *out) {
  fm_device_t *dev = as_fm(d);
  if (out) memset(out, 0, sizeof *out);
  if (dev->lost) return lost_status();
  return tsr_queue_wait(&dev->q, fence, timeout_ns, out);
}

static tsr_status_t fm_doorbell(tsr_hal_device_t *d, uint64_t fence, uint32_t tail, int close) {
  fm_device_t *dev = as_fm(d);
  if (dev->lost) return lost_status();
  return tsr_queue_doorbell(&dev->q, fence, tail, close);
}

static tsr_status_t fm_progress(tsr_hal_device_t *d, uint64_t fence, uint32_t done,
                                uint64_t timeout_ns, tsr_hal_result_t *out) {
  fm_device_t *dev = as_fm(d);
  if (out) memset(out, 0, sizeof *out);
  if (dev->lost) return lost_status();
  return tsr_queue_progress(&dev->q, fence, done, timeout_ns, out);
}

static tsr_status_t fm_reset(tsr_hal_device_t *d) {
  fm_device_t *dev = as_fm(d);
  if (dev->lost) return lost_status();
  return tsr_queue_reset(&dev->q);
}

const tsr_hal_vtable_t tsr_hal_fmodel_vtable = {
    .name = FM_NAME,
    .open = fm_open,
    .close = fm_close,
    .query_caps = fm_query_caps,
    .alloc = fm_alloc,
    .free = fm_free,
    .write = fm_write,
    .read = fm_read,
    .submit = fm_submit,
    .wait = fm_wait,
    .reset = fm_reset,
    .doorbell = fm_doorbell,
    .progress = fm_progress,
    .options = fm_options,
    .n_options = FM_N_OPTIONS,
};
