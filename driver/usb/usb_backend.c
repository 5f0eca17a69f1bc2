/*
 * usb_backend.c - backend "usb": a tessera board on USB, through libusb-1.0.
 *
 * libusb is loaded with dlopen ("libusb-1.0.so.0"), so libtessera runs
 * without it; when it is missing, or no board is attached, open() fails with
 * UNAVAILABLE and says which. The board is found by VID:PID, its first
 * interface is claimed, and its first bulk OUT and bulk IN endpoints carry
 * the protocol of usb_proto.h through usb_link.c (pipelined asynchronous
 * transfers, CRC, retransmission; see README.md).
 *
 * Device memory is the board's; this side keeps the allocator (devmem) so
 * alloc/free cost no bus traffic. write/read become MEM_WRITE/MEM_READ
 * chunks, submit a RUN (the board queues launches), wait polls STATUS,
 * reset sends RESET. A board that vanishes (unplug, transfer errors that
 * report no device) turns every later call into UNAVAILABLE; the process
 * never crashes because of it.
 *
 * Fences, completions, deadlines and reset go through the shared command
 * queue (driver/queue.h). The link is single-threaded, so every use of it
 * (a copy, a RUN, a STATUS poll, a RESET) runs under the queue's lock:
 * calls from several threads are safe and take turns on the bus; a long
 * copy holds the bus (and the lock) until it is done, and a submit to a
 * full board queue holds it while it waits for room.
 *
 * Options ("usb:key=value,..."):
 *   vid=, pid=      board identity (default 0x1209:0x0001, the pid.codes
 *                   test pair; see TSR_USB_DEFAULT_VID/PID)
 *   chunk=SIZE      payload bytes per frame (default 256K, up to 1M)
 *   inflight=N      frames in flight each way (default 8, 1..64)
 *   timeout=MS      resend a request unanswered after MS ms (default 100)
 *   retries=N       resends of one frame before DEVICE (default 10)
 *   poll=US         first STATUS poll interval in wait() (default 50 us,
 *                   doubling up to 2 ms)
 *   stats           print the link counters to stderr at close
 *   board=NAME      a board profile (driver/board.h; default usb3-artix7,
 *                   the edge board this protocol speaks to) for the link's
 *                   bandwidth and per-transfer cost and the launch cost; the
 *                   array, clock and memory are what the board reports
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <libusb-1.0/libusb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "driver/tsr_regmap.h"

#include "base/dl.h"
#include "driver/board.h"
#include "driver/devmem.h"
#include "driver/hal_impl.h"
#include "driver/queue.h"
#include "base/status.h"
#include "usb.h"
#include "usb_link.h"
#include "usb_proto.h"

#define USB_NAME "usb"
#define USB_LIB_FILE "libusb-1.0.so.0"
#define USB_MAX_WINDOW 64
#define USB_BATCH 256 /* requests per tsr_usb_link_run() of a long copy */
/* How long submit() waits for room in a full launch queue. */
#define USB_BUSY_WAIT_NS (60ull * 1000000000ull)

/* Entry points resolved from libusb. */
typedef struct usb_api {
  int (*init)(libusb_context **);
  void (*exit)(libusb_context *);
  ssize_t (*get_device_list)(libusb_context *, libusb_device ***);
  void (*free_device_list)(libusb_device **, int);
  int (*get_device_descriptor)(libusb_device *, struct libusb_device_descriptor *);
  int (*open)(libusb_device *, libusb_device_handle **);
  void (*close)(libusb_device_handle *);
  int (*set_auto_detach_kernel_driver)(libusb_device_handle *, int);
  int (*claim_interface)(libusb_device_handle *, int);
  int (*release_interface)(libusb_device_handle *, int);
  int (*get_active_config_descriptor)(libusb_device *, struct libusb_config_descriptor **);
  void (*free_config_descriptor)(struct libusb_config_descriptor *);
  struct libusb_transfer *(*alloc_transfer)(int);
  void (*free_transfer)(struct libusb_transfer *);
  int (*submit_transfer)(struct libusb_transfer *);
  int (*cancel_transfer)(struct libusb_transfer *);
  int (*handle_events_timeout_completed)(libusb_context *, struct timeval *, int *);
  const char *(*error_name)(int);
  uint8_t (*get_bus_number)(libusb_device *);
  uint8_t (*get_device_address)(libusb_device *);
  libusb_device *(*get_device)(libusb_device_handle *);
} usb_api_t;

/* A launch the board accepted keeps its tag in aux[0]. */
#define TAG aux[0]

typedef struct usb_xfer {
  struct usb_device *dev;
  unsigned slot;
  bool in;
  struct libusb_transfer *t;
} usb_xfer_t;

