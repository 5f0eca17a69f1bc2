/* tiles.c - how many descriptors a matmul launch carries, and the layout of
 * weights striped over a device's read ports (see plan.h). */
#include "plan.h"

#include <string.h>

int32_t tsr_tile_descs(const int32_t *n, int count, int32_t n_chunk, int32_t m,
                       int32_t m_chunk) {
  if (m_chunk < 1) m_chunk = 1;
  int32_t d = 0;
  for (int i = 0; i < count; i++) d += (n[i] + n_chunk - 1) / n_chunk;
  return d * ((m + m_chunk - 1) / m_chunk);
}

uint32_t tsr_tile_w_channels(const tsr_hal_caps_t *c) {
  const uint32_t p = c->mem_ports;
  if (p <= 1 || (p & (p - 1)) || TSR_TILE_N_CHUNK % p) return 1;
  return p;
}

void tsr_tile_w_stripe(int8_t *dst, const int8_t *src, int32_t n, int32_t k, uint32_t p) {
  const uint64_t per = ((uint64_t)n + p - 1) / p, cstride = per * (uint64_t)k;
  memset(dst, 0, tsr_tile_w_bytes(n, k, p));
  for (int32_t r = 0; r < n; r++)
    memcpy(dst + (uint64_t)(r % p) * cstride + (uint64_t)(r / p) * (uint64_t)k,
           src + (uint64_t)r * (uint64_t)k, (size_t)k);
}

void tsr_tile_w_desc(tsr_desc_t *d, uint64_t base, int32_t n, int32_t n0, int32_t k,
                     uint32_t p) {
  if (p <= 1) {
    d->w_addr = base + (uint64_t)n0 * (uint64_t)k;
    d->w_nch = 0;
    d->w_cstride = 0;
    return;
  }
  const uint64_t per = ((uint64_t)n + p - 1) / p;
  d->w_addr = base + (uint64_t)(n0 / (int32_t)p) * (uint64_t)k;
  d->w_nch = p;
  d->w_cstride = (uint32_t)(per * (uint64_t)k);
}
