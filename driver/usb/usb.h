/*
 * usb.h - what the "usb" backend offers beyond the HAL vtable.
 *
 * Internal header (driver/ and host/ may include it). The counters describe
 * the link since the device was opened; the runtime prints them with its
 * statistics, and "usb:stats" prints them to stderr when the device closes.
 */
#ifndef TSR_USB_H
#define TSR_USB_H

#include <stdint.h>

#include "driver/hal.h"

typedef struct tsr_usb_stats {
  uint64_t frames_out;     /* frames sent, retransmissions included          */
  uint64_t frames_in;      /* frames received, damaged and duplicate included */
  uint64_t retries;        /* requests sent again, all causes                */
  uint64_t retry_timeout;  /*   ... because no answer came in time           */
  uint64_t retry_nak;      /*   ... because the board NAKed a damaged frame  */
  uint64_t retry_seq;      /*   ... because a later answer overtook it       */
  uint64_t bad_in;         /* received frames dropped (CRC, length, magic)   */
  uint64_t dup_in;         /* answers to requests already answered           */
  uint64_t payload_bytes;  /* memory bytes moved, each counted once          */
  uint64_t wire_bytes;     /* bytes through both pipes: headers, payloads,
                              control frames and retransmissions            */
  uint64_t xfer_errors;    /* transfers that ended in a bus error or timeout */
} tsr_usb_stats_t;

/* Copies the counters of `dev`, which must come from the "usb" backend
 * (INVALID_ARGUMENT otherwise). `dev` is borrowed. */
tsr_status_t tsr_usb_get_stats(tsr_hal_device_t *dev, tsr_usb_stats_t *out);

/* Prints one line of counters ("usb: frames ...") to `f` (a FILE *). */
void tsr_usb_print_stats(const tsr_usb_stats_t *st, void *f);

#endif /* TSR_USB_H */