typedef struct usb_device {
  tsr_hal_device_t base; /* must be first */
  void *lib;
  usb_api_t api;
  libusb_context *ctx;
  libusb_device_handle *h;
  bool claimed;
  unsigned char ep_out, ep_in;
  usb_xfer_t out_x[USB_MAX_WINDOW], in_x[USB_MAX_WINDOW];
  tsr_usb_link_t *link;
  tsr_usb_info_t info;
  uint32_t ops; /* the opcodes the board runs (HW_OPS) */
  tsr_devmem_t *dm;
  tsr_usb_req_t *batch; /* (USB_BATCH) */
  /* options */
  uint64_t vid, pid, chunk, window, timeout_ms, retries, poll_us;
  bool print_stats;
  char board_name[256];
  tsr_board_t board;
  uint8_t bus, addr;
  tsr_queue_t q; /* fences, completions, and the lock of the link */
} usb_device_t;

static usb_device_t *as_usb(tsr_hal_device_t *d) { return (usb_device_t *)d; }

/* The edge where libusb's negative return codes become statuses. */
static tsr_status_t usb_status(const usb_api_t *api, int rc, const char *what) {
  const char *name = api && api->error_name ? api->error_name(rc) : "?";
  switch (rc) {
    case LIBUSB_ERROR_NO_DEVICE:
      return TSR_ERR(UNAVAILABLE, "usb: %s: the board is gone (%s)", what, name);
    case LIBUSB_ERROR_ACCESS:
    case LIBUSB_ERROR_BUSY:
    case LIBUSB_ERROR_NOT_FOUND:
    case LIBUSB_ERROR_NOT_SUPPORTED:
      return TSR_ERR(UNAVAILABLE, "usb: %s: %s", what, name);
    case LIBUSB_ERROR_TIMEOUT:
      return TSR_ERR(DEADLINE_EXCEEDED, "usb: %s: %s", what, name);
    case LIBUSB_ERROR_NO_MEM:
      return TSR_ERR(RESOURCE_EXHAUSTED, "usb: %s: %s", what, name);
    case LIBUSB_ERROR_IO:
    case LIBUSB_ERROR_INTERRUPTED:
      return TSR_ERR(IO, "usb: %s: %s", what, name);
    default:
      return TSR_ERR(DEVICE, "usb: %s: %s (%d)", what, name, rc);
  }
}

#define USB_CHECK(dev, expr, what)                                 \
  do {                                                             \
    int usb_rc_ = (expr);                                          \
    if (usb_rc_ < 0) return usb_status(&(dev)->api, usb_rc_, what); \
  } while (0)

static tsr_status_t load_api(usb_device_t *dev) {
  const char *paths[1] = {USB_LIB_FILE};
  TSR_RETURN_IF(tsr_dl_open(USB_NAME, paths, 1, RTLD_NOW | RTLD_LOCAL,
                            "libusb-1.0 is not installed: install libusb-1.0-0", &dev->lib,
                            NULL));
  const tsr_dl_sym_t syms[] = {
      {"libusb_init", (void **)&dev->api.init},
      {"libusb_exit", (void **)&dev->api.exit},
      {"libusb_get_device_list", (void **)&dev->api.get_device_list},
      {"libusb_free_device_list", (void **)&dev->api.free_device_list},
      {"libusb_get_device_descriptor", (void **)&dev->api.get_device_descriptor},
      {"libusb_open", (void **)&dev->api.open},
      {"libusb_close", (void **)&dev->api.close},
      {"libusb_set_auto_detach_kernel_driver", (void **)&dev->api.set_auto_detach_kernel_driver},
      {"libusb_claim_interface", (void **)&dev->api.claim_interface},
      {"libusb_release_interface", (void **)&dev->api.release_interface},
      {"libusb_get_active_config_descriptor", (void **)&dev->api.get_active_config_descriptor},
      {"libusb_free_config_descriptor", (void **)&dev->api.free_config_descriptor},
      {"libusb_alloc_transfer", (void **)&dev->api.alloc_transfer},
      {"libusb_free_transfer", (void **)&dev->api.free_transfer},
      {"libusb_submit_transfer", (void **)&dev->api.submit_transfer},
      {"libusb_cancel_transfer", (void **)&dev->api.cancel_transfer},
      {"libusb_handle_events_timeout_completed",
       (void **)&dev->api.handle_events_timeout_completed},
      {"libusb_error_name", (void **)&dev->api.error_name},
      {"libusb_get_bus_number", (void **)&dev->api.get_bus_number},
      {"libusb_get_device_address", (void **)&dev->api.get_device_address},
      {"libusb_get_device", (void **)&dev->api.get_device},
  };
  return tsr_dl_resolve(USB_NAME, dev->lib, USB_LIB_FILE, syms, sizeof syms / sizeof syms[0],
                        "libusb too old?");
}

/* ---- the transport: libusb asynchronous bulk transfers ---------------- */

static tsr_usb_xfer_status_t xfer_status(enum libusb_transfer_status st) {
  switch (st) {
    case LIBUSB_TRANSFER_COMPLETED: return TSR_USB_X_OK;
    case LIBUSB_TRANSFER_TIMED_OUT: return TSR_USB_X_TIMEOUT;
    case LIBUSB_TRANSFER_CANCELLED: return TSR_USB_X_CANCELLED;
    case LIBUSB_TRANSFER_NO_DEVICE: return TSR_USB_X_GONE;
    default: return TSR_USB_X_ERROR;
  }
}

