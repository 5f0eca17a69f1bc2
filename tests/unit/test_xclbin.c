/* test_xclbin.c - the xclbin writer and reader (driver/xrt/tsr_xclbin.h):
 * the layout against XRT's own header, round trips through our reader and
 * through XRT's parser and loader (noop shim, in a forked child), and one
 * named error per kind of malformed file. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver/tsr_regmap.h"

#include "tsr_test.h"
#include "driver/xrt/tsr_xclbin.h"
#include "driver/xrt/xrt_api.h"

#if defined(__has_include)
#if __has_include(<xrt/xclbin.h>) && __has_include(<uuid/uuid.h>)
#include <stddef.h>
#include <xrt/xclbin.h>
#define HAVE_XRT_XCLBIN_H 1
#endif
#endif

static uint8_t *build(tsr_xclbin_ctrl_t ctrl, const char *bitstream, size_t *size) {
  tsr_xclbin_write_opts_t o;
  tsr_xclbin_write_opts_init(&o);
  o.ctrl = ctrl;
  o.bitstream_path = bitstream;
  uint8_t *d = NULL;
  TSR_ASSERT_OK(tsr_xclbin_build(&o, &d, size));
  return d;
}

static const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tsr_test_tmpdir(), name);
  return buf[k];
}

static void write_bytes(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(d, 1, n, f), n);
  fclose(f);
}

/* Offsets of tsr_xclbin.h against the structures of <xrt/xclbin.h>. */
static void test_layout_matches_xrt_header(void) {
#ifdef HAVE_XRT_XCLBIN_H
  CU_ASSERT_EQUAL(sizeof(struct axlf), TSR_AXLF_MIN_BYTES);
  CU_ASSERT_EQUAL(offsetof(struct axlf, m_signature_length), TSR_AXLF_OFF_SIGLEN);
  CU_ASSERT_EQUAL(offsetof(struct axlf, reserved), TSR_AXLF_OFF_RESERVED);
  CU_ASSERT_EQUAL(offsetof(struct axlf, m_keyBlock), TSR_AXLF_OFF_KEYBLOCK);
  CU_ASSERT_EQUAL(offsetof(struct axlf, m_uniqueId), TSR_AXLF_OFF_UNIQUE_ID);
  CU_ASSERT_EQUAL(offsetof(struct axlf, m_header), TSR_AXLF_OFF_HEADER);
  CU_ASSERT_EQUAL(offsetof(struct axlf, m_sections), TSR_AXLF_OFF_SECTIONS);
  size_t h = TSR_AXLF_OFF_HEADER;
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_length), TSR_AXLF_OFF_LENGTH);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_timeStamp), TSR_AXLF_OFF_TIMESTAMP);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_versionPatch), TSR_AXLF_OFF_VER_PATCH);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_versionMajor), TSR_AXLF_OFF_VER_MAJOR);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_versionMinor), TSR_AXLF_OFF_VER_MINOR);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_mode), TSR_AXLF_OFF_MODE);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_actionMask), TSR_AXLF_OFF_ACTION_MASK);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, rom_uuid), TSR_AXLF_OFF_ROM_UUID);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_platformVBNV), TSR_AXLF_OFF_VBNV);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, uuid), TSR_AXLF_OFF_UUID);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_debug_bin), TSR_AXLF_OFF_DEBUG_BIN);
  CU_ASSERT_EQUAL(h + offsetof(struct axlf_header, m_numSections), TSR_AXLF_OFF_NUM_SECTIONS);
  CU_ASSERT_EQUAL(sizeof(struct axlf_section_header), TSR_AXLF_SECTION_HDR_BYTES);
  CU_ASSERT_EQUAL(offsetof(struct axlf_section_header, m_sectionName), 4);
  CU_ASSERT_EQUAL(offsetof(struct axlf_section_header, m_sectionOffset), 24);
  CU_ASSERT_EQUAL(offsetof(struct axlf_section_header, m_sectionSize), 32);
  CU_ASSERT_EQUAL(sizeof(struct mem_data), TSR_MEM_DATA_BYTES);
  CU_ASSERT_EQUAL(offsetof(struct mem_data, m_size), 8);
  CU_ASSERT_EQUAL(offsetof(struct mem_data, m_base_address), 16);
  CU_ASSERT_EQUAL(offsetof(struct mem_data, m_tag), 24);
  CU_ASSERT_EQUAL(offsetof(struct mem_topology, m_mem_data), TSR_MEM_TOPO_HDR_BYTES);
  CU_ASSERT_EQUAL(sizeof(struct connection), TSR_CONNECTION_BYTES);
  CU_ASSERT_EQUAL(offsetof(struct connectivity, m_connection), TSR_CONNECTIVITY_HDR_BYTES);
  CU_ASSERT_EQUAL(sizeof(struct ip_data), TSR_IP_DATA_BYTES);
  CU_ASSERT_EQUAL(offsetof(struct ip_data, m_base_address), 8);
  CU_ASSERT_EQUAL(offsetof(struct ip_data, m_name), 16);
  CU_ASSERT_EQUAL(offsetof(struct ip_layout, m_ip_data), TSR_IP_LAYOUT_HDR_BYTES);
  CU_ASSERT_EQUAL(EMBEDDED_METADATA, TSR_AXLF_EMBEDDED_METADATA);
  CU_ASSERT_EQUAL(MEM_TOPOLOGY, TSR_AXLF_MEM_TOPOLOGY);
  CU_ASSERT_EQUAL(CONNECTIVITY, TSR_AXLF_CONNECTIVITY);
  CU_ASSERT_EQUAL(IP_LAYOUT, TSR_AXLF_IP_LAYOUT);
  CU_ASSERT_EQUAL(BITSTREAM, TSR_AXLF_BITSTREAM);
  CU_ASSERT_EQUAL(MEM_DDR4, TSR_MEM_DDR4);
  CU_ASSERT_EQUAL(IP_KERNEL, TSR_IP_KERNEL);
  CU_ASSERT_EQUAL(AP_CTRL_CHAIN, TSR_XCLBIN_CTRL_CHAIN);
  CU_ASSERT_EQUAL(IP_CONTROL_MASK, TSR_IP_CONTROL_MASK);
