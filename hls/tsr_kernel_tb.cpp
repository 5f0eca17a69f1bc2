/*
 * tsr_kernel_tb.cpp - C simulation of the HLS kernel against the golden
 * model (driver/kernel_model.h, tsr_km_execute).
 *
 *   tsr_kernel_csim hls/tsr_kernel_hls.cpp
 *
 * 1. Interface: reads the top function's signature and INTERFACE pragmas
 *    from the source, lays the s_axilite registers out by the Vitis kernel
 *    flow's rule (from 0x10, each scalar takes its 32-bit words plus one
 *    reserved word; an m_axi port with offset=off takes none) and checks
 *    the input arguments against hw/regmap.def's TSR_ARG rows: same names,
 *    order, widths and offsets.
 * 2. Behaviour: every case runs the model and the kernel on copies of one
 *    random memory image; STATUS, ERR_INDEX, DESC_DONE, BYTES_WR, MACS and
 *    the whole memory afterwards must be identical, and the memory must be
 *    what the descriptors that ran give when computed by a naive loop
 *    written here (the model shares the library's kernels, so it is no
 *    independent reference for the arithmetic).
 * Prints one line per check and PASSED or FAILED at the end (exit 0 / 1).
 */
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tsr_kernel_hls.h"

extern "C" {
#include "driver/kernel_model.h"
}

static const uint64_t PHYS = TSR_HLS_PHYS_BYTES;
static int g_fail = 0, g_pass = 0;
static uint64_t g_rng = 0x7e55e7a;

static uint64_t rnd64() {
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint32_t rnd(uint32_t n) { return (uint32_t)(rnd64() % n); }

static void check(bool ok, const std::string &what) {
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    std::printf("FAIL  %s\n", what.c_str());
  }
}

/* ---- 1. interface against regmap.def ------------------------------------ */

struct arg_row {
  const char *name;
  unsigned off, bits;
};

static const arg_row regmap_args[] = {
#define TSR_REG(name, off, acc, desc)
#define TSR_ARG(name, off, bits, kind, desc) {#name, off, bits},
#define TSR_STAT(name, off, bits, desc)
#define TSR_DESC(name, off, bits, desc)
#define TSR_CONST(name, val, desc)
#define TSR_OP(name, val, desc)
#define TSR_HWERR(name, val, desc)
#include "../hw/regmap.def"
#undef TSR_REG
#undef TSR_ARG
#undef TSR_STAT
#undef TSR_DESC
#undef TSR_CONST
#undef TSR_OP
#undef TSR_HWERR
};

static std::string trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t\n"), b = s.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

static std::string upper(std::string s) {
  for (auto &ch : s) ch = (char)std::toupper((unsigned char)ch);
  return s;
}

/* Value of `key = value` in a pragma line ("" if absent). */
static std::string pragma_value(const std::string &line, const std::string &key) {
  size_t p = line.find(key);
  while (p != std::string::npos) {
    size_t q = p + key.size();
    while (q < line.size() && line[q] == ' ') q++;
    if (q < line.size() && line[q] == '=' && (p == 0 || line[p - 1] == ' ')) {
      q++;
      while (q < line.size() && line[q] == ' ') q++;
      size_t e = q;
      while (e < line.size() && line[e] != ' ') e++;
      return line.substr(q, e - q);
    }
    p = line.find(key, p + 1);
  }
  return "";
}

