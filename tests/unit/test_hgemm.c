/*
 * test_hgemm.c - the half-precision conversions and matmuls.
 *
 * Conversions against references written here from the formats'
 * definitions (every binary16 value; bf16 rounding of random and special
 * binary32 patterns, and the vector rounding bit for bit with the scalar
 * one). Matmuls: every kernel this CPU can run against a double-precision
 * sum of the exact products, within the error bound of an fp32 dot product
 * of length k in any order (|err| <= k u sum|x w|, u = 2^-24); results are
 * the same bits whatever the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/dtype.h"
#include "compute/hgemm.h"
#include "compute/qgemm_kernels.h"
#include "tsr_test.h"

static tsr_threadpool_t *g_pool2;
static tsr_threadpool_t *g_pool3;

static float bits_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static uint32_t f32_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

/* binary16 by its definition: (-1)^s 2^(e-15) (1 + m/1024), subnormals
 * 2^-14 m/1024. */
static double ref_f16(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = ldexp((double)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

static void test_f16_widen_all(void) {
  long bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const double r = ref_f16((uint16_t)h);
    const float f = tsr_f16_to_f32((uint16_t)h);
    if (isnan(r) ? !isnan(f) : (double)f != r || !signbit(f) != !signbit(r)) bad++;
  }
  CU_ASSERT_EQUAL(bad, 0);
}

/* bf16 rounding of a normal finite binary32: the nearer of the two bf16
 * neighbours, ties to the even one, compared in double. */
static uint16_t ref_bf16(float f) {
  const uint32_t b = f32_bits(f);
  const uint32_t exp = b >> 23 & 0xff;
  if (exp == 0xff) return (uint16_t)(b & 0x7fffff ? (b >> 16) | 0x40 : b >> 16);
  if (exp == 0) return (uint16_t)(b >> 16 & 0x8000);
  const uint16_t lo = (uint16_t)(b >> 16), hi = (uint16_t)(lo + 1);
  const double a = fabs((double)f);
  const double vl = fabs((double)bits_f32((uint32_t)lo << 16));
  /* above the largest finite bf16 the upper neighbour is 2^128 (infinity) */
  const double vh = (hi & 0x7f80) == 0x7f80 ? ldexp(1.0, 128)
                                            : fabs((double)bits_f32((uint32_t)hi << 16));
  const double dl = a - vl, dh = vh - a;
  return dl < dh || (dl == dh && !(lo & 1)) ? lo : hi;
}

static void test_bf16_round(void) {
  uint64_t seed = 11;
  long bad = 0, n = 0;
  const uint32_t special[] = {0x00000000, 0x80000000, 0x3f800000, 0x3f808000, 0x3f818000,
                              0x3f807fff, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7fffff,
                              0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffa00000,
                              0x00000001, 0x807fffff, 0x00800000, 0x00ff8000};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++, n++) {
    const float f = bits_f32(special[i]);
    if (tsr_f32_to_bf16(f) != ref_bf16(f)) {
      bad++;
      fprintf(stderr, "bf16 of 0x%08x: 0x%04x, expected 0x%04x\n", special[i],
              tsr_f32_to_bf16(f), ref_bf16(f));
    }
  }
  for (int i = 0; i < 2000000; i++, n++) {
    const float f = bits_f32((uint32_t)tsr_test_splitmix64(&seed));
    if (tsr_f32_to_bf16(f) != ref_bf16(f)) bad++;
  }
  CU_ASSERT_EQUAL(bad, 0);
  /* widening is exact: bf16 -> f32 -> bf16 is the identity on non-NaN */
  long bad_rt = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue; /* NaN */
    if ((h & 0x7f80) == 0 && (h & 0x7f)) continue;      /* subnormal: flushed */
    if (tsr_f32_to_bf16(tsr_bf16_to_f32((uint16_t)h)) != h) bad_rt++;
  }
  CU_ASSERT_EQUAL(bad_rt, 0);
  /* the vector rounding: the same bits as the scalar one */
  enum { N = 4099 };
  float *x = malloc(sizeof(float) * N);
  uint16_t *a = malloc(2 * N), *b = malloc(2 * N);
  for (int i = 0; i < N; i++) x[i] = bits_f32((uint32_t)tsr_test_splitmix64(&seed));
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i] = bits_f32(special[i]);
  for (int k = 0; k <= (int)TSR_HK_AVX512BF16; k++) {
    if (k == TSR_HK_AVX512BF16 &&
        tsr_hgemm_kernel(tsr_isa_hw(), TSR_HALF_BF16) != TSR_HK_AVX512BF16)
      continue;
    for (int len = 0; len <= N; len += len < 40 ? 1 : 1013) {
      memset(b, 0xAB, 2 * N);
      tsr_bf16_round((tsr_hkernel_t)k, b, x, (size_t)len);
      for (int i = 0; i < len; i++) a[i] = tsr_f32_to_bf16(x[i]);
      CU_ASSERT_EQUAL(memcmp(a, b, 2 * (size_t)len), 0);
      if (len < N) CU_ASSERT_EQUAL(b[len], 0xABAB); /* nothing past n */
    }
  }
  free(x);
  free(a);
  free(b);
}