#else
  printf("\n  <xrt/xclbin.h> not installed: layout compared in the round trips only ");
#endif
}

static void test_round_trip(void) {
  size_t n = 0;
  const tsr_regmap_arg_t *ra = tsr_regmap_args(&n);
  CU_ASSERT_EQUAL(n, 4);
  for (int chain = 0; chain < 2; chain++) {
    size_t size = 0;
    uint8_t *d = build(chain ? TSR_XCLBIN_CTRL_CHAIN : TSR_XCLBIN_CTRL_HS, NULL, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(size % 8, 0);
    tsr_xclbin_info_t *info = NULL;
    TSR_ASSERT_OK(tsr_xclbin_parse(d, size, "mem", &info));
    CU_ASSERT_PTR_NOT_NULL_FATAL(info);
    CU_ASSERT_EQUAL(info->length, size);
    CU_ASSERT_EQUAL(info->n_sections, 4);
    CU_ASSERT_EQUAL(info->n_mem, 1);
    CU_ASSERT_EQUAL(info->n_ip, 1);
    CU_ASSERT_EQUAL(info->n_conn, 2); /* the two PTR arguments */
    CU_ASSERT_EQUAL(info->n_kernels, 1);
    CU_ASSERT_EQUAL(info->bitstream_bytes, 0);
    CU_ASSERT_STRING_EQUAL(info->ip[0].name, "tsr_kernel:tsr_kernel_1");
    const tsr_xclbin_kernel_t *k = tsr_xclbin_find_kernel(info, TSR_XCLBIN_KERNEL_NAME);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(tsr_xclbin_kernel_ctrl(info, k),
                    chain ? TSR_XCLBIN_CTRL_CHAIN : TSR_XCLBIN_CTRL_HS);
    CU_ASSERT_STRING_EQUAL(k->protocol, chain ? "ap_ctrl_chain" : "ap_ctrl_hs");
    CU_ASSERT_EQUAL(k->n_args, n);
    for (size_t i = 0; i < n && i < k->n_args; i++) {
      CU_ASSERT_STRING_EQUAL(k->args[i].name, ra[i].name);
      CU_ASSERT_EQUAL(k->args[i].offset, ra[i].offset);
      CU_ASSERT_EQUAL(k->args[i].size, ra[i].bytes);
      CU_ASSERT_EQUAL(k->args[i].addr_qual, ra[i].is_ptr ? 1u : 0u);
    }
    CU_ASSERT_EQUAL(k->args[0].offset, TSR_ARG_MEM_BASE);
    CU_ASSERT_EQUAL(k->args[3].offset, TSR_ARG_N_DESC);
    TSR_ASSERT_OK(tsr_xclbin_check_regmap(k));
    CU_ASSERT_EQUAL(k->n_inst, 1);
    for (size_t i = 0; i < info->n_conn; i++)
      CU_ASSERT_TRUE(ra[info->conn[i].arg_index].is_ptr);
    tsr_xclbin_info_free(info);

    /* Deterministic: the same options give the same bytes. */
    size_t size2 = 0;
    uint8_t *d2 = build(chain ? TSR_XCLBIN_CTRL_CHAIN : TSR_XCLBIN_CTRL_HS, NULL, &size2);
    CU_ASSERT_EQUAL(size2, size);
    CU_ASSERT_TRUE(d2 && !memcmp(d, d2, size));
    free(d2);
    free(d);
  }
}

static void test_bitstream_section(void) {
  uint8_t bits[1000];
  for (size_t i = 0; i < sizeof bits; i++) bits[i] = (uint8_t)(i * 7 + 3);
  const char *bp = tmp_path("fake.bit");
  write_bytes(bp, bits, sizeof bits);
  size_t size = 0;
  uint8_t *d = build(TSR_XCLBIN_CTRL_HS, bp, &size);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  tsr_xclbin_info_t *info = NULL;
  TSR_ASSERT_OK(tsr_xclbin_parse(d, size, "mem", &info));
  CU_ASSERT_PTR_NOT_NULL_FATAL(info);
  CU_ASSERT_EQUAL(info->n_sections, 5);
  CU_ASSERT_EQUAL(info->bitstream_bytes, sizeof bits);
  for (size_t i = 0; i < info->n_sections; i++)
    if (info->sections[i].kind == TSR_AXLF_BITSTREAM)
      CU_ASSERT_EQUAL(memcmp(d + info->sections[i].offset, bits, sizeof bits), 0);
  tsr_xclbin_info_free(info);
  free(d);
  tsr_xclbin_write_opts_t o;
  tsr_xclbin_write_opts_init(&o);
  o.bitstream_path = tmp_path("missing.bit");
  uint8_t *none = NULL;
  TSR_ASSERT_ERR(tsr_xclbin_build(&o, &none, &size), TSR_STATUS_NOT_FOUND, "missing.bit");
  CU_ASSERT_PTR_NULL(none);
  o.bitstream_path = NULL;
  o.kernel_name = "bad name";
  TSR_ASSERT_ERR(tsr_xclbin_build(&o, &none, &size), TSR_STATUS_INVALID_ARGUMENT, "bad name");
}

/* ---- XRT's own parser and loader, in a child (XRT may end a process) ---- */

static int child_failures;
#define CHILD_CHECK(cond)                                                    \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "child: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      child_failures++;                                                      \
    }                                                                        \
  } while (0)