static void LIBUSB_CALL on_transfer(struct libusb_transfer *t) {
  usb_xfer_t *x = t->user_data;
  usb_device_t *dev = x->dev;
  if (!dev->link) return;
  if (x->in)
    tsr_usb_link_received(dev->link, x->slot, (size_t)t->actual_length, xfer_status(t->status));
  else
    tsr_usb_link_sent(dev->link, x->slot, xfer_status(t->status));
}

static void tr_bind(void *impl, tsr_usb_link_t *link) { ((usb_device_t *)impl)->link = link; }

static tsr_status_t tr_send(void *impl, unsigned slot, uint8_t *buf, size_t n,
                            uint32_t timeout_ms) {
  usb_device_t *dev = impl;
  struct libusb_transfer *t = dev->out_x[slot].t;
  libusb_fill_bulk_transfer(t, dev->h, dev->ep_out, buf, (int)n, on_transfer, &dev->out_x[slot],
                            timeout_ms);
  USB_CHECK(dev, dev->api.submit_transfer(t), "submitting an OUT transfer");
  return TSR_OK;
}

static tsr_status_t tr_recv(void *impl, unsigned slot, uint8_t *buf, size_t cap) {
  usb_device_t *dev = impl;
  struct libusb_transfer *t = dev->in_x[slot].t;
  libusb_fill_bulk_transfer(t, dev->h, dev->ep_in, buf, (int)cap, on_transfer, &dev->in_x[slot],
                            0);
  USB_CHECK(dev, dev->api.submit_transfer(t), "submitting an IN transfer");
  return TSR_OK;
}

static tsr_status_t tr_pump(void *impl, uint64_t timeout_ns) {
  usb_device_t *dev = impl;
  struct timeval tv = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                       .tv_usec = (suseconds_t)(timeout_ns % 1000000000ull / 1000)};
  int rc = dev->api.handle_events_timeout_completed(dev->ctx, &tv, NULL);
  if (rc == LIBUSB_ERROR_INTERRUPTED) return TSR_OK;
  USB_CHECK(dev, rc, "handling transfer events");
  return TSR_OK;
}

static void tr_cancel_all(void *impl) {
  usb_device_t *dev = impl;
  for (uint64_t i = 0; i < dev->window; i++)
    if (dev->in_x[i].t) dev->api.cancel_transfer(dev->in_x[i].t); /* NOT_FOUND if idle */
}

/* ---- helpers --------------------------------------------------------- */

static tsr_status_t run_reqs(usb_device_t *dev, tsr_usb_req_t *r, size_t n, uint64_t payload) {
  return tsr_usb_link_run(dev->link, r, n, payload);
}

/* Converts a board refusal into a status. */
static tsr_status_t board_error(const tsr_usb_req_t *r) {
  const char *what = tsr_usb_type_name(r->type);
  if (r->r_arg0 == TSR_USB_E_RANGE)
    return TSR_ERR(OUT_OF_RANGE, "usb: board refused %s at 0x%" PRIx64 ": %s", what, r->addr,
                   tsr_usb_error_name(r->r_arg0));
  return TSR_ERR(DEVICE, "usb: board refused %s (addr 0x%" PRIx64 "): %s (detail %" PRIu32 ")",
                 what, r->addr, tsr_usb_error_name(r->r_arg0), r->r_arg1);
}

/* One request, answered. */
static tsr_status_t one(usb_device_t *dev, tsr_usb_req_t *r) {
  TSR_RETURN_IF(run_reqs(dev, r, 1, 0));
  if (r->r_flags & TSR_USB_F_ERR) return board_error(r);
  return TSR_OK;
}

/* Moves n bytes between host memory and device address `addr`, in chunks,
 * USB_BATCH requests per pipelined batch. */
static tsr_status_t mem_copy(usb_device_t *dev, bool to_device, uint64_t addr, uint8_t *p,
                             size_t n) {
  const uint32_t chunk = tsr_usb_link_max_payload(dev->link);
  size_t done = 0;
  while (done < n) {
    size_t k = 0, start = done;
    for (; k < USB_BATCH && done < n; k++) {
      uint32_t len = (uint32_t)(n - done < chunk ? n - done : chunk);
      tsr_usb_req_t *r = &dev->batch[k];
      memset(r, 0, sizeof *r);
      r->addr = addr + done;
      if (to_device) {
        r->type = TSR_USB_T_MEM_WRITE;
        r->out = p + done;
        r->out_len = len;
      } else {
        r->type = TSR_USB_T_MEM_READ;
        r->arg0 = len;
        r->in = p + done;
        r->in_cap = len;
      }
      done += len;
    }
    TSR_RETURN_IF_ERROR(run_reqs(dev, dev->batch, k, done - start),
                        "usb: %s of %zu bytes at 0x%" PRIx64,
                        to_device ? "write" : "read", n, addr);
    for (size_t i = 0; i < k; i++) {
      tsr_usb_req_t *r = &dev->batch[i];
      if (r->r_flags & TSR_USB_F_ERR) return board_error(r);
      if (!to_device && r->r_len != r->in_cap)
        return TSR_ERR(DEVICE, "usb: MEM_READ at 0x%" PRIx64 " returned %" PRIu32
                       " of %" PRIu32 " bytes", r->addr, r->r_len, r->in_cap);
    }
  }
  return TSR_OK;
}

