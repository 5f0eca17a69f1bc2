/* tsr_test.c - helpers shared by the CUnit test programs. */
#include "tsr_test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/src/model_file.h"

const char *tsr_test_models_dir(void) {
  const char *d = getenv("TSR_MODELS_DIR");
  return d && *d ? d : "../shared/models";
}

const char *tsr_test_model_path(const char *file) {
  /* A few buffers in rotation, so that one call can take several paths. */
  static char buf[4][4096];
  static int next;
  char *b = buf[next++ % 4];
  snprintf(b, sizeof buf[0], "%s/%s", tsr_test_models_dir(), file);
  return b;
}

const char *tsr_test_tmpdir(void) {
  static char buf[256];
  if (!buf[0]) {
    snprintf(buf, sizeof buf, "build/test-tmp/%ld", (long)getpid());
    mkdir("build", 0755);
    mkdir("build/test-tmp", 0755);
    mkdir(buf, 0755);
  }
  return buf;
}

int tsr_test_have_model(const char *file) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", tsr_test_models_dir(), file);
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *tsr_test_model_or_skip(const char *file) {
  if (tsr_test_have_model(file)) return tsr_test_model_path(file);
  tsr_test_skip("no %s in %s", file, tsr_test_models_dir());
  return NULL;
}

const char *tsr_test_missing_reference_model(void) {
  static const char *const files[] = {"stories260K.bin", "stories260K.gguf", "tok512.bin"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (!tsr_test_have_model(files[i])) return files[i];
  return NULL;
}

int tsr_test_need_reference_models(void) {
  const char *missing = tsr_test_missing_reference_model();
  if (missing) tsr_test_skip("no %s in %s", missing, tsr_test_models_dir());
  return missing == NULL;
}

const char *tsr_test_build_path(const char *rel) {
  static char buf[4096];
  char self[3072];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) n = 0;
  self[n] = '\0';
  /* BUILD/tests/NAME -> BUILD */
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    else snprintf(self, sizeof self, ".");
  }
  snprintf(buf, sizeof buf, "%s/%s", self, rel);
  return buf;
}

void tsr_test_ref_gemm_i8(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                          const int8_t *w, size_t ldw, int32_t m, int32_t n, int32_t k) {
  for (int32_t i = 0; i < m; i++)
    for (int32_t j = 0; j < n; j++) {
      int64_t acc = 0;
      for (int32_t t = 0; t < k; t++)
        acc += (int64_t)a[(size_t)i * lda + (size_t)t] * (int64_t)w[(size_t)j * ldw + (size_t)t];
      c[(size_t)i * ldc + (size_t)j] = (int32_t)acc;
    }
}

/* ---- skips and the runner ---- */

#define MAX_SKIPS 256

static struct skip {
  CU_pTest test;  /* the case that skipped (NULL for a named skip) */
  char what[160]; /* "suite: case" or the name given */
  char why[320];
} g_skips[MAX_SKIPS];
static int g_n_skips, g_skips_lost;

static void record(CU_pTest test, const char *what, const char *fmt, va_list ap) {
  /* one record per case: the first reason */
  for (int i = 0; test && i < g_n_skips; i++)
    if (g_skips[i].test == test) return;
  if (g_n_skips == MAX_SKIPS) {
    g_skips_lost++;
    return;
  }
  struct skip *k = &g_skips[g_n_skips++];
  k->test = test;
  snprintf(k->what, sizeof k->what, "%s", what);
  vsnprintf(k->why, sizeof k->why, fmt, ap);
  /* one line: the reason may quote a multi-line message */
  for (char *p = k->why; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
}

void tsr_test_skip(const char *fmt, ...) {
  CU_pTest t = CU_get_current_test();
  CU_pSuite s = CU_get_current_suite();
  char what[160];
  snprintf(what, sizeof what, "%s: %s", s && s->pName ? s->pName : "?",
           t && t->pName ? t->pName : "?");
  va_list ap;
  va_start(ap, fmt);
  record(t, what, fmt, ap);
  va_end(ap);
}

void tsr_test_skip_named(const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(NULL, what, fmt, ap);
  va_end(ap);
}

int tsr_test_skip_program(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stderr);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  return 77;
}

static const char *skip_reason(CU_pTest t) {
  for (int i = 0; i < g_n_skips; i++)
    if (g_skips[i].test == t) return g_skips[i].why;
  return NULL;
}

static unsigned g_cases_run, g_cases_failed, g_cases_skipped;

static void on_suite_start(const CU_pSuite s) { printf("\nSuite: %s\n", s->pName); }

static void on_test_start(const CU_pTest t, const CU_pSuite s) {
  (void)s;
  printf("  Test: %s ...", t->pName);
  fflush(stdout);
}

