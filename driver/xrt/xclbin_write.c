/*
 * xclbin_write.c - builds the tessera kernel's xclbin from hw/regmap.def.
 *
 * See tsr_xclbin.h for the layout and what each section holds. XRT's own
 * packager (xclbinutil) is not available everywhere, and XRT itself checks
 * little beyond the magic, so the writer is deliberately strict and the
 * reader (xclbin_read.c) validates every file it is given.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "driver/tsr_regmap.h"
#include "tsr_xclbin.h"

/* ---- the TSR_ARG rows as a table --------------------------------------- */

#define TSR_REG(name, off, acc, desc)
#define TSR_ARG(name, off, bits, kind, desc) \
  {#name, (off), (bits) / 8, TSR_ARGKIND_##kind, desc},
#define TSR_STAT(name, off, bits, desc)
#define TSR_DESC(name, off, bits, desc)
#define TSR_CONST(name, val, desc)
#define TSR_OP(name, val, desc)
#define TSR_HWERR(name, val, desc)
#define TSR_ARGKIND_PTR true
#define TSR_ARGKIND_SCALAR false
static const struct {
  const char *upper;
  uint32_t offset, bytes;
  bool is_ptr;
  const char *desc;
} regmap_rows[] = {
#include "../../hw/regmap.def"
};
#undef TSR_REG
#undef TSR_ARG
#undef TSR_STAT
#undef TSR_DESC
#undef TSR_CONST
#undef TSR_OP
#undef TSR_HWERR
#undef TSR_ARGKIND_PTR
#undef TSR_ARGKIND_SCALAR

#define N_REGMAP_ARGS (sizeof regmap_rows / sizeof regmap_rows[0])

static char regmap_lower[N_REGMAP_ARGS][32];
static tsr_regmap_arg_t regmap_table[N_REGMAP_ARGS];
static pthread_once_t regmap_once = PTHREAD_ONCE_INIT;

static void regmap_init(void) {
  for (size_t i = 0; i < N_REGMAP_ARGS; i++) {
    size_t j = 0;
    for (; regmap_rows[i].upper[j] && j + 1 < sizeof regmap_lower[i]; j++)
      regmap_lower[i][j] = (char)tolower((unsigned char)regmap_rows[i].upper[j]);
    regmap_lower[i][j] = '\0';
    regmap_table[i] = (tsr_regmap_arg_t){regmap_lower[i], regmap_rows[i].offset,
                                         regmap_rows[i].bytes, regmap_rows[i].is_ptr,
                                         regmap_rows[i].desc};
  }
}

const tsr_regmap_arg_t *tsr_regmap_args(size_t *count) {
  pthread_once(&regmap_once, regmap_init);
  *count = N_REGMAP_ARGS;
  return regmap_table;
}

/* ---- names ------------------------------------------------------------- */

const char *tsr_xclbin_kind_name(uint32_t kind) {
  static const char *const names[] = {
      "BITSTREAM", "CLEARING_BITSTREAM", "EMBEDDED_METADATA", "FIRMWARE", "DEBUG_DATA",
      "SCHED_FIRMWARE", "MEM_TOPOLOGY", "CONNECTIVITY", "IP_LAYOUT", "DEBUG_IP_LAYOUT",
      "DESIGN_CHECK_POINT", "CLOCK_FREQ_TOPOLOGY", "MCS", "BMC", "BUILD_METADATA",
      "KEYVALUE_METADATA", "USER_METADATA", "DNA_CERTIFICATE", "PDI",
      "BITSTREAM_PARTIAL_PDI", "PARTITION_METADATA", "EMULATION_DATA", "SYSTEM_METADATA",
      "SOFT_KERNEL", "ASK_FLASH", "AIE_METADATA", "ASK_GROUP_TOPOLOGY",
      "ASK_GROUP_CONNECTIVITY", "SMARTNIC", "AIE_RESOURCES", "OVERLAY", "VENDER_METADATA"};
  return kind < sizeof names / sizeof names[0] ? names[kind] : "UNKNOWN";
}

const char *tsr_xclbin_ctrl_name(uint32_t ctrl) {
  switch (ctrl) {
    case 0: return "ap_ctrl_hs";
    case 1: return "ap_ctrl_chain";
    case 2: return "ap_ctrl_none";
    case 3: return "ap_ctrl_me";
    case 4: return "accel_adapter";
    case 5: return "fast_adapter";
    default: return "unknown";
  }
}

/* ---- a growable byte buffer -------------------------------------------- */

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
  bool oom;
} buf_t;

