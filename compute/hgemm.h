/*
 * hgemm.h - matmuls over half-precision weights (fp16 and bf16) with fp32
 * accumulation: the CPU path's --precision fp16 and bf16.
 *
 *   fp16  weights IEEE binary16, activations fp32; every weight is widened
 *         exactly (F16C / AVX-512 VCVTPH2PS) and multiplied in fp32;
 *   bf16  weights and activations bfloat16 (activations rounded once per
 *         matmul with tsr_bf16_round), products summed in fp32: AVX-512 BF16
 *         VDPBF16PS where the CPU has it, widening + FMA elsewhere.
 *
 * Work is split over N only and each C element is one kernel call over the
 * whole of K, so the thread count never changes a result; the kernel (hence
 * the summation order) is chosen from the CPU: results agree across kernels
 * to fp32 rounding, not bit for bit.
 *
 * Internal header (compute layer). Output first.
 */
#ifndef TSR_HGEMM_H
#define TSR_HGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "compute/qgemm.h"

typedef enum tsr_half {
  TSR_HALF_F16 = 0,
  TSR_HALF_BF16 = 1,
} tsr_half_t;

/* The kernels, from the slowest. */
typedef enum tsr_hkernel {
  TSR_HK_PORTABLE = 0,   /* C, any CPU                                    */
  TSR_HK_AVX2 = 1,       /* AVX2 + FMA + F16C, 8 lanes                    */
  TSR_HK_AVX512 = 2,     /* AVX-512F/BW, 16 lanes (bf16 widened to fp32)  */
  TSR_HK_AVX512BF16 = 3, /* bf16 only: VDPBF16PS                          */
} tsr_hkernel_t;

/* The best kernel for `type` on this CPU at most at level `isa` (the
 * context's ISA, so TSR_ISA also limits these kernels). */
tsr_hkernel_t tsr_hgemm_kernel(tsr_isa_t isa, tsr_half_t type);
const char *tsr_hkernel_name(tsr_hkernel_t k);

/* dst[i] = tsr_f32_to_bf16(x[i]) for n values (vectorized under
 * TSR_HK_AVX512BF16; the same bits either way). */
void tsr_bf16_round(tsr_hkernel_t kern, uint16_t *dst, const float *x, size_t n);

/* C[i][j] = sum_k X[i][k] * W[j][k] for i < m, j < n: W holds n rows of k
 * halves (row stride ldw elements), X m rows (stride ldx), C m rows of n
 * floats (stride ldc). m, n, k >= 1. Multithreaded over `pool` (NULL: the
 * calling thread). */
void tsr_hgemm_f16(tsr_threadpool_t *pool, tsr_hkernel_t kern, float *c, size_t ldc,
                   const float *x, size_t ldx, const uint16_t *w, size_t ldw, int32_t m,
                   int32_t n, int32_t k);
void tsr_hgemm_bf16(tsr_threadpool_t *pool, tsr_hkernel_t kern, float *c, size_t ldc,
                    const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw, int32_t m,
                    int32_t n, int32_t k);

/* ---- per-ISA kernels (hgemm_avx2.c, hgemm_avx512.c): columns [n0, n1) of
 * C for every row. */
typedef void (*tsr_hgemm_f16_fn)(float *c, size_t ldc, const float *x, size_t ldx,
                                 const uint16_t *w, size_t ldw, int32_t m, int32_t n0,
                                 int32_t n1, int32_t k);
typedef void (*tsr_hgemm_bf16_fn)(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                                  const uint16_t *w, size_t ldw, int32_t m, int32_t n0,
                                  int32_t n1, int32_t k);
void tsr_hgemm_f16_avx2(float *c, size_t ldc, const float *x, size_t ldx, const uint16_t *w,
                        size_t ldw, int32_t m, int32_t n0, int32_t n1, int32_t k);
void tsr_hgemm_bf16_avx2(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                         const uint16_t *w, size_t ldw, int32_t m, int32_t n0, int32_t n1,
                         int32_t k);
void tsr_hgemm_f16_avx512(float *c, size_t ldc, const float *x, size_t ldx, const uint16_t *w,
                          size_t ldw, int32_t m, int32_t n0, int32_t n1, int32_t k);
void tsr_hgemm_bf16_avx512(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                           const uint16_t *w, size_t ldw, int32_t m, int32_t n0, int32_t n1,
                           int32_t k);
void tsr_hgemm_bf16_avx512bf16(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                               const uint16_t *w, size_t ldw, int32_t m, int32_t n0,
                               int32_t n1, int32_t k);
void tsr_bf16_round_avx512bf16(uint16_t *dst, const float *x, size_t n);

#endif /* TSR_HGEMM_H */
