/* tiles.c - how many descriptors a matmul launch carries (see plan.h). */
#include "plan.h"

int32_t tsr_tile_descs(const int32_t *n, int count, int32_t n_chunk, int32_t m,
                       int32_t m_chunk) {
  if (m_chunk < 1) m_chunk = 1;
  int32_t d = 0;
  for (int i = 0; i < count; i++) d += (n[i] + n_chunk - 1) / n_chunk;
  return d * ((m + m_chunk - 1) / m_chunk);
}
