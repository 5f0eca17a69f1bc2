/*
 * cpu_backend.c - backend "cpu": the functional model (driver/kernel_model.h)
 * as a device.
 *
 * The device owns a host allocation that plays device memory, a devmem
 * allocator over it, and one worker thread that executes submitted
 * launches in order, like a kernel with a command queue. Cycle counts are
 * modeled; link and launch costs in the caps describe a PCIe board, since
 * the model stands in for one.
 *
 * Options ("cpu:key=value,..."):
 *   mem=SIZE       device memory (default 256M; K/M/G suffixes)
 *   base=ADDR      device address of the first byte (default 0x80000000)
 *   rows=, cols=   modeled array geometry (default 16x16)
 *   clock=MHZ      modeled kernel clock (default 300)
 *   bw=BYTES       modeled memory bytes per cycle (default 64)
 *   latency=CYC    modeled memory latency in cycles (default 40)
 *   threads=N      host threads executing GEMMs (default 1: the worker
 *                  alone; 0 = one per online CPU)
 *   fail=N         command N (the N-th submit, counting from 1) completes
 *                  with hw_status AXI_ERROR, having done nothing
 *   hang=N         command N never completes: wait() times out, later
 *                  commands queue behind it, reset() recovers
 *   lost           open succeeds, then every call fails with UNAVAILABLE
 *                  (a device that fell off the bus)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/kernel_model.h"

#include "driver/devmem.h"
#include "driver/hal_impl.h"
#include "base/status.h"

enum cmd_state { CMD_QUEUED, CMD_RUNNING, CMD_HUNG, CMD_DONE, CMD_ABORTED };

typedef struct cpu_cmd {
  tsr_hal_command_t cmd;
  enum cmd_state state;
  tsr_hal_result_t res;
} cpu_cmd_t;

typedef struct cpu_device {
  tsr_hal_device_t base; /* must be first */
  tsr_km_timing_t timing;
  tsr_km_memory_t mem; /* data owned (aligned_alloc) */
  tsr_devmem_t *dm;
  int threads;            /* option threads=                            */
  tsr_threadpool_t *pool; /* owned; NULL when threads == 1              */
  uint64_t fail_at, hang_at; /* 1-based command numbers, 0 = never */
  bool lost;

  pthread_t worker;
  bool worker_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* worker waits: a command was queued, reset, stop */
  pthread_cond_t cv_done; /* waiters wait: a command finished or was aborted */
  bool stop;
  cpu_cmd_t *cmds;  /* (n_cmds) fence f is cmds[f - 1 - base_fence] */
  uint64_t n_cmds, cap_cmds;
  uint64_t base_fence; /* fences up to this one were forgotten */
  uint64_t next_run; /* index in cmds of the next command to execute */
  bool running;      /* the worker is executing cmds[next_run] */
  bool idle;         /* the worker sleeps on cv_work for new commands */
  atomic_uint_fast64_t published; /* commands submitted, readable without mu */
} cpu_device_t;

#define CPU_NAME "cpu"
/* Finished commands whose results wait() can still return. */
#define KEEP_DONE 1024

static cpu_device_t *as_cpu(tsr_hal_device_t *d) { return (cpu_device_t *)d; }

static tsr_status_t lost_status(void) {
  return TSR_ERR(UNAVAILABLE, "cpu: device lost (fault injection option 'lost')");
}

/* Worker spin before sleeping: ~20-50 us of pause instructions. */
#define CPU_SPIN 4096
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
  cpu_device_t *dev = arg;
  pthread_mutex_lock(&dev->mu);
  for (;;) {
    while (!dev->stop && dev->next_run >= dev->n_cmds) {
      /* Spin a little first: the host usually submits the next launch
       * within microseconds, and a sleeping worker costs it a futex wake
       * (and the launch a scheduler round trip). */
      uint_fast64_t seen = atomic_load(&dev->published);
      pthread_mutex_unlock(&dev->mu);
      for (int i = 0; i < CPU_SPIN && atomic_load(&dev->published) == seen; i++) cpu_relax();
      pthread_mutex_lock(&dev->mu);
      if (dev->stop || dev->next_run < dev->n_cmds) break;
      dev->idle = true;
      pthread_cond_wait(&dev->cv_work, &dev->mu);
      dev->idle = false;
    }
    if (dev->stop) break;
    uint64_t idx = dev->next_run;
    uint64_t fence = dev->base_fence + idx + 1;
    cpu_cmd_t *c = &dev->cmds[idx];
    if (c->state == CMD_HUNG) { /* stays hung until reset() moves next_run */
      pthread_cond_wait(&dev->cv_work, &dev->mu);
      continue;
    }
    if (dev->hang_at == fence) {
      c->state = CMD_HUNG;
      continue;
    }
    tsr_hal_command_t cmd = c->cmd;
    tsr_hal_result_t res;
    c->state = CMD_RUNNING;
    dev->running = true;
    if (dev->fail_at == fence) {
      memset(&res, 0, sizeof res);
      res.hw_status = TSR_HWERR_AXI_ERROR;
      res.cycles = tsr_km_launch_cycles(&dev->timing);
    } else {
      pthread_mutex_unlock(&dev->mu);
      tsr_km_execute(&dev->timing, &dev->mem, &cmd, dev->pool, &res);
      pthread_mutex_lock(&dev->mu);
    }
    dev->running = false;
    idx = fence - 1 - dev->base_fence; /* submit() may have compacted cmds */
    c = &dev->cmds[idx];
    c->res = res;
    c->state = CMD_DONE;
    dev->next_run = idx + 1;
    pthread_cond_broadcast(&dev->cv_done);
  }
  pthread_mutex_unlock(&dev->mu);
  return NULL;
}

