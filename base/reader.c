/* reader.c - the bounds-checked little-endian reader (see reader.h). */
#include "base/reader.h"

#include <string.h>

#include "base/le.h"

tsr_status_t tsr_reader_need(const tsr_reader_t *r, size_t n, const char *field) {
  if (n <= r->size - r->off) return TSR_OK;
  return TSR_ERR(FORMAT,
                 "%s: %s at offset 0x%zx: truncated: needs %zu bytes, %zu left (size %zu)",
                 r->what, field, r->off, n, r->size - r->off, r->size);
}

tsr_status_t tsr_reader_bytes(tsr_reader_t *r, size_t n, const char *field,
                              const uint8_t **out) {
  TSR_RETURN_IF(tsr_reader_need(r, n, field));
  *out = r->data + r->off;
  r->off += n;
  return TSR_OK;
}

tsr_status_t tsr_reader_u8(tsr_reader_t *r, const char *field, uint8_t *out) {
  const uint8_t *p;
  TSR_RETURN_IF(tsr_reader_bytes(r, 1, field, &p));
  *out = p[0];
  return TSR_OK;
}

tsr_status_t tsr_reader_u32(tsr_reader_t *r, const char *field, uint32_t *out) {
  const uint8_t *p;
  TSR_RETURN_IF(tsr_reader_bytes(r, 4, field, &p));
  *out = (uint32_t)tsr_get_le(p, 4);
  return TSR_OK;
}

tsr_status_t tsr_reader_i32(tsr_reader_t *r, const char *field, int32_t *out) {
  uint32_t u;
  TSR_RETURN_IF(tsr_reader_u32(r, field, &u));
  memcpy(out, &u, 4);
  return TSR_OK;
}

tsr_status_t tsr_reader_u64(tsr_reader_t *r, const char *field, uint64_t *out) {
  const uint8_t *p;
  TSR_RETURN_IF(tsr_reader_bytes(r, 8, field, &p));
  *out = tsr_get_le(p, 8);
  return TSR_OK;
}

tsr_status_t tsr_reader_f32(tsr_reader_t *r, const char *field, float *out) {
  uint32_t u;
  TSR_RETURN_IF(tsr_reader_u32(r, field, &u));
  memcpy(out, &u, 4);
  return TSR_OK;
}