static void on_test_complete(const CU_pTest t, const CU_pSuite s, const CU_pFailureRecord f) {
  (void)s;
  g_cases_run++;
  if (f) {
    g_cases_failed++;
    printf("FAILED\n");
    for (CU_pFailureRecord r = f; r; r = r->pNext)
      printf("    %s:%u - %s\n", r->strFileName ? r->strFileName : "?", r->uiLineNumber,
             r->strCondition ? r->strCondition : "?");
  } else if (skip_reason(t)) {
    g_cases_skipped++;
    printf("SKIPPED: %s\n", skip_reason(t));
  } else {
    printf("passed\n");
  }
  fflush(stdout);
}

static void on_suite_init_failure(const CU_pSuite s) {
  printf("\nSuite %s: its setup FAILED, its cases did not run\n", s->pName);
}

static void on_suite_cleanup_failure(const CU_pSuite s) {
  printf("\nSuite %s: its cleanup FAILED\n", s->pName);
}

int tsr_test_run_all(void) {
  CU_set_suite_start_handler(on_suite_start);
  CU_set_test_start_handler(on_test_start);
  CU_set_test_complete_handler(on_test_complete);
  CU_set_suite_init_failure_handler(on_suite_init_failure);
  CU_set_suite_cleanup_failure_handler(on_suite_cleanup_failure);
  CU_run_all_tests();
  unsigned asserts = CU_get_number_of_asserts(), bad = CU_get_number_of_failures();
  unsigned fsuites = CU_get_number_of_suites_failed();
  CU_cleanup_registry();
  unsigned passed = g_cases_run - g_cases_failed - g_cases_skipped;
  fflush(stderr);
  int named = 0;
  for (int i = 0; i < g_n_skips; i++) named += g_skips[i].test == NULL;
  printf("\ncases: %u run, %u passed, %u failed, %u skipped", g_cases_run, passed,
         g_cases_failed, g_cases_skipped);
  if (named) printf(", and %d group(s) of cases not run here", named);
  printf("; asserts: %u, %u failed%s\n", asserts, bad,
         fsuites ? "; a suite's setup or cleanup failed" : "");
  for (int i = 0; i < g_n_skips; i++)
    printf("SKIP case %s: %s\n", g_skips[i].what, g_skips[i].why);
  if (g_skips_lost) printf("SKIP case (%d more skips not recorded)\n", g_skips_lost);
  if (bad || fsuites || g_cases_failed) {
    fflush(stdout);
    return 1;
  }
  if (passed == 0 && g_n_skips > 0) {
    /* nothing ran: the program skipped; the last line says why */
    if (g_n_skips > 1) printf("every case skipped (%d skips): %s\n", g_n_skips, g_skips[0].why);
    else printf("every case skipped: %s\n", g_skips[0].why);
    fflush(stdout);
    return 77;
  }
  fflush(stdout);
  return 0;
}

int tsr_test_gen_model(char *path, size_t cap, const char *name, int dim, int hidden,
                       int layers, int heads, int kv_heads, int vocab, int seq_len,
                       uint64_t seed) {
  tsr_gen_params_t p;
  tsr_status_t s = tsr_gen_preset("stories260K", &p);
  p.dim = dim;
  p.hidden_dim = hidden;
  p.n_layers = layers;
  p.n_heads = heads;
  p.n_kv_heads = kv_heads;
  p.vocab_size = vocab;
  p.seq_len = seq_len;
  p.seed = seed;
  snprintf(path, cap, "%s/%s.gguf", tsr_test_tmpdir(), name);
  if (!s) s = tsr_gen_model_write(path, &p);
  if (s) fprintf(stderr, "generating %s: %s\n", name, tsr_status_message(s));
  tsr_status_free(s);
  return s ? 1 : 0;
}

tsr_status_t tsr_test_rig_open(tsr_test_rig_t *r, const char *path, const char *devices,
                               tsr_split_t split, uint32_t timeout_ms) {
  memset(r, 0, sizeof *r);
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  o.n_threads = 2;
  o.devices = devices;
  o.offload = TSR_OFFLOAD_ALL;
  o.split = split;
  o.quiet = true;
  o.fallback = false;
  if (timeout_ms) o.device_timeout_ms = timeout_ms;
  tsr_status_t s = tsr_context_create(&o, &r->ctx);
  if (!s) s = tsr_model_load(r->ctx, path, NULL, &r->model);
  if (!s) {
    tsr_model_config_t cfg;
    tsr_model_config(r->model, &cfg);
    r->vocab = cfg.vocab_size;
  }
  return s;
}

void tsr_test_rig_close(tsr_test_rig_t *r) {
  tsr_model_destroy(r->model);
  tsr_context_destroy(r->ctx);
  memset(r, 0, sizeof *r);
}
