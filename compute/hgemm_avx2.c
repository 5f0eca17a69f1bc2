/*
 * hgemm_avx2.c - the AVX2 half-precision kernels (compute/hgemm.h): fp16
 * widened with F16C VCVTPH2PS, bf16 widened by a shift, FMA in fp32.
 * 4 rows of X by 2 rows of W: 8 accumulators of 8 lanes in the 16 ymm
 * registers with the operands.
 */
#include <immintrin.h>

#include "compute/hgemm.h"

enum { MR = 4, NR = 2, M_CHUNK = 64 };

#define HG_TARGET __attribute__((target("avx2,fma,f16c")))

HG_TARGET static inline __attribute__((always_inline)) float hsum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* Lanes [0, n) of 8 halves at p (n < 8), the rest zero. */
HG_TARGET static inline __attribute__((always_inline)) __m128i load_part(const uint16_t *p,
                                                                        int n) {
  uint16_t t[8] = {0};
  for (int l = 0; l < n; l++) t[l] = p[l];
  return _mm_loadu_si128((const __m128i *)t);
}

HG_TARGET static inline __attribute__((always_inline)) __m256 widen_bf16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

HG_TARGET static inline __attribute__((always_inline)) void mk_f16(int mr, int nr, float *c,
                                                                   size_t ldc, const float *x,
                                                                   size_t ldx,
                                                                   const uint16_t *w,
                                                                   size_t ldw, int32_t k) {
  __m256 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
  int32_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 wv[NR];
    for (int j = 0; j < nr; j++)
      wv[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + (size_t)j * ldw + t)));
    for (int i = 0; i < mr; i++) {
      const __m256 xv = _mm256_loadu_ps(x + (size_t)i * ldx + t);
      for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (t < k) {
    const int rest = (int)(k - t);
    __m256 wv[NR];
    for (int j = 0; j < nr; j++) wv[j] = _mm256_cvtph_ps(load_part(w + (size_t)j * ldw + t, rest));
    for (int i = 0; i < mr; i++) {
      float xt[8] = {0};
      for (int l = 0; l < rest; l++) xt[l] = x[(size_t)i * ldx + (size_t)t + (size_t)l];
      const __m256 xv = _mm256_loadu_ps(xt);
      for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) c[(size_t)i * ldc + (size_t)j] = hsum(acc[i][j]);
}

HG_TARGET static inline __attribute__((always_inline)) void mk_bf16(int mr, int nr, float *c,
                                                                    size_t ldc,
                                                                    const uint16_t *x,
                                                                    size_t ldx,
                                                                    const uint16_t *w,
                                                                    size_t ldw, int32_t k) {
  __m256 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
  int32_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 wv[NR];
    for (int j = 0; j < nr; j++)
      wv[j] = widen_bf16(_mm_loadu_si128((const __m128i *)(w + (size_t)j * ldw + t)));
    for (int i = 0; i < mr; i++) {
      const __m256 xv = widen_bf16(_mm_loadu_si128((const __m128i *)(x + (size_t)i * ldx + t)));
      for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (t < k) {
    const int rest = (int)(k - t);
    __m256 wv[NR];
    for (int j = 0; j < nr; j++) wv[j] = widen_bf16(load_part(w + (size_t)j * ldw + t, rest));
    for (int i = 0; i < mr; i++) {
      const __m256 xv = widen_bf16(load_part(x + (size_t)i * ldx + t, rest));
      for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) c[(size_t)i * ldc + (size_t)j] = hsum(acc[i][j]);
}

#define HG_CASE(MK, a, b) \
  case ((a) - 1) * NR + (b) - 1: MK(a, b, cp, ldc, xp, ldx, wp, ldw, k); break;
#define HG_LOOPS(MK)                                                                    \
  for (int32_t i0 = 0; i0 < m; i0 += M_CHUNK) {                                         \
    const int32_t i1 = m - i0 < M_CHUNK ? m : i0 + M_CHUNK;                            \
    for (int32_t j = n0; j < n1; j += NR) {                                             \
      const int nr = n1 - j < NR ? (int)(n1 - j) : NR;                                  \
      for (int32_t i = i0; i < i1; i += MR) {                                           \
        const int mr = i1 - i < MR ? (int)(i1 - i) : MR;                                \
        float *cp = c + (size_t)i * ldc + (size_t)j;                                    \
        const uint16_t *wp = w + (size_t)j * ldw;                                       \
        const __typeof__(x) xp = x + (size_t)i * ldx;                                   \
        switch ((mr - 1) * NR + nr - 1) {                                               \
          HG_CASE(MK, 1, 1) HG_CASE(MK, 1, 2) HG_CASE(MK, 2, 1) HG_CASE(MK, 2, 2)       \
          HG_CASE(MK, 3, 1) HG_CASE(MK, 3, 2) HG_CASE(MK, 4, 1) HG_CASE(MK, 4, 2)       \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  }

HG_TARGET void tsr_hgemm_f16_avx2(float *c, size_t ldc, const float *x, size_t ldx,
                                  const uint16_t *w, size_t ldw, int32_t m, int32_t n0,
                                  int32_t n1, int32_t k) {
  HG_LOOPS(mk_f16)
}

HG_TARGET void tsr_hgemm_bf16_avx2(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                                   const uint16_t *w, size_t ldw, int32_t m, int32_t n0,
                                   int32_t n1, int32_t k) {
  HG_LOOPS(mk_bf16)
}