static void check_interface(const char *path) {
  std::ifstream f(path);
  check((bool)f, std::string("read ") + path);
  if (!f) return;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string src = ss.str();
  const std::string sig = "extern \"C\" void tsr_kernel(";
  size_t at = src.rfind(sig); /* the definition comes last */
  check(at != std::string::npos, "top function tsr_kernel found");
  if (at == std::string::npos) return;
  size_t end = src.find(')', at);
  std::string params = src.substr(at + sig.size(), end - at - sig.size());

  struct param {
    std::string name, type;
    bool by_value;
  };
  std::vector<param> ps;
  std::stringstream pl(params);
  std::string item;
  while (std::getline(pl, item, ',')) {
    item = trim(item);
    size_t sp = item.find_last_of(" &*");
    param p;
    p.name = item.substr(sp + 1);
    p.type = trim(item.substr(0, sp + 1));
    p.by_value = p.type.find('&') == std::string::npos && p.type.find('*') == std::string::npos;
    ps.push_back(p);
  }
  /* INTERFACE pragmas by port. */
  std::vector<std::string> lines;
  std::stringstream sl(src);
  std::string ln;
  while (std::getline(sl, ln))
    if (ln.find("#pragma HLS INTERFACE") != std::string::npos) lines.push_back(ln);
  auto mode_of = [&](const std::string &port, std::string *offset) {
    std::string mode;
    for (const auto &l : lines)
      if (pragma_value(l, "port") == port) {
        std::string m = pragma_value(l, "mode");
        if (m == "m_axi") {
          mode = m;
          if (offset) *offset = pragma_value(l, "offset");
        } else if (mode.empty()) {
          mode = m;
        }
      }
    return mode;
  };
  unsigned cur = 0x10, n_in = 0;
  const unsigned n_rows = sizeof regmap_args / sizeof regmap_args[0];
  for (const auto &p : ps) {
    std::string offset;
    std::string mode = mode_of(p.name, &offset);
    if (mode == "m_axi") {
      check(offset == "off", "m_axi port " + p.name + " addresses device addresses (offset=off)");
      std::printf("port  %-10s m_axi, no register\n", p.name.c_str());
      continue;
    }
    check(mode == "s_axilite", "argument " + p.name + " is in s_axilite");
    unsigned bits = p.type.find("64") != std::string::npos ? 64 : 32;
    unsigned off = cur;
    cur += 4 * (bits / 32 + 1);
    std::printf("reg   %-10s 0x%02X %2u bits %s\n", p.name.c_str(), off, bits,
                p.by_value ? "in" : "out (data; ap_vld follows)");
    if (!p.by_value) continue;
    if (n_in < n_rows) {
      const arg_row &r = regmap_args[n_in];
      char msg[200];
      std::snprintf(msg, sizeof msg, "argument %u: HLS %s at 0x%02X/%u bits vs regmap.def %s at "
                    "0x%02X/%u bits", n_in, p.name.c_str(), off, bits, r.name, r.off, r.bits);
      check(upper(p.name) == r.name && off == r.off && bits == r.bits, msg);
    }
    n_in++;
  }
  check(n_in == n_rows, "as many input arguments as regmap.def has TSR_ARG rows");
  check(mode_of("return", nullptr) == "s_axilite", "ap_ctrl block in s_axilite (return port)");
  std::printf("ok    interface: %u arguments match hw/regmap.def\n", n_in);
}

/* ---- 2. behaviour against the model ------------------------------------- */

static std::vector<uint8_t> g_img(PHYS);

static void fill_random(uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++) g_img[i] = (uint8_t)(rnd64() >> 56);
}

static void put(uint64_t at, const tsr_desc_t &d) { tsr_desc_pack(&g_img[at], &d); }

static tsr_desc_t get(uint64_t at) {
  tsr_desc_t d;
  tsr_desc_unpack(&d, &g_img[at]);
  return d;
}

/* A GEMM laid out at the bump pointer *off with padded strides. */
static tsr_desc_t gemm_at(uint64_t *off, uint32_t m, uint32_t n, uint32_t k, uint32_t pa,
                          uint32_t pw, uint32_t pc) {
  tsr_desc_t d = {};
  d.opcode = TSR_OP_GEMM_I8_I32;
  d.m = m, d.n = n, d.k = k, d.lda = k + pa, d.ldw = k + pw, d.ldc = 4 * (n + pc);
  uint64_t o = *off + rnd(5);
  d.a_addr = o;
  o += (uint64_t)(m - 1) * d.lda + k;
  d.w_addr = o;
  o += (uint64_t)(n - 1) * d.ldw + k;
  o = (o + 3) & ~3ull;
  d.c_addr = o;
  o += (uint64_t)(m - 1) * d.ldc + 4ull * n;
  *off = (o + 63) & ~63ull;
  return d;
}

/* A GEMM_BSR laid out at *off by this testbench (hw/README.md "Block-sparse
 * weights"): round(density * tiles) tiles of random bytes kept at random,
 * the bitmaps `pb` bytes longer than needed, tiles from the next 64-byte
 * boundary. */
