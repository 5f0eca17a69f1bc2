/*
 * bench.c - machine roofline and int8 kernel throughput (see bench.h).
 *
 * The peak loops are compiled per ISA with target attributes rather than
 * in the _avx2/_avx512 files: they are measurement code, not kernels, and
 * they are only called after tsr_isa_hw() allows it.
 */
#include "bench.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "compute/qgemm_kernels.h"
#include "base/status.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define TSR_BENCH_X86 1
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { TSR_BENCH_MAX_REPS = 101 };

static int clamp_reps(int reps) {
  return reps < 1 ? 1 : reps > TSR_BENCH_MAX_REPS ? TSR_BENCH_MAX_REPS : reps;
}

static void noop_task(void *arg, int task, int thread) { (void)arg, (void)task, (void)thread; }

/* Wakes sleeping workers so the first timed run does not include it. */
static void warm_pool(tsr_threadpool_t *pool) {
  int nt = tsr_threadpool_size(pool);
  for (int i = 0; i < 4; ++i) tsr_threadpool_run(pool, nt * 4, noop_task, NULL);
}

void tsr_bench_opts_init(tsr_bench_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->isa = tsr_isa_detect();
  o->reps = 5;
  o->mem_bytes = (size_t)1 << 30;
  o->sgemm_n = 2048;
  o->n_shapes = 3;
  o->shapes[0] = (tsr_bench_shape_t){1, 14336, 4096};
  o->shapes[1] = (tsr_bench_shape_t){512, 14336, 4096};
  o->shapes[2] = (tsr_bench_shape_t){512, 4096, 4096};
}

/* ------------------------------------------------------------------------ */
/* Memory read bandwidth                                                     */
/* ------------------------------------------------------------------------ */

enum { TSR_BW_CHUNK = 4 << 20 }; /* bytes per task: balances two threads */

typedef struct {
  const uint8_t *buf;
  size_t bytes;
  tsr_isa_t isa;
  _Atomic uint64_t sink;
} bw_job_t;

#ifdef TSR_BENCH_X86
/* Lane sums in unsigned arithmetic: the intrinsics' reductions add in
 * signed types, and the values here wrap (they only keep the loops alive). */
__attribute__((target("avx512f"))) static uint64_t sum_u64x8(__m512i v) {
  uint64_t lane[8], s = 0;
  _mm512_storeu_si512((void *)lane, v);
  for (int i = 0; i < 8; i++) s += lane[i];
  return s;
}

__attribute__((target("avx512f"))) static uint32_t sum_u32x16(__m512i v) {
  uint32_t lane[16], s = 0;
  _mm512_storeu_si512((void *)lane, v);
  for (int i = 0; i < 16; i++) s += lane[i];
  return s;
}

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    /* Same software prefetch lead as the GEMV kernel (16 KiB), so the
     * reference is the best stream this core can pull, not what the
     * hardware prefetcher alone manages. Prefetches past the end are
     * harmless hints. */
    for (int l = 0; l < 256; l += 64) _mm_prefetch((const char *)(p + i + 16384 + l), _MM_HINT_T0);
    a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i)));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + i + 64)));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));
  }
  a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return sum_u64x8(a0);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
  }
  a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}
#endif

static uint64_t read_portable(const uint8_t *p, size_t n) {
  const uint64_t *q = (const uint64_t *)p;
  uint64_t a = 0, b = 0;
  for (size_t i = 0; i + 2 <= n / 8; i += 2) a ^= q[i], b ^= q[i + 1];
  return a ^ b;
}

static void bw_task(void *arg, int task, int thread) {
  (void)thread;
  bw_job_t *j = arg;
  size_t off = (size_t)task * TSR_BW_CHUNK;
  size_t n = j->bytes - off < TSR_BW_CHUNK ? j->bytes - off : TSR_BW_CHUNK;
  uint64_t r;
#ifdef TSR_BENCH_X86
  if (j->isa == TSR_ISA_AVX512VNNI) r = read_avx512(j->buf + off, n);
  else if (j->isa == TSR_ISA_AVX2) r = read_avx2(j->buf + off, n);
  else
#endif
    r = read_portable(j->buf + off, n);
  atomic_fetch_xor_explicit(&j->sink, r, memory_order_relaxed);
}

