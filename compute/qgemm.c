/*
 * qgemm.c - ISA detection, quantization, the portable kernel, and the
 * multithreaded dispatch of tsr_qgemm / tsr_qgemm_strided.
 *
 * Work is split over N only: every C element is computed by exactly one
 * kernel call over the whole of K, so the split (and the thread count) can
 * never change a result bit. Which kernel runs is decided by ISA and M:
 *   - M < TSR_QGEMM_PACK_MIN_M (decode): "row" kernels stream W once from
 *     its row-major storage, several rows at a time; memory bound.
 *   - otherwise, on AVX-512 VNNI: A is packed once (u8, k-quad interleaved)
 *     and each task packs a KC x NC block of W for the register-blocked
 *     micro-kernel; compute bound.
 */
#include "compute/qgemm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compute/qgemm_kernels.h"
#include "base/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TSR_X86 1
#endif

/* Below this many rows of A, packing W costs more than it saves: each
 * packed byte would be reused fewer than 16 times. */
enum { TSR_QGEMM_PACK_MIN_M = 16 };

/* ------------------------------------------------------------------------ */
/* ISA detection                                                             */
/* ------------------------------------------------------------------------ */

#ifdef TSR_X86
static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

static tsr_isa_t detect_hw(void) {
#ifdef TSR_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return TSR_ISA_PORTABLE;
  const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
  /* The CPU may have AVX while the OS does not save ymm/zmm state: both
   * CPUID and XCR0 must agree before any wide register is touched. */
  if (!osxsave || !avx || !fma) return TSR_ISA_PORTABLE;
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0x6) != 0x6) return TSR_ISA_PORTABLE; /* SSE + AVX state */
  if (__get_cpuid_max(0, NULL) < 7) return TSR_ISA_PORTABLE;
  __cpuid_count(7, 0, a, b, c, d);
  if (!((b >> 5) & 1)) return TSR_ISA_PORTABLE; /* AVX2 */
  const int f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
  /* opmask, upper zmm halves and zmm16-31 state */
  if (f && bw && vl && vnni && (xcr0 & 0xE0) == 0xE0) return TSR_ISA_AVX512VNNI;
  return TSR_ISA_AVX2;
#else
  return TSR_ISA_PORTABLE;
#endif
}

tsr_isa_t tsr_isa_hw(void) {
  static atomic_int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    v = (int)detect_hw();
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return (tsr_isa_t)v;
}

tsr_isa_t tsr_isa_detect(void) {
  tsr_isa_t hw = tsr_isa_hw();
  const char *env = getenv("TSR_ISA");
  if (!env || !*env) return hw;
  tsr_isa_t want = hw;
  if (!strcmp(env, "portable")) want = TSR_ISA_PORTABLE;
  else if (!strcmp(env, "avx2")) want = TSR_ISA_AVX2;
  else if (!strcmp(env, "avx512vnni")) want = TSR_ISA_AVX512VNNI;
  return want < hw ? want : hw;
}

const char *tsr_isa_name(tsr_isa_t isa) {
  switch (isa) {
    case TSR_ISA_PORTABLE: return "portable";
    case TSR_ISA_AVX2: return "avx2";
    case TSR_ISA_AVX512VNNI: return "avx512vnni";
  }
  return "unknown";
}

/* ------------------------------------------------------------------------ */
/* Quantization                                                              */
/* ------------------------------------------------------------------------ */

/* The one quantization rule, for weights and activations alike:
 *   scale = max|x| / 127 (1 when the row is all zero),
 *   q = clamp(nearbyintf(x / scale), -127, 127)
 * A true division (not x * (1/scale)) so the result is the correctly
 * rounded quotient and easy to reproduce anywhere; nearbyintf rounds ties
 * to even under the default rounding mode. NaN inputs quantize to 0. */
