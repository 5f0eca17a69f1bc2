/*
 * test_qgemm.c - the int8 kernels are bit-exact (contract 1).
 *
 * Every ISA this CPU has is compared for equality with the portable kernel
 * and with an independent 64-bit triple loop, over seeded random shapes,
 * edge shapes, extreme values and strides; quantization is compared with a
 * naive reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/qgemm.h"
#include "compute/qgemm_kernels.h"
#include "tsr_test.h"

static tsr_threadpool_t *g_pool2; /* 2 workers + caller share the work */
static tsr_threadpool_t *g_pool3;

/* Independent reference: 64-bit sums, no shared code with the library. */
static void naive(int32_t *c, size_t ldc, const int8_t *a, size_t lda, const int8_t *w,
                  size_t ldw, int m, int n, int k) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int t = 0; t < k; ++t) s += (int64_t)a[(size_t)i * lda + t] * w[(size_t)j * ldw + t];
      c[(size_t)i * ldc + j] = (int32_t)s;
    }
}

static void fill_i8(int8_t *p, size_t n, uint64_t *seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (int8_t)(tsr_test_splitmix64(seed) & 0xFF);
}

static int n_isas(void) { return (int)tsr_isa_hw() + 1; }

/* Checks one shape on every ISA and thread count, through both entry
 * points; pad > 0 makes every stride larger than its row. Returns the
 * number of mismatching elements (0 expected). */
static long check_shape(int m, int n, int k, int pad, uint64_t seed, int fill) {
  size_t lda = (size_t)k + pad, ldw = (size_t)k + pad * 3, ldc = (size_t)n + pad * 2;
  int8_t *a = malloc((size_t)m * lda + 1);
  int8_t *w = malloc((size_t)n * ldw + 1);
  int32_t *ref = malloc((size_t)m * ldc * sizeof(int32_t));
  int32_t *port = malloc((size_t)m * ldc * sizeof(int32_t));
  int32_t *got = malloc((size_t)m * ldc * sizeof(int32_t));
  if (fill == 0) {
    fill_i8(a, (size_t)m * lda, &seed);
    fill_i8(w, (size_t)n * ldw, &seed);
  } else { /* extremes: A = -128, W = -128 (fill 1) or 127 (fill 2) */
    memset(a, -128, (size_t)m * lda);
    memset(w, fill == 1 ? -128 : 127, (size_t)n * ldw);
  }
  naive(ref, ldc, a, lda, w, ldw, m, n, k);
  /* the portable kernel against the naive loop */
  memset(port, 0x5A, (size_t)m * ldc * sizeof(int32_t));
  tsr_qgemm_portable(port, ldc, a, lda, w, ldw, m, n, k);
  long bad = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) bad += ref[(size_t)i * ldc + j] != port[(size_t)i * ldc + j];

  /* a dense copy of W for the qmatrix entry point */
  int8_t *wd = malloc((size_t)n * k);
  for (int j = 0; j < n; ++j) memcpy(wd + (size_t)j * k, w + (size_t)j * ldw, (size_t)k);
  tsr_qmatrix_t q;
  tsr_status_t s = tsr_qmatrix_from_i8(&q, wd, n, k);
  CU_ASSERT_PTR_NULL_FATAL(s);

  tsr_threadpool_t *pools[3] = {NULL, g_pool2, g_pool3};
  for (int isa = 0; isa < n_isas(); ++isa) {
    for (int p = 0; p < 3; ++p) {
      for (int entry = 0; entry < 2; ++entry) {
        /* sentinel in the padding columns catches writes past n */
        memset(got, 0x5A, (size_t)m * ldc * sizeof(int32_t));
        if (entry == 0)
          tsr_qgemm_strided(pools[p], (tsr_isa_t)isa, got, ldc, a, lda, w, ldw, m, n, k);
        else
          tsr_qgemm(pools[p], (tsr_isa_t)isa, got, ldc, a, lda, &q, m);
        long b = 0;
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) b += ref[(size_t)i * ldc + j] != got[(size_t)i * ldc + j];
          for (size_t j = (size_t)n; j < ldc; ++j) b += got[(size_t)i * ldc + j] != 0x5A5A5A5A;
        }
        if (b)
          fprintf(stderr, "mismatch: isa=%s pool=%d entry=%s m=%d n=%d k=%d pad=%d: %ld\n",
                  tsr_isa_name((tsr_isa_t)isa), p, entry ? "qmatrix" : "strided", m, n, k, pad, b);
        bad += b;
      }
    }
  }
  tsr_qmatrix_free(&q);
  free(wd);
  free(a);
  free(w);
  free(ref);
  free(port);
  free(got);
  return bad;
}