static void touch_task(void *arg, int task, int thread) {
  (void)thread;
  bw_job_t *j = arg;
  size_t off = (size_t)task * TSR_BW_CHUNK;
  size_t n = j->bytes - off < TSR_BW_CHUNK ? j->bytes - off : TSR_BW_CHUNK;
  memset((uint8_t *)j->buf + off, (int)(task & 0x7F) | 1, n);
}

tsr_status_t tsr_bench_mem_bw(tsr_threadpool_t *pool, size_t bytes, int reps, double *out_gbps) {
  *out_gbps = 0;
  reps = clamp_reps(reps);
  const size_t huge = (size_t)2 << 20;
  bytes = (bytes + huge - 1) / huge * huge;
  if (!bytes) return TSR_ERR(INVALID_ARGUMENT, "bench: memory bandwidth array of 0 bytes");
  uint8_t *buf = aligned_alloc(huge, bytes);
  if (!buf) return TSR_ERR(RESOURCE_EXHAUSTED, "bench: cannot allocate %zu bytes", bytes);
  /* Huge pages keep TLB misses out of a bandwidth number. */
  (void)madvise(buf, bytes, MADV_HUGEPAGE);
  bw_job_t j = {.buf = buf, .bytes = bytes, .isa = tsr_isa_hw()};
  if (j.isa > tsr_isa_detect()) j.isa = tsr_isa_detect();
  atomic_init(&j.sink, 0);
  int n_tasks = (int)((bytes + TSR_BW_CHUNK - 1) / TSR_BW_CHUNK);
  tsr_threadpool_run(pool, n_tasks, touch_task, &j); /* fault the pages in */
  tsr_threadpool_run(pool, n_tasks, bw_task, &j);    /* one untimed pass */
  double t[TSR_BENCH_MAX_REPS];
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    tsr_threadpool_run(pool, n_tasks, bw_task, &j);
    t[r] = now_s() - t0;
  }
  free(buf);
  *out_gbps = (double)bytes / median(t, reps) / 1e9;
  return TSR_OK;
}

/* ------------------------------------------------------------------------ */
/* Arithmetic peaks: register-only loops, one copy per thread                */
/* ------------------------------------------------------------------------ */

/* Iterations per thread and run: ~10-50 ms at the expected peaks. */
enum { TSR_PEAK_ITERS = 1 << 20 };

typedef struct {
  tsr_isa_t isa;
  int fp32;
  _Atomic uint64_t sink;
} peak_job_t;

#ifdef TSR_BENCH_X86
/* 12 independent accumulator chains cover latency x throughput of
 * vpdpbusd / vfmadd on current cores (latency ~4-5, up to 2 per cycle).
 * The body is one asm statement so the compiler can neither merge the
 * chains nor drop them: exactly 12 instructions per iteration. */
