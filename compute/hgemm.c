/*
 * hgemm.c - the half-precision matmuls: kernel choice, the portable
 * kernels and the multithreaded split (compute/hgemm.h).
 */
#include "compute/hgemm.h"

#include <stdbool.h>

#include "compute/dtype.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TSR_HG_X86 1
#endif

/* ---- kernel choice ---- */

/* CPUID 1 ECX bit 29 (F16C); CPUID 7.1 EAX bit 5 (AVX512_BF16). The
 * context's ISA already checked AVX2/AVX-512 and the OS's register state. */
static bool cpu_f16c(void) {
#ifdef TSR_HG_X86
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
#else
  return false;
#endif
}

static bool cpu_avx512bf16(void) {
#ifdef TSR_HG_X86
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, NULL) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if (a < 1) return false; /* no subleaf 1 */
  __cpuid_count(7, 1, a, b, c, d);
  return a >> 5 & 1;
#else
  return false;
#endif
}

tsr_hkernel_t tsr_hgemm_kernel(tsr_isa_t isa, tsr_half_t type) {
  if (isa >= TSR_ISA_AVX512VNNI) {
    if (type == TSR_HALF_BF16 && cpu_avx512bf16()) return TSR_HK_AVX512BF16;
    return TSR_HK_AVX512; /* AVX-512F has the 16-lane fp16 widening */
  }
  if (isa >= TSR_ISA_AVX2 && cpu_f16c()) return TSR_HK_AVX2;
  return TSR_HK_PORTABLE;
}

const char *tsr_hkernel_name(tsr_hkernel_t k) {
  switch (k) {
    case TSR_HK_PORTABLE: return "portable";
    case TSR_HK_AVX2: return "avx2+f16c";
    case TSR_HK_AVX512: return "avx512";
    case TSR_HK_AVX512BF16: return "avx512bf16";
  }
  return "unknown";
}

void tsr_bf16_round(tsr_hkernel_t kern, uint16_t *dst, const float *x, size_t n) {
  if (kern == TSR_HK_AVX512BF16) {
    tsr_bf16_round_avx512bf16(dst, x, n);
    return;
  }
  for (size_t i = 0; i < n; i++) dst[i] = tsr_f32_to_bf16(x[i]);
}

/* ---- portable kernels: four partial sums per dot product ---- */

/* X[i] and W[i] widened: fp16 W with fp32 X (bf = false), or bf16 both. */
static inline float x_at(bool bf, const void *x, size_t i) {
  return bf ? tsr_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}
static inline float w_at(bool bf, const uint16_t *w, size_t i) {
  return bf ? tsr_bf16_to_f32(w[i]) : tsr_f16_to_f32(w[i]);
}

static void widen_portable(bool bf, float *c, size_t ldc, const void *x, size_t ldx,
                           const uint16_t *w, size_t ldw, int32_t m, int32_t n0, int32_t n1,
                           int32_t k) {
  for (int32_t j = n0; j < n1; j++) {
    const size_t wr = (size_t)j * ldw;
    for (int32_t i = 0; i < m; i++) {
      const size_t xr = (size_t)i * ldx;
      float s[4] = {0, 0, 0, 0};
      int32_t t = 0;
      for (; t + 4 <= k; t += 4)
        for (int l = 0; l < 4; l++)
          s[l] += x_at(bf, x, xr + (size_t)(t + l)) * w_at(bf, w, wr + (size_t)(t + l));
      for (; t < k; t++) s[0] += x_at(bf, x, xr + (size_t)t) * w_at(bf, w, wr + (size_t)t);
      c[(size_t)i * ldc + (size_t)j] = (s[0] + s[1]) + (s[2] + s[3]);
    }
  }
}

static void f16_portable(float *c, size_t ldc, const float *x, size_t ldx, const uint16_t *w,
                         size_t ldw, int32_t m, int32_t n0, int32_t n1, int32_t k) {
  widen_portable(false, c, ldc, x, ldx, w, ldw, m, n0, n1, k);
}

static void bf16_portable(float *c, size_t ldc, const uint16_t *x, size_t ldx,
                          const uint16_t *w, size_t ldw, int32_t m, int32_t n0, int32_t n1,
                          int32_t k) {
  widen_portable(true, c, ldc, x, ldx, w, ldw, m, n0, n1, k);
}

/* ---- the split over N ---- */

typedef struct {
  tsr_hgemm_f16_fn f16;
  tsr_hgemm_bf16_fn bf16;
  float *c;
  size_t ldc, ldx, ldw;
  const void *x;
  const uint16_t *w;
  int32_t m, n, k, chunk;
} hg_job_t;

static void hg_task(void *arg, int task, int thread) {
  (void)thread;
  const hg_job_t *j = arg;
  const int32_t n0 = task * j->chunk;
  const int32_t n1 = n0 + j->chunk < j->n ? n0 + j->chunk : j->n;
  if (j->f16)
    j->f16(j->c, j->ldc, j->x, j->ldx, j->w, j->ldw, j->m, n0, n1, j->k);
  else
    j->bf16(j->c, j->ldc, j->x, j->ldx, j->w, j->ldw, j->m, n0, n1, j->k);
}

/* Columns per task: a multiple of 16 (the kernels' blocks), about four
 * tasks per thread so uneven cores even out, never below 16. */
static void hg_run(tsr_threadpool_t *pool, hg_job_t *j) {
  const int threads = pool ? tsr_threadpool_size(pool) : 1;
  int32_t chunk = j->n;
  if (threads > 1) {
    chunk = (j->n + 4 * threads - 1) / (4 * threads);
    chunk = (chunk + 15) / 16 * 16;
  }
  if (chunk < 16) chunk = 16;
  j->chunk = chunk;
  const int tasks = (int)((j->n + chunk - 1) / chunk);
  if (tasks <= 1 || !pool)
    for (int t = 0; t < tasks; t++) hg_task(j, t, 0);
  else
    tsr_threadpool_run(pool, tasks, hg_task, j);
}

void tsr_hgemm_f16(tsr_threadpool_t *pool, tsr_hkernel_t kern, float *c, size_t ldc,
                   const float *x, size_t ldx, const uint16_t *w, size_t ldw, int32_t m,
                   int32_t n, int32_t k) {
  hg_job_t j = {.c = c, .ldc = ldc, .ldx = ldx, .ldw = ldw, .x = x, .w = w,
                .m = m, .n = n, .k = k};
  j.f16 = kern >= TSR_HK_AVX512 ? tsr_hgemm_f16_avx512
          : kern == TSR_HK_AVX2 ? tsr_hgemm_f16_avx2
                                : f16_portable;
  hg_run(pool, &j);
}

void tsr_hgemm_bf16(tsr_threadpool_t *pool, tsr_hkernel_t kern, float *c, size_t ldc,
                    const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw, int32_t m,
                    int32_t n, int32_t k) {
  hg_job_t j = {.c = c, .ldc = ldc, .ldx = ldx, .ldw = ldw, .x = x, .w = w,
                .m = m, .n = n, .k = k};
  j.bf16 = kern == TSR_HK_AVX512BF16 ? tsr_hgemm_bf16_avx512bf16
           : kern == TSR_HK_AVX512   ? tsr_hgemm_bf16_avx512
           : kern == TSR_HK_AVX2     ? tsr_hgemm_bf16_avx2
                                     : bf16_portable;
  hg_run(pool, &j);
}
