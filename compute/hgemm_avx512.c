/*
 * hgemm_avx512.c - the AVX-512 half-precision kernels (compute/hgemm.h):
 * fp16 widened with VCVTPH2PS, bf16 with VDPBF16PS (functions marked for
 * AVX512_BF16, called only where CPUID has it) or widened by a shift.
 *
 * Register blocking: 8 rows of X by 3 rows of W, 24 accumulators of 16
 * lanes over the whole of K (each W vector, widened once, serves 8 rows),
 * reduced at the end; X is walked in chunks of 64 rows so a chunk stays in
 * L2 while W streams.
 */
#include <immintrin.h>

#include "compute/hgemm.h"

enum { MR = 8, NR = 3, M_CHUNK = 64 };

/* Each W row is a short stream (K halves) the hardware prefetcher barely
 * trains on: the same offset of the row PF_ROWS further (the block after
 * next) is prefetched while this one is read. A prefetch never faults, so
 * past the end of W is harmless. */
#define PF_ROWS (2 * NR)
#define PREFETCH_NEXT(p) \
  _mm_prefetch((const char *)((p) + (size_t)PF_ROWS * ldw), _MM_HINT_T0)

/* Sum of each of a, b, c, d's lanes, as {a, b, c, d}. */
static inline __attribute__((always_inline)) __m256 fold(__m512 a) {
  return _mm256_add_ps(_mm512_castps512_ps256(a),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
static inline __attribute__((always_inline)) __m128 reduce4(__m512 a, __m512 b, __m512 c,
                                                            __m512 d) {
  const __m256 t0 = _mm256_hadd_ps(fold(a), fold(b));
  const __m256 t1 = _mm256_hadd_ps(fold(c), fold(d));
  const __m256 t2 = _mm256_hadd_ps(t0, t1);
  return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

/* Stores row i's nr sums (acc[i][0..nr)) at c. */
static inline __attribute__((always_inline)) void store_row(float *c, const __m512 *acc,
                                                            int nr) {
  const __m512 z = _mm512_setzero_ps();
  const __m128 s = reduce4(acc[0], nr > 1 ? acc[1] : z, nr > 2 ? acc[2] : z, z);
  float t[4];
  _mm_storeu_ps(t, s);
  for (int j = 0; j < nr; j++) c[j] = t[j];
}

/* bf16 lanes widened to fp32 (exact). */
static inline __attribute__((always_inline)) __m512 widen_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ---- fp16 weights, fp32 X: 16 k per step ---- */

static inline __attribute__((always_inline)) void mk_f16(int mr, int nr, float *c, size_t ldc,
                                                         const float *x, size_t ldx,
                                                         const uint16_t *w, size_t ldw,
                                                         int32_t k) {
  __m512 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
  int32_t t = 0;
  for (; t + 16 <= k; t += 16) {
    __m512 wv[NR];
    for (int j = 0; j < nr; j++) {
      wv[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)j * ldw + t)));
      PREFETCH_NEXT(w + (size_t)j * ldw + t);
    }
    for (int i = 0; i < mr; i++) {
      const __m512 xv = _mm512_loadu_ps(x + (size_t)i * ldx + t);
      for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (t < k) {
    const __mmask16 mk = (__mmask16)((1u << (k - t)) - 1);
    __m512 wv[NR];
    for (int j = 0; j < nr; j++)
      wv[j] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, w + (size_t)j * ldw + t));
    for (int i = 0; i < mr; i++) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)i * ldx + t);
      for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++) store_row(c + (size_t)i * ldc, acc[i], nr);
}

/* ---- bf16 weights and X, widened: 16 k per step ---- */

