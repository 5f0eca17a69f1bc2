/*
 * hal.h - the device HAL: one vtable every backend implements.
 *
 * Internal header (the executor and the CLI use it; applications do not).
 * A device owns a flat device memory. The host allocates buffers in it,
 * copies data in and out, and submits commands: a command is one kernel
 * launch over a ring of descriptors (hw/regmap.def) in device memory, with
 * the buffer window the kernel may touch. Submission is asynchronous and
 * returns a fence; wait() blocks on a fence with a timeout. All backends
 * share one command queue (driver/queue.h) for fences, completions,
 * deadlines and reset; any thread may call any member (see the vtable).
 *
 * Backends: fmodel (the kernel's functional model, driver/fmodel), sim
 * (Verilator RTL, driver/sim), opencl, xrt, usb. "cpu" is never a HAL
 * backend: it names the host everywhere. A backend whose library or
 * hardware is absent fails open() with TSR_STATUS_UNAVAILABLE and a reason.
 */
#ifndef TSR_HAL_H
#define TSR_HAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/options.h"
#include "tessera.h"

typedef struct tsr_hal_device tsr_hal_device_t;
typedef struct tsr_hal_vtable tsr_hal_vtable_t;

/* A region of device memory. `addr` is the device address the kernel sees. */
typedef struct tsr_hal_buffer {
  uint64_t addr;
  uint64_t size;
  void *impl; /* backend-private handle (e.g. an XRT BO), may be NULL */
} tsr_hal_buffer_t;

/* What a device can do; filled by query_caps(). */
typedef struct tsr_hal_caps {
  char name[64];           /* e.g. "sim (Verilator RTL, 16x16)"             */
  uint32_t array_rows;     /* MAC array rows (M direction)                  */
  uint32_t array_cols;     /* MAC array columns (N direction)               */
  uint32_t max_dim;        /* largest M, N, K per descriptor                */
  uint64_t mem_size;       /* device memory in bytes                        */
  double clock_hz;         /* kernel clock the cycle counts refer to        */
  double mem_bytes_per_cycle; /* modeled read bandwidth of one memory channel */
  double link_bytes_per_s; /* host<->device bandwidth                       */
  double link_latency_s;   /* fixed cost per host<->device transfer         */
  double launch_latency_s; /* fixed cost per kernel launch                  */
  uint32_t ops;            /* bit mask of supported TSR_OP_* opcodes        */
  uint32_t flags;          /* TSR_HAL_CAP_* bits                            */
  uint32_t mem_ports;      /* read ports, each on its own memory channel of
                              mem_bytes_per_cycle (0 is taken as 1)         */
  uint32_t mem_latency;    /* modeled cycles from a read request to its first
                              data (0: unknown, the timing's default)      */
  char board[32];          /* board profile the figures come from
                              (driver/board.h), "" when the backend's own  */
  double doorbell_latency_s; /* TSR_HAL_CAP_QUEUE: fixed cost of one more
                              ring on a running queue (the doorbell write
                              and the read that sees it done)               */
  double host_mem_latency_s; /* TSR_HAL_CAP_HOST_MEM: the kernel's latency
                              to a buffer in host memory over the link     */
} tsr_hal_caps_t;

/* caps.flags: the device runs the host flow but computes nothing (XRT's
 * noop shim). Its results must never be used: the partitioner gives it no
 * work and `tessera gemm` says its checksum is not a result. */
#define TSR_HAL_CAP_NO_COMPUTE (1u << 0)
/* caps.flags: the device runs queue mode (hw/regmap.def Q_CTRL, Q_TAIL): a
 * launch submitted with TSR_HAL_CMD_QUEUE stays running over a ring of
 * slots the host refills, driven by the vtable's doorbell() and
 * progress(). One more ring then costs doorbell_latency_s, not a launch. */
#define TSR_HAL_CAP_QUEUE (1u << 1)
/* caps.flags: the host's staging copies (activations, descriptors, results)
 * go to buffers in host memory that the kernel reaches over the link (XRT
 * host_only buffers on a platform with host memory access): each costs
 * host_mem_latency_s instead of a DMA transfer's link_latency_s. The
 * backends that model such a card keep the buffers in their simulated
 * device memory; only the cost differs. */