static tsr_desc_t bsr_at(uint64_t *off, uint32_t m, uint32_t n, uint32_t k, uint32_t BK,
                         double density, uint32_t pa, uint32_t pb, uint32_t pc) {
  const uint32_t BN = 16;
  const uint32_t ntr = (n + BN - 1) / BN, nkt = (k + BK - 1) / BK, rb = (nkt + 7) / 8;
  tsr_desc_t d = {};
  d.opcode = TSR_OP_GEMM_BSR_I8_I32;
  d.m = m, d.n = n, d.k = k, d.lda = k + pa, d.ldw = rb + pb, d.ldc = 4 * (n + pc);
  d.w_nch = BN << 16 | BK;
  uint64_t o = *off + rnd(5);
  d.a_addr = o;
  o += (uint64_t)(m - 1) * d.lda + k;
  d.w_addr = o;
  uint64_t total = (uint64_t)ntr * nkt, keep = (uint64_t)(density * (double)total + 0.5);
  std::vector<uint8_t> sel(total, 0);
  for (uint64_t i = 0; i < keep; i++) sel[i] = 1;
  for (uint64_t i = total; i > 1; i--) std::swap(sel[i - 1], sel[rnd64() % i]);
  for (uint32_t r = 0; r < ntr; r++) {
    std::memset(&g_img[o + (uint64_t)r * d.ldw], 0, rb);
    for (uint32_t t = 0; t < nkt; t++)
      if (sel[(uint64_t)r * nkt + t]) g_img[o + (uint64_t)r * d.ldw + t / 8] |= (uint8_t)(1u << (t % 8));
  }
  o += (uint64_t)ntr * d.ldw;
  o = (o + 63) & ~63ull;
  d.w_cstride = (uint32_t)keep;
  o += keep * BN * BK; /* the tiles: random bytes already there */
  o = (o + 3) & ~3ull;
  d.c_addr = o;
  o += (uint64_t)(m - 1) * d.ldc + 4ull * n;
  *off = (o + 63) & ~63ull;
  return d;
}

/* W of a GEMM_BSR as a dense n x k matrix, read from mem by this testbench. */
static std::vector<int8_t> bsr_dense(const std::vector<uint8_t> &mem, const tsr_desc_t &d) {
  const uint32_t BN = 16, BK = d.w_nch & 0xFFFFu;
  const uint32_t ntr = (d.n + BN - 1) / BN, nkt = (d.k + BK - 1) / BK;
  std::vector<int8_t> w((size_t)d.n * d.k, 0);
  uint64_t tiles = (d.w_addr + (uint64_t)ntr * d.ldw + 63) & ~63ull, idx = 0;
  for (uint32_t r = 0; r < ntr; r++)
    for (uint32_t t = 0; t < nkt; t++) {
      if (!((mem[d.w_addr + (uint64_t)r * d.ldw + t / 8] >> (t % 8)) & 1)) continue;
      for (uint32_t j = 0; j < BN && r * BN + j < d.n; j++)
        for (uint32_t x = 0; x < BK && t * BK + x < d.k; x++)
          w[(size_t)(r * BN + j) * d.k + t * BK + x] =
              (int8_t)mem[tiles + idx * BN * BK + (uint64_t)j * BK + x];
      idx++;
    }
  return w;
}

static tsr_hal_command_t cmd_of(uint64_t wb, uint64_t ws, uint64_t ring, uint32_t n) {
  tsr_hal_command_t c = {};
  c.window_base = wb, c.window_size = ws, c.ring = ring, c.n_desc = n;
  return c;
}

/* The naive expectation: the first `done` descriptors of the ring run in
 * order on a copy of g_img, each read from memory as the previous ones left
 * it, C[i][j] = sum_t A[i][t] * W[j][t] in 64 bits, stored as int32 little
 * endian. Returns the bytes of `got` that differ (plus descriptors it cannot
 * follow: outside the memory). */
