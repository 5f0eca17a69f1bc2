/*
 * test_board.c - board profiles (driver/board.h): the built-in profiles
 * parse and carry the data-sheet figures (written here from the sources in
 * driver/README.md, not from the files), bad profiles give named errors,
 * and fmodel:board= puts a board into the caps and lets options override it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/board.h"
#include "driver/hal.h"
#include "tsr_test.h"

static const char good[] =
    "# a comment\n"
    "name = t1\n"
    "title = Test board\n"
    "  mem_channels = 4   \n"
    "channel_gbps = 19.2\n"
    "mem_size = 1G\n"
    "clock_mhz = 300\n"
    "dsp_slices = 300\n"
    "macs_per_dsp = 1\n"
    "array_rows = 16\n"
    "array_cols = 16\n"
    "ports = 2\n"
    "link_gbps = 12\n"
    "link_latency_us = 25\n"
    "launch_latency_us = 70\n";

static void test_good(void) {
  tsr_board_t b;
  TSR_ASSERT_OK(tsr_board_parse(good, strlen(good), "t1.board", &b));
  CU_ASSERT_STRING_EQUAL(b.name, "t1");
  CU_ASSERT_STRING_EQUAL(b.title, "Test board");
  CU_ASSERT_EQUAL(b.mem_channels, 4);
  CU_ASSERT_EQUAL(b.ports, 2);
  CU_ASSERT_EQUAL(b.mem_size, 1ull << 30);
  CU_ASSERT_EQUAL(b.mem_latency, 40); /* absent: the default */
  CU_ASSERT_DOUBLE_EQUAL(b.channel_bytes_per_s, 19.2e9, 1);
  CU_ASSERT_DOUBLE_EQUAL(tsr_board_bytes_per_cycle(&b), 64.0, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(b.link_latency_s, 25e-6, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(b.launch_latency_s, 70e-6, 1e-12);
  /* no trailing newline, CRLF lines */
  const char crlf[] = "name = t2\r\ntitle = x\r\nmem_channels = 1\r\nchannel_gbps = 1\r\n"
                      "mem_size = 64K\r\nclock_mhz = 100\r\narray_rows = 4\r\narray_cols = 4\r\n"
                      "link_gbps = 1\r\nlink_latency_us = 0\r\nlaunch_latency_us = 0";
  TSR_ASSERT_OK(tsr_board_parse(crlf, strlen(crlf), "t2", &b));
  CU_ASSERT_STRING_EQUAL(b.name, "t2");
  CU_ASSERT_EQUAL(b.ports, 1);
  CU_ASSERT_DOUBLE_EQUAL(b.clock_hz, 100e6, 1e-3);
}

/* `good` with line `line` (1-based) replaced by `repl` ("" drops it). */
static void variant(char *out, size_t cap, int line, const char *repl) {
  size_t len = 0;
  const char *p = good;
  for (int l = 1; *p; l++) {
    const char *e = strchr(p, '\n');
    size_t n = (size_t)(e - p) + 1;
    if (l == line) len += (size_t)snprintf(out + len, cap - len, "%s%s", repl, *repl ? "\n" : "");
    else len += (size_t)snprintf(out + len, cap - len, "%.*s", (int)n, p);
    p += n;
  }
}

static void bad(int line, const char *repl, const char *needle) {
  char buf[2048];
  variant(buf, sizeof buf, line, repl);
  tsr_board_t b;
  TSR_ASSERT_ERR(tsr_board_parse(buf, strlen(buf), "b.board", &b), TSR_STATUS_FORMAT, needle);
}

static void test_bad(void) {
  bad(4, "mem_channels = 0", "b.board:4: key 'mem_channels': board: option mem_channels=0 is "
                             "outside [1, 1024]");
  bad(4, "", "b.board: required key 'mem_channels' missing");
  bad(5, "channel_gbps = fast", "b.board:5: key 'channel_gbps': 'fast' is not a number");
  bad(5, "channel_gbps = 12x", "b.board:5: key 'channel_gbps': '12x' is not a number");
  bad(5, "channel_gbps = -3", "b.board:5: key 'channel_gbps': -3 is outside");
  bad(5, "channel_gbps =", "b.board:5: key 'channel_gbps': '' is not a number");
  bad(6, "mem_size = lots", "b.board:6: key 'mem_size'");
  bad(7, "clocks_mhz = 300", "b.board:7: unknown key 'clocks_mhz' (known: name, title");
  bad(7, "clock_mhz 300", "b.board:7: expected 'key = value', got 'clock_mhz 300'");
  bad(2, "name = t1\nname = t3", "b.board:3: key 'name' given twice (first on line 2)");
  bad(2, "name =", "b.board:2: key 'name': empty value");
  bad(12, "ports = 8", "key 'ports': 8 read ports need as many memory channels, the board has 4");
  bad(11, "array_cols = 32", "a 16x32 array is 512 MACs, more than 300 DSP slices x 1 MACs "
                             "hold (300)");
  bad(10, "array_rows = 256", "b.board:10: key 'array_rows'");
  bad(15, "", "required key 'launch_latency_us' missing");
  char longline[700];
  memset(longline, 'x', sizeof longline - 1);
  longline[sizeof longline - 1] = '\0';
  bad(3, longline, "b.board:3: line longer than 511 characters");
  tsr_board_t b;
  const char nul[] = "name = a\0b\n";
  TSR_ASSERT_ERR(tsr_board_parse(nul, sizeof nul - 1, "n.board", &b), TSR_STATUS_FORMAT,
                 "n.board:1: a NUL byte in the line");
}

/* The built-in boards, against the figures of their sources. */
static void test_builtin(void) {
  CU_ASSERT_EQUAL(tsr_board_builtin_count(), 4);
  tsr_board_t b;
  TSR_ASSERT_OK(tsr_board_load("u280", &b));
  CU_ASSERT_EQUAL(b.mem_channels, 32);                                   /* HBM2 PCs */
  CU_ASSERT_DOUBLE_EQUAL(b.mem_channels * b.channel_bytes_per_s, 460e9, 1e6); /* DS963 */
  CU_ASSERT_EQUAL(b.dsp_slices, 9024);                                   /* DS963 */
  CU_ASSERT_TRUE((uint64_t)b.array_rows * b.array_cols <= 9024);
  CU_ASSERT_STRING_EQUAL(b.origin, "built-in driver/boards/u280.board");
  TSR_ASSERT_OK(tsr_board_load("u250", &b));
  CU_ASSERT_EQUAL(b.mem_channels, 4);
  CU_ASSERT_DOUBLE_EQUAL(b.mem_channels * b.channel_bytes_per_s, 77e9, 1e6); /* DS962 */
  CU_ASSERT_EQUAL(b.dsp_slices, 12288);
  TSR_ASSERT_OK(tsr_board_load("pcie-ddr4", &b));
  CU_ASSERT_EQUAL(b.mem_channels, 1);
  CU_ASSERT_EQUAL(b.array_rows, 16);
  CU_ASSERT_DOUBLE_EQUAL(b.channel_bytes_per_s, 2400e6 * 8, 1); /* DDR4-2400 x 64 bit */
  CU_ASSERT_DOUBLE_EQUAL(b.clock_hz, 300e6, 1);
  TSR_ASSERT_OK(tsr_board_load("usb3-artix7", &b));
  CU_ASSERT_TRUE(b.link_bytes_per_s <= 400e6); /* FT601: 32 bit x 100 MHz */
  CU_ASSERT_EQUAL(b.dsp_slices, 740);           /* XC7A200T, DS180 */
  for (size_t i = 0; i < tsr_board_builtin_count(); i++) {
    TSR_ASSERT_OK(tsr_board_load(tsr_board_builtin_name(i), &b));
    CU_ASSERT_STRING_EQUAL(b.name, tsr_board_builtin_name(i));
  }
  TSR_ASSERT_ERR(tsr_board_load("nope", &b), TSR_STATUS_NOT_FOUND,
                 "board 'nope' unknown (built-in: pcie-ddr4, u250, u280, usb3-artix7");
  TSR_ASSERT_ERR(tsr_board_load("/nonexistent/x.board", &b), TSR_STATUS_NOT_FOUND,
                 "cannot open '/nonexistent/x.board'");
}

static void test_file_and_backend(void) {
  char path[] = "/tmp/tsr_board_XXXXXX.board";
  int fd = mkstemps(path, 6);
  CU_ASSERT_TRUE_FATAL(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs(good, f);
  fclose(f);
  tsr_board_t b;
  TSR_ASSERT_OK(tsr_board_load(path, &b));
  CU_ASSERT_STRING_EQUAL(b.origin, path);

  char spec[128];
  snprintf(spec, sizeof spec, "fmodel:board=%s", path);
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_hal_open(spec, &dev));
  if (dev) {
    tsr_hal_caps_t c;
    dev->vt->query_caps(dev, &c);
    CU_ASSERT_STRING_EQUAL(c.board, "t1");
    CU_ASSERT_EQUAL(c.mem_ports, 2);
    CU_ASSERT_EQUAL(c.mem_size, 1ull << 30);
    CU_ASSERT_DOUBLE_EQUAL(c.mem_bytes_per_cycle, 64.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(c.launch_latency_s, 70e-6, 1e-12);
    tsr_hal_close(dev);
  }
  /* explicit options win over the board */
  TSR_ASSERT_OK(tsr_hal_open("fmodel:board=u280,rows=16,cols=16,ports=4,mem=64M", &dev));
  if (dev) {
    tsr_hal_caps_t c;
    dev->vt->query_caps(dev, &c);
    CU_ASSERT_STRING_EQUAL(c.board, "u280");
    CU_ASSERT_EQUAL(c.array_rows, 16);
    CU_ASSERT_EQUAL(c.mem_ports, 4);
    CU_ASSERT_EQUAL(c.mem_size, 64ull << 20);
    CU_ASSERT_DOUBLE_EQUAL(c.mem_bytes_per_cycle * c.clock_hz, 14.375e9, 1e3);
    tsr_hal_close(dev);
  }
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:board=nope", &dev), TSR_STATUS_NOT_FOUND,
                 "fmodel: option board=nope: board 'nope' unknown");
  f = fopen(path, "w");
  fputs("name = t1\nmem_channels = 0\n", f);
  fclose(f);
  snprintf(spec, sizeof spec, "fmodel:board=%s", path);
  char needle[160];
  snprintf(needle, sizeof needle, "%s:2: key 'mem_channels'", path);
  TSR_ASSERT_ERR(tsr_hal_open(spec, &dev), TSR_STATUS_FORMAT, needle);
  unlink(path);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("board", NULL, NULL);
  CU_add_test(s, "a good profile", test_good);
  CU_add_test(s, "bad profiles name file, line, key and why", test_bad);
  CU_add_test(s, "built-in profiles carry their sources' figures", test_builtin);
  CU_add_test(s, "a profile file, fmodel:board= and overrides", test_file_and_backend);
  return tsr_test_run_all();
}
