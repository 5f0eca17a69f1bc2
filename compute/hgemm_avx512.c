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
#include "compute/hgemm_loops.h"

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

/* ---- widened to fp32, 16 k per step: fp16 W with fp32 X (BF = 0), or
 * bf16 W and X (BF = 1) ---- */

static inline __attribute__((always_inline)) __m512 load_w(int bf, const uint16_t *p,
                                                          __mmask16 mk) {
  const __m256i h = _mm256_maskz_loadu_epi16(mk, p);
  return bf ? widen_bf16(h) : _mm512_cvtph_ps(h);
}
static inline __attribute__((always_inline)) __m512 load_x(int bf, const void *p, size_t at,
                                                          __mmask16 mk) {
  return bf ? widen_bf16(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)p + at))
            : _mm512_maskz_loadu_ps(mk, (const float *)p + at);
}

static inline __attribute__((always_inline)) void mk_widen(int bf, int mr, int nr, float *c,
                                                           size_t ldc, const void *x,
                                                           size_t ldx, const uint16_t *w,
                                                           size_t ldw, int32_t k) {
  __m512 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
  for (int32_t t = 0; t < k; t += 16) {
    /* whole steps unmasked; the tail's masked-off lanes load as zero */
    const __mmask16 mk = k - t >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - t)) - 1);
    __m512 wv[NR];
    for (int j = 0; j < nr; j++) {
      wv[j] = load_w(bf, w + (size_t)j * ldw + t, mk);
      PREFETCH_NEXT(w + (size_t)j * ldw + t);
    }
    for (int i = 0; i < mr; i++) {
      const __m512 xv = load_x(bf, x, (size_t)i * ldx + (size_t)t, mk);
      for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; i++) store_row(c + (size_t)i * ldc, acc[i], nr);
}
#define mk_f16(mr, nr, ...) mk_widen(0, mr, nr, __VA_ARGS__)
#define mk_bf16w(mr, nr, ...) mk_widen(1, mr, nr, __VA_ARGS__)

/* ---- bf16 with VDPBF16PS: 32 k (16 pairs) per step ---- */

__attribute__((target("avx512bf16"))) static inline __attribute__((always_inline)) void
mk_bf16dp(int mr, int nr, float *c, size_t ldc, const uint16_t *x, size_t ldx,
          const uint16_t *w, size_t ldw, int32_t k) {
  __m512 acc[MR][NR];
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
  for (int32_t t = 0; t < k; t += 32) {
    /* zero pairs (the tail's masked-off lanes) add nothing */
    const __mmask32 mk = k - t >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1ull << (k - t)) - 1);
    __m512i wv[NR];
    for (int j = 0; j < nr; j++) {
      wv[j] = _mm512_maskz_loadu_epi16(mk, w + (size_t)j * ldw + t);
      PREFETCH_NEXT(w + (size_t)j * ldw + t);
    }
    for (int i = 0; i < mr; i++) {
      const __m512i xv = _mm512_maskz_loadu_epi16(mk, x + (size_t)i * ldx + t);
      for (int j = 0; j < nr; j++)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
  for (int i = 0; i < mr; i++) store_row(c + (size_t)i * ldc, acc[i], nr);
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