static size_t naive_diff(const tsr_hal_command_t &cmd, uint32_t done,
                         const std::vector<uint8_t> &got) {
  std::vector<uint8_t> mem = g_img;
  size_t bad = 0;
  for (uint32_t i = 0; i < done; i++) {
    uint64_t at = cmd.ring + 64ull * i;
    if (at + TSR_HW_DESC_BYTES > PHYS) return bad + 1;
    tsr_desc_t d;
    tsr_desc_unpack(&d, &mem[at]);
    if (d.opcode != TSR_OP_GEMM_I8_I32 && d.opcode != TSR_OP_GEMM_BSR_I8_I32) continue;
    bool bsr = d.opcode == TSR_OP_GEMM_BSR_I8_I32;
    if (d.a_addr + (uint64_t)(d.m - 1) * d.lda + d.k > PHYS ||
        (!bsr && d.w_addr + (uint64_t)(d.n - 1) * d.ldw + d.k > PHYS) ||
        d.c_addr + (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n > PHYS)
      return bad + 1;
    std::vector<int8_t> wd;
    if (bsr) wd = bsr_dense(mem, d);
    std::vector<int32_t> c((size_t)d.m * d.n);
    for (uint32_t r = 0; r < d.m; r++)
      for (uint32_t j = 0; j < d.n; j++) {
        int64_t acc = 0;
        for (uint32_t t = 0; t < d.k; t++)
          acc += (int64_t)(int8_t)mem[d.a_addr + (uint64_t)r * d.lda + t] *
                 (bsr ? wd[(size_t)j * d.k + t] : (int8_t)mem[d.w_addr + (uint64_t)j * d.ldw + t]);
        c[(size_t)r * d.n + j] = (int32_t)acc;
      }
    for (uint32_t r = 0; r < d.m; r++)
      for (uint32_t j = 0; j < d.n; j++) {
        uint32_t v = (uint32_t)c[(size_t)r * d.n + j];
        uint8_t *o = &mem[d.c_addr + (uint64_t)r * d.ldc + 4ull * j];
        o[0] = (uint8_t)v, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)(v >> 16);
        o[3] = (uint8_t)(v >> 24);
      }
  }
  for (size_t i = 0; i < PHYS; i++) bad += mem[i] != got[i];
  return bad;
}

/* Runs the model and the kernel on copies of g_img. */
static void run_case(const std::string &name, const tsr_hal_command_t &cmd,
                     int want_status = -1) {
  std::vector<uint8_t> ref = g_img, dut = g_img;
  tsr_km_timing_t t;
  tsr_km_timing_init(&t);
  tsr_km_memory_t km = {ref.data(), 0, PHYS};
  tsr_hal_result_t r;
  tsr_km_execute(&t, &km, &cmd, nullptr, &r);
  uint32_t st = 0, ei = 0, dd = 0;
  uint64_t rd = 0, wr = 0, mac = 0;
  tsr_kernel(cmd.window_base, cmd.window_size, cmd.ring, cmd.n_desc, dut.data(), st, ei, dd, rd,
             wr, mac);
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < PHYS; i++)
    if (ref[i] != dut[i] && diff++ == 0) first = i;
  size_t naive = naive_diff(cmd, dd, dut);
  bool ok = st == r.hw_status && ei == r.err_index && dd == r.desc_done && wr == r.bytes_wr &&
            mac == r.macs && diff == 0 && naive == 0 &&
            (want_status < 0 || (uint32_t)want_status == st);
  char msg[512];
  std::snprintf(msg, sizeof msg,
                "%-34s status %u/%u err_index %u/%u desc_done %u/%u bytes_wr %llu/%llu macs "
                "%llu/%llu memory diff %zu (first at 0x%zx), vs naive %zu [hls/model]",
                name.c_str(), st, r.hw_status, ei, r.err_index, dd, r.desc_done,
                (unsigned long long)wr, (unsigned long long)r.bytes_wr, (unsigned long long)mac,
                (unsigned long long)r.macs, diff, first, naive);
  check(ok, msg);
  if (ok)
    std::printf("ok    %-34s status %u (%s), %u done, %llu MACs\n", name.c_str(), st,
                tsr_hal_hwerr_name(st), dd, (unsigned long long)mac);
}

