/*
 * qgemm_avx2.c - int8 GEMM with AVX2 (no VNNI).
 *
 * Compiled with -mavx2; called only when CPUID and XCR0 say so (qgemm.c).
 * vpmaddubsw would be faster but saturates to int16 (255*127*2 > 32767),
 * which breaks contract 1, so both operands are sign-extended to int16 and
 * multiplied with vpmaddwd: each pair sum is at most 2 * 128 * 128 = 32768
 * in magnitude and lands in int32 exactly.
 */
#include <immintrin.h>

#include "compute/qgemm_kernels.h"

#define TSR_INLINE static inline __attribute__((always_inline))

TSR_INLINE int32_t hsum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

TSR_INLINE __m256i widen16(const int8_t *p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
}

/* MA rows of A x NW rows of W, all of K. The callers use MA <= 4 with
 * NW <= 2 (8 accumulators, 2 widened W rows and an A row fit the 16 ymm
 * registers; 4 x 4 spilled its accumulators on every step), and NW = 4 for
 * one row only. */
TSR_INLINE void tile(int MA, int NW, int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                     const int8_t *w, size_t ldw, int32_t k) {
  __m256i acc[4][4];
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < NW; ++j) acc[i][j] = _mm256_setzero_si256();
  int32_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    __m256i wv[4];
    for (int j = 0; j < NW; ++j) wv[j] = widen16(w + (size_t)j * ldw + kk);
    for (int i = 0; i < MA; ++i) {
      __m256i av = widen16(a + (size_t)i * lda + kk);
      for (int j = 0; j < NW; ++j) acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(av, wv[j]));
    }
  }
  for (int i = 0; i < MA; ++i) {
    for (int j = 0; j < NW; ++j) {
      int32_t s = hsum8(acc[i][j]);
      for (int32_t t = kk; t < k; ++t) s += (int32_t)a[(size_t)i * lda + t] * (int32_t)w[(size_t)j * ldw + t];
      c[(size_t)i * ldc + j] = s;
    }
  }
}

TSR_INLINE void group(int NW, int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                      const int8_t *w, size_t ldw, int32_t m, int32_t k) {
  int32_t i = 0;
  for (; i + 4 <= m; i += 4) tile(4, NW, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, k);
  switch (m - i) {
    case 3: tile(3, NW, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, k); break;
    case 2: tile(2, NW, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, k); break;
    case 1: tile(1, NW, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, k); break;
    default: break;
  }
}

void tsr_qgemm_rows_avx2(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                         const int8_t *w, size_t ldw, int32_t m, int32_t n, int32_t k) {
  int32_t j = 0;
  if (m == 1) /* GEMV: four W rows in flight keep more of the memory stream busy */
    for (; j + 4 <= n; j += 4) group(4, c + j, ldc, a, lda, w + (size_t)j * ldw, ldw, m, k);
  for (; j + 2 <= n; j += 2) group(2, c + j, ldc, a, lda, w + (size_t)j * ldw, ldw, m, k);
  for (; j < n; ++j) group(1, c + j, ldc, a, lda, w + (size_t)j * ldw, ldw, m, k);
}
