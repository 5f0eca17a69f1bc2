/*
 * hgemm_avx2.c - the AVX2 half-precision kernels (compute/hgemm.h): fp16
 * widened with F16C VCVTPH2PS, bf16 widened by a shift, FMA in fp32.
 * 4 rows of X by 2 rows of W: 8 accumulators of 8 lanes in the 16 ymm
 * registers with the operands.
 */
#include <immintrin.h>

#include "compute/hgemm.h"
#include "compute/hgemm_loops.h"

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

/* fp16 W with fp32 X (BF = 0) or bf16 W and X (BF = 1), widened; `n` < 8
 * lanes of a tail (the rest zero), 8 for a whole step. */
HG_TARGET static inline __attribute__((always_inline)) __m256 load_w(int bf, const uint16_t *p,
                                                                    int n) {
  const __m128i h = n == 8 ? _mm_loadu_si128((const __m128i *)p) : load_part(p, n);
  return bf ? widen_bf16(h) : _mm256_cvtph_ps(h);
}
HG_TARGET static inline __attribute__((always_inline)) __m256 load_x(int bf, const void *p,
                                                                    size_t at, int n) {
  if (bf) return load_w(1, (const uint16_t *)p + at, n);
  const float *f = (const float *)p + at;
  if (n == 8) return _mm256_loadu_ps(f);
  float t[8] = {0};
  for (int l = 0; l < n; l++) t[l] = f[l];
  return _mm256_loadu_ps(t);
}

HG_TARGET static inline __attribute__((always_inline)) void mk_widen(int bf, int mr, int nr,
                                                                     float *c, size_t ldc,
                                                                     const void *x, size_t ldx,
                                                                     const uint16_t *w,
                                                                     size_t ldw, int32_t k) {
  __m256 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
  for (int32_t t = 0; t < k; t += 8) {
    const int n = k - t >= 8 ? 8 : (int)(k - t);
    __m256 wv[NR];
    for (int j = 0; j < nr; j++) wv[j] = load_w(bf, w + (size_t)j * ldw + t, n);
    for (int i = 0; i < mr; i++) {
      const __m256 xv = load_x(bf, x, (size_t)i * ldx + (size_t)t, n);
      for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) c[(size_t)i * ldc + (size_t)j] = hsum(acc[i][j]);
}
#define mk_f16(mr, nr, ...) mk_widen(0, mr, nr, __VA_ARGS__)
#define mk_bf16(mr, nr, ...) mk_widen(1, mr, nr, __VA_ARGS__)

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