#define TSR_PEAK_ASM(insn, c)                                                             \
  __asm__ volatile(insn " %[b], %[a], %[c0]\n\t" insn " %[b], %[a], %[c1]\n\t"          \
                   insn " %[b], %[a], %[c2]\n\t" insn " %[b], %[a], %[c3]\n\t"          \
                   insn " %[b], %[a], %[c4]\n\t" insn " %[b], %[a], %[c5]\n\t"          \
                   insn " %[b], %[a], %[c6]\n\t" insn " %[b], %[a], %[c7]\n\t"          \
                   insn " %[b], %[a], %[c8]\n\t" insn " %[b], %[a], %[c9]\n\t"          \
                   insn " %[b], %[a], %[c10]\n\t" insn " %[b], %[a], %[c11]\n\t"        \
                   : [c0] "+v"(c##0), [c1] "+v"(c##1), [c2] "+v"(c##2), [c3] "+v"(c##3),  \
                     [c4] "+v"(c##4), [c5] "+v"(c##5), [c6] "+v"(c##6), [c7] "+v"(c##7),  \
                     [c8] "+v"(c##8), [c9] "+v"(c##9), [c10] "+v"(c##10), [c11] "+v"(c##11) \
                   : [a] "v"(a), [b] "v"(b))

/* Named registers around the loop: an array would live in memory. */
#define TSR_PEAK_LOOP(T, insn, arr)                                                       \
  do {                                                                                    \
    T c0 = arr[0], c1 = arr[1], c2 = arr[2], c3 = arr[3], c4 = arr[4], c5 = arr[5];        \
    T c6 = arr[6], c7 = arr[7], c8 = arr[8], c9 = arr[9], c10 = arr[10], c11 = arr[11];    \
    for (int i = 0; i < TSR_PEAK_ITERS; ++i) TSR_PEAK_ASM(insn, c);                       \
    arr[0] = c0, arr[1] = c1, arr[2] = c2, arr[3] = c3, arr[4] = c4, arr[5] = c5;          \
    arr[6] = c6, arr[7] = c7, arr[8] = c8, arr[9] = c9, arr[10] = c10, arr[11] = c11;      \
  } while (0)

__attribute__((target("avx512f,avx512vnni"))) static uint64_t peak_vnni512(void) {
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5), c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_epi32(i);
  TSR_PEAK_LOOP(__m512i, "vpdpbusd", c);
  for (int i = 1; i < 12; ++i) c[0] = _mm512_add_epi32(c[0], c[i]);
  return sum_u32x16(c[0]);
}

__attribute__((target("avx512f"))) static uint64_t peak_fma512(void) {
  __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f), c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_ps((float)i);
  TSR_PEAK_LOOP(__m512, "vfmadd231ps", c);
  for (int i = 1; i < 12; ++i) c[0] = _mm512_add_ps(c[0], c[i]);
  return (uint64_t)_mm512_reduce_add_ps(c[0]);
}

/* AVX2 has no VNNI in the -mavx2 kernels: the int8 path there is
 * vpmaddwd + vpaddd on int16; vpmaddwd alone is timed (16 MACs per ymm),
 * an upper bound for that kernel. */
__attribute__((target("avx2"))) static uint64_t peak_madd256(void) {
  __m256i a = _mm256_set1_epi16(3), b = _mm256_set1_epi16(-5), c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_epi32(i);
  TSR_PEAK_LOOP(__m256i, "vpmaddwd", c);
  for (int i = 1; i < 12; ++i) c[0] = _mm256_add_epi32(c[0], c[i]);
  return (uint64_t)(uint32_t)_mm256_extract_epi32(c[0], 0);
}

__attribute__((target("avx2,fma"))) static uint64_t peak_fma256(void) {
  __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f), c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_ps((float)i);
  TSR_PEAK_LOOP(__m256, "vfmadd231ps", c);
  for (int i = 1; i < 12; ++i) c[0] = _mm256_add_ps(c[0], c[i]);
  return (uint64_t)_mm256_cvtss_f32(c[0]);
}
#endif

static void peak_task(void *arg, int task, int thread) {
  (void)task, (void)thread;
  peak_job_t *j = arg;
  uint64_t r = 0;
#ifdef TSR_BENCH_X86
  if (j->isa == TSR_ISA_AVX512VNNI) r = j->fp32 ? peak_fma512() : peak_vnni512();
  else if (j->isa == TSR_ISA_AVX2) r = j->fp32 ? peak_fma256() : peak_madd256();
#endif
  atomic_fetch_xor_explicit(&j->sink, r, memory_order_relaxed);
}

/* Ops per loop iteration per thread: 12 instructions x lanes x MACs x 2. */
static double peak_ops_per_iter(tsr_isa_t isa, int fp32) {
  if (isa == TSR_ISA_AVX512VNNI) return fp32 ? 12.0 * 16 * 2 : 12.0 * 64 * 2;
  return fp32 ? 12.0 * 8 * 2 : 12.0 * 16 * 2;
}

