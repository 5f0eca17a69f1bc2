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

float tsr_quantize_row_avx2(int8_t *q, const float *x, int32_t k) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  int32_t i = 0;
  /* max_ps(v, acc) keeps acc when v is NaN, as the scalar `v > amax` does */
  for (; i + 8 <= k; i += 8)
    vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), vmax);
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  float amax = 0.0f;
  for (int j = 0; j < 8; ++j)
    if (lanes[j] > amax) amax = lanes[j];
  for (; i < k; ++i) {
    float v = x[i] < 0 ? -x[i] : x[i];
    if (v > amax) amax = v;
  }
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  const __m256 vs = _mm256_set1_ps(scale), hi = _mm256_set1_ps(127.0f),
               lo = _mm256_set1_ps(-127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  i = 0;
  for (; i + 32 <= k; i += 32) {
    __m256i v32[4];
    for (int j = 0; j < 4; ++j) {
      __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * j), vs),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> 0 */
      v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      v32[j] = _mm256_cvtps_epi32(v);
    }
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v32[0], v32[1]),
                                   _mm256_packs_epi32(v32[2], v32[3]));
    _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(p, order));
  }
  for (; i < k; ++i) {
    float v = __builtin_nearbyintf(x[i] / scale);
    if (!(v == v)) v = 0.0f;
    if (v > 127.0f) v = 127.0f;
    if (v < -127.0f) v = -127.0f;
    q[i] = (int8_t)v;
  }
  return scale;
}
