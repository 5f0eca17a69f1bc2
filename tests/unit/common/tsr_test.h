/*
 * tsr_test.h - helpers shared by the CUnit test programs.
 */
#ifndef TSR_TEST_H
#define TSR_TEST_H

#include <CUnit/Basic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

/* Directory of the reference models: $TSR_MODELS_DIR or ../shared/models. */
const char *tsr_test_models_dir(void);
/* Path of a file in that directory (one of 4 static buffers used in turn). */
const char *tsr_test_model_path(const char *file);
/* Scratch directory for a test program (created; under build/). */
const char *tsr_test_tmpdir(void);

/* Writes a generated llama GGUF (the stories260K preset with these sizes,
 * F32 weights) to TMPDIR/NAME.gguf and puts its path in path (cap bytes).
 * Returns 0, or 1 after printing why it could not. */
int tsr_test_gen_model(char *path, size_t cap, const char *name, int dim, int hidden,
                       int layers, int heads, int kv_heads, int vocab, int seq_len,
                       uint64_t seed);

/* A context on `devices` (offload all, `split`, 2 threads, quiet, fallback
 * off so that a device failure shows instead of hiding behind the host;
 * watchdog `timeout_ms`, 0 = the default) with the model at `path`. */
typedef struct tsr_test_rig {
  tsr_context_t *ctx;
  tsr_model_t *model;
  int vocab;
} tsr_test_rig_t;
tsr_status_t tsr_test_rig_open(tsr_test_rig_t *r, const char *path, const char *devices,
                               tsr_split_t split, uint32_t timeout_ms);
void tsr_test_rig_close(tsr_test_rig_t *r);

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

/* ---- skips ----------------------------------------------------------------
 * A case that cannot run here (a library, model or backend is missing) calls
 * tsr_test_skip() with the reason and returns: it is reported as SKIPPED,
 * never as passed. tsr_test_run_all() prints one line per skip,
 *   SKIP case <suite>: <case>: <reason>
 * (tests/run.sh shows them under the program's PASS line), and returns 77
 * when nothing ran (every case that ran skipped): the program skipped, and
 * its last output line says why. */
void tsr_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A skip of something never registered, named `what` (a suite left out
 * because its backend does not open). */
void tsr_test_skip_named(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* For a program that cannot run at all (before any case): prints the reason
 * as its last line and returns 77, for main to return. */
int tsr_test_skip_program(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether `file` exists in the models directory. */
int tsr_test_have_model(const char *file);
/* tsr_test_model_path(file) if the file exists; otherwise records a skip of
 * the running case ("no FILE in DIR") and returns NULL. */
const char *tsr_test_model_or_skip(const char *file);

/* Whether the reference models (stories260K.bin, stories260K.gguf,
 * tok512.bin) are all there; if not, records a skip of the running case
 * naming the first one missing and returns 0. */
int tsr_test_need_reference_models(void);
/* The first reference model file missing, or NULL when all are there. */
const char *tsr_test_missing_reference_model(void);

/* Path of `rel` under this build's root (BUILD/rel), found from this
 * program's own location (BUILD/tests/NAME): "bin/tessera". Static buffer. */
const char *tsr_test_build_path(const char *rel);

/* ---- an independent reference ----------------------------------------------
 * The int8 matmul contract written as a plain loop, sharing no code with
 * the library: c[i*ldc + j] = sum_t a[i*lda + t] * w[j*ldw + t], summed in
 * 64 bits and stored as int32. Tests compare device results with this, not
 * with the library's kernels (which the functional model itself uses). */
void tsr_test_ref_gemm_i8(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                          const int8_t *w, size_t ldw, int32_t m, int32_t n, int32_t k);

/* Runs the registered suites; prints each case as passed, FAILED (with its
 * failed assertions) or SKIPPED (with the reason), then the skip lines.
 * Returns the exit code: 1 if any assertion or suite setup failed, else 77
 * if every case that ran skipped, else 0. */
int tsr_test_run_all(void);

#endif