static double peak(tsr_threadpool_t *pool, tsr_isa_t isa, int reps, int fp32) {
  tsr_isa_t hw = tsr_isa_hw();
  if (isa > hw) isa = hw;
  if (isa == TSR_ISA_PORTABLE) return 0;
  reps = clamp_reps(reps);
  peak_job_t j = {.isa = isa, .fp32 = fp32};
  atomic_init(&j.sink, 0);
  int nt = tsr_threadpool_size(pool);
  warm_pool(pool);
  tsr_threadpool_run(pool, nt, peak_task, &j); /* clocks up, code warm */
  double t[TSR_BENCH_MAX_REPS];
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    tsr_threadpool_run(pool, nt, peak_task, &j);
    t[r] = now_s() - t0;
  }
  return peak_ops_per_iter(isa, fp32) * TSR_PEAK_ITERS * nt / median(t, reps) / 1e9;
}

double tsr_bench_int8_peak(tsr_threadpool_t *pool, tsr_isa_t isa, int reps) {
  return peak(pool, isa, reps, 0);
}

double tsr_bench_fp32_peak(tsr_threadpool_t *pool, tsr_isa_t isa, int reps) {
  return peak(pool, isa, reps, 1);
}

/* ------------------------------------------------------------------------ */
/* OpenBLAS sgemm                                                            */
/* ------------------------------------------------------------------------ */

