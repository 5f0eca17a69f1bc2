/*
 * qgemm_kernels.h - per-ISA int8 kernels behind tsr_qgemm().
 *
 * Internal to qgemm*.c and bench.c. The dispatcher in qgemm.c splits the N
 * dimension into tasks and calls these on sub-ranges; each kernel computes
 * a C block exactly (contract 1), so the split never changes a bit.
 * qgemm_avx2.c / qgemm_avx512.c are compiled with their -m flags, so these
 * functions may only be called once tsr_isa_hw() says the CPU has the ISA.
 */
#ifndef TSR_QGEMM_KERNELS_H
#define TSR_QGEMM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "compute/qgemm.h"

/* The ISA the hardware and OS support, ignoring TSR_ISA. */
tsr_isa_t tsr_isa_hw(void);

/* "Row" kernels: no packing, W read once straight from its row-major
 * storage. Right for small M (decode), where the weights stream from
 * memory once and any reformatting would cost more than it saves.
 * row_sum: sum_k W[n][k] for the n rows of this call, or NULL (the AVX-512
 * kernel then computes it on the fly; AVX2 does not need it). */
/* The per-row symmetric quantization of qgemm.c (quantize_row), 8 floats
 * at a time: same divisions, round-to-nearest-even, NaN to 0, clamp to
 * [-127, 127]; bit-identical results. Returns the scale. */
float tsr_quantize_row_avx2(int8_t *q, const float *x, int32_t k);
void tsr_qgemm_rows_avx2(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                         const int8_t *w, size_t ldw, int32_t m, int32_t n, int32_t k);
void tsr_qgemm_rows_avx512(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                           const int8_t *w, size_t ldw, const int32_t *row_sum,
                           int32_t m, int32_t n, int32_t k);

/* Packed AVX-512 VNNI GEMM (large M, prefill).
 *
 * A is packed once per call into blocks of TSR_QGEMM_MR rows, converted to
 * u8 (a + 128) and interleaved by 4-byte k-quads:
 *   apack[(mb * kp/4 + kq) * MR * 4 + r * 4 + j] = (u8)(A[mb*MR + r][kq*4 + j] + 128)
 * kp = K rounded up to 4; rows past M and k past K hold 128 (= 0).
 * W is packed per task, TSR_QGEMM_KC deep x TSR_QGEMM_NC wide, into panels
 * of TSR_QGEMM_NR output channels laid out the same way, so one 64-byte load
 * feeds 16 channels x 4 k in one vpdpbusd. */
#define TSR_QGEMM_MR 8    /* rows of A per micro-kernel (8 or 12)         */
#define TSR_QGEMM_NR 32   /* output channels per micro-kernel (2 x zmm)   */
#define TSR_QGEMM_KC 512 /* k depth of one packed W block (multiple of 64) */
#define TSR_QGEMM_NC 256  /* output channels of one task (multiple of NR) */

/* Bytes of the packed A for m rows of depth k. */
size_t tsr_qgemm_apack_size(int32_t m, int32_t k);
/* Packs MR-row blocks [mb0, mb1) of A into apack (the whole buffer). */
void tsr_qgemm_pack_a_avx512(uint8_t *apack, const int8_t *a, size_t lda, int32_t m,
                             int32_t k, int32_t mb0, int32_t mb1);
/* Bytes of the per-thread scratch needed by tsr_qgemm_block_avx512. */
size_t tsr_qgemm_wpack_size(void);
/* C[0:m][n0:n0+nc] for nc <= NC, from the packed A and row-major W rows
 * w[0:nc] (row stride ldw). row_sum (nc entries) or NULL. wbuf: scratch of
 * tsr_qgemm_wpack_size() bytes, 64-byte aligned, private to the thread. */
void tsr_qgemm_block_avx512(int32_t *c, size_t ldc, const uint8_t *apack, int32_t m,
                            const int8_t *w, size_t ldw, const int32_t *row_sum,
                            int32_t nc, int32_t k, int8_t *wbuf);

#endif
