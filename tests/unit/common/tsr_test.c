/* tsr_test.c - helpers shared by the CUnit test programs. */
#include "tsr_test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int tsr_test_run_all(void) {
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  unsigned fsuites = CU_get_number_of_suites_failed();
  CU_cleanup_registry();
  return (failed || fsuites) ? 1 : 0;
}
