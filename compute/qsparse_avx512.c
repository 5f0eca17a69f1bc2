/*
 * qsparse_avx512.c - the block-sparse decode kernel with AVX-512 VNNI
 * (compute/qsparse.h): a tile row's 16 outputs in one register, each
 * stored tile 4 VPDPBUSD of a broadcast activation quad against the
 * tile's 4 column quads; then the u8 offset removed with the row sums.
 */
#include <immintrin.h>

#include "compute/qsparse.h"

enum { T = TSR_QSPARSE_TILE };

void tsr_qsparse_rows_avx512(int32_t *c, size_t ldc, const uint8_t *au, size_t ldau,
                             const tsr_qsparse_t *w, int32_t m, int32_t t0, int32_t t1) {
  for (int32_t tr = t0; tr < t1; tr++) {
    const int32_t r0 = tr * T, nr = w->n - r0 < T ? w->n - r0 : T;
    const __mmask16 mk = (__mmask16)((1u << nr) - 1);
    const __m512i sums = _mm512_maskz_loadu_epi32(mk, w->row_sum + r0);
    const __m512i corr = _mm512_slli_epi32(sums, 7); /* 128 * sum_k W */
    for (int32_t i = 0; i < m; i++) {
      const uint8_t *ar = au + (size_t)i * ldau;
      __m512i acc = _mm512_setzero_si512();
      for (int32_t s = w->row_start[tr]; s < w->row_start[tr + 1]; s++) {
        const int8_t *t = w->tiles + (int64_t)s * T * T;
        const uint8_t *x = ar + (size_t)w->tile_col[s] * T;
        int32_t q[4];
        __builtin_memcpy(q, x, 16);
        acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(q[0]), _mm512_load_si512(t));
        acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(q[1]), _mm512_load_si512(t + 64));
        acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(q[2]), _mm512_load_si512(t + 128));
        acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(q[3]), _mm512_load_si512(t + 192));
      }
      _mm512_mask_storeu_epi32(c + (size_t)i * ldc + (size_t)r0, mk, _mm512_sub_epi32(acc, corr));
    }
  }
}