static int xrt_check_file(const char *path, int expect_chain) {
  const tsr_xrt_api_t *x = NULL;
  tsr_status_t s = tsr_xrt_api_get(TSR_XRT_SHIM_NOOP, &x);
  if (s) {
    fprintf(stderr, "child: XRT not usable here: %s\n", tsr_status_message(s));
    int skip = tsr_status_code(s) == TSR_STATUS_UNAVAILABLE;
    tsr_status_free(s);
    return skip ? 77 : 1;
  }
  /* The parser: kernel and CU counts, UUID. */
  tsr_xclbin_info_t *info = NULL;
  s = tsr_xclbin_read_file(path, &info);
  CHILD_CHECK(s == TSR_OK);
  tsr_status_free(s);
  if (!info) return 1;
  tsr_xrt_xclbin_h xb = x->xclbinAllocFilename(path);
  CHILD_CHECK(xb != NULL);
  if (xb) {
    CHILD_CHECK(x->xclbinGetNumKernels(xb) == 1);
    CHILD_CHECK(x->xclbinGetNumKernelComputeUnits(xb) == 1);
    unsigned char uuid[16] = {0};
    CHILD_CHECK(x->xclbinGetUUID(xb, uuid) == 0);
    CHILD_CHECK(memcmp(uuid, info->uuid, 16) == 0);
    x->xclbinFreeHandle(xb);
  }
  /* The loader (noop shim): argument offsets and banks as XRT sees them. */
  if (!strcmp(x->mode, "noop")) {
    tsr_xrt_device_h dev = x->deviceOpen(0);
    CHILD_CHECK(dev != NULL);
    if (dev) {
      CHILD_CHECK(x->deviceLoadXclbinFile(dev, path) == 0);
      unsigned char uuid[16] = {0};
      CHILD_CHECK(x->deviceGetXclbinUUID(dev, uuid) == 0);
      CHILD_CHECK(memcmp(uuid, info->uuid, 16) == 0);
      tsr_xrt_kernel_h k = x->plKernelOpen(dev, uuid, TSR_XCLBIN_KERNEL_NAME);
      CHILD_CHECK(k != NULL);
      size_t n = 0;
      const tsr_regmap_arg_t *ra = tsr_regmap_args(&n);
      for (size_t i = 0; k && i < n; i++) {
        uint32_t off = x->kernelArgOffset(k, (int)i);
        if (off != ra[i].offset)
          fprintf(stderr, "child: argument %zu (%s): XRT offset 0x%x, regmap 0x%x\n", i,
                  ra[i].name, off, ra[i].offset);
        CHILD_CHECK(off == ra[i].offset);
        if (ra[i].is_ptr) CHILD_CHECK(x->kernelArgGroupId(k, (int)i) == 0);
      }
      if (k) x->kernelClose(k);
      x->deviceClose(dev);
    }
  }
  (void)expect_chain;
  tsr_xclbin_info_free(info);
  return child_failures ? 1 : 0;
}