/* ---- HAL ----------------------------------------------------------- */

static void usb_close(tsr_hal_device_t *d) {
  usb_device_t *dev = as_usb(d);
  if (!dev) return;
  if (dev->link && dev->print_stats) {
    tsr_usb_stats_t st;
    tsr_usb_link_stats(dev->link, &st);
    tsr_usb_print_stats(&st, stderr);
  }
  tsr_usb_link_destroy(dev->link);
  dev->link = NULL;
  for (unsigned i = 0; i < USB_MAX_WINDOW; i++) {
    if (dev->out_x[i].t) dev->api.free_transfer(dev->out_x[i].t);
    if (dev->in_x[i].t) dev->api.free_transfer(dev->in_x[i].t);
  }
  if (dev->claimed) dev->api.release_interface(dev->h, 0);
  if (dev->h) dev->api.close(dev->h);
  if (dev->ctx) dev->api.exit(dev->ctx);
  if (dev->lib) dlclose(dev->lib);
  tsr_queue_destroy(&dev->q);
  tsr_devmem_destroy(dev->dm);
  free(dev->batch);
  free(dev);
}

static const tsr_opt_spec_t usb_options[] = {
    TSR_OPT_ROW_U64(usb_device_t, vid, "vid", 0, 0xffff, "board USB vendor id (default 0x1209)"),
    TSR_OPT_ROW_U64(usb_device_t, pid, "pid", 0, 0xffff, "board USB product id (default 0x0001)"),
    TSR_OPT_ROW_U64(usb_device_t, chunk, "chunk", 64, TSR_USB_MAX_PAYLOAD,
                    "payload bytes per frame (default 256K)"),
    TSR_OPT_ROW_U64(usb_device_t, window, "inflight", 1, USB_MAX_WINDOW,
                    "frames in flight each way (default 8)"),
    TSR_OPT_ROW_U64(usb_device_t, timeout_ms, "timeout", 1, 600000,
                    "resend a request unanswered after this many ms (default 100)"),
    TSR_OPT_ROW_U64(usb_device_t, retries, "retries", 0, 1000,
                    "resends of one frame before DEVICE (default 10)"),
    TSR_OPT_ROW_U64(usb_device_t, poll_us, "poll", 1, 1000000,
                    "first STATUS poll interval in us in wait (default 50, doubling to 2 ms)"),
    TSR_OPT_ROW_BOOL(usb_device_t, print_stats, "stats", "print the link counters at close"),
    TSR_OPT_ROW_STR(usb_device_t, board_name, "board", TSR_OPT_NONEMPTY,
                    "board profile for the link and launch costs (default usb3-artix7)"),
};
#define USB_N_OPTIONS (sizeof usb_options / sizeof usb_options[0])

static tsr_status_t parse_options(usb_device_t *dev, const char *options) {
  snprintf(dev->board_name, sizeof dev->board_name, "usb3-artix7");
  TSR_RETURN_IF(tsr_opts_parse(USB_NAME, usb_options, USB_N_OPTIONS, options, dev));
  TSR_RETURN_IF_ERROR(tsr_board_load(dev->board_name, &dev->board), "usb: option board=%s",
                      dev->board_name);
  return TSR_OK;
}

/* Finds the index-th board with the configured VID:PID and opens it. */
static tsr_status_t find_board(usb_device_t *dev, int index) {
  libusb_device **list = NULL;
  ssize_t n = dev->api.get_device_list(dev->ctx, &list);
  if (n < 0) return usb_status(&dev->api, (int)n, "listing USB devices");
  libusb_device *found = NULL;
  int seen = 0;
  for (ssize_t i = 0; i < n && !found; i++) {
    struct libusb_device_descriptor dd;
    if (dev->api.get_device_descriptor(list[i], &dd) < 0) continue;
    if (dd.idVendor == dev->vid && dd.idProduct == dev->pid && seen++ == index) found = list[i];
  }
  tsr_status_t s = TSR_OK;
  if (!found) {
    s = TSR_ERR(UNAVAILABLE, "usb: no board %04" PRIx64 ":%04" PRIx64 " (index %d) among %zd "
                "USB device(s); options vid=, pid= select another", dev->vid, dev->pid, index,
                n);
  } else {
    dev->bus = dev->api.get_bus_number(found);
    dev->addr = dev->api.get_device_address(found);
    int rc = dev->api.open(found, &dev->h);
    if (rc < 0) {
      dev->h = NULL;
      s = usb_status(&dev->api, rc, "opening the board");
    }
  }
  dev->api.free_device_list(list, 1);
  return s;
}

