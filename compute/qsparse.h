/*
 * qsparse.h - an int8 weight matrix with its all-zero tiles left out, and
 * the decode matmul over it (the CPU's use of block-pruned weights).
 *
 * W (n x k, tsr_qmatrix_t) is cut into tiles of 16 rows x 16 columns (edge
 * tiles padded with zeros). Only tiles holding a non-zero are stored, each
 * as 4 column quads of 16 rows x 4 bytes (the VNNI operand layout), with
 * per tile row the column index of each stored tile. The product skips the
 * missing tiles: the int32 results are those of tsr_qgemm on the dense W,
 * bit for bit (the skipped products are all zero).
 *
 * Internal header (compute layer). Output first.
 */
#ifndef TSR_QSPARSE_H
#define TSR_QSPARSE_H

#include <stdint.h>

#include "base/threadpool.h"
#include "compute/qgemm.h"

#define TSR_QSPARSE_TILE 16

typedef struct tsr_qsparse {
  int32_t n, k;
  int32_t tile_rows, tile_cols; /* ceil(n / 16), ceil(k / 16) */
  int32_t *row_start;  /* (tile_rows + 1) first stored tile of each tile row */
  int32_t *tile_col;   /* (stored) tile column of each stored tile */
  int8_t *tiles;       /* (stored, 256) 64-byte aligned */
  const int32_t *row_sum; /* borrowed from the dense matrix (n) */
  int64_t stored;
} tsr_qsparse_t;

/* Fraction of W's 16 x 16 tiles holding a non-zero value. */
double tsr_qsparse_density(const tsr_qmatrix_t *w);

/* Builds the compressed form of w (which must outlive it: its row sums). */
tsr_status_t tsr_qsparse_build(const tsr_qmatrix_t *w, tsr_qsparse_t *out);
void tsr_qsparse_free(tsr_qsparse_t *s);

/* C (m x n, ldc) = A (m x k int8, lda) * W^T over the stored tiles, for the
 * m < 16 rows of a decode step; multithreaded over tile rows (`pool` NULL:
 * the caller). The VNNI kernel where `isa` has it, else portable C. */
void tsr_qsparse_gemm(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
                      const int8_t *a, size_t lda, const tsr_qsparse_t *w, int32_t m);

/* The VNNI kernel (qsparse_avx512.c): tile rows [t0, t1). */
void tsr_qsparse_rows_avx512(int32_t *c, size_t ldc, const uint8_t *au, size_t ldau,
                             const tsr_qsparse_t *w, int32_t m, int32_t t0, int32_t t1);

#endif /* TSR_QSPARSE_H */