/* Runs fn in a child; returns its exit status, or 128+signal. */
static int in_child(int (*fn)(const char *, int), const char *path, int arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(fn(path, arg));
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "child killed by signal %d\n", WTERMSIG(st));
    return 128 + WTERMSIG(st);
  }
  return WEXITSTATUS(st);
}

static void test_xrt_parses_and_loads(void) {
  for (int chain = 0; chain < 2; chain++) {
    tsr_xclbin_write_opts_t o;
    tsr_xclbin_write_opts_init(&o);
    o.ctrl = chain ? TSR_XCLBIN_CTRL_CHAIN : TSR_XCLBIN_CTRL_HS;
    const char *p = tmp_path(chain ? "chain.xclbin" : "hs.xclbin");
    TSR_ASSERT_OK(tsr_xclbin_write_file(&o, p));
    int rc = in_child(xrt_check_file, p, chain);
    if (rc == 77) {
      tsr_test_skip("XRT is not usable here (its library does not load)");
      return;
    }
    CU_ASSERT_EQUAL(rc, 0);
  }
}

/* ---- malformed files ------------------------------------------------------ */

static size_t sec_hdr(size_t i) { return TSR_AXLF_OFF_SECTIONS + i * TSR_AXLF_SECTION_HDR_BYTES; }

/* Parses a mutated copy and expects FORMAT with `needle`. */
static void expect_format(const uint8_t *d, size_t size, const char *needle) {
  tsr_xclbin_info_t *info = NULL;
  tsr_status_t s = tsr_xclbin_parse(d, size, "bad.xclbin", &info);
  CU_ASSERT_PTR_NULL(info);
  CU_ASSERT_PTR_NOT_NULL(s);
  if (s) {
    CU_ASSERT_EQUAL(tsr_status_code(s), TSR_STATUS_FORMAT);
    if (!strstr(tsr_status_message(s), needle))
      fprintf(stderr, "message \"%s\" lacks \"%s\"\n", tsr_status_message(s), needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s), needle));
    CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s), "bad.xclbin"));
  }
  tsr_status_free(s);
  tsr_xclbin_info_free(info);
}

/* Index of the section of `kind` in a file built by build(). */
static size_t section_index(const uint8_t *d, uint32_t kind) {
  uint32_t n = tsr_get_le32(d + TSR_AXLF_OFF_NUM_SECTIONS);
  for (uint32_t i = 0; i < n; i++)
    if (tsr_get_le32(d + sec_hdr(i)) == kind) return i;
  return 0;
}

