/*
 * tsr_test.h - helpers shared by the CUnit test programs.
 */
#ifndef TSR_TEST_H
#define TSR_TEST_H

#include <CUnit/Basic.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

/* Directory of the reference models: $TSR_MODELS_DIR or ../shared/models. */
const char *tsr_test_models_dir(void);
/* Path of a file in that directory (one of 4 static buffers used in turn). */
const char *tsr_test_model_path(const char *file);
/* Scratch directory for a test program (created; under build/). */
const char *tsr_test_tmpdir(void);

/* splitmix64, as in the gemm CLI contract. */
static inline uint64_t tsr_test_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Asserts `s` is OK; on failure prints the message and frees it. */
#define TSR_ASSERT_OK(expr)                                                  \
  do {                                                                       \
    tsr_status_t s_ = (expr);                                                \
    if (s_) fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,    \
                    tsr_status_message(s_));                                 \
    CU_ASSERT_PTR_NULL(s_);                                                  \
    tsr_status_free(s_);                                                     \
  } while (0)

/* Asserts `expr` fails with `code` and that its message contains `needle`. */
#define TSR_ASSERT_ERR(expr, code, needle)                                   \
  do {                                                                       \
    tsr_status_t s_ = (expr);                                                \
    CU_ASSERT_PTR_NOT_NULL(s_);                                              \
    if (s_) {                                                                \
      CU_ASSERT_EQUAL(tsr_status_code(s_), (code));                          \
      if (!strstr(tsr_status_message(s_), (needle)))                         \
        fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__,    \
                __LINE__, tsr_status_message(s_), (needle));                 \
      CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s_), (needle)));      \
    }                                                                        \
    tsr_status_free(s_);                                                     \
  } while (0)

/* Runs the registered suites with the basic runner; returns the exit code
 * (0 when every assertion passed). */
int tsr_test_run_all(void);

#endif