static void cpu_close(tsr_hal_device_t *d) {
  cpu_device_t *dev = as_cpu(d);
  if (!dev) return;
  if (dev->worker_started) {
    pthread_mutex_lock(&dev->mu);
    dev->stop = true;
    pthread_cond_broadcast(&dev->cv_work);
    pthread_mutex_unlock(&dev->mu);
    pthread_join(dev->worker, NULL);
    pthread_cond_destroy(&dev->cv_work);
    pthread_cond_destroy(&dev->cv_done);
    pthread_mutex_destroy(&dev->mu);
  }
  tsr_threadpool_destroy(dev->pool);
  tsr_devmem_destroy(dev->dm);
  free(dev->mem.data);
  free(dev->cmds);
  free(dev);
}

static tsr_status_t parse_options(cpu_device_t *dev, const char *options) {
  const char *cur = options;
  char key[32], val[128];
  tsr_status_t err = TSR_OK;
  while (tsr_hal_opt_next(&cur, key, sizeof key, val, sizeof val, &err)) {
    uint64_t u = 0;
    double f = 0;
    if (!strcmp(key, "mem")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 4096, 1ull << 36, &u));
      dev->mem.size = u;
    } else if (!strcmp(key, "base")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 0, 1ull << 62, &u));
      if (u % 4096)
        return TSR_ERR(INVALID_ARGUMENT, "cpu: option base=0x%" PRIx64
                       " must be 4096-byte aligned", u);
      dev->mem.base = u;
    } else if (!strcmp(key, "rows")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 1, 255, &u));
      dev->timing.rows = (uint32_t)u;
    } else if (!strcmp(key, "cols")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 1, 255, &u));
      dev->timing.cols = (uint32_t)u;
    } else if (!strcmp(key, "clock")) {
      TSR_RETURN_IF(tsr_hal_opt_f64(CPU_NAME, key, val, 1, 5000, &f));
      dev->timing.clock_hz = f * 1e6;
    } else if (!strcmp(key, "bw")) {
      TSR_RETURN_IF(tsr_hal_opt_f64(CPU_NAME, key, val, 1.0 / 64, 4096, &f));
      dev->timing.mem_bytes_per_cycle = f;
    } else if (!strcmp(key, "latency")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 0, 100000, &u));
      dev->timing.mem_latency = (uint32_t)u;
    } else if (!strcmp(key, "threads")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 0, 1024, &u));
      dev->threads = (int)u;
    } else if (!strcmp(key, "fail")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 1, UINT64_MAX, &dev->fail_at));
    } else if (!strcmp(key, "hang")) {
      TSR_RETURN_IF(tsr_hal_opt_u64(CPU_NAME, key, val, 1, UINT64_MAX, &dev->hang_at));
    } else if (!strcmp(key, "lost")) {
      if (val[0]) return TSR_ERR(INVALID_ARGUMENT, "cpu: option 'lost' takes no value");
      dev->lost = true;
    } else {
      return TSR_ERR(INVALID_ARGUMENT,
                     "cpu: unknown option '%s' (known: mem, base, rows, cols, clock, bw, "
                     "latency, threads, fail, hang, lost)", key);
    }
  }
  return err;
}