static float quantize_row_portable(int8_t *q, const float *x, int32_t k) {
  float amax = 0.0f;
  for (int32_t i = 0; i < k; ++i) {
    float v = fabsf(x[i]);
    if (v > amax) amax = v;
  }
  const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  for (int32_t i = 0; i < k; ++i) {
    float v = nearbyintf(x[i] / scale);
    if (!(v == v)) v = 0.0f;
    if (v > 127.0f) v = 127.0f;
    if (v < -127.0f) v = -127.0f;
    q[i] = (int8_t)v;
  }
  return scale;
}

/* Picked once: the AVX2 form where the CPU has it (AVX-512 CPUs have
 * AVX2), bit-identical to the portable one. */
static float quantize_row(int8_t *q, const float *x, int32_t k) {
  static _Atomic int isa = -1;
  int v = atomic_load_explicit(&isa, memory_order_relaxed);
  if (v < 0) {
    v = (int)tsr_isa_detect();
    atomic_store_explicit(&isa, v, memory_order_relaxed);
  }
  if (v >= (int)TSR_ISA_AVX2) return tsr_quantize_row_avx2(q, x, k);
  return quantize_row_portable(q, x, k);
}

void tsr_quantize_rows(int8_t *q, float *scales, const float *x, int32_t m, int32_t k) {
  for (int32_t r = 0; r < m; ++r)
    scales[r] = quantize_row(q + (size_t)r * k, x + (size_t)r * k, k);
}

void tsr_dequantize(float *out, size_t ldo, const int32_t *c, size_t ldc,
                    const float *a_scale, const float *w_scale, int32_t m, int32_t n) {
  for (int32_t i = 0; i < m; ++i) {
    const float as = a_scale[i];
    float *o = out + (size_t)i * ldo;
    const int32_t *ci = c + (size_t)i * ldc;
    /* Evaluation order is part of the contract: ((float)C * a) * w. */
    for (int32_t j = 0; j < n; ++j) o[j] = (float)ci[j] * as * w_scale[j];
  }
}

/* ------------------------------------------------------------------------ */
/* tsr_qmatrix_t                                                             */
/* ------------------------------------------------------------------------ */

/* Largest K whose exact sums fit int32: K * 128 * 128 < 2^31. */
#define TSR_QGEMM_MAX_K ((1 << 17) - 1)

/* Weight buffers larger than a few MiB are 2 MiB aligned and advised as
 * huge pages: decode streams them end to end and 4 KiB pages would cost a
 * TLB miss every 4 KiB. */
void *tsr_weights_alloc(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  size_t align = bytes >= 4 * huge ? huge : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  void *p = aligned_alloc(align, rounded ? rounded : align);
  if (p && align == huge) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

static tsr_status_t qmatrix_alloc(tsr_qmatrix_t *out, int32_t n, int32_t k) {
  memset(out, 0, sizeof(*out));
  if (n <= 0 || k <= 0)
    return TSR_ERR(INVALID_ARGUMENT, "qmatrix: dimensions n=%d k=%d must be positive", n, k);
  if (k > TSR_QGEMM_MAX_K)
    return TSR_ERR(OUT_OF_RANGE, "qmatrix: k=%d exceeds %d (int32 sums could overflow)", k,
                   TSR_QGEMM_MAX_K);
  out->data = tsr_weights_alloc((size_t)n * (size_t)k);
  out->row_sum = malloc((size_t)n * sizeof(int32_t));
  out->scale = malloc((size_t)n * sizeof(float));
  if (!out->data || !out->row_sum || !out->scale) {
    tsr_qmatrix_free(out);
    return TSR_ERR(RESOURCE_EXHAUSTED, "qmatrix: cannot allocate %d x %d int8 weights", n, k);
  }
  out->n = n;
  out->k = k;
  return TSR_OK;
}

static void qmatrix_sums(tsr_qmatrix_t *q) {
  for (int32_t r = 0; r < q->n; ++r) {
    const int8_t *row = q->data + (size_t)r * q->k;
    int32_t s = 0;
    for (int32_t i = 0; i < q->k; ++i) s += row[i];
    q->row_sum[r] = s;
  }
}

tsr_status_t tsr_qmatrix_quantize(tsr_qmatrix_t *out, const float *w, int32_t n, int32_t k) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "qmatrix_quantize: out is NULL");
  if (!w) {
    memset(out, 0, sizeof(*out));
    return TSR_ERR(INVALID_ARGUMENT, "qmatrix_quantize: weights are NULL");
  }
  TSR_RETURN_IF(qmatrix_alloc(out, n, k));
  for (int32_t r = 0; r < n; ++r)
    out->scale[r] = quantize_row(out->data + (size_t)r * k, w + (size_t)r * k, k);
  qmatrix_sums(out);
  return TSR_OK;
}