#define TSR_HAL_CAP_HOST_MEM (1u << 2)

/* The fixed cost of running one more ring on this device as the executor
 * does (a doorbell in queue mode, else a launch), and of one of its staging
 * copies (the kernel's access to host memory, else a DMA transfer). */
static inline double tsr_hal_ring_latency_s(const tsr_hal_caps_t *c) {
  return (c->flags & TSR_HAL_CAP_QUEUE) ? c->doorbell_latency_s : c->launch_latency_s;
}
static inline double tsr_hal_copy_latency_s(const tsr_hal_caps_t *c) {
  return (c->flags & TSR_HAL_CAP_HOST_MEM) ? c->host_mem_latency_s : c->link_latency_s;
}

/* One kernel launch: run `n_desc` descriptors starting at device address
 * `ring`; every address must lie in [window_base, window_base+window_size). */
typedef struct tsr_hal_command {
  uint64_t window_base;
  uint64_t window_size;
  uint64_t ring;
  uint32_t n_desc;
  uint32_t flags; /* TSR_HAL_CMD_* */
} tsr_hal_command_t;

/* command.flags: queue mode (needs TSR_HAL_CAP_QUEUE; others refuse it with
 * INVALID_ARGUMENT): `ring` holds n_desc slots, descriptor i runs from slot
 * i % n_desc once doorbell() has published it; the launch ends when it is
 * closed and every published descriptor ran, or at the first refusal. */
#define TSR_HAL_CMD_QUEUE (1u << 0)

/* What a finished command reports (registers after ap_done). */
typedef struct tsr_hal_result {
  uint32_t hw_status;  /* TSR_HWERR_* */
  uint32_t err_index;  /* failing descriptor when hw_status != 0 */
  uint32_t desc_done;
  uint64_t cycles;     /* busy cycles (from the RTL, or modeled)    */
  uint64_t stall_cycles;
  uint64_t bytes_rd, bytes_wr, macs;
} tsr_hal_result_t;

/* Parameters for open(); `options` is parsed against the backend's option
 * table (the vtable's `options`): unknown keys and values outside an
 * option's range are rejected ("key=value,key=value", may be NULL). */
typedef struct tsr_hal_open_params {
  int index;            /* which device of this backend (0 = first)       */
  const char *options;  /* backend-specific, borrowed                     */
} tsr_hal_open_params_t;

/* The vtable. Every member is required unless marked optional.
 *
 * Threads: every call on a device is safe from any thread at any time
 * (except close(), which must be the last call, made once no other call is
 * in flight). Fences are handed out by the device's command queue
 * (driver/queue.h) under its lock, so fences from concurrent submits are
 * distinct and ordered; alloc/free are guarded by the allocator's lock;
 * wait() never holds the device lock while it sleeps, so a submit from
 * another thread is not stalled by a waiter. Where the device itself is
 * single-threaded (the simulator, a USB link) its calls take turns under
 * the device lock. Concurrent copies into memory that a running launch (or
 * another copy) uses are the caller's race, as on hardware. */