static tsr_status_t cpu_open(const tsr_hal_open_params_t *params, tsr_hal_device_t **out) {
  *out = NULL;
  if (params && params->index != 0)
    return TSR_ERR(NOT_FOUND, "cpu: there is one cpu device (index 0), not index %d",
                   params->index);
  cpu_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return TSR_ERR(RESOURCE_EXHAUSTED, "cpu: out of host memory");
  dev->base.vt = &tsr_hal_cpu_vtable;
  tsr_km_timing_init(&dev->timing);
  dev->mem.base = 0x80000000ull;
  dev->mem.size = 256ull << 20;
  dev->threads = 1;
  tsr_status_t s = parse_options(dev, params ? params->options : NULL);
  if (!s && dev->threads != 1) s = tsr_threadpool_create(dev->threads, &dev->pool);
  if (s) {
    cpu_close(&dev->base);
    return s;
  }
  dev->mem.size &= ~(uint64_t)4095;
  dev->mem.data = aligned_alloc(4096, dev->mem.size);
  if (!dev->mem.data) {
    cpu_close(&dev->base);
    return TSR_ERR(RESOURCE_EXHAUSTED, "cpu: cannot allocate %" PRIu64
                   " bytes of device memory on the host", dev->mem.size);
  }
  memset(dev->mem.data, 0, dev->mem.size);
  s = tsr_devmem_create(dev->mem.base, dev->mem.size, &dev->dm);
  if (s) {
    cpu_close(&dev->base);
    return s;
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&dev->mu, NULL);
  pthread_cond_init(&dev->cv_work, &ca);
  pthread_cond_init(&dev->cv_done, &ca);
  pthread_condattr_destroy(&ca);
  int rc = pthread_create(&dev->worker, NULL, worker_main, dev);
  if (rc) {
    pthread_cond_destroy(&dev->cv_work);
    pthread_cond_destroy(&dev->cv_done);
    pthread_mutex_destroy(&dev->mu);
    cpu_close(&dev->base);
    return TSR_ERR(RESOURCE_EXHAUSTED, "cpu: cannot start the worker thread (%s)",
                   strerror(rc));
  }
  dev->worker_started = true;
  *out = &dev->base;
  return TSR_OK;
}

static void cpu_query_caps(tsr_hal_device_t *d, tsr_hal_caps_t *out) {
  cpu_device_t *dev = as_cpu(d);
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "cpu (functional model, %ux%u)%s", dev->timing.rows,
           dev->timing.cols, dev->lost ? " [lost]" : "");
  out->array_rows = dev->timing.rows;
  out->array_cols = dev->timing.cols;
  out->max_dim = TSR_HW_MAX_DIM;
  out->mem_size = dev->mem.size;
  out->clock_hz = dev->timing.clock_hz;
  out->mem_bytes_per_cycle = dev->timing.mem_bytes_per_cycle;
  tsr_hal_caps_pcie_defaults(out); /* the model stands for a PCIe board */
  out->ops = (1u << TSR_OP_NOP) | (1u << TSR_OP_GEMM_I8_I32);
}

static tsr_status_t cpu_alloc(tsr_hal_device_t *d, uint64_t size, uint64_t align,
                              tsr_hal_buffer_t *out) {
  cpu_device_t *dev = as_cpu(d);
  memset(out, 0, sizeof *out);
  if (dev->lost) return lost_status();
  return tsr_devmem_buffer_alloc(dev->dm, CPU_NAME, size, align, out);
}

static void cpu_free(tsr_hal_device_t *d, tsr_hal_buffer_t *buf) {
  cpu_device_t *dev = as_cpu(d);
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

static tsr_status_t cpu_write(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf,
                              uint64_t offset, const void *src, size_t n) {
  cpu_device_t *dev = as_cpu(d);
  if (dev->lost) return lost_status();
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, CPU_NAME, buf, offset, n, "write"));
  if (n) memcpy(dev->mem.data + (buf->addr - dev->mem.base) + offset, src, n);
  return TSR_OK;
}

static tsr_status_t cpu_read(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf,
                             uint64_t offset, void *dst, size_t n) {
  cpu_device_t *dev = as_cpu(d);
  if (dev->lost) return lost_status();
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, CPU_NAME, buf, offset, n, "read"));
  if (n) memcpy(dst, dev->mem.data + (buf->addr - dev->mem.base) + offset, n);
  return TSR_OK;
}