typedef struct {
  tsr_qmatrix_t *q;
  void (*row)(void *ctx, int32_t r, float *dst);
  void (*rows_done)(void *ctx, int32_t r0, int32_t r1);
  void *ctx;
  float *tmp; /* one row per thread */
  int32_t rows_per_task;
} quant_job_t;

static void quant_task(void *arg, int task, int thread) {
  const quant_job_t *j = arg;
  const int32_t k = j->q->k;
  float *tmp = j->tmp + (size_t)thread * (size_t)k;
  const int32_t r0 = task * j->rows_per_task;
  const int32_t r1 = r0 + j->rows_per_task < j->q->n ? r0 + j->rows_per_task : j->q->n;
  for (int32_t r = r0; r < r1; ++r) {
    j->row(j->ctx, r, tmp);
    j->q->scale[r] = quantize_row(j->q->data + (size_t)r * k, tmp, k);
  }
  if (j->rows_done && r1 > r0) j->rows_done(j->ctx, r0, r1);
}

tsr_status_t tsr_qmatrix_quantize_rows(tsr_threadpool_t *pool, tsr_qmatrix_t *out, int32_t n,
                                       int32_t k,
                                       void (*row)(void *ctx, int32_t r, float *dst),
                                       void (*rows_done)(void *ctx, int32_t r0, int32_t r1),
                                       void *ctx) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "qmatrix_quantize_rows: out is NULL");
  if (!row) {
    memset(out, 0, sizeof(*out));
    return TSR_ERR(INVALID_ARGUMENT, "qmatrix_quantize_rows: no row function");
  }
  TSR_RETURN_IF(qmatrix_alloc(out, n, k));
  const int threads = pool ? tsr_threadpool_size(pool) : 1;
  quant_job_t j = {out, row, rows_done, ctx,
                   malloc(sizeof(float) * (size_t)k * (size_t)threads), 64};
  if (!j.tmp) {
    tsr_qmatrix_free(out);
    return TSR_ERR(RESOURCE_EXHAUSTED, "qmatrix_quantize_rows: %d rows of %d floats", threads,
                   k);
  }
  tsr_threadpool_run(pool, (n + j.rows_per_task - 1) / j.rows_per_task, quant_task, &j);
  free(j.tmp);
  qmatrix_sums(out);
  return TSR_OK;
}

tsr_status_t tsr_qmatrix_from_i8(tsr_qmatrix_t *out, const int8_t *w, int32_t n, int32_t k) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "qmatrix_from_i8: out is NULL");
  if (!w) {
    memset(out, 0, sizeof(*out));
    return TSR_ERR(INVALID_ARGUMENT, "qmatrix_from_i8: weights are NULL");
  }
  TSR_RETURN_IF(qmatrix_alloc(out, n, k));
  memcpy(out->data, w, (size_t)n * (size_t)k);
  for (int32_t r = 0; r < n; ++r) out->scale[r] = 1.0f;
  qmatrix_sums(out);
  return TSR_OK;
}