static void test_isa_detect(void) {
  tsr_isa_t hw = tsr_isa_hw();
  printf("\nREPORT qgemm: hardware ISA %s\n", tsr_isa_name(hw));
  CU_ASSERT_STRING_EQUAL(tsr_isa_name(TSR_ISA_PORTABLE), "portable");
  CU_ASSERT_STRING_EQUAL(tsr_isa_name(TSR_ISA_AVX512VNNI), "avx512vnni");
  setenv("TSR_ISA", "portable", 1);
  CU_ASSERT_EQUAL(tsr_isa_detect(), TSR_ISA_PORTABLE);
  setenv("TSR_ISA", "avx512vnni", 1);
  CU_ASSERT_EQUAL(tsr_isa_detect(), hw); /* never above the hardware */
  unsetenv("TSR_ISA");
  CU_ASSERT_EQUAL(tsr_isa_detect(), hw);
}

static void test_small_sizes(void) {
  /* every size 1..70 as a cube, and M = 1 / N = 1 / K = 1 lines */
  long bad = 0;
  for (int s = 1; s <= 70; ++s) {
    bad += check_shape(s, s, s, 0, 100 + s, 0);
    bad += check_shape(1, s, s + 3, 0, 200 + s, 0);
    bad += check_shape(s, 1, s, 0, 300 + s, 0);
    bad += check_shape(s, s + 5, 1, 0, 400 + s, 0);
  }
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_random_shapes(void) {
  uint64_t seed = 12345;
  long bad = 0;
  for (int it = 0; it < 40; ++it) {
    int m = 1 + (int)(tsr_test_splitmix64(&seed) % 80);
    int n = 1 + (int)(tsr_test_splitmix64(&seed) % 300);
    int k = 1 + (int)(tsr_test_splitmix64(&seed) % 700);
    int pad = (int)(tsr_test_splitmix64(&seed) % 3) * 7;
    bad += check_shape(m, n, k, pad, seed, 0);
  }
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_blocked_shapes(void) {
  /* Shapes that cross the packed kernel's block edges: several K blocks
   * (KC) with a ragged last one, several N tasks (NC), partial MR/NR tiles. */
  long bad = 0;
  bad += check_shape(TSR_QGEMM_MR * 3 + 5, TSR_QGEMM_NC + TSR_QGEMM_NR + 3,
                     TSR_QGEMM_KC * 2 + 7, 0, 7, 0);
  bad += check_shape(16, TSR_QGEMM_NC * 2, TSR_QGEMM_KC, 5, 8, 0);
  bad += check_shape(64, 96, TSR_QGEMM_KC + 1, 1, 9, 0);
  bad += check_shape(17, 513, 129, 11, 10, 0);
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_extremes(void) {
  /* K = 4096 of -128 * -128 sums to 2^26 per element; -128 * 127 to
   * -2^12 * 127 * 128: the u8 shift trick must stay exact. */
  long bad = 0;
  for (int fill = 1; fill <= 2; ++fill) {
    bad += check_shape(1, 33, 4096, 0, 1, fill);
    bad += check_shape(3, 35, 4096, 2, 1, fill);
    bad += check_shape(17, 33, 4096, 0, 1, fill);
  }
  /* the largest legal K: sums close to INT32_MAX */
  bad += check_shape(2, 5, (1 << 17) - 1, 0, 1, 1);
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_k_zero_and_empty(void) {
  int32_t c[6] = {7, 7, 7, 7, 7, 7};
  int8_t a[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1};
  for (int isa = 0; isa < n_isas(); ++isa) {
    c[0] = c[1] = c[2] = 7;
    tsr_qgemm_strided(NULL, (tsr_isa_t)isa, c, 3, a, 1, w, 1, 1, 3, 0);
    CU_ASSERT(c[0] == 0 && c[1] == 0 && c[2] == 0);
    tsr_qgemm_strided(g_pool2, (tsr_isa_t)isa, c, 3, a, 1, w, 1, 0, 3, 4); /* m = 0: no-op */
    CU_ASSERT(c[0] == 0);
  }
}

/* ---- quantization ---- */

static float ref_scale(const float *x, int k) {
  float amax = 0;
  for (int i = 0; i < k; ++i) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
  return amax == 0 ? 1.0f : amax / 127.0f;
}

static int8_t ref_q(float x, float scale) {
  float v = nearbyintf(x / scale);
  return (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
}

static void test_quantize_rows(void) {
  enum { M = 5, K = 9 };
  float x[M][K] = {
      /* amax 127 -> scale 1: exact ties round to even */
      {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -127.0f},
      {0, 0, 0, 0, 0, 0, 0, 0, 0}, /* zero row: scale 1, all zero */
      {1e-3f, -2e-3f, 3e-3f, 0.25f, -0.25f, 0.1f, 0, 0, 0.125f},
      {-1e6f, 5e5f, 1, -1, 2.5e5f, 0, 3, 999999.0f, -1e6f},
      {3.0f, 3.0f, -3.0f, 1.0f, 2.0f, 1.5f, 0.75f, -0.75f, 0.0f},
  };
  int8_t q[M][K];
  float sc[M];
  tsr_quantize_rows(&q[0][0], sc, &x[0][0], M, K);
  int bad = 0;
  for (int r = 0; r < M; ++r) {
    float s = ref_scale(x[r], K);
    bad += sc[r] != s;
    for (int i = 0; i < K; ++i) bad += q[r][i] != ref_q(x[r][i], s);
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(sc[0], 1.0f);
  CU_ASSERT(q[0][1] == 0 && q[0][2] == 2 && q[0][3] == 2 && q[0][4] == 0);
  CU_ASSERT(q[0][5] == -2 && q[0][6] == -2 && q[0][7] == 126);
  CU_ASSERT(q[0][0] == 127 && q[0][8] == -127);
  CU_ASSERT_EQUAL(sc[1], 1.0f);
  for (int i = 0; i < K; ++i) CU_ASSERT_EQUAL(q[1][i], 0);
  /* the row maximum maps to exactly +-127 */
  CU_ASSERT(q[3][0] == -127 && q[3][8] == -127);
  CU_ASSERT(q[4][0] == 127 && q[4][2] == -127);

  /* random rows against the reference */
  uint64_t seed = 99;
  enum { RM = 7, RK = 333 };
  static float rx[RM * RK];
  static int8_t rq[RM * RK];
  float rs[RM];
  for (int i = 0; i < RM * RK; ++i)
    rx[i] = (float)((int64_t)(tsr_test_splitmix64(&seed) % 2000001) - 1000000) / 37.0f;
  tsr_quantize_rows(rq, rs, rx, RM, RK);
  bad = 0;
  for (int r = 0; r < RM; ++r) {
    float s = ref_scale(rx + r * RK, RK);
    bad += rs[r] != s;
    for (int i = 0; i < RK; ++i) bad += rq[r * RK + i] != ref_q(rx[r * RK + i], s);
  }
  CU_ASSERT_EQUAL(bad, 0);

  /* a row as wide as the vector loops (8 and 32 at a time) with exact ties,
   * a NaN (ignored by the maximum, quantized to 0) and values past the
   * clamp, at every offset of the tail */
  for (int k = 30; k <= 75; ++k) {
    float w[75];
    int8_t wq[75];
    for (int i = 0; i < k; ++i) w[i] = (float)(i % 9) - 4.5f; /* ties: x.5 */
    w[0] = 127.0f;
    w[k / 2] = NAN;
    w[k - 1] = -127.0f;
    float ws;
    tsr_quantize_rows(wq, &ws, w, 1, k);
    bad = ws != 1.0f;
    for (int i = 0; i < k; ++i) bad += wq[i] != (i == k / 2 ? 0 : ref_q(w[i], 1.0f));
    CU_ASSERT_EQUAL(bad, 0);
  }
}

static void test_qmatrix(void) {
  enum { N = 6, K = 70 };
  float w[N * K];
  uint64_t seed = 5;
  for (int i = 0; i < N * K; ++i) w[i] = (float)((int)(tsr_test_splitmix64(&seed) % 201) - 100) * 0.01f;
  for (int i = 0; i < K; ++i) w[2 * K + i] = 0; /* a zero row */
  tsr_qmatrix_t q;
  TSR_ASSERT_OK(tsr_qmatrix_quantize(&q, w, N, K));
  CU_ASSERT_EQUAL(q.n, N);
  CU_ASSERT_EQUAL(q.k, K);
  CU_ASSERT_EQUAL((uintptr_t)q.data % 64, 0);
  int bad = 0;
  for (int r = 0; r < N; ++r) {
    float s = ref_scale(w + r * K, K);
    bad += q.scale[r] != s;
    int32_t sum = 0;
    for (int i = 0; i < K; ++i) {
      bad += q.data[r * K + i] != ref_q(w[r * K + i], s);
      sum += q.data[r * K + i];
    }
    bad += q.row_sum[r] != sum;
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(q.scale[2], 1.0f);
  tsr_qmatrix_free(&q);
  CU_ASSERT_PTR_NULL(q.data);

  TSR_ASSERT_ERR(tsr_qmatrix_quantize(&q, w, 0, K), TSR_STATUS_INVALID_ARGUMENT, "n=0");
  TSR_ASSERT_ERR(tsr_qmatrix_from_i8(&q, (const int8_t *)w, 3, -1), TSR_STATUS_INVALID_ARGUMENT, "k=-1");
  TSR_ASSERT_ERR(tsr_qmatrix_from_i8(&q, (const int8_t *)w, 1, 1 << 17), TSR_STATUS_OUT_OF_RANGE, "k=131072");
  TSR_ASSERT_ERR(tsr_qmatrix_quantize(&q, NULL, 1, 1), TSR_STATUS_INVALID_ARGUMENT, "NULL");
}

static void test_dequantize(void) {
  enum { M = 3, N = 4, LDC = 6, LDO = 5 };
  int32_t c[M * LDC];
  for (int i = 0; i < M * LDC; ++i) c[i] = (i * 7919) % 20001 - 10000;
  c[0] = INT32_MAX;
  c[1] = INT32_MIN;
  float as[M] = {0.013f, 1.0f, 3.7e-5f}, ws[N] = {0.5f, 0.0071f, 2.0f, 1e-3f};
  float out[M * LDO];
  for (int i = 0; i < M * LDO; ++i) out[i] = -1.0f;
  tsr_dequantize(out, LDO, c, LDC, as, ws, M, N);
  int bad = 0;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      volatile float t = (float)c[i * LDC + j];
      t = t * as[i];
      t = t * ws[j];
      bad += memcmp((const void *)&t, &out[i * LDO + j], sizeof(float)) != 0;
    }
    bad += out[i * LDO + N] != -1.0f; /* padding untouched */
  }
  CU_ASSERT_EQUAL(bad, 0);
}

/* End to end: quantize, multiply, dequantize equals the float product up
 * to the quantization error (a sanity check of the scheme, not bits). */
static void test_w8a8_close_to_float(void) {
  enum { M = 4, N = 40, K = 256 };
  static float x[M * K], w[N * K], y[M * N];
  uint64_t seed = 77;
  for (int i = 0; i < M * K; ++i) x[i] = (float)((int)(tsr_test_splitmix64(&seed) % 2001) - 1000) / 1000.0f;
  for (int i = 0; i < N * K; ++i) w[i] = (float)((int)(tsr_test_splitmix64(&seed) % 2001) - 1000) / 1000.0f;
  tsr_qmatrix_t q;
  TSR_ASSERT_OK(tsr_qmatrix_quantize(&q, w, N, K));
  static int8_t xq[M * K];
  float xs[M];
  int32_t c[M * N];
  tsr_quantize_rows(xq, xs, x, M, K);
  tsr_qgemm(g_pool2, tsr_isa_detect(), c, N, xq, K, &q, M);
  tsr_dequantize(y, N, c, N, xs, q.scale, M, N);
  double max_err = 0, max_ref = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double r = 0;
      for (int t = 0; t < K; ++t) r += (double)x[i * K + t] * w[j * K + t];
      max_err = fmax(max_err, fabs(r - y[i * N + j]));
      max_ref = fmax(max_ref, fabs(r));
    }
  CU_ASSERT(max_err < 0.02 * max_ref);
  tsr_qmatrix_free(&q);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  tsr_status_t s = tsr_threadpool_create(2, &g_pool2);
  if (!s) s = tsr_threadpool_create(3, &g_pool3);
  if (s) {
    fprintf(stderr, "thread pool: %s\n", tsr_status_message(s));
    return 2;
  }
  CU_pSuite suite = CU_add_suite("qgemm", NULL, NULL);
  CU_add_test(suite, "isa detection and TSR_ISA", test_isa_detect);
  CU_add_test(suite, "every ISA = portable = naive, sizes 1..70", test_small_sizes);
  CU_add_test(suite, "random shapes and strides", test_random_shapes);
  CU_add_test(suite, "packed kernel block edges", test_blocked_shapes);
  CU_add_test(suite, "K=4096 extremes, largest K", test_extremes);
  CU_add_test(suite, "K=0 and empty shapes", test_k_zero_and_empty);
  CU_pSuite qs = CU_add_suite("quantization", NULL, NULL);
  CU_add_test(qs, "quantize rows vs reference", test_quantize_rows);
  CU_add_test(qs, "qmatrix quantize, sums, errors", test_qmatrix);
  CU_add_test(qs, "dequantize expression order", test_dequantize);
  CU_add_test(qs, "W8A8 close to fp32", test_w8a8_close_to_float);
  /* The kernels of ISAs this CPU lacks are compiled but cannot run here. */
  for (int isa = (int)tsr_isa_hw() + 1; isa <= (int)TSR_ISA_AVX512VNNI; ++isa) {
    char what[96];
    snprintf(what, sizeof what, "the %s kernel (every qgemm case)", tsr_isa_name((tsr_isa_t)isa));
    tsr_test_skip_named(what, "this CPU has no %s; its kernel was not run",
                        tsr_isa_name((tsr_isa_t)isa));
  }
  int rc = tsr_test_run_all();
  tsr_threadpool_destroy(g_pool2);
  tsr_threadpool_destroy(g_pool3);
  return rc;
}