typedef struct {
  int m, n, k, pad;
} shape_t;

/* One shape on every kernel this CPU runs, both types, three thread
 * counts. Returns the number of elements outside the bound. */
static long check_shape(shape_t s, uint64_t seed, double *worst_ratio) {
  const size_t ldx = (size_t)s.k + (size_t)s.pad, ldw = (size_t)s.k + (size_t)s.pad * 3;
  const size_t ldc = (size_t)s.n + (size_t)s.pad * 2;
  float *x = malloc(sizeof(float) * (size_t)s.m * ldx);
  uint16_t *xb = malloc(2 * (size_t)s.m * ldx);
  uint16_t *wf = malloc(2 * (size_t)s.n * ldw), *wb = malloc(2 * (size_t)s.n * ldw);
  float *c = malloc(sizeof(float) * (size_t)s.m * ldc);
  float *c2 = malloc(sizeof(float) * (size_t)s.m * ldc);
  for (size_t i = 0; i < (size_t)s.m * ldx; i++) {
    x[i] = (float)((double)(tsr_test_splitmix64(&seed) >> 11) * 0x1p-53 * 4.0 - 2.0);
    xb[i] = tsr_f32_to_bf16(x[i]);
  }
  for (size_t i = 0; i < (size_t)s.n * ldw; i++) {
    const float v = (float)((double)(tsr_test_splitmix64(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0);
    wf[i] = tsr_f32_to_f16(v);
    wb[i] = tsr_f32_to_bf16(v);
  }
  long bad = 0;
  for (int type = 0; type < 2; type++) {
    const tsr_hkernel_t best = tsr_hgemm_kernel(tsr_isa_hw(), (tsr_half_t)type);
    for (int kern = 0; kern <= (int)best; kern++) {
      if (type == TSR_HALF_F16 && kern == TSR_HK_AVX512BF16) continue;
      tsr_threadpool_t *pools[3] = {NULL, g_pool2, g_pool3};
      for (int p = 0; p < 3; p++) {
        float *out = p ? c2 : c;
        for (size_t i = 0; i < (size_t)s.m * ldc; i++) out[i] = -12345.0f;
        if (type == TSR_HALF_F16)
          tsr_hgemm_f16(pools[p], (tsr_hkernel_t)kern, out, ldc, x, ldx, wf, ldw, s.m, s.n, s.k);
        else
          tsr_hgemm_bf16(pools[p], (tsr_hkernel_t)kern, out, ldc, xb, ldx, wb, ldw, s.m, s.n,
                         s.k);
        if (p) CU_ASSERT_EQUAL(memcmp(c, c2, sizeof(float) * (size_t)s.m * ldc), 0);
      }
      for (int i = 0; i < s.m; i++) {
        for (int j = 0; j < s.n; j++) {
          double ref = 0, mag = 0;
          for (int t = 0; t < s.k; t++) {
            const double xv = type == TSR_HALF_F16 ? (double)x[(size_t)i * ldx + t]
                                                   : (double)tsr_bf16_to_f32(xb[(size_t)i * ldx + t]);
            const double wv = type == TSR_HALF_F16 ? ref_f16(wf[(size_t)j * ldw + t])
                                                   : (double)bits_f32((uint32_t)wb[(size_t)j * ldw + t] << 16);
            ref += xv * wv;
            mag += fabs(xv * wv);
          }
          const double bound = (double)s.k * 0x1p-24 * mag + 1e-30;
          const double err = fabs((double)c[(size_t)i * ldc + j] - ref);
          if (err / bound > *worst_ratio) *worst_ratio = err / bound;
          if (err > bound) bad++;
        }
        for (size_t j = (size_t)s.n; j < ldc; j++) /* padding untouched */
          if (c[(size_t)i * ldc + j] != -12345.0f) bad++;
      }
    }
  }
  free(x);
  free(xb);
  free(wf);
  free(wb);
  free(c);
  free(c2);
  return bad;
}

static void test_shapes(void) {
  uint64_t seed = 5;
  long bad = 0;
  double worst = 0;
  for (int m = 1; m <= 9; m++)
    for (int n = 1; n <= 9; n++)
      for (int k = 1; k <= 70; k += (k < 35 ? 1 : 7)) bad += check_shape((shape_t){m, n, k, 0}, seed++, &worst);
  const shape_t big[] = {{1, 288, 288, 0}, {1, 100, 768, 3}, {7, 65, 129, 1},
                         {64, 48, 288, 0}, {65, 33, 1000, 2}, {130, 20, 64, 5},
                         {3, 1, 4096, 0}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
    bad += check_shape(big[i], seed++, &worst);
  printf("\n    worst error / bound: %.3f ", worst);
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_kernel_choice(void) {
  /* TSR_ISA below AVX2 leaves the portable kernels; names are distinct */
  CU_ASSERT_EQUAL(tsr_hgemm_kernel(TSR_ISA_PORTABLE, TSR_HALF_F16), TSR_HK_PORTABLE);
  CU_ASSERT_EQUAL(tsr_hgemm_kernel(TSR_ISA_PORTABLE, TSR_HALF_BF16), TSR_HK_PORTABLE);
  CU_ASSERT(tsr_hgemm_kernel(tsr_isa_hw(), TSR_HALF_F16) != TSR_HK_AVX512BF16);
  CU_ASSERT_STRING_NOT_EQUAL(tsr_hkernel_name(TSR_HK_AVX512), tsr_hkernel_name(TSR_HK_AVX512BF16));
  printf("\n    this CPU: fp16 %s, bf16 %s ",
         tsr_hkernel_name(tsr_hgemm_kernel(tsr_isa_hw(), TSR_HALF_F16)),
         tsr_hkernel_name(tsr_hgemm_kernel(tsr_isa_hw(), TSR_HALF_BF16)));
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  tsr_status_t s = tsr_threadpool_create(2, &g_pool2);
  if (!s) s = tsr_threadpool_create(3, &g_pool3);
  if (s) {
    fprintf(stderr, "thread pool: %s\n", tsr_status_message(s));
    return 2;
  }
  CU_pSuite suite = CU_add_suite("hgemm", NULL, NULL);
  CU_add_test(suite, "fp16 widening, every value", test_f16_widen_all);
  CU_add_test(suite, "bf16 rounding (scalar and vector)", test_bf16_round);
  CU_add_test(suite, "kernel choice", test_kernel_choice);
  CU_add_test(suite, "every kernel vs double, fp32 dot bound", test_shapes);
  const tsr_hkernel_t best = tsr_hgemm_kernel(tsr_isa_hw(), TSR_HALF_BF16);
  for (int k = (int)best + 1; k <= (int)TSR_HK_AVX512BF16; k++) {
    char what[96];
    snprintf(what, sizeof what, "the %s kernels", tsr_hkernel_name((tsr_hkernel_t)k));
    tsr_test_skip_named(what, "this CPU cannot run the %s kernels",
                        tsr_hkernel_name((tsr_hkernel_t)k));
  }
  int rc = tsr_test_run_all();
  tsr_threadpool_destroy(g_pool2);
  tsr_threadpool_destroy(g_pool3);
  return rc;
}