struct tsr_hal_vtable {
  const char *name; /* "fmodel", "sim", ... */
  /* Opens a device. Sets *out = NULL first. UNAVAILABLE when the backend's
   * library or hardware is missing, with the reason in the message. */
  tsr_status_t (*open)(const tsr_hal_open_params_t *params, tsr_hal_device_t **out);
  /* Releases everything; outstanding commands are abandoned. No other call
   * on the device may be in flight or follow. */
  void (*close)(tsr_hal_device_t *dev);
  void (*query_caps)(tsr_hal_device_t *dev, tsr_hal_caps_t *out);
  /* Allocates `size` bytes aligned to `align` (power of two, >= 64). */
  tsr_status_t (*alloc)(tsr_hal_device_t *dev, uint64_t size, uint64_t align,
                        tsr_hal_buffer_t *out);
  void (*free)(tsr_hal_device_t *dev, tsr_hal_buffer_t *buf);
  /* Host -> device copy of n bytes at buf->addr + offset. Range-checked. */
  tsr_status_t (*write)(tsr_hal_device_t *dev, const tsr_hal_buffer_t *buf,
                        uint64_t offset, const void *src, size_t n);
  /* Device -> host copy. Range-checked. */
  tsr_status_t (*read)(tsr_hal_device_t *dev, const tsr_hal_buffer_t *buf,
                       uint64_t offset, void *dst, size_t n);
  /* Queues a launch; returns a fence that identifies it. May return before
   * the command runs. */
  tsr_status_t (*submit)(tsr_hal_device_t *dev, const tsr_hal_command_t *cmd,
                         uint64_t *out_fence);
  /* Waits until `fence` completes or `timeout_ns` passes
   * (DEADLINE_EXCEEDED). Fills *out (optional) for that command. A command
   * the kernel refused is a success of wait() with out->hw_status != 0. */
  tsr_status_t (*wait)(tsr_hal_device_t *dev, uint64_t fence, uint64_t timeout_ns,
                       tsr_hal_result_t *out);
  /* Aborts outstanding work and returns the device to idle. Buffers and
   * their contents survive a reset. */
  tsr_status_t (*reset)(tsr_hal_device_t *dev);
  /* Optional (NULL where the backend has no queue mode; usable when the
   * caps have TSR_HAL_CAP_QUEUE). For the queue-mode
   * launch `fence`: publishes its descriptors up to `tail` (counted from 0
   * since it began; at most n_desc past those done) and, with `close`, has
   * it end once they ran. Returns before they run. */
  tsr_status_t (*doorbell)(tsr_hal_device_t *dev, uint64_t fence, uint32_t tail, int close);
  /* Waits until the queue-mode launch `fence` completed `done` descriptors,
   * or ended (refused one, or closed: *out then is what wait() reports),
   * or `timeout_ns` passed (DEADLINE_EXCEEDED). *out: its counters since it
   * began (hw_status, err_index, desc_done, cycles, bytes, macs). */
  tsr_status_t (*progress)(tsr_hal_device_t *dev, uint64_t fence, uint32_t done,
                           uint64_t timeout_ns, tsr_hal_result_t *out);
  /* Optional (NULL when the backend has none): prints the backend's own
   * counters (e.g. a link's frames and retries) to `f` as lines indented by
   * two spaces. Called by the runtime's --stats report, also for a device
   * that was declared lost. */
  void (*print_stats)(tsr_hal_device_t *dev, FILE *f);
  /* The options open() takes (base/options.h: name, type, range, help),
   * n_options rows; what `tessera devices` prints. */
  const tsr_opt_spec_t *options;
  size_t n_options;
};

/* Every device object starts with this header. */
struct tsr_hal_device {
  const tsr_hal_vtable_t *vt;
};

/* Registry: the backends compiled into this library, in preference order
 * (the fmodel functional model last). */
const tsr_hal_vtable_t *const *tsr_hal_backends(size_t *count);
/* Looks a backend up by name; NULL if unknown. */
const tsr_hal_vtable_t *tsr_hal_find(const char *name);
/* Opens "name" or "name:options" (e.g. "sim:latency=100"). */
tsr_status_t tsr_hal_open(const char *spec, tsr_hal_device_t **out);
/* Checks a spec as tsr_hal_open() parses it (a known backend, options
 * against its table: names, types, ranges) without opening anything. The
 * checks a backend makes after parsing (e.g. fmodel's base alignment) and
 * the presence of its hardware are not covered. */
tsr_status_t tsr_hal_check_spec(const char *spec);
static inline void tsr_hal_close(tsr_hal_device_t *dev) {
  if (dev) dev->vt->close(dev);
}

/* Human-readable text for a TSR_HWERR_* code. */
const char *tsr_hal_hwerr_name(uint32_t code);

#endif /* TSR_HAL_H */