/* Claims interface 0 and picks its first bulk OUT and IN endpoints. */
static tsr_status_t claim(usb_device_t *dev) {
  int rc = dev->api.set_auto_detach_kernel_driver(dev->h, 1);
  if (rc < 0 && rc != LIBUSB_ERROR_NOT_SUPPORTED)
    return usb_status(&dev->api, rc, "detaching kernel drivers");
  USB_CHECK(dev, dev->api.claim_interface(dev->h, 0), "claiming interface 0");
  dev->claimed = true;
  struct libusb_config_descriptor *cd = NULL;
  USB_CHECK(dev, dev->api.get_active_config_descriptor(dev->api.get_device(dev->h), &cd),
            "reading the configuration descriptor");
  if (cd->bNumInterfaces >= 1 && cd->interface[0].num_altsetting >= 1) {
    const struct libusb_interface_descriptor *id = &cd->interface[0].altsetting[0];
    for (int e = 0; e < id->bNumEndpoints; e++) {
      const struct libusb_endpoint_descriptor *ed = &id->endpoint[e];
      if ((ed->bmAttributes & 3) != LIBUSB_TRANSFER_TYPE_BULK) continue;
      if ((ed->bEndpointAddress & 0x80) && !dev->ep_in) dev->ep_in = ed->bEndpointAddress;
      if (!(ed->bEndpointAddress & 0x80) && !dev->ep_out) dev->ep_out = ed->bEndpointAddress;
    }
  }
  dev->api.free_config_descriptor(cd);
  if (!dev->ep_in || !dev->ep_out)
    return TSR_ERR(UNAVAILABLE, "usb: device %04" PRIx64 ":%04" PRIx64 " has no bulk IN/OUT "
                   "pair on interface 0: not a tessera board", dev->vid, dev->pid);
  return TSR_OK;
}

static tsr_status_t hello(usb_device_t *dev, uint32_t nonce) {
  uint8_t info[TSR_USB_INFO_BYTES];
  tsr_usb_req_t r = {.type = TSR_USB_T_HELLO, .arg0 = nonce, .in = info,
                     .in_cap = sizeof info};
  TSR_RETURN_IF_ERROR(one(dev, &r), "usb: greeting the board");
  if (r.r_len != TSR_USB_INFO_BYTES)
    return TSR_ERR(DEVICE, "usb: HELLO answer has %" PRIu32 " bytes, expected %u", r.r_len,
                   TSR_USB_INFO_BYTES);
  tsr_usb_info_unpack(&dev->info, info);
  if (dev->info.proto_version != TSR_USB_VERSION)
    return TSR_ERR(UNAVAILABLE, "usb: board speaks protocol %" PRIu32 ", this driver %u",
                   dev->info.proto_version, TSR_USB_VERSION);
  if (dev->info.max_payload < dev->chunk)
    return TSR_ERR(INVALID_ARGUMENT, "usb: chunk=%" PRIu64 " exceeds the board's %" PRIu32
                   "-byte frames", dev->chunk, dev->info.max_payload);
  if (dev->info.mem_size == 0 || dev->info.mem_base % TSR_DEVMEM_MIN_ALIGN)
    return TSR_ERR(DEVICE, "usb: board announces unusable memory (base 0x%" PRIx64 ", %" PRIu64
                   " bytes)", dev->info.mem_base, dev->info.mem_size);
  return TSR_OK;
}

/* The opcodes the board's kernel runs: HW_OPS from interface version 3 on,
 * NOP and GEMM before it. */
static tsr_status_t read_ops(usb_device_t *dev) {
  tsr_usb_req_t r = {.type = TSR_USB_T_REG_READ, .addr = TSR_STAT_HW_INFO};
  TSR_RETURN_IF_ERROR(one(dev, &r), "usb: reading HW_INFO");
  const uint32_t info = r.r_arg0;
  uint32_t ops = 0;
  if ((info >> 16 & 0xff) >= 3) {
    r = (tsr_usb_req_t){.type = TSR_USB_T_REG_READ, .addr = TSR_STAT_HW_OPS};
    TSR_RETURN_IF_ERROR(one(dev, &r), "usb: reading HW_OPS");
    ops = r.r_arg0;
    if (!(ops >> TSR_OP_GEMM_I8_I32 & 1))
      return TSR_ERR(DEVICE, "usb: the board's HW_OPS 0x%" PRIx32 " lacks GEMM_I8_I32", ops);
  }
  dev->ops = tsr_hw_ops(info, ops);
  return TSR_OK;
}

static const tsr_queue_ops_t usb_queue_ops;

