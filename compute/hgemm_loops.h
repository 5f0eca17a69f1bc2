/*
 * hgemm_loops.h - the block loops of the half-precision kernels
 * (hgemm_avx2.c, hgemm_avx512.c), shared: X in chunks of M_CHUNK rows, W in
 * blocks of NR rows, every (mr, nr) <= (MR, NR) tile a call of the
 * micro-kernel MK(mr, nr, ...) with constant sizes (so its accumulators
 * stay in registers). The including file defines MR (<= 8), NR (<= 4) and
 * M_CHUNK; the loops read c, ldc, x, ldx, w, ldw, m, n0, n1, k.
 *
 * Internal header (compute layer).
 */
#ifndef TSR_HGEMM_LOOPS_H
#define TSR_HGEMM_LOOPS_H

#define HG_CASE(MK, a, b)                                                  \
  case ((a) - 1) * 4 + (b) - 1:                                            \
    if ((a) <= MR && (b) <= NR) MK(a, b, cp, ldc, xp, ldx, wp, ldw, k); \
    break;
#define HG_CASES_ROW(MK, a) HG_CASE(MK, a, 1) HG_CASE(MK, a, 2) HG_CASE(MK, a, 3) HG_CASE(MK, a, 4)
#define HG_LOOPS(MK)                                                                 \
  for (int32_t i0 = 0; i0 < m; i0 += M_CHUNK) {                                      \
    const int32_t i1 = m - i0 < M_CHUNK ? m : i0 + M_CHUNK;                         \
    for (int32_t j = n0; j < n1; j += NR) {                                          \
      const int nr = n1 - j < NR ? (int)(n1 - j) : NR;                               \
      for (int32_t i = i0; i < i1; i += MR) {                                        \
        const int mr = i1 - i < MR ? (int)(i1 - i) : MR;                             \
        float *cp = c + (size_t)i * ldc + (size_t)j;                                 \
        const uint16_t *wp = w + (size_t)j * ldw;                                    \
        const __typeof__(x) xp = x + (size_t)i * ldx;                                \
        switch ((mr - 1) * 4 + nr - 1) {                                             \
          HG_CASES_ROW(MK, 1) HG_CASES_ROW(MK, 2) HG_CASES_ROW(MK, 3)               \
          HG_CASES_ROW(MK, 4) HG_CASES_ROW(MK, 5) HG_CASES_ROW(MK, 6)               \
          HG_CASES_ROW(MK, 7) HG_CASES_ROW(MK, 8)                                    \
        }                                                                            \
      }                                                                              \
    }                                                                                \
  }

#endif /* TSR_HGEMM_LOOPS_H */
