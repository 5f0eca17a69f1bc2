/*
 * qgemm.h - the int8 matmul contract and its CPU kernels.
 *
 *   C[m*ldc + n] = sum_{k<K} (int32)A[m*lda + k] * (int32)W[n*ldw + k]
 *
 * int8 x int8 -> int32, both operands K-contiguous (W holds one output
 * channel per row). Every implementation - portable C, AVX2, AVX-512 VNNI,
 * and every device - returns bit-identical int32 results (contract 1).
 * Sums are exact: |A*W| <= 2^14, so K < 2^17 cannot overflow int32.
 */
#ifndef TSR_QGEMM_H
#define TSR_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"

typedef enum tsr_isa {
  TSR_ISA_PORTABLE = 0,
  TSR_ISA_AVX2 = 1,
  TSR_ISA_AVX512VNNI = 2,
} tsr_isa_t;

/* Best ISA this CPU supports (CPUID + OS state), overridable with the
 * environment variable TSR_ISA=portable|avx2|avx512vnni (never above what
 * the CPU has). */
tsr_isa_t tsr_isa_detect(void);
const char *tsr_isa_name(tsr_isa_t isa);

/* An int8 weight matrix ready for the kernels: row-major N x K (ldw = K)
 * plus whatever the kernels precompute (per-row sums for the u8*s8 VNNI
 * trick). Devices read `data` as is. */
typedef struct tsr_qmatrix {
  int32_t n, k;
  int8_t *data;     /* (n, k) owned, 64-byte aligned */
  int32_t *row_sum; /* (n) sum_k data[n][k], owned */
  float *scale;     /* (n) per-output-channel dequantization scale, owned */
} tsr_qmatrix_t;

/* Quantizes fp32 W (n x k, row-major) per output channel, symmetric:
 * scale[n] = max|W[n]| / 127 (1 if the row is all zero),
 * q = clamp(nearbyint(W / scale), -127, 127). */
tsr_status_t tsr_qmatrix_quantize(tsr_qmatrix_t *out, const float *w, int32_t n, int32_t k);
/* The same quantization with W given one row at a time: row(ctx, r, dst)
 * writes row r (k floats) into dst, a scratch row. For weights stored in
 * another format (F16, Q8_0) the rows are converted one by one, never the
 * whole matrix; the result equals tsr_qmatrix_quantize of the converted W.
 * Rows are shared among the threads of `pool` (NULL: the caller alone);
 * `row` must be safe to call from several threads at once; so must
 * `rows_done` (optional), told of each range of rows [r0, r1) once they are
 * quantized (the caller may release their source). */
tsr_status_t tsr_qmatrix_quantize_rows(tsr_threadpool_t *pool, tsr_qmatrix_t *out, int32_t n,
                                       int32_t k,
                                       void (*row)(void *ctx, int32_t r, float *dst),
                                       void (*rows_done)(void *ctx, int32_t r0, int32_t r1),
                                       void *ctx);
/* Wraps already-quantized int8 data (copied) with unit scales. */
tsr_status_t tsr_qmatrix_from_i8(tsr_qmatrix_t *out, const int8_t *w, int32_t n, int32_t k);
void tsr_qmatrix_free(tsr_qmatrix_t *q);

/* Memory for weights the kernels stream (free with free()): 2 MiB aligned
 * and advised as huge pages from 8 MiB up (a TLB miss every 4 KiB page
 * otherwise halves what a decode step streams), else 64-byte aligned. */
void *tsr_weights_alloc(size_t bytes);

/* Quantizes activations per row (per token), symmetric, same rule as the
 * weights: scales[m] = max|x[m]| / 127 (1 if zero). */
void tsr_quantize_rows(int8_t *q, float *scales, const float *x, int32_t m, int32_t k);

/* THE shared dequantization routine: out[m*ldo + n] =
 * (float)C[m*ldc + n] * a_scale[m] * w_scale[n]. Every backend's int32
 * result goes through here, so equal integers give equal floats. */
void tsr_dequantize(float *out, size_t ldo, const int32_t *c, size_t ldc,
                    const float *a_scale, const float *w_scale, int32_t m, int32_t n);

/* Portable reference kernel (any shape, any strides). */
void tsr_qgemm_portable(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                        const int8_t *w, size_t ldw, int32_t m, int32_t n, int32_t k);

/* C = A * W^T with the kernel for `isa`, multithreaded over `pool` (NULL =
 * caller only). `w` provides row sums for the VNNI path. */
void tsr_qgemm(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
               const int8_t *a, size_t lda, const tsr_qmatrix_t *w, int32_t m);

/* Same contract on a raw int8 W with any row stride (no precomputed sums):
 * what a device's functional model runs for a descriptor. */
void tsr_qgemm_strided(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
                       const int8_t *a, size_t lda, const int8_t *w, size_t ldw,
                       int32_t m, int32_t n, int32_t k);

#endif
