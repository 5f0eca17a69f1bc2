/*
 * test_qsparse.c - block-sparse int8 weights: the product over the stored
 * tiles equals an independent 64-bit triple loop over the dense matrix,
 * bit for bit, for odd shapes, tile densities 0 to 1, every kernel this
 * CPU runs and several thread counts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/qgemm.h"
#include "compute/qgemm_kernels.h"
#include "compute/qsparse.h"
#include "tsr_test.h"

static tsr_threadpool_t *g_pool3;

/* W with each 16 x 16 tile kept with probability `keep` (else all zero). */
static void fill(int8_t *w, int n, int k, double keep, uint64_t *seed) {
  const int tr = (n + 15) / 16, tc = (k + 15) / 16;
  for (int i = 0; i < tr; i++)
    for (int j = 0; j < tc; j++) {
      const bool on = (double)(tsr_test_splitmix64(seed) >> 11) * 0x1p-53 < keep;
      for (int r = i * 16; r < n && r < i * 16 + 16; r++)
        for (int c = j * 16; c < k && c < j * 16 + 16; c++)
          w[(size_t)r * k + c] = on ? (int8_t)((tsr_test_splitmix64(seed) & 0xFF) | 1) : 0;
    }
}

static void test_equals_dense(void) {
  uint64_t seed = 3;
  const int shapes[][2] = {{16, 16}, {1, 1}, {17, 33}, {100, 64}, {288, 288}, {37, 1000}, {768, 200}};
  const double keeps[] = {0.0, 0.3, 0.5, 1.0};
  long bad = 0, cases = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (size_t ki = 0; ki < sizeof keeps / sizeof keeps[0]; ki++) {
      const int n = shapes[si][0], k = shapes[si][1];
      int8_t *w = malloc((size_t)n * k);
      fill(w, n, k, keeps[ki], &seed);
      tsr_qmatrix_t q;
      TSR_ASSERT_OK(tsr_qmatrix_from_i8(&q, w, n, k));
      tsr_qsparse_t s;
      TSR_ASSERT_OK(tsr_qsparse_build(&q, &s));
      const double dens = tsr_qsparse_density(&q);
      CU_ASSERT_EQUAL(s.stored, llround(dens * s.tile_rows * s.tile_cols));
      for (int m = 1; m <= 15; m += 7) {
        int8_t *a = malloc((size_t)m * (k + 5));
        for (size_t i = 0; i < (size_t)m * (k + 5); i++)
          a[i] = (int8_t)(tsr_test_splitmix64(&seed) & 0xFF);
        a[0] = -128; /* the extreme activation */
        int32_t *ref = calloc((size_t)m * n, sizeof(int32_t));
        for (int i = 0; i < m; i++)
          for (int j = 0; j < n; j++) {
            int64_t acc = 0;
            for (int t = 0; t < k; t++) acc += (int64_t)a[(size_t)i * (k + 5) + t] * w[(size_t)j * k + t];
            ref[(size_t)i * n + j] = (int32_t)acc;
          }
        int32_t *c = malloc(sizeof(int32_t) * (size_t)m * (n + 3));
        for (int isa = 0; isa <= (int)tsr_isa_hw(); isa++)
          for (int p = 0; p < 2; p++) {
            for (size_t i = 0; i < (size_t)m * (n + 3); i++) c[i] = 0x5a5a5a5a;
            tsr_qsparse_gemm(p ? g_pool3 : NULL, (tsr_isa_t)isa, c, (size_t)n + 3, a,
                             (size_t)k + 5, &s, m);
            for (int i = 0; i < m; i++) {
              bad += memcmp(c + (size_t)i * (n + 3), ref + (size_t)i * n, sizeof(int32_t) * n) != 0;
              for (int j = n; j < n + 3; j++) bad += c[(size_t)i * (n + 3) + j] != 0x5a5a5a5a;
            }
            cases++;
          }
        free(a);
        free(ref);
        free(c);
      }
      tsr_qsparse_free(&s);
      tsr_qmatrix_free(&q);
      free(w);
    }
  printf("\n    %ld cases (shapes x densities x rows x kernels x threads) ", cases);
  CU_ASSERT_EQUAL(bad, 0);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  tsr_status_t s = tsr_threadpool_create(3, &g_pool3);
  if (s) return 2;
  CU_pSuite suite = CU_add_suite("qsparse", NULL, NULL);
  CU_add_test(suite, "block-sparse product = dense, bit for bit", test_equals_dense);
  if (tsr_isa_hw() < TSR_ISA_AVX512VNNI)
    tsr_test_skip_named("the AVX-512 VNNI block-sparse kernel",
                        "this CPU has no avx512vnni; its kernel was not run");
  int rc = tsr_test_run_all();
  tsr_threadpool_destroy(g_pool3);
  return rc;
}