tsr_status_t tsr_bench_sgemm(int n, int threads, int reps, double *out_gflops) {
  *out_gflops = 0;
  if (n <= 0) return TSR_ERR(INVALID_ARGUMENT, "bench: sgemm size n=%d", n);
  reps = clamp_reps(reps);
  size_t nn = (size_t)n * (size_t)n;
  float *a = aligned_alloc(64, (nn * sizeof(float) + 63) & ~(size_t)63);
  float *b = aligned_alloc(64, (nn * sizeof(float) + 63) & ~(size_t)63);
  float *c = aligned_alloc(64, (nn * sizeof(float) + 63) & ~(size_t)63);
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return TSR_ERR(RESOURCE_EXHAUSTED, "bench: sgemm n=%d buffers", n);
  }
  for (size_t i = 0; i < nn; ++i) {
    a[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
    b[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
  }
  /* OpenBLAS's own threads for this figure; the runtime keeps it at one
   * thread per call (context.c) */
  openblas_set_num_threads(threads > 0 ? threads : 1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  double t[TSR_BENCH_MAX_REPS];
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    t[r] = now_s() - t0;
  }
  openblas_set_num_threads(1);
  free(a), free(b), free(c);
  *out_gflops = 2.0 * (double)n * n * n / median(t, reps) / 1e9;
  return TSR_OK;
}

/* ------------------------------------------------------------------------ */
/* int8 kernels                                                              */
/* ------------------------------------------------------------------------ */

static void fill_random(int8_t *p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = (int8_t)(x >> (8 * (i & 7)));
}

tsr_status_t tsr_bench_qgemm(tsr_threadpool_t *pool, tsr_isa_t isa, tsr_bench_shape_t s,
                             int reps, double *out_seconds) {
  *out_seconds = 0;
  if (s.m <= 0 || s.n <= 0 || s.k <= 0)
    return TSR_ERR(INVALID_ARGUMENT, "bench: qgemm shape m=%d n=%d k=%d", s.m, s.n, s.k);
  reps = clamp_reps(reps);
  size_t wbytes = (size_t)s.n * (size_t)s.k;
  int8_t *w = malloc(wbytes);
  int8_t *a = malloc((size_t)s.m * (size_t)s.k);
  int32_t *c = malloc((size_t)s.m * (size_t)s.n * sizeof(int32_t));
  if (!w || !a || !c) {
    free(w), free(a), free(c);
    return TSR_ERR(RESOURCE_EXHAUSTED, "bench: qgemm buffers for m=%d n=%d k=%d", s.m, s.n, s.k);
  }
  fill_random(w, wbytes, 0x1234567);
  fill_random(a, (size_t)s.m * (size_t)s.k, 0x7654321);
  tsr_qmatrix_t q;
  tsr_status_t st = tsr_qmatrix_from_i8(&q, w, s.n, s.k);
  free(w);
  if (st) {
    free(a), free(c);
    return tsr_status_annotate(st, "bench: qgemm m=%d n=%d k=%d", s.m, s.n, s.k);
  }
  warm_pool(pool);
  tsr_qgemm(pool, isa, c, (size_t)s.n, a, (size_t)s.k, &q, s.m);
  double t[TSR_BENCH_MAX_REPS];
  /* Short calls (decode) are timed in batches so the clock's resolution
   * and call overhead stay below 1%; each batch still streams W from
   * memory, since W is larger than the caches for the shapes that matter. */
  double t0 = now_s();
  tsr_qgemm(pool, isa, c, (size_t)s.n, a, (size_t)s.k, &q, s.m);
  double one = now_s() - t0;
  int batch = one > 0.01 ? 1 : (int)(0.01 / (one > 1e-7 ? one : 1e-7)) + 1;
  for (int r = 0; r < reps; ++r) {
    t0 = now_s();
    for (int b = 0; b < batch; ++b) tsr_qgemm(pool, isa, c, (size_t)s.n, a, (size_t)s.k, &q, s.m);
    t[r] = (now_s() - t0) / batch;
  }
  tsr_qmatrix_free(&q);
  free(a), free(c);
  *out_seconds = median(t, reps);
  return TSR_OK;
}

tsr_status_t tsr_bench_kernels(const tsr_bench_opts_t *o, tsr_bench_kernel_results_t *r) {
  memset(r, 0, sizeof(*r));
  if (o->n_shapes < 0 || o->n_shapes > TSR_BENCH_MAX_SHAPES)
    return TSR_ERR(INVALID_ARGUMENT, "bench: n_shapes=%d (max %d)", o->n_shapes, TSR_BENCH_MAX_SHAPES);
  r->n_threads = tsr_threadpool_size(o->pool);
  r->isa = o->isa > tsr_isa_hw() ? tsr_isa_hw() : o->isa;
  r->reps = clamp_reps(o->reps);
  r->mem_bytes = o->mem_bytes;
  r->sgemm_n = o->sgemm_n;
  if (o->mem_bytes)
    TSR_RETURN_IF_ERROR(tsr_bench_mem_bw(o->pool, o->mem_bytes, r->reps, &r->mem_bw_gbps),
                        "memory bandwidth");
  r->int8_peak_gops = tsr_bench_int8_peak(o->pool, r->isa, r->reps);
  r->fp32_peak_gflops = tsr_bench_fp32_peak(o->pool, r->isa, r->reps);
  if (o->sgemm_n > 0)
    TSR_RETURN_IF_ERROR(tsr_bench_sgemm(o->sgemm_n, r->n_threads, r->reps, &r->sgemm_gflops),
                        "sgemm");
  r->n_shapes = o->n_shapes;
  for (int i = 0; i < o->n_shapes; ++i) {
    tsr_bench_kernel_result_t *k = &r->shapes[i];
    tsr_bench_shape_t s = o->shapes[i];
    k->shape = s;
    /* one untimed call: first-touch of its buffers and code */
    double warm = 0;
    TSR_RETURN_IF_ERROR(tsr_bench_qgemm(o->pool, r->isa, s, 1, &warm), "int8 kernel %d", i);
    double ops = 2.0 * s.m * (double)s.n * s.k;
    double bytes = (double)s.n * s.k + (double)s.m * s.k;
    k->memory_bound = s.m < 16;
    k->limit_bytes = k->memory_bound ? (size_t)bytes : 0;
    /* Pairs: the bounding limit, then the kernel, `reps` times; medians of
     * each, and the fraction is the ratio of the two medians, so that it
     * follows from the figures reported. */
    double limits[TSR_BENCH_MAX_REPS], secs[TSR_BENCH_MAX_REPS];
    for (int rep = 0; rep < r->reps; ++rep) {
      if (k->memory_bound)
        TSR_RETURN_IF_ERROR(tsr_bench_mem_bw(o->pool, k->limit_bytes, 1, &limits[rep]),
                            "memory bandwidth over %zu bytes", k->limit_bytes);
      else
        limits[rep] = tsr_bench_int8_peak(o->pool, r->isa, 1);
      TSR_RETURN_IF_ERROR(tsr_bench_qgemm(o->pool, r->isa, s, 1, &secs[rep]),
                          "int8 kernel %d", i);
    }
    k->seconds = median(secs, r->reps);
    k->limit = median(limits, r->reps);
    k->gops = ops / k->seconds / 1e9;
    k->gbps = bytes / k->seconds / 1e9;
    k->frac = k->limit > 0 ? (k->memory_bound ? k->gbps : k->gops) / k->limit : 0;
  }
  return TSR_OK;
}

void tsr_bench_print_table(FILE *f, const tsr_bench_kernel_results_t *r) {
  fprintf(f, "CPU roofline (%d threads, %s, median of %d)\n", r->n_threads, tsr_isa_name(r->isa),
          r->reps);
  if (r->mem_bytes)
    fprintf(f, "  memory read bandwidth   %9.1f GB/s  (%zu MiB array)\n", r->mem_bw_gbps,
            r->mem_bytes >> 20);
  fprintf(f, "  int8 peak               %9.1f GOPS\n", r->int8_peak_gops);
  fprintf(f, "  fp32 FMA peak           %9.1f GFLOPS\n", r->fp32_peak_gflops);
  if (r->sgemm_n)
    fprintf(f, "  OpenBLAS sgemm %5d^3  %9.1f GFLOPS\n", r->sgemm_n, r->sgemm_gflops);
  if (!r->n_shapes) return;
  fprintf(f, "int8 kernels (tsr_qgemm); each against the limit that bounds it, measured\n"
             "before each of its runs: read bandwidth over an array of its own bytes (GEMV)\n"
             "or the int8 peak (GEMM); %% = the two medians' ratio\n");
  fprintf(f, "  %6s %6s %6s %10s %9s %8s  %-24s %7s\n", "M", "N", "K", "ms", "GOPS", "GB/s",
          "bound", "%bound");
  for (int i = 0; i < r->n_shapes; ++i) {
    const tsr_bench_kernel_result_t *k = &r->shapes[i];
    char bound[48];
    if (k->memory_bound)
      snprintf(bound, sizeof bound, "%.1f GB/s (%zu MiB read)", k->limit, k->limit_bytes >> 20);
    else
      snprintf(bound, sizeof bound, "%.1f GOPS (int8 peak)", k->limit);
    fprintf(f, "  %6d %6d %6d %10.3f %9.1f %8.1f  %-24s %6.1f%%\n", k->shape.m, k->shape.n,
            k->shape.k, k->seconds * 1e3, k->gops, k->gbps, bound, 100 * k->frac);
  }
}

void tsr_bench_print_json(FILE *f, const tsr_bench_kernel_results_t *r) {
  fprintf(f,
          "{\"threads\": %d, \"isa\": \"%s\", \"reps\": %d, \"mem_bw_gbps\": %.2f, "
          "\"mem_bytes\": %zu, \"int8_peak_gops\": %.1f, \"fp32_peak_gflops\": %.1f, "
          "\"sgemm_n\": %d, \"sgemm_gflops\": %.1f, \"kernels\": [",
          r->n_threads, tsr_isa_name(r->isa), r->reps, r->mem_bw_gbps, r->mem_bytes,
          r->int8_peak_gops, r->fp32_peak_gflops, r->sgemm_n, r->sgemm_gflops);
  for (int i = 0; i < r->n_shapes; ++i) {
    const tsr_bench_kernel_result_t *k = &r->shapes[i];
    fprintf(f,
            "%s{\"m\": %d, \"n\": %d, \"k\": %d, \"seconds\": %.6g, \"gops\": %.2f, "
            "\"gbps\": %.2f, \"bound\": \"%s\", \"limit\": %.2f, \"limit_bytes\": %zu, "
            "\"frac\": %.4f}",
            i ? ", " : "", k->shape.m, k->shape.n, k->shape.k, k->seconds, k->gops, k->gbps,
            k->memory_bound ? "read_gbps" : "int8_peak_gops", k->limit, k->limit_bytes,
            k->frac);
  }
  fprintf(f, "]}\n");
}
