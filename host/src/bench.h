/*
 * bench.h - measurements of this machine and of the CPU int8 kernels.
 *
 * Internal header, used by `tessera bench`. Every function measures wall
 * time (CLOCK_MONOTONIC) over several repetitions and returns the median,
 * so a machine shared with other work gives stable numbers. The roofline
 * references are measured, not taken from a datasheet:
 *   - memory read bandwidth: all threads stream a large array (1 GiB);
 *   - int8 peak: a register-only vpdpbusd loop (vpmaddwd on AVX2) on all
 *     threads, 2 ops per multiply-accumulate;
 *   - fp32 peak: a register-only FMA loop on all threads, 2 flops per FMA;
 * and each kernel is reported as a fraction of the limit that bounds it,
 * measured again before each of its runs and reported with it: GEMV (small
 * M) against the read bandwidth over an array of its own bytes (a 56 MiB
 * weight matrix may be read faster than a 1 GiB array), GEMM against the
 * int8 peak; the fraction is the ratio of the two reported medians.
 */
#ifndef TSR_BENCH_H
#define TSR_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "compute/qgemm.h"
#include "base/threadpool.h"

#define TSR_BENCH_MAX_SHAPES 8

typedef struct tsr_bench_shape {
  int32_t m, n, k; /* C (m x n) = A (m x k) * W^T (n x k) */
} tsr_bench_shape_t;

typedef struct tsr_bench_opts {
  tsr_threadpool_t *pool; /* borrowed; NULL = the calling thread only     */
  tsr_isa_t isa;          /* kernels and peak loops to use                 */
  int reps;               /* timed repetitions per measurement (median)    */
  size_t mem_bytes;       /* bandwidth array; 0 skips the measurement      */
  int sgemm_n;            /* square OpenBLAS sgemm size; 0 skips it        */
  int n_shapes;           /* int8 kernel shapes to time                    */
  tsr_bench_shape_t shapes[TSR_BENCH_MAX_SHAPES];
} tsr_bench_opts_t;

typedef struct tsr_bench_kernel_result {
  tsr_bench_shape_t shape;
  double seconds;   /* median time of one tsr_qgemm call (paired runs)     */
  double gops;      /* 2*m*n*k / seconds / 1e9                             */
  double gbps;      /* weight + activation bytes read / seconds / 1e9      */
  bool memory_bound; /* m < 16: bounded by reading the weights, else by
                        the int8 arithmetic peak                           */
  /* The limit that bounds it, measured right before each of its runs (so
   * both see the same load on a shared machine), median: read bandwidth
   * over an array of the kernel's own bytes (GB/s), or the int8 peak
   * (GOPS). */
  double limit;
  size_t limit_bytes; /* the bandwidth array (memory-bound rows)            */
  double frac;        /* gbps / limit or gops / limit: the printed figures */
} tsr_bench_kernel_result_t;

typedef struct tsr_bench_kernel_results {
  int n_threads;
  tsr_isa_t isa;
  int reps;
  double mem_bw_gbps;      /* 0 when skipped */
  size_t mem_bytes;
  double int8_peak_gops;   /* 0 on the portable ISA (no vector loop) */
  double fp32_peak_gflops; /* 0 on the portable ISA */
  double sgemm_gflops;     /* 0 when skipped */
  int sgemm_n;
  int n_shapes;
  tsr_bench_kernel_result_t shapes[TSR_BENCH_MAX_SHAPES];
} tsr_bench_kernel_results_t;

/* Defaults: pool NULL, isa = tsr_isa_detect(), 5 reps, 1 GiB, sgemm 2048,
 * shapes 1x14336x4096 (decode GEMV, 58 MB of weights > LLC),
 * 512x14336x4096 and 512x4096x4096 (prefill GEMM). */
void tsr_bench_opts_init(tsr_bench_opts_t *opts);

/* Median of `reps` runs; see the header comment for what each measures. */
tsr_status_t tsr_bench_mem_bw(tsr_threadpool_t *pool, size_t bytes, int reps, double *out_gbps);
double tsr_bench_int8_peak(tsr_threadpool_t *pool, tsr_isa_t isa, int reps);
double tsr_bench_fp32_peak(tsr_threadpool_t *pool, tsr_isa_t isa, int reps);
/* OpenBLAS cblas_sgemm on n x n x n with `threads` of OpenBLAS's own
 * threads (set back to one after: the runtime calls it from its pool). */
tsr_status_t tsr_bench_sgemm(int n, int threads, int reps, double *out_gflops);
/* Median seconds of tsr_qgemm on random int8 data of the given shape. */
tsr_status_t tsr_bench_qgemm(tsr_threadpool_t *pool, tsr_isa_t isa, tsr_bench_shape_t shape,
                             int reps, double *out_seconds);

/* Runs everything `opts` asks for (borrowed) and fills *out. */
tsr_status_t tsr_bench_kernels(const tsr_bench_opts_t *opts, tsr_bench_kernel_results_t *out);
/* A human-readable table / one JSON object (with a trailing newline). */
void tsr_bench_print_table(FILE *f, const tsr_bench_kernel_results_t *r);
void tsr_bench_print_json(FILE *f, const tsr_bench_kernel_results_t *r);

#endif