static void test_malformed(void) {
  size_t size = 0;
  uint8_t *good = build(TSR_XCLBIN_CTRL_HS, NULL, &size);
  CU_ASSERT_PTR_NOT_NULL_FATAL(good);
  uint8_t *d = malloc(size + 64);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
#define RESET() memcpy(d, good, size)
  size_t meta = section_index(good, TSR_AXLF_EMBEDDED_METADATA);
  size_t mem = section_index(good, TSR_AXLF_MEM_TOPOLOGY);
  size_t conn = section_index(good, TSR_AXLF_CONNECTIVITY);
  uint64_t meta_off = tsr_get_le64(good + sec_hdr(meta) + 24);
  uint64_t meta_size = tsr_get_le64(good + sec_hdr(meta) + 32);

  RESET();
  expect_format(d, 100, "truncated header");
  RESET();
  memcpy(d, "xclbin1", 8);
  expect_format(d, size, "bad magic");
  RESET();
  expect_format(d, size - 8, "length mismatch"); /* file cut short */
  RESET();
  tsr_put_le64(d + TSR_AXLF_OFF_LENGTH, size + 8);
  expect_format(d, size, "length mismatch");
  RESET();
  tsr_put_le32(d + TSR_AXLF_OFF_NUM_SECTIONS, 1000);
  expect_format(d, size, "section table out of range");
  RESET();
  tsr_put_le64(d + sec_hdr(mem) + 24, size - 16); /* 48 bytes from 16 before the end */
  expect_format(d, size, "section out of range");
  RESET();
  tsr_put_le64(d + sec_hdr(mem) + 32, UINT64_MAX - 4); /* offset + size overflows */
  expect_format(d, size, "section out of range");
  RESET();
  tsr_put_le64(d + sec_hdr(mem) + 24, 64); /* inside the header */
  expect_format(d, size, "section out of range");
  RESET();
  tsr_put_le64(d + sec_hdr(mem) + 24, meta_off + 8); /* inside the metadata */
  expect_format(d, size, "overlapping sections");
  RESET();
  tsr_put_le64(d + sec_hdr(meta) + 32, meta_size / 2); /* XML cut in half */
  expect_format(d, size, "truncated metadata");
  RESET();
  {
    char *x = (char *)d + meta_off;
    char *p = strstr(x, "</kernel>");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memcpy(p, "</kernal>", 9);
    expect_format(d, size, "malformed metadata");
  }
  RESET();
  {
    char *p = strstr((char *)d + meta_off, "offset=\"0x1C\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    p[7] = '\''; /* mismatched quotes: offset='0x1C" */
    expect_format(d, size, "metadata");
  }
  RESET();
  tsr_put_le32(d + tsr_get_le64(good + sec_hdr(mem) + 24), 1000); /* 1000 banks */
  expect_format(d, size, "malformed section MEM_TOPOLOGY");
  RESET();
  {
    uint64_t coff = tsr_get_le64(good + sec_hdr(conn) + 24);
    tsr_put_le32(d + coff + TSR_CONNECTIVITY_HDR_BYTES + 8, 7); /* bank 7 of 1 */
    expect_format(d, size, "malformed section CONNECTIVITY");
  }

  /* Well-formed, but not the register map: parsed, then refused. */
  RESET();
  {
    char *p = strstr((char *)d + meta_off, "offset=\"0x1C\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memcpy(p, "offset=\"0x20\"", 13);
    tsr_xclbin_info_t *info = NULL;
    TSR_ASSERT_OK(tsr_xclbin_parse(d, size, "moved.xclbin", &info));
    if (info) {
      const tsr_xclbin_kernel_t *k = tsr_xclbin_find_kernel(info, NULL);
      CU_ASSERT_PTR_NOT_NULL(k);
      if (k) TSR_ASSERT_ERR(tsr_xclbin_check_regmap(k), TSR_STATUS_FORMAT, "argument 1");
      tsr_xclbin_info_free(info);
    }
  }
  tsr_xclbin_info_t *info = NULL;
  TSR_ASSERT_ERR(tsr_xclbin_read_file(tmp_path("absent.xclbin"), &info), TSR_STATUS_NOT_FOUND,
                 "absent.xclbin");
  free(d);
  free(good);
#undef RESET
}

/* Every single-byte truncation of the header and section table fails with
 * a status, never a crash. */
static void test_truncations(void) {
  size_t size = 0;
  uint8_t *good = build(TSR_XCLBIN_CTRL_HS, NULL, &size);
  CU_ASSERT_PTR_NOT_NULL_FATAL(good);
  int failures = 0;
  for (size_t n = 0; n < size; n += (n < 700 ? 1 : 61)) {
    uint8_t *d = malloc(n ? n : 1);
    memcpy(d, good, n);
    tsr_xclbin_info_t *info = NULL;
    tsr_status_t s = tsr_xclbin_parse(d, n, "cut", &info);
    if (!s || tsr_status_code(s) != TSR_STATUS_FORMAT) failures++;
    tsr_status_free(s);
    tsr_xclbin_info_free(info);
    free(d);
  }
  CU_ASSERT_EQUAL(failures, 0);
  free(good);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("xclbin", NULL, NULL);
  CU_add_test(s, "layout matches <xrt/xclbin.h>", test_layout_matches_xrt_header);
  CU_add_test(s, "round trip through our reader (hs, chain)", test_round_trip);
  CU_add_test(s, "bitstream section and writer errors", test_bitstream_section);
  CU_add_test(s, "XRT parses and loads it (noop)", test_xrt_parses_and_loads);
  CU_add_test(s, "malformed files give named errors", test_malformed);
  CU_add_test(s, "every truncation is an error", test_truncations);
  return tsr_test_run_all();
}
