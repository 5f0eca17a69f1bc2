/*
 * usb_link.h - reliable, pipelined request/response exchange over two bulk
 * pipes (one OUT, one IN), independent of libusb.
 *
 * Internal header. A link owns `window` request slots and `window` posted
 * receive buffers. tsr_usb_link_run() sends a batch of requests, keeping up
 * to `window` in flight, and returns when every one has a valid response.
 * Recovery (see README.md, "Recovery"):
 *   - a response with a bad CRC is dropped; its request is sent again when
 *     a later response shows it was skipped (sequence gap) or its timeout
 *     expires;
 *   - a NAK from the board resends the named request at once;
 *   - responses for requests no longer outstanding (duplicates, late
 *     answers) are counted and ignored;
 *   - after `max_retries` resends of one request the batch fails with
 *     DEVICE; a vanished device fails it with UNAVAILABLE.
 * The board answers a resent command from its cache, so commands with side
 * effects (RUN, RESET) run once.
 *
 * The transport (libusb in usb_backend.c, a direct call into the board in
 * the unit tests) starts transfers and reports their completion by calling
 * tsr_usb_link_sent() / tsr_usb_link_received() from inside its pump().
 * Single-threaded: every call on one link comes from one thread.
 */
#ifndef TSR_USB_LINK_H
#define TSR_USB_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"
#include "usb.h"

typedef struct tsr_usb_link tsr_usb_link_t;

/* How a transfer ended, as the transport reports it. */
typedef enum tsr_usb_xfer_status {
  TSR_USB_X_OK = 0,
  TSR_USB_X_TIMEOUT = 1,   /* the transfer's own timeout expired        */
  TSR_USB_X_CANCELLED = 2, /* cancelled by the link (close)             */
  TSR_USB_X_GONE = 3,      /* the device is gone (unplugged)            */
  TSR_USB_X_ERROR = 4,     /* stall, overflow or another bus error      */
} tsr_usb_xfer_status_t;

typedef struct tsr_usb_transport {
  void *impl;
  /* Tells the transport which link its completions go to (optional;
   * called first thing in tsr_usb_link_create, before any transfer). */
  void (*bind)(void *impl, tsr_usb_link_t *link);
  /* Starts an OUT transfer of `n` bytes at `buf` (valid until it
   * completes) for request slot `slot`, which ends in one
   * tsr_usb_link_sent(). An error return means it was not started. */
  tsr_status_t (*send)(void *impl, unsigned slot, uint8_t *buf, size_t n,
                       uint32_t timeout_ms);
  /* Posts receive buffer `slot` of `cap` bytes; ends in one
   * tsr_usb_link_received(). */
  tsr_status_t (*recv)(void *impl, unsigned slot, uint8_t *buf, size_t cap);
  /* Delivers completions, waiting at most `timeout_ns` for the first. */
  tsr_status_t (*pump)(void *impl, uint64_t timeout_ns);
  /* Cancels every posted receive (optional; close pumps until they end). */
  void (*cancel_all)(void *impl);
} tsr_usb_transport_t;

typedef struct tsr_usb_link_config {
  unsigned window;       /* requests (and receives) in flight, 1..64      */
  uint32_t max_payload;  /* largest payload of one frame                  */
  uint32_t timeout_ms;   /* resend a request unanswered after this long   */
  unsigned max_retries;  /* resends of one request before giving up       */
  uint32_t first_seq;    /* sequence number of the first request          */
} tsr_usb_link_config_t;

void tsr_usb_link_config_init(tsr_usb_link_config_t *cfg);

/* Creates a link over `tr` (copied; its impl must outlive the link) and
 * posts the receive buffers. The caller owns *out. */
tsr_status_t tsr_usb_link_create(const tsr_usb_link_config_t *cfg,
                                 const tsr_usb_transport_t *tr, tsr_usb_link_t **out);
/* Cancels outstanding receives, waits (bounded) for them, frees. */
void tsr_usb_link_destroy(tsr_usb_link_t *l);

/* One request and, after tsr_usb_link_run(), its response. */
typedef struct tsr_usb_req {
  uint8_t type;        /* TSR_USB_T_*                                   */
  uint64_t addr;
  uint32_t arg0, arg1;
  const void *out;     /* payload sent (borrowed), out_len bytes        */
  uint32_t out_len;
  void *in;            /* where a response payload is copied (borrowed) */
  uint32_t in_cap;
  /* filled from the response */
  uint16_t r_flags;    /* TSR_USB_F_ERR set: the board refused it        */
  uint32_t r_arg0, r_arg1;
  uint32_t r_len;      /* payload bytes copied to `in`                   */
} tsr_usb_req_t;

/* Runs `n` requests, pipelined, in sequence-number order; returns when all
 * are answered. Board refusals are not errors here: see r_flags. Returns
 * UNAVAILABLE once the device is gone (and on every later call), DEVICE when
 * a request stays unanswered after max_retries resends or a transfer fails.
 * `payload_bytes` is added to the payload counter on success. */
tsr_status_t tsr_usb_link_run(tsr_usb_link_t *l, tsr_usb_req_t *reqs, size_t n,
                              uint64_t payload_bytes);

/* Completion entry points for transports (call only from pump()). */
void tsr_usb_link_sent(tsr_usb_link_t *l, unsigned slot, tsr_usb_xfer_status_t st);
void tsr_usb_link_received(tsr_usb_link_t *l, unsigned slot, size_t n,
                           tsr_usb_xfer_status_t st);

/* True once the transport reported the device gone. */
bool tsr_usb_link_lost(const tsr_usb_link_t *l);
/* Counters since create. */
void tsr_usb_link_stats(const tsr_usb_link_t *l, tsr_usb_stats_t *out);
/* Largest payload per frame (from the config). */
uint32_t tsr_usb_link_max_payload(const tsr_usb_link_t *l);

#endif /* TSR_USB_LINK_H */
