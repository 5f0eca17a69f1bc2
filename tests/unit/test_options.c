/*
 * test_options.c - option strings parsed from a table (base/options.h), and
 * every backend's table as the HAL registry exposes it.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "driver/hal.h"
#include "tsr_test.h"

typedef struct opts {
  uint64_t mem;
  uint32_t rows;
  double clock;
  bool lost;
  char path[8];
  char name[16];
} opts_t;

static const tsr_opt_spec_t table[] = {
    TSR_OPT_ROW_U64(opts_t, mem, "mem", 4096, 1ull << 36, "memory bytes"),
    TSR_OPT_ROW_U64(opts_t, rows, "rows", 1, 255, "array rows"),
    TSR_OPT_ROW_F64(opts_t, clock, "clock", 1, 5000, "clock in MHz"),
    TSR_OPT_ROW_BOOL(opts_t, lost, "lost", "a switch"),
    TSR_OPT_ROW_STR(opts_t, path, "path", TSR_OPT_NONEMPTY, "a file"),
    TSR_OPT_ROW_STR(opts_t, name, "name", 0, "any text"),
};
#define N (sizeof table / sizeof table[0])

static void test_values(void) {
  opts_t o = {.mem = 7, .rows = 16, .clock = 300};
  TSR_ASSERT_OK(tsr_opts_parse("t", table, N, NULL, &o));
  TSR_ASSERT_OK(tsr_opts_parse("t", table, N, "", &o));
  CU_ASSERT_EQUAL(o.mem, 7); /* not given: untouched */
  TSR_ASSERT_OK(tsr_opts_parse("t", table, N, "mem=64M,rows=0x20,clock=250.5,lost,path=a.f",
                               &o));
  CU_ASSERT_EQUAL(o.mem, 64ull << 20);
  CU_ASSERT_EQUAL(o.rows, 32);
  CU_ASSERT_EQUAL(o.clock, 250.5);
  CU_ASSERT_TRUE(o.lost);
  CU_ASSERT_STRING_EQUAL(o.path, "a.f");
  TSR_ASSERT_OK(tsr_opts_parse("t", table, N, "lost=0,mem=1GiB,name=", &o));
  CU_ASSERT_FALSE(o.lost);
  CU_ASSERT_EQUAL(o.mem, 1ull << 30);
  CU_ASSERT_STRING_EQUAL(o.name, "");
  TSR_ASSERT_OK(tsr_opts_parse("t", table, N, "lost=yes,mem=8KB", &o));
  CU_ASSERT_TRUE(o.lost);
  CU_ASSERT_EQUAL(o.mem, 8192);
}

static void test_errors(void) {
  opts_t o = {0};
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "bogus=1", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "unknown option 'bogus' (known: mem, rows, clock, lost, path, name)");
  /* Negative and too large: OUT_OF_RANGE naming component, option, value, range. */
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "rows=-1", &o), TSR_STATUS_OUT_OF_RANGE,
                 "t: option rows=-1 is outside [1, 255]");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "rows=256", &o), TSR_STATUS_OUT_OF_RANGE,
                 "t: option rows=256 is outside [1, 255]");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "mem=1", &o), TSR_STATUS_OUT_OF_RANGE, "mem=1");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "mem=99999999999G", &o), TSR_STATUS_OUT_OF_RANGE,
                 "overflows");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "clock=0.5", &o), TSR_STATUS_OUT_OF_RANGE,
                 "clock=0.5 is outside [1, 5000]");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "clock=-3", &o), TSR_STATUS_OUT_OF_RANGE,
                 "clock=-3");
  /* Malformed values. */
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "mem=abc", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "mem='abc' is not an unsigned integer");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "mem=4Q", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "mem='4Q'");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "mem", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "mem needs an unsigned integer");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "clock=fast", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "clock='fast' is not a number");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "lost=3", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "lost='3' is not a switch");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "path=", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "path needs a value");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "path=toolongname", &o),
                 TSR_STATUS_INVALID_ARGUMENT, "path is too long");
  TSR_ASSERT_ERR(tsr_opts_parse("t", table, N, "=3", &o), TSR_STATUS_INVALID_ARGUMENT,
                 "malformed");
}

/* Every backend has a table; every numeric option has a real range, and
 * the parser of the backend itself refuses out-of-range values (not only
 * the table): `fmodel` opens everywhere, the others are tried when they
 * open here. */
static void test_backend_tables(void) {
  size_t n = 0;
  const tsr_hal_vtable_t *const *vts = tsr_hal_backends(&n);
  for (size_t i = 0; i < n; i++) {
    const tsr_hal_vtable_t *vt = vts[i];
    CU_ASSERT_PTR_NOT_NULL(vt->options);
    CU_ASSERT(vt->n_options > 0);
    for (size_t j = 0; j < vt->n_options; j++) {
      const tsr_opt_spec_t *o = &vt->options[j];
      CU_ASSERT_PTR_NOT_NULL(o->help);
      if (o->type == TSR_OPT_U64) CU_ASSERT(o->umin <= o->umax);
      if (o->type == TSR_OPT_F64) CU_ASSERT(o->fmin < o->fmax);
    }
  }
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:latency=-1", &dev), TSR_STATUS_OUT_OF_RANGE,
                 "fmodel: option latency=-1 is outside [0, 100000]");
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:nope", &dev), TSR_STATUS_INVALID_ARGUMENT,
                 "(known: mem, base, rows");
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:base=4097", &dev), TSR_STATUS_INVALID_ARGUMENT,
                 "4096-byte aligned");
  CU_ASSERT_PTR_NULL(dev);
  tsr_status_t s = tsr_hal_open("sim", &dev);
  if (s) {
    tsr_test_skip("sim does not open here: %s", tsr_status_message(s));
    tsr_status_free(s);
    return;
  }
  tsr_hal_close(dev);
  dev = NULL;
  TSR_ASSERT_ERR(tsr_hal_open("sim:latency=-1", &dev), TSR_STATUS_OUT_OF_RANGE,
                 "sim: option latency=-1 is outside [0, 100000]");
  TSR_ASSERT_ERR(tsr_hal_open("sim:bw=0", &dev), TSR_STATUS_OUT_OF_RANGE,
                 "sim: option bw=0 is outside [1, 4096]");
  TSR_ASSERT_ERR(tsr_hal_open("sim:waves=", &dev), TSR_STATUS_INVALID_ARGUMENT, "waves");
  CU_ASSERT_PTR_NULL(dev);
}

static void test_print(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  tsr_opts_print(f, table, N, "  ");
  fclose(f);
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "  mem=N (u64 4096..2^36)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "rows=N (u64 1..255)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "clock=X (f64 1..5000)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "lost (switch)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "array rows"));
  free(buf);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("options", NULL, NULL);
  CU_add_test(s, "values of every type", test_values);
  CU_add_test(s, "errors name option, value and range", test_errors);
  CU_add_test(s, "every backend parses through its table", test_backend_tables);
  CU_add_test(s, "help from the table", test_print);
  return tsr_test_run_all();
}