static bool buf_reserve(buf_t *b, size_t extra) {
  if (b->oom) return false;
  if (b->n + extra <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->n + extra) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  memset(p + b->cap, 0, cap - b->cap);
  b->p = p;
  b->cap = cap;
  return true;
}

static void buf_put(buf_t *b, const void *src, size_t n) {
  if (!buf_reserve(b, n)) return;
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void buf_zero(buf_t *b, size_t n) {
  if (!buf_reserve(b, n)) return;
  memset(b->p + b->n, 0, n);
  b->n += n;
}

static void buf_printf(buf_t *b, const char *fmt, ...) TSR_PRINTF(2, 3);
static void buf_printf(buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_reserve(b, (size_t)n + 1)) return;
  va_start(ap, fmt);
  vsnprintf((char *)b->p + b->n, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)n;
}

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

/* ---- sections ----------------------------------------------------------- */

static void xml_metadata(buf_t *x, const tsr_xclbin_write_opts_t *o, const char *kname) {
  size_t n = 0;
  const tsr_regmap_arg_t *args = tsr_regmap_args(&n);
  const char *proto = tsr_xclbin_ctrl_name(o->ctrl);
  buf_printf(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  buf_printf(x, "<project name=\"tessera\">\n");
  buf_printf(x, "  <platform vendor=\"xilinx\" boardid=\"tessera\" name=\"%s\" "
                "featureRomTime=\"0\">\n", o->platform_vbnv);
  buf_printf(x, "    <version major=\"1\" minor=\"0\"/>\n");
  buf_printf(x, "    <device name=\"fpga0\" fpgaDevice=\"\" addrWidth=\"64\">\n");
  buf_printf(x, "      <core name=\"OCL_REGION_0\" target=\"bitstream\" type=\"clc_region\" "
                "clockFreq=\"%uMHz\" numComputeUnits=\"1\">\n", o->clock_mhz);
  buf_printf(x, "        <kernelClocks>\n");
  buf_printf(x, "          <clock port=\"KERNEL_CLK\" frequency=\"%uMHz\"/>\n", o->clock_mhz);
  buf_printf(x, "        </kernelClocks>\n");
  buf_printf(x, "        <kernel name=\"%s\" language=\"c\" vlnv=\"tessera:kernel:%s:1.0\" "
                "preferredWorkGroupSizeMultiple=\"0\" workGroupSize=\"1\" "
                "interrupt=\"true\" hwControlProtocol=\"%s\">\n", kname, kname, proto);
  buf_printf(x, "          <port name=\"S_AXI_CONTROL\" mode=\"slave\" range=\"0x%X\" "
                "dataWidth=\"32\" portType=\"addressable\" base=\"0x0\"/>\n",
             (unsigned)TSR_HW_CTRL_BYTES);
  buf_printf(x, "          <port name=\"M_AXI_GMEM\" mode=\"master\" "
                "range=\"0xFFFFFFFFFFFFFFFF\" dataWidth=\"512\" portType=\"addressable\" "
                "base=\"0x0\"/>\n");
  for (size_t i = 0; i < n; i++) {
    const char *type = args[i].is_ptr ? "void*" : args[i].bytes == 8 ? "unsigned long"
                                                                      : "unsigned int";
    buf_printf(x, "          <arg name=\"%s\" addressQualifier=\"%d\" id=\"%zu\" "
                  "port=\"%s\" size=\"0x%X\" offset=\"0x%X\" hostOffset=\"0x0\" "
                  "hostSize=\"0x%X\" type=\"%s\"/>\n",
               args[i].name, args[i].is_ptr ? 1 : 0, i,
               args[i].is_ptr ? "M_AXI_GMEM" : "S_AXI_CONTROL", args[i].bytes,
               args[i].offset, args[i].bytes, type);
  }
  buf_printf(x, "          <compileWorkGroupSize x=\"1\" y=\"1\" z=\"1\"/>\n");
  buf_printf(x, "          <maxWorkGroupSize x=\"1\" y=\"1\" z=\"1\"/>\n");
  buf_printf(x, "          <instance name=\"%s_1\">\n", kname);
  buf_printf(x, "            <addrRemap base=\"0x%" PRIX64 "\" range=\"0x%X\" "
                "port=\"S_AXI_CONTROL\"/>\n", o->cu_base, (unsigned)TSR_HW_CTRL_BYTES);
  buf_printf(x, "          </instance>\n");
  buf_printf(x, "        </kernel>\n");
  buf_printf(x, "      </core>\n");
  buf_printf(x, "    </device>\n");
  buf_printf(x, "  </platform>\n");
  buf_printf(x, "</project>\n");
  buf_zero(x, 1); /* NUL-terminated, as XRT's parser reads it as a C string */
}

static void mem_topology(buf_t *s, const tsr_xclbin_write_opts_t *o) {
  uint8_t hdr[TSR_MEM_TOPO_HDR_BYTES] = {0};
  tsr_put_le32(hdr, 1);
  buf_put(s, hdr, sizeof hdr);
  uint8_t m[TSR_MEM_DATA_BYTES] = {0};
  m[0] = TSR_MEM_DDR4;
  m[1] = 1; /* used */
  tsr_put_le64(m + 8, o->mem_size / 1024);
  tsr_put_le64(m + 16, o->mem_base);
  memcpy(m + 24, "bank0", 5);
  buf_put(s, m, sizeof m);
}

static void ip_layout(buf_t *s, const tsr_xclbin_write_opts_t *o, const char *kname) {
  uint8_t hdr[TSR_IP_LAYOUT_HDR_BYTES] = {0};
  tsr_put_le32(hdr, 1);
  buf_put(s, hdr, sizeof hdr);
  uint8_t ip[TSR_IP_DATA_BYTES] = {0};
  tsr_put_le32(ip, TSR_IP_KERNEL);
  /* interrupt enabled, interrupt id 0, control protocol in bits 15:8 */
  uint32_t props = TSR_IP_INT_ENABLE_MASK | ((uint32_t)o->ctrl << TSR_IP_CONTROL_SHIFT);
  tsr_put_le32(ip + 4, props);
  tsr_put_le64(ip + 8, o->cu_base);
  snprintf((char *)ip + 16, 64, "%s:%s_1", kname, kname);
  buf_put(s, ip, sizeof ip);
}

static void connectivity(buf_t *s) {
  size_t n = 0, n_ptr = 0;
  const tsr_regmap_arg_t *args = tsr_regmap_args(&n);
  for (size_t i = 0; i < n; i++) n_ptr += args[i].is_ptr;
  uint8_t hdr[TSR_CONNECTIVITY_HDR_BYTES];
  tsr_put_le32(hdr, (uint32_t)n_ptr);
  buf_put(s, hdr, sizeof hdr);
  for (size_t i = 0; i < n; i++) {
    if (!args[i].is_ptr) continue;
    uint8_t c[TSR_CONNECTION_BYTES];
    tsr_put_le32(c, (uint32_t)i); /* arg_index     */
    tsr_put_le32(c + 4, 0);       /* ip_layout_index: the one CU */
    tsr_put_le32(c + 8, 0);       /* mem_data_index: bank0 */
    buf_put(s, c, sizeof c);
  }
}

static tsr_status_t read_whole(const char *path, buf_t *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return TSR_ERR(NOT_FOUND, "bitstream '%s': %s", path, strerror(errno));
  uint8_t chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) buf_put(out, chunk, got);
  bool err = ferror(f) != 0;
  fclose(f);
  if (err) return TSR_ERR(IO, "bitstream '%s': read error", path);
  if (out->oom) return TSR_ERR(RESOURCE_EXHAUSTED, "bitstream '%s': out of memory", path);
  if (out->n == 0) return TSR_ERR(INVALID_ARGUMENT, "bitstream '%s' is empty", path);
  return TSR_OK;
}

