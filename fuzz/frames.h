/*
 * frames.h - how the USB fuzz targets cut an input into frames.
 *
 * An input is a list of records: u16 length (little-endian), u8 flags, then
 * `length` bytes (a record cut short by the end of the input keeps what is
 * there). Flag FZ_RESEAL rewrites the frame's len field, payload CRC and
 * header CRC to match its bytes (so mutations get past the CRCs and reach
 * what lies behind them); FZ_XFER_ERROR delivers it as a failed transfer.
 */
#ifndef TSR_FUZZ_FRAMES_H
#define TSR_FUZZ_FRAMES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "driver/usb/usb_proto.h"

enum { FZ_RESEAL = 1u << 0, FZ_XFER_ERROR = 1u << 1 };

typedef struct fz_frames {
  const uint8_t *p, *end;
} fz_frames_t;

/* The next record, or 0 at the end; *frame points into the input. */
static inline int fz_next_frame(fz_frames_t *it, const uint8_t **frame, size_t *len,
                                unsigned *flags) {
  if (it->end - it->p < 3) return 0;
  size_t n = (size_t)(it->p[0] | it->p[1] << 8);
  *flags = it->p[2];
  it->p += 3;
  if (n > (size_t)(it->end - it->p)) n = (size_t)(it->end - it->p);
  *frame = it->p;
  *len = n;
  it->p += n;
  return 1;
}

/* Copies a frame into `out` (cap bytes), resealed when asked. Returns the
 * bytes copied. */
static inline size_t fz_copy_frame(uint8_t *out, size_t cap, const uint8_t *frame, size_t n,
                                   unsigned flags) {
  if (n > cap) n = cap;
  memcpy(out, frame, n);
  if ((flags & FZ_RESEAL) && n >= TSR_USB_HDR_BYTES) {
    uint32_t len = (uint32_t)(n - TSR_USB_HDR_BYTES);
    uint32_t pcrc = len ? tsr_usb_crc32(0, out + TSR_USB_HDR_BYTES, len) : 0;
    for (int i = 0; i < 4; i++) out[12 + i] = (uint8_t)(len >> (8 * i));
    for (int i = 0; i < 4; i++) out[32 + i] = (uint8_t)(pcrc >> (8 * i));
    uint32_t hcrc = tsr_usb_crc32(0, out, 36);
    for (int i = 0; i < 4; i++) out[36 + i] = (uint8_t)(hcrc >> (8 * i));
  }
  return n;
}

#endif /* TSR_FUZZ_FRAMES_H */