static tsr_status_t usb_open_dev(usb_device_t *dev, const tsr_hal_open_params_t *params) {
  TSR_RETURN_IF(parse_options(dev, params ? params->options : NULL));
  TSR_RETURN_IF(load_api(dev));
  int rc = dev->api.init(&dev->ctx);
  if (rc < 0) {
    dev->ctx = NULL;
    return usb_status(&dev->api, rc, "initialising libusb");
  }
  TSR_RETURN_IF(find_board(dev, params ? params->index : 0));
  TSR_RETURN_IF(claim(dev));
  for (uint64_t i = 0; i < dev->window; i++) {
    dev->out_x[i] = (usb_xfer_t){.dev = dev, .slot = (unsigned)i, .in = false,
                                 .t = dev->api.alloc_transfer(0)};
    dev->in_x[i] = (usb_xfer_t){.dev = dev, .slot = (unsigned)i, .in = true,
                                .t = dev->api.alloc_transfer(0)};
    if (!dev->out_x[i].t || !dev->in_x[i].t)
      return TSR_ERR(RESOURCE_EXHAUSTED, "usb: cannot allocate libusb transfers");
  }
  dev->batch = calloc(USB_BATCH, sizeof *dev->batch);
  if (!dev->batch) return TSR_ERR(RESOURCE_EXHAUSTED, "usb: out of host memory");
  /* Sequence numbers start from a per-open value, so answers a board still
   * holds from an earlier session can never match a request of this one. */
  uint32_t nonce = (uint32_t)(tsr_hal_now_ns() ^ ((uint64_t)getpid() << 16)) | 1u;
  tsr_usb_link_config_t cfg;
  tsr_usb_link_config_init(&cfg);
  cfg.window = (unsigned)dev->window;
  cfg.max_payload = (uint32_t)dev->chunk;
  cfg.timeout_ms = (uint32_t)dev->timeout_ms;
  cfg.max_retries = (unsigned)dev->retries;
  cfg.first_seq = nonce;
  tsr_usb_transport_t tr = {.impl = dev, .bind = tr_bind, .send = tr_send, .recv = tr_recv,
                            .pump = tr_pump, .cancel_all = tr_cancel_all};
  tsr_usb_link_t *link = NULL;
  TSR_RETURN_IF(tsr_usb_link_create(&cfg, &tr, &link));
  dev->link = link;
  TSR_RETURN_IF(hello(dev, nonce));
  TSR_RETURN_IF(read_ops(dev));
  TSR_RETURN_IF(tsr_devmem_create(dev->info.mem_base, dev->info.mem_size, &dev->dm));
  tsr_queue_config_t qc = {.name = USB_NAME, .ops = &usb_queue_ops, .impl = dev,
                           .poll_first_ns = dev->poll_us * 1000, .poll_max_ns = 2000000};
  return tsr_queue_init(&dev->q, &qc);
}

static tsr_status_t usb_open(const tsr_hal_open_params_t *params, tsr_hal_device_t **out) {
  *out = NULL;
  usb_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return TSR_ERR(RESOURCE_EXHAUSTED, "usb: out of host memory");
  dev->base.vt = &tsr_hal_usb_vtable;
  dev->vid = TSR_USB_DEFAULT_VID;
  dev->pid = TSR_USB_DEFAULT_PID;
  dev->chunk = 256u << 10;
  dev->window = 8;
  dev->timeout_ms = 100;
  dev->retries = 10;
  dev->poll_us = 50;
  tsr_status_t s = usb_open_dev(dev, params);
  if (s) {
    usb_close(&dev->base);
    return s;
  }
  *out = &dev->base;
  return TSR_OK;
}

static void usb_query_caps(tsr_hal_device_t *d, tsr_hal_caps_t *out) {
  usb_device_t *dev = as_usb(d);
  memset(out, 0, sizeof *out);
  tsr_queue_lock(&dev->q);
  bool gone = tsr_usb_link_lost(dev->link);
  tsr_queue_unlock(&dev->q);
  snprintf(out->name, sizeof out->name, "usb %03u:%03u (%s, %ux%u)%s", dev->bus, dev->addr,
           dev->info.kind, dev->info.rows, dev->info.cols, gone ? " [gone]" : "");
  out->array_rows = dev->info.rows;
  out->array_cols = dev->info.cols;
  out->max_dim = TSR_HW_MAX_DIM;
  out->mem_size = dev->info.mem_size;
  out->clock_hz = dev->info.clock_khz * 1e3;
  out->mem_bytes_per_cycle = dev->info.mem_bytes_per_cycle;
  /* the link and launch costs of the board profile (usb3-artix7: a USB 3
   * bulk-FIFO bridge of the FT601 class with 1 MiB transfers and several in
   * flight, ~350 MB/s, ~125 us per round trip, a launch is one RUN) */
  snprintf(out->board, sizeof out->board, "%s", dev->board.name);
  out->link_bytes_per_s = dev->board.link_bytes_per_s;
  out->link_latency_s = dev->board.link_latency_s;
  out->launch_latency_s = dev->board.launch_latency_s;
  out->mem_ports = 1;
  out->ops = dev->ops;
}