/* FNV-1a 64 with a seed: the UUID and unique id are hashes of the content,
 * so the same inputs always give the same file. */
static uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void tsr_xclbin_write_opts_init(tsr_xclbin_write_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->ctrl = TSR_XCLBIN_CTRL_HS;
  o->kernel_name = TSR_XCLBIN_KERNEL_NAME;
  o->platform_vbnv = "xilinx:tessera:generic:1.0";
  o->cu_base = 0x1800000;
  o->mem_base = 0x4000000000ull;
  o->mem_size = 16ull << 30;
  o->clock_mhz = 300;
}

tsr_status_t tsr_xclbin_build(const tsr_xclbin_write_opts_t *opts, uint8_t **out_data,
                              size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  tsr_xclbin_write_opts_t o;
  tsr_xclbin_write_opts_init(&o);
  if (opts) {
    o = *opts;
    if (!o.kernel_name) o.kernel_name = TSR_XCLBIN_KERNEL_NAME;
    if (!o.platform_vbnv) o.platform_vbnv = "xilinx:tessera:generic:1.0";
    if (!o.clock_mhz) o.clock_mhz = 300;
    if (!o.mem_size) o.mem_size = 16ull << 30;
  }
  if (o.ctrl != TSR_XCLBIN_CTRL_HS && o.ctrl != TSR_XCLBIN_CTRL_CHAIN)
    return TSR_ERR(INVALID_ARGUMENT, "xclbin: control protocol %d is not hs or chain",
                   (int)o.ctrl);
  size_t klen = strlen(o.kernel_name);
  if (klen == 0 || klen > 28)
    return TSR_ERR(INVALID_ARGUMENT, "xclbin: kernel name '%s' must be 1..28 characters",
                   o.kernel_name);
  for (size_t i = 0; i < klen; i++)
    if (!isalnum((unsigned char)o.kernel_name[i]) && o.kernel_name[i] != '_')
      return TSR_ERR(INVALID_ARGUMENT, "xclbin: kernel name '%s' has character '%c' "
                     "(only letters, digits, '_')", o.kernel_name, o.kernel_name[i]);
  if (strlen(o.platform_vbnv) > 63 || strpbrk(o.platform_vbnv, "<>&\"'"))
    return TSR_ERR(INVALID_ARGUMENT, "xclbin: platform name '%s' is too long or has XML "
                   "special characters", o.platform_vbnv);
  if (o.mem_size % 1024)
    return TSR_ERR(INVALID_ARGUMENT, "xclbin: bank size %" PRIu64 " is not a multiple of "
                   "1 KiB", o.mem_size);

  struct {
    uint32_t kind;
    const char *name;
    buf_t data;
  } sec[5];
  size_t n_sec = 0;
  memset(sec, 0, sizeof sec);
  tsr_status_t st = TSR_OK;

  sec[n_sec].kind = TSR_AXLF_EMBEDDED_METADATA;
  sec[n_sec].name = "metadata";
  xml_metadata(&sec[n_sec++].data, &o, o.kernel_name);
  sec[n_sec].kind = TSR_AXLF_MEM_TOPOLOGY;
  sec[n_sec].name = "mem_topology";
  mem_topology(&sec[n_sec++].data, &o);
  sec[n_sec].kind = TSR_AXLF_IP_LAYOUT;
  sec[n_sec].name = "ip_layout";
  ip_layout(&sec[n_sec++].data, &o, o.kernel_name);
  sec[n_sec].kind = TSR_AXLF_CONNECTIVITY;
  sec[n_sec].name = "connectivity";
  connectivity(&sec[n_sec++].data);
  if (o.bitstream_path) {
    sec[n_sec].kind = TSR_AXLF_BITSTREAM;
    sec[n_sec].name = "bitstream";
    st = read_whole(o.bitstream_path, &sec[n_sec++].data);
  }

  buf_t f = {0};
  if (!st) {
    size_t hdr_end = TSR_AXLF_OFF_SECTIONS + n_sec * TSR_AXLF_SECTION_HDR_BYTES;
    buf_zero(&f, hdr_end);
    uint64_t off[5];
    for (size_t i = 0; i < n_sec; i++) {
      buf_zero(&f, (8 - f.n % 8) % 8); /* every section 8-byte aligned */
      off[i] = f.n;
      buf_put(&f, sec[i].data.p, sec[i].data.n);
      if (sec[i].data.oom) f.oom = true;
    }
    buf_zero(&f, (8 - f.n % 8) % 8);
    if (f.oom) {
      st = TSR_ERR(RESOURCE_EXHAUSTED, "xclbin: out of memory");
    } else {
      uint8_t *p = f.p;
      memcpy(p, "xclbin2", 8);
      tsr_put_le32(p + TSR_AXLF_OFF_SIGLEN, 0xFFFFFFFFu); /* -1: unsigned */
      memset(p + TSR_AXLF_OFF_RESERVED, 0xFF, 28);
      memset(p + TSR_AXLF_OFF_KEYBLOCK, 0xFF, 256);
      tsr_put_le64(p + TSR_AXLF_OFF_LENGTH, f.n);
      tsr_put_le64(p + TSR_AXLF_OFF_TIMESTAMP, o.timestamp);
      put16(p + TSR_AXLF_OFF_VER_PATCH, 0);
      p[TSR_AXLF_OFF_VER_MAJOR] = 2;
      p[TSR_AXLF_OFF_VER_MINOR] = 13;
      put16(p + TSR_AXLF_OFF_MODE, 0); /* XCLBIN_FLAT */
      snprintf((char *)p + TSR_AXLF_OFF_VBNV, 64, "%s", o.platform_vbnv);
      tsr_put_le32(p + TSR_AXLF_OFF_NUM_SECTIONS, (uint32_t)n_sec);
      for (size_t i = 0; i < n_sec; i++) {
        uint8_t *h = p + TSR_AXLF_OFF_SECTIONS + i * TSR_AXLF_SECTION_HDR_BYTES;
        tsr_put_le32(h, sec[i].kind);
        snprintf((char *)h + 4, 16, "%s", sec[i].name);
        tsr_put_le64(h + 24, off[i]);
        tsr_put_le64(h + 32, sec[i].data.n);
      }
      /* UUID (RFC 4122 layout, version 5-style bits) and unique id from the
       * content, computed with the UUID and unique id fields still zero. */
      uint64_t h1 = fnv1a(p, f.n, 0xcbf29ce484222325ull);
      uint64_t h2 = fnv1a(p, f.n, h1 ^ 0x9E3779B97F4A7C15ull);
      uint8_t *u = p + TSR_AXLF_OFF_UUID;
      tsr_put_le64(u, h1);
      tsr_put_le64(u + 8, h2);
      u[6] = (uint8_t)((u[6] & 0x0F) | 0x50);
      u[8] = (uint8_t)((u[8] & 0x3F) | 0x80);
      tsr_put_le64(p + TSR_AXLF_OFF_UNIQUE_ID, h1 ^ h2);
      *out_data = f.p;
      *out_size = f.n;
      f.p = NULL;
    }
  }
  free(f.p);
  for (size_t i = 0; i < n_sec; i++) free(sec[i].data.p);
  return st;
}

tsr_status_t tsr_xclbin_write_file(const tsr_xclbin_write_opts_t *opts, const char *path) {
  uint8_t *data = NULL;
  size_t size = 0;
  TSR_RETURN_IF(tsr_xclbin_build(opts, &data, &size));
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 32);
  if (!tmp) {
    free(data);
    return TSR_ERR(RESOURCE_EXHAUSTED, "xclbin: out of memory");
  }
  snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  tsr_status_t st = TSR_OK;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    st = TSR_ERR(IO, "xclbin: cannot create '%s': %s", tmp, strerror(errno));
  } else {
    size_t put = fwrite(data, 1, size, f);
    int e1 = ferror(f);
    int e2 = fclose(f);
    if (put != size || e1 || e2)
      st = TSR_ERR(IO, "xclbin: writing '%s' failed after %zu of %zu bytes", tmp, put, size);
    else if (rename(tmp, path) != 0)
      st = TSR_ERR(IO, "xclbin: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st) unlink(tmp);
  }
  free(tmp);
  free(data);
  return st;
}