static inline __attribute__((always_inline)) void mk_bf16w(int mr, int nr, float *c,
                                                           size_t ldc, const uint16_t *x,
                                                           size_t ldx, const uint16_t *w,
                                                           size_t ldw, int32_t k) {
  __m512 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
  int32_t t = 0;
  for (; t + 16 <= k; t += 16) {
    __m512 wv[NR];
    for (int j = 0; j < nr; j++) {
      wv[j] = widen_bf16(_mm256_loadu_si256((const __m256i *)(w + (size_t)j * ldw + t)));
      PREFETCH_NEXT(w + (size_t)j * ldw + t);
    }
    for (int i = 0; i < mr; i++) {
      const __m512 xv =
          widen_bf16(_mm256_loadu_si256((const __m256i *)(x + (size_t)i * ldx + t)));
      for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (t < k) {
    const __mmask16 mk = (__mmask16)((1u << (k - t)) - 1);
    __m512 wv[NR];
    for (int j = 0; j < nr; j++)
      wv[j] = widen_bf16(_mm256_maskz_loadu_epi16(mk, w + (size_t)j * ldw + t));
    for (int i = 0; i < mr; i++) {
      const __m512 xv = widen_bf16(_mm256_maskz_loadu_epi16(mk, x + (size_t)i * ldx + t));
      for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++) store_row(c + (size_t)i * ldc, acc[i], nr);
}

/* ---- bf16 with VDPBF16PS: 32 k (16 pairs) per step ---- */

__attribute__((target("avx512bf16"))) static inline __attribute__((always_inline)) void
mk_bf16dp(int mr, int nr, float *c, size_t ldc, const uint16_t *x, size_t ldx,
          const uint16_t *w, size_t ldw, int32_t k) {
  __m512 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
  int32_t t = 0;
  for (; t + 32 <= k; t += 32) {
    __m512i wv[NR];
    for (int j = 0; j < nr; j++) {
      wv[j] = _mm512_loadu_si512(w + (size_t)j * ldw + t);
      PREFETCH_NEXT(w + (size_t)j * ldw + t);
    }
    for (int i = 0; i < mr; i++) {
      const __m512i xv = _mm512_loadu_si512(x + (size_t)i * ldx + t);
      for (int j = 0; j < nr; j++)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
  if (t < k) { /* zero pairs add nothing */
    const __mmask32 mk = (__mmask32)((1ull << (k - t)) - 1);
    __m512i wv[NR];
    for (int j = 0; j < nr; j++) wv[j] = _mm512_maskz_loadu_epi16(mk, w + (size_t)j * ldw + t);
    for (int i = 0; i < mr; i++) {
      const __m512i xv = _mm512_maskz_loadu_epi16(mk, x + (size_t)i * ldx + t);
      for (int j = 0; j < nr; j++)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
  for (int i = 0; i < mr; i++) store_row(c + (size_t)i * ldc, acc[i], nr);
}

/* The block loops, with every (mr, nr) <= (MR, NR) a specialized call. */
#define HG_CASE(MK, a, b) \
  case ((a) - 1) * NR + (b) - 1: MK(a, b, cp, ldc, xp, ldx, wp, ldw, k); break;
#define HG_CASES_ROW(MK, a) HG_CASE(MK, a, 1) HG_CASE(MK, a, 2) HG_CASE(MK, a, 3)
#define HG_LOOPS(MK)                                                             \
  for (int32_t i0 = 0; i0 < m; i0 += M_CHUNK) {                                  \
    const int32_t i1 = m - i0 < M_CHUNK ? m : i0 + M_CHUNK;                     \
    for (int32_t j = n0; j < n1; j += NR) {                                      \
      const int nr = n1 - j < NR ? (int)(n1 - j) : NR;                           \
      for (int32_t i = i0; i < i1; i += MR) {                                    \
        const int mr = i1 - i < MR ? (int)(i1 - i) : MR;                         \
        float *cp = c + (size_t)i * ldc + (size_t)j;                             \
        const uint16_t *wp = w + (size_t)j * ldw;                                \
        const __typeof__(x) xp = x + (size_t)i * ldx;                            \
        switch ((mr - 1) * NR + nr - 1) {                                        \
          HG_CASES_ROW(MK, 1) HG_CASES_ROW(MK, 2) HG_CASES_ROW(MK, 3) HG_CASES_ROW(MK, 4) \
          HG_CASES_ROW(MK, 5) HG_CASES_ROW(MK, 6) HG_CASES_ROW(MK, 7) HG_CASES_ROW(MK, 8) \
        }                                                                        \
      }                                                                          \
    }                                                                            \
  }

void tsr_hgemm_f16_avx512(float *c, size_t ldc, const float *x, size_t ldx, const uint16_t *w,
                          size_t ldw, int32_t m, int32_t n0, int32_t n1, int32_t k) {
  HG_LOOPS(mk_f16)
}

void tsr_hgemm_bf16_avx512(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                           const uint16_t *w, size_t ldw, int32_t m, int32_t n0, int32_t n1,
                           int32_t k) {
  HG_LOOPS(mk_bf16w)
}

__attribute__((target("avx512bf16"))) void tsr_hgemm_bf16_avx512bf16(
    float *c, size_t ldc, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw,
    int32_t m, int32_t n0, int32_t n1, int32_t k) {
  HG_LOOPS(mk_bf16dp)
}

__attribute__((target("avx512bf16"))) void tsr_bf16_round_avx512bf16(uint16_t *dst,
                                                                     const float *x,
                                                                     size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, mk,
                             (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i)));
  }
}
