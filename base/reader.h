/*
 * reader.h - a bounds-checked little-endian reader over a byte buffer.
 *
 * Internal header (base layer). Every read names the field and its byte
 * offset, so a malformed file gives a precise status instead of a read past
 * the buffer. Used by the model-file parsers and the xclbin reader.
 */
#ifndef TSR_READER_H
#define TSR_READER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tsr_reader {
  const uint8_t *data;
  size_t size;
  size_t off;       /* next byte to read */
  const char *what; /* buffer name for messages (borrowed) */
} tsr_reader_t;

static inline void tsr_reader_init(tsr_reader_t *r, const uint8_t *data, size_t size,
                                   const char *what) {
  r->data = data;
  r->size = size;
  r->off = 0;
  r->what = what ? what : "buffer";
}

static inline size_t tsr_reader_left(const tsr_reader_t *r) { return r->size - r->off; }

/* FORMAT "what: FIELD at offset 0x..: truncated: needs N bytes, M left (file
 * size S)" unless `n` bytes remain. */
tsr_status_t tsr_reader_need(const tsr_reader_t *r, size_t n, const char *field);
/* Each reads one little-endian value, naming `field` in the error. */
tsr_status_t tsr_reader_u8(tsr_reader_t *r, const char *field, uint8_t *out);
tsr_status_t tsr_reader_u32(tsr_reader_t *r, const char *field, uint32_t *out);
tsr_status_t tsr_reader_i32(tsr_reader_t *r, const char *field, int32_t *out);
tsr_status_t tsr_reader_u64(tsr_reader_t *r, const char *field, uint64_t *out);
tsr_status_t tsr_reader_f32(tsr_reader_t *r, const char *field, float *out);
/* Returns a pointer to the next `n` bytes (borrowed) and skips them. */
tsr_status_t tsr_reader_bytes(tsr_reader_t *r, size_t n, const char *field,
                              const uint8_t **out);

#endif
