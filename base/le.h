/*
 * le.h - little-endian stores and loads by shifts, so the host's byte order
 * never matters and unaligned fields are safe.
 *
 * Internal header (base layer): descriptors, USB frames, model files and
 * xclbin containers all use these.
 */
#ifndef TSR_LE_H
#define TSR_LE_H

#include <stdint.h>

static inline void tsr_put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void tsr_put_le64(uint8_t *p, uint64_t v) {
  tsr_put_le32(p, (uint32_t)v); tsr_put_le32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t tsr_get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static inline uint64_t tsr_get_le64(const uint8_t *p) {
  return (uint64_t)tsr_get_le32(p) | (uint64_t)tsr_get_le32(p + 4) << 32;
}
/* The n (<= 8) bytes at p as an unsigned little-endian integer. */
static inline uint64_t tsr_get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

#endif