static void cases() {
  const uint64_t WIN = 2u << 20; /* window [0, 2 MiB) for most cases */
  fill_random(0, PHYS);
  /* Random shapes, one descriptor each. */
  for (int i = 0; i < 10; i++) {
    uint64_t off = 4096;
    uint32_t lim = i < 5 ? 40 : 200;
    tsr_desc_t d = gemm_at(&off, 1 + rnd(lim), 1 + rnd(lim), 1 + rnd(3 * lim), rnd(2) * rnd(30),
                           rnd(2) * rnd(30), rnd(2) * rnd(3));
    put(0, d);
    char nm[64];
    std::snprintf(nm, sizeof nm, "random %ux%ux%u", d.m, d.n, d.k);
    run_case(nm, cmd_of(0, WIN, 0, 1), 0);
  }
  /* Odd shapes in one ring: edges of the 16x16 array and of the k chunk. */
  static const uint32_t shapes[][3] = {{1, 1, 1},   {1, 1, 255}, {1, 1, 256}, {1, 1, 257},
                                       {16, 16, 16}, {17, 15, 33}, {33, 1, 513}, {1, 40, 700},
                                       {31, 17, 4099}};
  uint32_t ns = sizeof shapes / sizeof shapes[0];
  uint64_t off = 4096;
  for (uint32_t i = 0; i < ns; i++)
    put(64 * i, gemm_at(&off, shapes[i][0], shapes[i][1], shapes[i][2], i % 3, i % 2, i % 2));
  run_case("odd shapes, one ring", cmd_of(0, WIN, 0, ns), 0);
  /* Long K with the extreme values (the largest exact sums). */
  off = 4096;
  tsr_desc_t lk = gemm_at(&off, 2, 3, TSR_HW_MAX_DIM, 0, 0, 0);
  std::memset(&g_img[lk.a_addr], 0x80, 2 * TSR_HW_MAX_DIM);
  std::memset(&g_img[lk.w_addr], 0x80, 3 * TSR_HW_MAX_DIM);
  put(0, lk);
  run_case("K = 65535, all -128", cmd_of(0, WIN, 0, 1), 0);
  fill_random(0, PHYS);
  /* Many descriptors with NOPs, an overwrite and a read-after-write. */
  off = 8192;
  for (uint32_t i = 0; i < 30; i++) {
    tsr_desc_t d = {};
    d.opcode = TSR_OP_NOP;
    if (i % 6 != 2) d = gemm_at(&off, 1 + rnd(20), 1 + rnd(20), 1 + rnd(60), rnd(3), 0, 0);
    put(64 * i, d);
  }
  tsr_desc_t d29 = get(64 * 29);
  tsr_desc_t d30 = gemm_at(&off, d29.m, d29.n, 7, 0, 0, 0);
  d30.c_addr = d29.c_addr, d30.ldc = d29.ldc;
  put(64 * 30, d30);
  tsr_desc_t d31 = gemm_at(&off, 2, 2, 4 * d29.n, 0, 0, 0);
  d31.a_addr = d29.c_addr, d31.lda = d29.ldc;
  put(64 * 31, d31);
  run_case("ring of 32, NOPs, overwrite, RAW", cmd_of(0, WIN, 0, 32), 0);
  run_case("N_DESC = 0", cmd_of(0, WIN, 0, 0), 0);

  /* Refusals at descriptor 2 of 4, each check and the check order. */
  struct mut {
    const char *name;
    uint32_t want;
    void (*f)(tsr_desc_t &);
  };
  static const mut muts[] = {
      {"bad opcode", TSR_HWERR_BAD_OPCODE, [](tsr_desc_t &d) { d.opcode = 5; }},
      {"flags set", TSR_HWERR_BAD_OPCODE, [](tsr_desc_t &d) { d.flags = 1; }},
      {"W_NCH 2 on one port", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.w_nch = 2; }},
      {"W_CSTRIDE with one channel", TSR_HWERR_BAD_STRIDE,
       [](tsr_desc_t &d) { d.w_nch = 1, d.w_cstride = 64; }},
      {"NOP with flags", TSR_HWERR_BAD_OPCODE,
       [](tsr_desc_t &d) { d.opcode = TSR_OP_NOP, d.flags = 4; }},
      {"M = 0", TSR_HWERR_BAD_DIMS, [](tsr_desc_t &d) { d.m = 0; }},
      {"K > MAX_DIM", TSR_HWERR_BAD_DIMS, [](tsr_desc_t &d) { d.k = TSR_HW_MAX_DIM + 1; }},
      {"LDA < K", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.lda = d.k - 1; }},
      {"LDW < K", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.ldw = d.k - 1; }},
      {"LDC < 4N", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.ldc = 4 * d.n - 4; }},
      {"LDC % 4", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.ldc += 1; }},
      {"C_ADDR % 4", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.c_addr += 2; }},
      {"A outside window", TSR_HWERR_ADDR_RANGE, [](tsr_desc_t &d) { d.a_addr = (2u << 20) - 3; }},
      {"W wraps", TSR_HWERR_ADDR_RANGE, [](tsr_desc_t &d) { d.w_addr = UINT64_MAX - 1; }},
      {"C outside window", TSR_HWERR_ADDR_RANGE, [](tsr_desc_t &d) { d.c_addr = 2u << 20; }},
      {"opcode before dims", TSR_HWERR_BAD_OPCODE, [](tsr_desc_t &d) { d.opcode = 3, d.n = 0; }},
      {"dims before stride", TSR_HWERR_BAD_DIMS, [](tsr_desc_t &d) { d.k = 0, d.ldc = 1; }},
      {"stride before range", TSR_HWERR_BAD_STRIDE,
       [](tsr_desc_t &d) { d.lda = 0, d.a_addr = UINT64_MAX; }},
  };
  for (const auto &mu : muts) {
    fill_random(0, WIN);
    off = 4096;
    for (uint32_t j = 0; j < 4; j++) {
      tsr_desc_t d = gemm_at(&off, 3 + j, 5, 20 + j, 0, 0, 0);
      if (j == 2) mu.f(d);
      put(64 * j, d);
    }
    run_case(std::string("refuse: ") + mu.name, cmd_of(0, WIN, 0, 4), (int)mu.want);
  }
  /* GEMM_BSR: odd shapes at densities 0, 0.25, 0.5, 1, one ring each. */
  static const uint32_t bshapes[][3] = {{1, 1, 1},   {3, 17, 130}, {17, 33, 257}, {5, 40, 1000},
                                        {33, 16, 128}, {1, 70, 700}, {20, 47, 4100}, {2, 5, 9000}};
  static const double dens[] = {0, 0.25, 0.5, 1};
  for (uint32_t bk : {64u, 128u})
    for (double de : dens) {
      fill_random(0, WIN);
      off = 4096;
      uint32_t nb = sizeof bshapes / sizeof bshapes[0];
      for (uint32_t i = 0; i < nb; i++)
        put(64 * i, bsr_at(&off, bshapes[i][0], bshapes[i][1], bshapes[i][2], bk, de, i % 3,
                           i % 2, i % 4 == 1));
      char nm[64];
      std::snprintf(nm, sizeof nm, "GEMM_BSR BK %u odd shapes, density %.2f", bk, de);
      run_case(nm, cmd_of(0, WIN, 0, nb), 0);
    }
  /* GEMM_BSR refusals at descriptor 1 of 2, each check and their order. */
  static const mut bmuts[] = {
      {"BSR: BN 32", TSR_HWERR_BAD_BLOCK, [](tsr_desc_t &d) { d.w_nch = 32u << 16 | 64u; }},
      {"BSR: BK 32", TSR_HWERR_BAD_BLOCK, [](tsr_desc_t &d) { d.w_nch = 16u << 16 | 32u; }},
      {"BSR: BK 256", TSR_HWERR_BAD_BLOCK, [](tsr_desc_t &d) { d.w_nch = 16u << 16 | 256u; }},
      {"BSR: bitmap stride short", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.ldw = 0; }},
      {"BSR: LDC < 4N", TSR_HWERR_BAD_STRIDE, [](tsr_desc_t &d) { d.ldc = 4 * d.n - 4; }},
      {"BSR: bitmaps outside window", TSR_HWERR_ADDR_RANGE,
       [](tsr_desc_t &d) { d.w_addr = (2u << 20) - 1; }},
      {"BSR: bitmaps wrap", TSR_HWERR_ADDR_RANGE, [](tsr_desc_t &d) { d.w_addr = UINT64_MAX - 1; }},
      {"BSR: tiles outside window", TSR_HWERR_ADDR_RANGE,
       [](tsr_desc_t &d) { d.w_cstride = (2u << 20) / 1024; }},
      {"BSR: count one high", TSR_HWERR_BAD_COUNT, [](tsr_desc_t &d) { d.w_cstride++; }},
      {"BSR: count one low", TSR_HWERR_BAD_COUNT, [](tsr_desc_t &d) { d.w_cstride--; }},
      {"BSR: dims before block", TSR_HWERR_BAD_DIMS, [](tsr_desc_t &d) { d.m = 0, d.w_nch = 0; }},
      {"BSR: block before stride", TSR_HWERR_BAD_BLOCK,
       [](tsr_desc_t &d) { d.w_nch = 0, d.lda = 0; }},
      {"BSR: range before count", TSR_HWERR_ADDR_RANGE,
       [](tsr_desc_t &d) { d.c_addr = 2u << 20, d.w_cstride++; }},
  };
  for (uint32_t bk : {64u, 128u})
    for (const auto &mu : bmuts) {
      fill_random(0, WIN);
      off = 4096;
      put(0, bsr_at(&off, 7, 40, 300, bk, 0.5, 1, 2, 0));
      tsr_desc_t d = bsr_at(&off, 5, 33, 300, bk, 0.5, 0, 0, 1);
      mu.f(d);
      put(64, d);
      run_case(std::string("refuse: ") + mu.name + (bk == 64 ? " (BK 64)" : " (BK 128)"),
               cmd_of(0, WIN, 0, 2), (int)mu.want);
    }
  {
    fill_random(0, WIN);
    off = 4096;
    tsr_desc_t d = bsr_at(&off, 5, 33, 300, 64, 0.5, 0, 0, 1);
    g_img[d.w_addr] |= 1u << 5; /* k tile 5 of 5 (64 bytes each): past K */
    d.w_cstride++;
    put(0, d);
    run_case("refuse: BSR: a bit past K", cmd_of(0, WIN, 0, 1), TSR_HWERR_BAD_COUNT);
    tsr_desc_t far = bsr_at(&off, 5, 33, 300, 128, 0.5, 0, 0, 1);
    far.w_addr = PHYS - 1;
    put(0, far);
    run_case("BSR: bitmaps beyond memory", cmd_of(0, 1ull << 40, 0, 1), TSR_HWERR_AXI_ERROR);
  }
  /* The ring itself. */
  off = 4096;
  put(0, gemm_at(&off, 4, 4, 4, 0, 0, 0));
  put(64, get(0));
  run_case("ring misaligned", cmd_of(0, WIN, 32, 2), TSR_HWERR_RING_RANGE);
  run_case("ring below the window", cmd_of(64, WIN - 64, 0, 2), TSR_HWERR_RING_RANGE);
  run_case("ring longer than the window", cmd_of(0, WIN, 0, WIN / 64 + 1), TSR_HWERR_RING_RANGE);
  run_case("N_DESC = 2^32-1", cmd_of(0, WIN, 0, 0xFFFFFFFFu), TSR_HWERR_RING_RANGE);
  /* A window beyond the memory: the memory answers DECERR. */
  tsr_desc_t far = get(0);
  far.w_addr = PHYS - 2;
  put(64, far);
  run_case("W straddles the end of memory", cmd_of(0, 1ull << 40, 0, 2), TSR_HWERR_AXI_ERROR);
  far = get(0);
  far.c_addr = PHYS + 64;
  put(64, far);
  run_case("C beyond memory", cmd_of(0, 1ull << 40, 0, 2), TSR_HWERR_AXI_ERROR);
  fill_random(PHYS - 4096, PHYS);
  for (int j = 3; j >= 1; j--) {
    tsr_desc_t nop = {};
    nop.opcode = TSR_OP_NOP;
    put(PHYS - 64ull * j, nop);
  }
  run_case("ring runs off the end of memory", cmd_of(0, 1ull << 40, PHYS - 192, 5),
           TSR_HWERR_AXI_ERROR);
}

int main(int argc, char **argv) {
  std::printf("tessera HLS kernel, C simulation (%dx%d array, k chunk %d, %llu bytes of "
              "memory)\n", TSR_HLS_ROWS, TSR_HLS_COLS, TSR_HLS_KC, (unsigned long long)PHYS);
  check_interface(argc > 1 ? argv[1] : "hls/tsr_kernel_hls.cpp");
  cases();
  std::printf("%d checks passed, %d failed\n", g_pass, g_fail);
  std::printf("%s\n", g_fail ? "FAILED" : "PASSED");
  return g_fail ? 1 : 0;
}