static tsr_status_t cpu_submit(tsr_hal_device_t *d, const tsr_hal_command_t *cmd,
                               uint64_t *out_fence) {
  cpu_device_t *dev = as_cpu(d);
  *out_fence = 0;
  if (dev->lost) return lost_status();
  if (!cmd) return TSR_ERR(INVALID_ARGUMENT, "cpu: submit: NULL command");
  pthread_mutex_lock(&dev->mu);
  /* Keep the results of the last KEEP_DONE finished commands only, so a
   * long run does not grow without bound. */
  if (dev->next_run >= 2 * KEEP_DONE) {
    uint64_t drop = dev->next_run - KEEP_DONE;
    memmove(dev->cmds, dev->cmds + drop, (dev->n_cmds - drop) * sizeof *dev->cmds);
    dev->n_cmds -= drop;
    dev->next_run -= drop;
    dev->base_fence += drop;
  }
  if (dev->n_cmds == dev->cap_cmds) {
    uint64_t cap = dev->cap_cmds ? dev->cap_cmds * 2 : 64;
    cpu_cmd_t *p = realloc(dev->cmds, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&dev->mu);
      return TSR_ERR(RESOURCE_EXHAUSTED, "cpu: submit: out of host memory");
    }
    dev->cmds = p;
    dev->cap_cmds = cap;
  }
  cpu_cmd_t *c = &dev->cmds[dev->n_cmds++];
  memset(c, 0, sizeof *c);
  c->cmd = *cmd;
  c->state = CMD_QUEUED;
  *out_fence = dev->base_fence + dev->n_cmds;
  atomic_fetch_add(&dev->published, 1);
  /* A busy or spinning worker finds the command when it finishes the current one:
   * waking it is only needed when it sleeps (saves a futex call per launch
   * while two launches are in flight). */
  if (dev->idle) pthread_cond_signal(&dev->cv_work);
  pthread_mutex_unlock(&dev->mu);
  return TSR_OK;
}

static tsr_status_t cpu_wait(tsr_hal_device_t *d, uint64_t fence, uint64_t timeout_ns,
                             tsr_hal_result_t *out) {
  cpu_device_t *dev = as_cpu(d);
  if (out) memset(out, 0, sizeof *out);
  if (dev->lost) return lost_status();
  pthread_mutex_lock(&dev->mu);
  if (fence == 0 || fence > dev->base_fence + dev->n_cmds) {
    uint64_t n = dev->base_fence + dev->n_cmds;
    pthread_mutex_unlock(&dev->mu);
    return TSR_ERR(INVALID_ARGUMENT, "cpu: wait: fence %" PRIu64 " was never issued "
                   "(last is %" PRIu64 ")", fence, n);
  }
  if (fence <= dev->base_fence) {
    pthread_mutex_unlock(&dev->mu);
    return TSR_ERR(NOT_FOUND, "cpu: wait: the result of fence %" PRIu64 " is no longer "
                   "kept (only the last %d finished commands are)", fence, KEEP_DONE);
  }
  const uint64_t base0 = dev->base_fence;
  uint64_t now = tsr_hal_now_ns();
  uint64_t deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
  struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ull),
                        .tv_nsec = (long)(deadline % 1000000000ull)};
  tsr_status_t s = TSR_OK;
  for (;;) {
    /* Compaction only happens in submit(), which this thread is not in. */
    const cpu_cmd_t *c = &dev->cmds[fence - 1 - base0];
    enum cmd_state st = c->state;
    if (st == CMD_DONE) {
      if (out) *out = c->res;
      break;
    }
    if (st == CMD_ABORTED) {
      s = TSR_ERR(DEVICE, "cpu: command %" PRIu64 " was aborted by a reset", fence);
      break;
    }
    if (deadline == UINT64_MAX) {
      pthread_cond_wait(&dev->cv_done, &dev->mu);
      continue;
    }
    if (tsr_hal_now_ns() >= deadline) {
      s = TSR_ERR(DEADLINE_EXCEEDED, "cpu: command %" PRIu64 " not done after %" PRIu64
                  " ns%s", fence, timeout_ns,
                  st == CMD_HUNG ? " (the device hung; reset it)" : "");
      break;
    }
    pthread_cond_timedwait(&dev->cv_done, &dev->mu, &ts);
  }
  pthread_mutex_unlock(&dev->mu);
  return s;
}

static tsr_status_t cpu_reset(tsr_hal_device_t *d) {
  cpu_device_t *dev = as_cpu(d);
  if (dev->lost) return lost_status();
  pthread_mutex_lock(&dev->mu);
  /* A launch in the model always finishes; let it, then drop the queue. */
  while (dev->running) pthread_cond_wait(&dev->cv_done, &dev->mu);
  for (uint64_t i = dev->next_run; i < dev->n_cmds; i++) dev->cmds[i].state = CMD_ABORTED;
  dev->next_run = dev->n_cmds;
  pthread_cond_broadcast(&dev->cv_done);
  pthread_cond_broadcast(&dev->cv_work);
  pthread_mutex_unlock(&dev->mu);
  return TSR_OK;
}

const tsr_hal_vtable_t tsr_hal_cpu_vtable = {
    .name = CPU_NAME,
    .open = cpu_open,
    .close = cpu_close,
    .query_caps = cpu_query_caps,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .write = cpu_write,
    .read = cpu_read,
    .submit = cpu_submit,
    .wait = cpu_wait,
    .reset = cpu_reset,
};