/* With the queue's lock held. */
static tsr_status_t usable(usb_device_t *dev) {
  if (tsr_usb_link_lost(dev->link))
    return TSR_ERR(UNAVAILABLE, "usb: the board %03u:%03u is gone (unplugged)", dev->bus,
                   dev->addr);
  return TSR_OK;
}

static tsr_status_t usb_alloc(tsr_hal_device_t *d, uint64_t size, uint64_t align,
                              tsr_hal_buffer_t *out) {
  usb_device_t *dev = as_usb(d);
  memset(out, 0, sizeof *out);
  tsr_queue_lock(&dev->q);
  tsr_status_t s = usable(dev);
  tsr_queue_unlock(&dev->q);
  if (s) return s;
  return tsr_devmem_buffer_alloc(dev->dm, USB_NAME, size, align, out);
}

static void usb_free(tsr_hal_device_t *d, tsr_hal_buffer_t *buf) {
  tsr_devmem_buffer_free(as_usb(d)->dm, buf);
}

static tsr_status_t usb_write(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf, uint64_t offset,
                              const void *src, size_t n) {
  usb_device_t *dev = as_usb(d);
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, USB_NAME, buf, offset, n, "write"));
  tsr_queue_lock(&dev->q);
  tsr_status_t s = usable(dev);
  if (!s) s = mem_copy(dev, true, buf->addr + offset, (uint8_t *)(uintptr_t)src, n);
  tsr_queue_unlock(&dev->q);
  return s;
}

static tsr_status_t usb_read(tsr_hal_device_t *d, const tsr_hal_buffer_t *buf, uint64_t offset,
                             void *dst, size_t n) {
  usb_device_t *dev = as_usb(d);
  TSR_RETURN_IF(tsr_devmem_check_copy(dev->dm, USB_NAME, buf, offset, n, "read"));
  tsr_queue_lock(&dev->q);
  tsr_status_t s = usable(dev);
  if (!s) s = mem_copy(dev, false, buf->addr + offset, dst, n);
  tsr_queue_unlock(&dev->q);
  return s;
}

/* Asks the board about launch `fence` and records what it says. *open
 * tells whether the launch is still queued or running there. */
static tsr_status_t poll_status(usb_device_t *dev, uint64_t fence, bool *open) {
  *open = false;
  tsr_queue_cmd_t *c = tsr_queue_cmd(&dev->q, fence);
  if (!c || c->state != TSR_QUEUE_STARTED) return TSR_OK;
  uint8_t res[TSR_USB_RESULT_BYTES];
  tsr_usb_req_t r = {.type = TSR_USB_T_STATUS, .arg0 = (uint32_t)c->TAG, .in = res,
                     .in_cap = sizeof res};
  TSR_RETURN_IF_ERROR(one(dev, &r), "usb: status of command %" PRIu64, fence);
  if (r.r_arg0 == TSR_USB_L_DONE) {
    if (r.r_len != TSR_USB_RESULT_BYTES)
      return TSR_ERR(DEVICE, "usb: STATUS answer has %" PRIu32 " bytes, expected %u", r.r_len,
                     TSR_USB_RESULT_BYTES);
    tsr_hal_result_t hr;
    tsr_usb_result_unpack(&hr, res);
    tsr_queue_complete(&dev->q, fence, &hr);
  } else if (r.r_arg0 == TSR_USB_L_ABORTED) {
    tsr_queue_abort(&dev->q, fence);
  } else {
    *open = true;
  }
  return TSR_OK;
}