void tsr_qmatrix_free(tsr_qmatrix_t *q) {
  if (!q) return;
  free(q->data);
  free(q->row_sum);
  free(q->scale);
  memset(q, 0, sizeof(*q));
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

void tsr_qgemm_portable(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                        const int8_t *w, size_t ldw, int32_t m, int32_t n, int32_t k) {
  for (int32_t i = 0; i < m; ++i) {
    const int8_t *ai = a + (size_t)i * lda;
    for (int32_t j = 0; j < n; ++j) {
      const int8_t *wj = w + (size_t)j * ldw;
      int32_t s = 0;
      for (int32_t t = 0; t < k; ++t) s += (int32_t)ai[t] * (int32_t)wj[t];
      c[(size_t)i * ldc + j] = s;
    }
  }
}

typedef struct {
  tsr_isa_t isa;
  int32_t *c;
  size_t ldc;
  const int8_t *a;
  size_t lda;
  const int8_t *w;
  size_t ldw;
  const int32_t *row_sum; /* may be NULL */
  int32_t m, n, k;
  int32_t n_per_task;
  /* packed path */
  uint8_t *apack;
  int32_t mb_per_task;
  int8_t *wbufs; /* one tsr_qgemm_wpack_size() slice per thread */
} qgemm_job_t;

static void rows_task(void *arg, int task, int thread) {
  (void)thread;
  const qgemm_job_t *j = arg;
  int32_t n0 = task * j->n_per_task;
  int32_t nn = j->n - n0 < j->n_per_task ? j->n - n0 : j->n_per_task;
  int32_t *c = j->c + n0;
  const int8_t *w = j->w + (size_t)n0 * j->ldw;
  switch (j->isa) {
    case TSR_ISA_AVX512VNNI:
      tsr_qgemm_rows_avx512(c, j->ldc, j->a, j->lda, w, j->ldw,
                            j->row_sum ? j->row_sum + n0 : NULL, j->m, nn, j->k);
      break;
    case TSR_ISA_AVX2:
      tsr_qgemm_rows_avx2(c, j->ldc, j->a, j->lda, w, j->ldw, j->m, nn, j->k);
      break;
    default:
      tsr_qgemm_portable(c, j->ldc, j->a, j->lda, w, j->ldw, j->m, nn, j->k);
      break;
  }
}

static void pack_a_task(void *arg, int task, int thread) {
  (void)thread;
  const qgemm_job_t *j = arg;
  int32_t nmb = (j->m + TSR_QGEMM_MR - 1) / TSR_QGEMM_MR;
  int32_t mb0 = task * j->mb_per_task;
  int32_t mb1 = mb0 + j->mb_per_task < nmb ? mb0 + j->mb_per_task : nmb;
  tsr_qgemm_pack_a_avx512(j->apack, j->a, j->lda, j->m, j->k, mb0, mb1);
}

static void block_task(void *arg, int task, int thread) {
  const qgemm_job_t *j = arg;
  int32_t n0 = task * TSR_QGEMM_NC;
  int32_t nc = j->n - n0 < TSR_QGEMM_NC ? j->n - n0 : TSR_QGEMM_NC;
  tsr_qgemm_block_avx512(j->c + n0, j->ldc, j->apack, j->m, j->w + (size_t)n0 * j->ldw, j->ldw,
                         j->row_sum ? j->row_sum + n0 : NULL, nc, j->k,
                         j->wbufs + (size_t)thread * tsr_qgemm_wpack_size());
}

/* Packing scratch is kept between calls: a fresh multi-MiB allocation is
 * an mmap whose pages the kernel faults in and zeroes on every call, which
 * cost a quarter of a prefill GEMM. One cached buffer, taken with an
 * atomic exchange so concurrent callers each get their own. */
typedef struct {
  size_t size;
  uint8_t *data; /* 2 MiB aligned */
} scratch_t;

static _Atomic(scratch_t *) g_scratch;

static void scratch_free(scratch_t *s) {
  if (s) free(s->data);
  free(s);
}

static scratch_t *scratch_get(size_t size) {
  scratch_t *s = atomic_exchange(&g_scratch, NULL);
  if (s && s->size >= size) return s;
  scratch_free(s);
  const size_t huge = (size_t)2 << 20;
  size = (size + huge - 1) & ~(huge - 1);
  s = malloc(sizeof(*s));
  uint8_t *d = aligned_alloc(huge, size);
  if (!s || !d) {
    free(s);
    free(d);
    return NULL;
  }
  (void)madvise(d, size, MADV_HUGEPAGE);
  s->size = size;
  s->data = d;
  return s;
}

static void scratch_put(scratch_t *s) { scratch_free(atomic_exchange(&g_scratch, s)); }

/* The packed AVX-512 path; false if scratch memory is unavailable (the
 * caller then uses the row kernels, which need none). */
static int qgemm_packed(tsr_threadpool_t *pool, qgemm_job_t *j) {
  const int nt = tsr_threadpool_size(pool);
  size_t asz = (tsr_qgemm_apack_size(j->m, j->k) + 63) & ~(size_t)63;
  size_t wsz = tsr_qgemm_wpack_size();
  scratch_t *sc = scratch_get(asz + wsz * (size_t)nt);
  if (!sc) return 0;
  uint8_t *scratch = sc->data;
  j->apack = scratch;
  j->wbufs = (int8_t *)(scratch + asz);
  int32_t nmb = (j->m + TSR_QGEMM_MR - 1) / TSR_QGEMM_MR;
  j->mb_per_task = (nmb + 4 * nt - 1) / (4 * nt);
  tsr_threadpool_run(pool, (nmb + j->mb_per_task - 1) / j->mb_per_task, pack_a_task, j);
  tsr_threadpool_run(pool, (j->n + TSR_QGEMM_NC - 1) / TSR_QGEMM_NC, block_task, j);
  scratch_put(sc);
  return 1;
}

static void qgemm_dispatch(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
                           const int8_t *a, size_t lda, const int8_t *w, size_t ldw,
                           const int32_t *row_sum, int32_t m, int32_t n, int32_t k) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int32_t i = 0; i < m; ++i) memset(c + (size_t)i * ldc, 0, (size_t)n * sizeof(int32_t));
    return;
  }
  /* Never run code the CPU (or OS) cannot execute, whatever was asked. */
  tsr_isa_t hw = tsr_isa_hw();
  if (isa > hw) isa = hw;
  qgemm_job_t j = {.isa = isa, .c = c, .ldc = ldc, .a = a, .lda = lda, .w = w, .ldw = ldw,
                   .row_sum = row_sum, .m = m, .n = n, .k = k};
  if (isa == TSR_ISA_AVX512VNNI && m >= TSR_QGEMM_PACK_MIN_M && qgemm_packed(pool, &j)) return;
  /* Row tasks of ~256 KiB of W each (less when M > 1): long enough that
   * the prefetch stream of a task rarely restarts cold (each task start
   * does), short enough to balance two threads on a shared machine. */
  int32_t rows = (int32_t)((256 * 1024) / ((size_t)k * (size_t)(m < 4 ? m : 4)));
  rows = (rows + 3) & ~3;
  if (rows < 4) rows = 4;
  j.n_per_task = rows;
  tsr_threadpool_run(pool, (n + rows - 1) / rows, rows_task, &j);
}

void tsr_qgemm(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
               const int8_t *a, size_t lda, const tsr_qmatrix_t *w, int32_t m) {
  qgemm_dispatch(pool, isa, c, ldc, a, lda, w->data, (size_t)w->k, w->row_sum, m, w->n, w->k);
}

void tsr_qgemm_strided(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
                       const int8_t *a, size_t lda, const int8_t *w, size_t ldw,
                       int32_t m, int32_t n, int32_t k) {
  qgemm_dispatch(pool, isa, c, ldc, a, lda, w, ldw, NULL, m, n, k);
}