static void sleep_us(uint64_t us) {
  struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Queue hook: sends RUN. The board queues launches; when its queue is
 * full, wait for the oldest open one and ask again (bounded: a board whose
 * queue never drains, e.g. behind a hung kernel, ends in DEADLINE_EXCEEDED,
 * not a hang here). */
static tsr_status_t usb_start(void *impl, tsr_queue_t *q, uint64_t fence, tsr_queue_cmd_t *c) {
  usb_device_t *dev = impl;
  TSR_RETURN_IF(usable(dev));
  uint8_t run[TSR_USB_RUN_BYTES];
  tsr_usb_run_pack(run, &c->cmd);
  const uint64_t deadline = tsr_hal_now_ns() + USB_BUSY_WAIT_NS;
  uint64_t pause = dev->poll_us;
  for (;;) {
    tsr_usb_req_t r = {.type = TSR_USB_T_RUN, .out = run, .out_len = sizeof run};
    TSR_RETURN_IF(run_reqs(dev, &r, 1, 0));
    if (!(r.r_flags & TSR_USB_F_ERR)) {
      c->TAG = r.r_arg0;
      c->state = TSR_QUEUE_STARTED;
      return TSR_OK;
    }
    if (r.r_arg0 != TSR_USB_E_BUSY) return board_error(&r);
    uint64_t oldest = tsr_queue_oldest_pending(q);
    if (!oldest || oldest == fence)
      return TSR_ERR(DEVICE, "usb: board says its queue is full with nothing of ours queued");
    bool open = false;
    TSR_RETURN_IF(poll_status(dev, oldest, &open));
    if (!open) continue;
    if (tsr_hal_now_ns() >= deadline)
      return TSR_ERR(DEADLINE_EXCEEDED, "usb: submit: the board's launch queue stayed full for "
                     "%llu s (command %" PRIu64 " not done)",
                     (unsigned long long)(USB_BUSY_WAIT_NS / 1000000000ull), oldest);
    sleep_us(pause);
    if (pause < 2000) pause *= 2;
  }
}

/* Queue hook: STATUS requests from the oldest open launch up to `fence`
 * (the board runs them in order), so launches nobody waits for are settled
 * too and the queue can forget them. */
static tsr_status_t usb_poll(void *impl, tsr_queue_t *q, uint64_t fence, uint64_t budget_ns,
                             bool *idle) {
  usb_device_t *dev = impl;
  TSR_RETURN_IF(usable(dev));
  bool open = false;
  for (uint64_t f = tsr_queue_oldest_pending(q); !open && f && f <= fence; f++)
    TSR_RETURN_IF(poll_status(dev, f, &open));
  *idle = open;
  return TSR_OK;
}

static tsr_status_t usb_reset_hook(void *impl, tsr_queue_t *q) {
  usb_device_t *dev = impl;
  TSR_RETURN_IF(usable(dev));
  tsr_usb_req_t r = {.type = TSR_USB_T_RESET};
  TSR_RETURN_IF_ERROR(one(dev, &r), "usb: reset");
  return TSR_OK;
}

static const tsr_queue_ops_t usb_queue_ops = {
    .start = usb_start,
    .poll = usb_poll,
    .reset = usb_reset_hook,
};

static tsr_status_t usb_submit(tsr_hal_device_t *d, const tsr_hal_command_t *cmd,
                               uint64_t *out_fence) {
  return tsr_queue_submit(&as_usb(d)->q, cmd, out_fence);
}

static tsr_status_t usb_wait(tsr_hal_device_t *d, uint64_t fence, uint64_t timeout_ns,
                             tsr_hal_result_t *out) {
  return tsr_queue_wait(&as_usb(d)->q, fence, timeout_ns, out);
}

static tsr_status_t usb_reset(tsr_hal_device_t *d) { return tsr_queue_reset(&as_usb(d)->q); }

tsr_status_t tsr_usb_get_stats(tsr_hal_device_t *d, tsr_usb_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!d || d->vt != &tsr_hal_usb_vtable)
    return TSR_ERR(INVALID_ARGUMENT, "usb stats asked of a device that is not 'usb'");
  tsr_queue_lock(&as_usb(d)->q);
  tsr_usb_link_stats(as_usb(d)->link, out);
  tsr_queue_unlock(&as_usb(d)->q);
  return TSR_OK;
}

static void print_counters(const tsr_usb_stats_t *st, FILE *f, const char *prefix) {
  double eff = st->wire_bytes ? 100.0 * (double)st->payload_bytes / (double)st->wire_bytes : 0;
  fprintf(f,
          "%sframes out %" PRIu64 " in %" PRIu64 ", retries %" PRIu64 " (timeout %" PRIu64
          ", nak %" PRIu64 ", seq %" PRIu64 "), bad in %" PRIu64 ", duplicate in %" PRIu64
          ", payload %" PRIu64 " B, wire %" PRIu64 " B, efficiency %.2f%%\n",
          prefix, st->frames_out, st->frames_in, st->retries, st->retry_timeout, st->retry_nak,
          st->retry_seq, st->bad_in, st->dup_in, st->payload_bytes, st->wire_bytes, eff);
}

void tsr_usb_print_stats(const tsr_usb_stats_t *st, void *f) {
  print_counters(st, (FILE *)f, "usb: ");
}

/* The HAL's optional print_stats: the link counters in the --stats report. */
static void usb_print_stats(tsr_hal_device_t *d, FILE *f) {
  usb_device_t *dev = as_usb(d);
  if (!dev->link) return;
  tsr_usb_stats_t st;
  tsr_queue_lock(&dev->q);
  tsr_usb_link_stats(dev->link, &st);
  tsr_queue_unlock(&dev->q);
  print_counters(&st, f, "  usb link: ");
}

const tsr_hal_vtable_t tsr_hal_usb_vtable = {
    .name = USB_NAME,
    .open = usb_open,
    .close = usb_close,
    .query_caps = usb_query_caps,
    .alloc = usb_alloc,
    .free = usb_free,
    .write = usb_write,
    .read = usb_read,
    .submit = usb_submit,
    .wait = usb_wait,
    .reset = usb_reset,
    .print_stats = usb_print_stats,
    .options = usb_options,
    .n_options = USB_N_OPTIONS,
};
