/*
 * test_kernel_fuzz.c - the kernel fuzzed differentially: the RTL (Verilated,
 * through the tsr_sim.h C ABI) and the functional model (tsr_km_execute)
 * run the same random launches, and on every input:
 *   (a) neither touches memory outside the MEM_BASE/MEM_SIZE window: the
 *       simulator's memory model watches the window (tsr_sim_watch: a read
 *       burst past the window rounded out to bus words, or a strobed write
 *       byte outside it, is counted), and the simulator's memory outside
 *       the window must come back unchanged; the functional model runs on
 *       a host mapping where everything outside the window is PROT_NONE
 *       (the window lands exactly on a page edge, its end or its start in
 *       turn, and the few bytes left between it and a protected page are a
 *       guard pattern that must come back unchanged), so a stray read or
 *       write faults and is reported;
 *   (b) ap_done comes within a bound derived from the work (a multiple of
 *       the functional model's cycles at a pessimistic bandwidth, plus a
 *       constant): no hang;
 *   (c) both give the same STATUS, ERR_INDEX, DESC_DONE, BYTES_RD, BYTES_WR
 *       and MACS and the same window contents byte for byte; after an
 *       AXI_ERROR from an operand outside the memory (kernel_model.h step 5,
 *       documented there as an approximation) the counters and the C extent
 *       of the failing descriptor, which the RTL writes from whatever data
 *       the memory returned with its error, are left out. C over its own
 *       descriptor's A or W is never generated valid: the spec leaves the
 *       order of reads and writes inside one descriptor open.
 * The register file is fuzzed on the way: writes to interrupt registers,
 * offsets that name nothing, read-only status registers, offsets beyond the
 * 0x80 window or misaligned (which must answer SLVERR) and junk argument
 * words, in random order with the arguments, then read back against
 * hw/README.md (arguments hold what was written, other offsets read 0).
 *
 * Inputs (descriptor rings, windows, memory) come from a seeded generator:
 * valid rings (random shapes, strides, alignments, operands flush with the
 * window's edges), nearly valid ones (one field just past a limit: M/N/K 0
 * or MAX_DIM+1, LDx one short, C or LDC misaligned, extents one byte past
 * the window or wrapping 2^64, reserved bits, bad opcodes), ring faults
 * (misaligned, one descriptor past the end, below the window, N_DESC 0 or
 * huge, wrapping 2^64), results written over the ring itself, random
 * descriptor bytes, and odd windows (empty, unaligned, past the memory,
 * below it, at the top of the address space). Three simulator instances
 * with different memory models (latency, bandwidth, outstanding bursts)
 * take the inputs in turn.
 *
 * TSR_KFUZZ_N (default 1200) inputs from TSR_KFUZZ_SEED (default 1),
 * starting at index TSR_KFUZZ_FIRST (default 0): an input depends only on
 * (seed, index), so a reproducer's line replays it alone. Every
 * disagreement prints the seed, the index and a dump of the window, the
 * ring, the descriptors, the register writes and both results, and fails.
 * A fixed set of regression inputs (found by this fuzzer) runs first.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
/* A faulting run is left with siglongjmp in the middle of the model: what
 * it had allocated (the GEMM's packing scratch) is abandoned by the test,
 * not leaked by the library. */
#define LSAN_OFF() __lsan_disable()
#define LSAN_ON() __lsan_enable()
#else
#define LSAN_OFF() ((void)0)
#define LSAN_ON() ((void)0)
#endif

#include "driver/kernel_model.h"
#include "driver/tsr_regmap.h"
#include "sim/tsr_sim.h"
#include "tsr_test.h"

/* ---- the RTL library, loaded with dlopen ---------------------------------- */

static tsr_sim_api_t api;
static char g_lib_err[512];

static int load_rtl(void) {
  const char *env = getenv("TSR_RTL_LIB");
  const char *path = env && *env ? env : tsr_test_build_path("lib/libtessera_rtl.so");
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(g_lib_err, sizeof g_lib_err, "the RTL library does not load (%s); build it with "
             "`make rtl` or set TSR_RTL_LIB", dlerror());
    return -1;
  }
  const char *missing = tsr_sim_api_resolve(h, dlsym, &api);
  if (!missing && !api.watch) missing = "tsr_sim_watch";
  if (!missing && !api.stray) missing = "tsr_sim_stray";
  if (!missing && !api.last_error) missing = "tsr_sim_last_error";
  if (missing) {
    snprintf(g_lib_err, sizeof g_lib_err, "%s lacks %s (stale build? run `make rtl`)", path,
             missing);
    return -1;
  }
  if (api.abi_version() != TSR_SIM_ABI_VERSION) {
    snprintf(g_lib_err, sizeof g_lib_err, "%s has ABI %d, want %d", path, api.abi_version(),
             TSR_SIM_ABI_VERSION);
    return -1;
  }
  return 0;
}

/* ---- the device: physical memory and simulator instances ------------------ */

#define PHYS_BASE ((uint64_t)0x4000000000) /* the simulator's default memory base */
#define PHYS_SIZE ((uint64_t)1 << 20)
#define PHYS_END (PHYS_BASE + PHYS_SIZE)
#define PAGE ((uint64_t)4096)
#define N_INST 3
#define MAX_SLOTS 12
#define MAX_NOISE 24

/* Memory models of the instances: the board profile, a fast memory that
 * takes one burst at a time, and a slow narrow one (back-pressure). */
static const struct { uint32_t latency, bytes_per_cycle, outstanding; } inst_mem[N_INST] = {
    {40, 64, 16}, {1, 64, 1}, {97, 16, 4}};

static tsr_sim_t *g_sim[N_INST];
static uint32_t g_rows, g_cols;
static uint32_t g_ops; /* HW_OPS of the library: the opcodes the model runs too */
static uint8_t *g_imgs[N_INST]; /* what each simulator's memory should hold (PHYS_SIZE) */
static uint8_t *g_img;          /* that of the instance in use */
static uint8_t *g_after; /* a simulator's memory after a launch */
static uint8_t *g_fm;    /* the functional model's mapping: PHYS_SIZE + 3 pages */
static size_t g_fm_len;

static int sim_open(int i) {
  tsr_sim_config_t cfg;
  api.config_init(&cfg);
  cfg.mem_base = PHYS_BASE;
  cfg.mem_size = PHYS_SIZE;
  cfg.mem_latency = inst_mem[i].latency;
  cfg.mem_bytes_per_cycle = inst_mem[i].bytes_per_cycle;
  cfg.mem_max_outstanding = inst_mem[i].outstanding;
  char err[256] = "";
  if (api.create(&cfg, &g_sim[i], err, sizeof err) != 0) {
    fprintf(stderr, "tsr_sim_create: %s\n", err);
    return -1;
  }
  api.geometry(g_sim[i], &g_rows, &g_cols);
  if (api.reg_read(g_sim[i], TSR_STAT_HW_OPS, &g_ops) != 0) return -1;
  return api.mem_write(g_sim[i], PHYS_BASE, g_imgs[i], PHYS_SIZE) == 0 ? 0 : -1;
}

/* A simulator that stopped (assertion, protocol fault, hang) is replaced. */
static int sim_renew(int i) {
  api.destroy(g_sim[i]);
  g_sim[i] = NULL;
  return sim_open(i);
}

/* ---- random numbers -------------------------------------------------------- */

static uint64_t g_rs;
static uint64_t rnd(void) { return tsr_test_splitmix64(&g_rs); }
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); } /* [lo,hi] */
static bool chance(unsigned pct) { return below(100) < pct; }
/* Log-uniform in [lo, hi]: small values as often as large ones. */
static uint64_t logu(uint64_t lo, uint64_t hi) {
  unsigned bits = 64 - (unsigned)__builtin_clzll(hi);
  for (;;) {
    uint64_t v = rnd() >> (64 - range(1, bits));
    if (v >= lo && v <= hi) return v;
  }
}

/* ---- one input -------------------------------------------------------------- */

typedef struct noise {
  uint32_t off, val;
} noise_t;

typedef struct input {
  char cls[96];     /* classes of the generator that made it */
  int inst;         /* simulator instance */
  uint64_t wb, ws;  /* MEM_BASE, MEM_SIZE */
  uint64_t ring;    /* RING */
  uint32_t n_desc;  /* N_DESC */
  int n_slots;      /* descriptors written at ring, ring + 64, ... */
  uint8_t slot[MAX_SLOTS][TSR_HW_DESC_BYTES];
  uint64_t fill_seed;
  int fill_kind;    /* 0 random bytes, 1 all -128, 2 small values */
  int n_noise;      /* register writes before and among the arguments */
  noise_t noise[MAX_NOISE];
  int exact_end;    /* the model's mapping: window end (1) or start (0) on a page edge */
  uint32_t q_ctrl;  /* Q_CTRL written after the noise: 0, or queue mode with close */
  uint32_t q_tail;  /* Q_TAIL then (queue mode: descriptors published) */
} input_t;

typedef struct outcome {
  tsr_hal_result_t r;
} outcome_t;

/* ---- intervals -------------------------------------------------------------- */

/* [lo, hi) in 65-bit arithmetic (hi may be 2^64). */
typedef struct span {
  unsigned __int128 lo, hi;
} span_t;

static span_t span_of(uint64_t addr, unsigned __int128 len) {
  span_t s = {addr, (unsigned __int128)addr + len};
  return s;
}
static span_t span_and(span_t a, span_t b) {
  span_t s = {a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
  if (s.hi < s.lo) s.hi = s.lo;
  return s;
}
static bool span_overlap(span_t a, span_t b) { return a.lo < b.hi && b.lo < a.hi; }
static span_t phys_span(void) { return span_of(PHYS_BASE, PHYS_SIZE); }
static span_t win_span(const input_t *in) { return span_of(in->wb, in->ws); }

/* Extents as the kernel checks them (kernel_model.h, step 4). */
static unsigned __int128 ext_a(const tsr_desc_t *d) {
  return (unsigned __int128)(d->m - 1) * d->lda + d->k;
}
static unsigned __int128 ext_w(const tsr_desc_t *d) {
  return (unsigned __int128)(d->n - 1) * d->ldw + d->k;
}
static unsigned __int128 ext_c(const tsr_desc_t *d) {
  return (unsigned __int128)(d->m - 1) * d->ldc + 4ull * d->n;
}

/* ---- the generator ------------------------------------------------------------ */

static tsr_km_timing_t timing_of(int inst) {
  tsr_km_timing_t t;
  tsr_km_timing_init(&t);
  t.rows = g_rows;
  t.cols = g_cols;
  t.mem_latency = inst_mem[inst].latency;
  t.mem_bytes_per_cycle = inst_mem[inst].bytes_per_cycle;
  /* the opcodes of the RTL as built (a build without GEMM_BSR refuses it) */
  t.ops = g_ops ? g_ops : (1u << TSR_OP_NOP) | (1u << TSR_OP_GEMM_I8_I32);
  return t;
}

/* Work cap of one GEMM in modeled cycles, so that a run stays short. */
static uint64_t gemm_cost(uint32_t m, uint32_t n, uint32_t k) {
  tsr_km_timing_t t = timing_of(0);
  return tsr_km_gemm_cycles(&t, m, n, k);
}

/* Where operands go: the window, or its part in memory when there is one. */
static span_t place_region(const input_t *in) {
  span_t w = win_span(in), p = span_and(w, phys_span());
  return p.hi > p.lo ? p : w;
}

/* An address for `len` bytes inside r, aligned to `align`, or flush with one
 * of r's edges now and then; returns false if it does not fit. */
static bool place(span_t r, unsigned __int128 len, uint64_t align, uint64_t *out) {
  if (r.hi - r.lo < len) return false;
  unsigned __int128 lo = (r.lo + align - 1) / align * align;
  unsigned __int128 last = (r.hi - len) / align * align;
  if (last < lo) return false;
  unsigned pick = (unsigned)below(10);
  unsigned __int128 a;
  if (pick == 0) a = lo;
  else if (pick == 1) a = last;
  else a = lo + (unsigned __int128)below((uint64_t)((last - lo) / align) + 1) * align;
  if (a >> 64) return false;
  *out = (uint64_t)a;
  return true;
}

static uint32_t pad(uint32_t base) {
  unsigned p = (unsigned)below(20);
  if (p < 10) return base;
  if (p < 16) return base + (uint32_t)range(1, 70);
  if (p < 19) return base + (uint32_t)logu(1, 4096);
  return base + (uint32_t)logu(4096, 256 << 10); /* rows far apart */
}

/* A valid GEMM inside `r`, avoiding `avoid` (the ring) with C unless
 * `over_ring`; falls back to a NOP when nothing fits. */
static void gen_gemm(const input_t *in, span_t r, span_t avoid, tsr_desc_t *d) {
  memset(d, 0, sizeof *d);
  d->opcode = TSR_OP_GEMM_I8_I32;
  unsigned sz = (unsigned)below(100);
  uint32_t m, n, k;
  if (sz < 68) {
    m = (uint32_t)range(1, 24), n = (uint32_t)range(1, 40), k = (uint32_t)logu(1, 160);
  } else if (sz < 88) {
    m = (uint32_t)logu(1, 80), n = (uint32_t)logu(1, 80), k = (uint32_t)logu(1, 600);
  } else if (sz < 96) {
    static const uint32_t kb[] = {4095, 4096, 4097, 8191, 8192, 8193};
    m = (uint32_t)range(1, 8), n = (uint32_t)range(1, 20);
    k = chance(50) ? kb[below(6)] : (uint32_t)range(4000, 9000);
  } else { /* one dimension at MAX_DIM (or just under), the others tiny */
    m = n = k = (uint32_t)range(1, 2);
    uint32_t big = TSR_HW_MAX_DIM - (uint32_t)below(2);
    unsigned which = (unsigned)below(3);
    if (which == 0) k = big;
    else if (which == 1) n = big;
    else m = big;
  }
  for (int tries = 0; tries < 40; tries++) {
    uint64_t cap = sz >= 96 ? 400000 : 60000;
    while (gemm_cost(m, n, k) > cap) {
      if (k >= m && k >= n) k = (k + 1) / 2;
      else if (m >= n) m = (m + 1) / 2;
      else n = (n + 1) / 2;
    }
    d->m = m, d->n = n, d->k = k;
    d->lda = pad(k), d->ldw = pad(k), d->ldc = 4 * pad(n);
    if (chance(50)) d->ldc = 4 * n;
    bool ok = place(r, ext_a(d), 1, &d->a_addr) && place(r, ext_w(d), 1, &d->w_addr) &&
              place(r, ext_c(d), 4, &d->c_addr);
    if (ok) {
      span_t c = span_of(d->c_addr, ext_c(d));
      if (!span_overlap(c, span_of(d->a_addr, ext_a(d))) &&
          !span_overlap(c, span_of(d->w_addr, ext_w(d))) && !span_overlap(c, avoid))
        return;
    }
    if (tries % 4 == 3) { /* shrink */
      if (m > 1) m = (m + 1) / 2;
      if (n > 1) n = (n + 1) / 2;
      if (k > 1) k = (k + 1) / 2;
    }
  }
  (void)in;
  memset(d, 0, sizeof *d); /* nothing fits: a NOP */
}

/* Whether C overlaps the descriptor's own A or W: the result would depend
 * on the order of reads and writes inside one descriptor, which the spec
 * leaves open, so the generator never makes such a descriptor valid. */
static bool c_over_operands(const tsr_desc_t *d) {
  if (!d->m || !d->n) return false;
  span_t c = span_of(d->c_addr, ext_c(d));
  return span_overlap(c, span_of(d->a_addr, ext_a(d))) ||
         span_overlap(c, span_of(d->w_addr, ext_w(d)));
}

static const char *mutate_one(const input_t *in, tsr_desc_t *d);

/* One field of a valid descriptor pushed just past (or onto) a limit; a
 * move that would put C over the descriptor's own operands is undone. */
static const char *mutate(const input_t *in, tsr_desc_t *d) {
  if (d->opcode != TSR_OP_GEMM_I8_I32) {
    d->opcode = TSR_OP_GEMM_I8_I32;
    d->m = d->n = d->k = 1, d->lda = d->ldw = 1, d->ldc = 4;
    d->a_addr = d->w_addr = in->wb, d->c_addr = (in->wb + 4) & ~3ull;
  }
  tsr_desc_t before = *d;
  const char *what = mutate_one(in, d);
  if (tsr_km_check_desc(d, in->wb, in->ws) == TSR_HWERR_OK && c_over_operands(d)) {
    *d = before;
    return "valid (mutation undone: C over its operands)";
  }
  return what;
}

static const char *mutate_one(const input_t *in, tsr_desc_t *d) {
  uint64_t wend = in->wb + in->ws; /* may wrap; only used when it does not */
  switch (below(36)) {
    case 0: d->opcode = TSR_OP_GEMM_BSR_I8_I32; return "opcode GEMM_BSR (a GEMM's fields)";
    case 1: d->opcode = 0xffffffffu; return "opcode ~0";
    case 2: d->opcode = (uint32_t)rnd(); return "opcode random";
    case 3: d->flags = 1u << below(32); return "a FLAGS bit";
    case 4:
      if (chance(50)) {
        d->w_nch = 2 + (uint32_t)below(64);
        return "W_NCH above one port";
      }
      d->w_nch = (uint32_t)below(2);
      d->w_cstride = 1u << below(32);
      return "W_CSTRIDE with one channel";
    case 5: d->m = 0; return "M = 0";
    case 6: d->n = 0; return "N = 0";
    case 7: d->k = 0; return "K = 0";
    case 8: d->m = TSR_HW_MAX_DIM + 1; return "M = MAX_DIM + 1";
    case 9: d->n = TSR_HW_MAX_DIM + 1; return "N = MAX_DIM + 1";
    case 10: d->k = TSR_HW_MAX_DIM + 1; return "K = MAX_DIM + 1";
    case 11: d->k = 0xffffffffu; return "K = ~0";
    case 12: d->m = 0x10001; return "M = 2^16 + 1 (low half 1)";
    case 13: d->lda = d->k - 1; return "LDA = K - 1";
    case 14: d->ldw = d->k - 1; return "LDW = K - 1";
    case 15: d->ldc = 4 * d->n - 4; return "LDC = 4N - 4";
    case 16: d->ldc = 4 * d->n + (uint32_t)range(1, 3); return "LDC misaligned";
    case 17: d->c_addr += range(1, 3); return "C misaligned";
    case 18: d->a_addr = in->wb - 1; return "A one below the window";
    case 19: d->w_addr = in->wb - 1; return "W one below the window";
    case 20: d->c_addr = (in->wb - 4) & ~3ull; return "C one word below the window";
    case 21: d->a_addr = wend - (uint64_t)ext_a(d) + 1; return "A one past the window";
    case 22: d->w_addr = wend - (uint64_t)ext_w(d) + 1; return "W one past the window";
    case 23: d->c_addr = ((wend - (uint64_t)ext_c(d)) & ~3ull) + 4; return "C one word past";
    case 24: d->a_addr = wend - (uint64_t)ext_a(d); return "A flush with the end";
    case 25: d->w_addr = wend - (uint64_t)ext_w(d); return "W flush with the end";
    case 26: d->c_addr = (wend - (uint64_t)ext_c(d)) & ~3ull; return "C flush with the end";
    case 27: d->a_addr = UINT64_MAX - range(0, 64); return "A wraps 2^64";
    case 28: d->c_addr = (UINT64_MAX - range(0, 64)) & ~3ull; return "C wraps 2^64";
    case 29: d->lda = 0x80000000u | (uint32_t)below(1u << 31); return "LDA huge";
    case 30: d->ldc = 0xfffffffcu; return "LDC = 2^32 - 4";
    case 31: d->m = TSR_HW_MAX_DIM; return "M = MAX_DIM";
    case 32: d->n = TSR_HW_MAX_DIM, d->ldc = 4u * TSR_HW_MAX_DIM; return "N = MAX_DIM";
    case 33: d->a_addr = rnd(); return "A random";
    case 34: d->c_addr = in->wb + in->ws; return "C at the window's end";
    default: d->w_addr = in->wb + (uint64_t)below(in->ws + 1); return "W anywhere in the window";
  }
}

static const uint32_t k_interesting32[] = {0, 1, 2, 3, 4, 15, 16, 17, 63, 64, 65, 4095, 4096,
                                           4097, 65535, 65536, 0x7fffffff, 0x80000000u,
                                           0xfffffffcu, 0xffffffffu};

static uint32_t any32(void) {
  return chance(60) ? k_interesting32[below(sizeof k_interesting32 / 4)] : (uint32_t)rnd();
}

/* A descriptor of interesting and random field values. */
static void gen_random_desc(const input_t *in, uint8_t out[TSR_HW_DESC_BYTES]) {
  if (chance(20)) { /* raw bytes */
    for (int i = 0; i < TSR_HW_DESC_BYTES; i++) out[i] = (uint8_t)rnd();
    tsr_desc_t d;
    tsr_desc_unpack(&d, out);
    if (d.opcode == TSR_OP_GEMM_I8_I32 && tsr_km_check_desc(&d, in->wb, in->ws) == 0 &&
        c_over_operands(&d)) {
      d.c_addr |= 2;
      tsr_desc_pack(out, &d);
    }
    return;
  }
  tsr_desc_t d;
  d.opcode = chance(70) ? TSR_OP_GEMM_I8_I32 : (chance(50) ? TSR_OP_NOP : any32());
  d.flags = chance(85) ? 0 : any32();
  d.m = any32(), d.n = any32(), d.k = any32();
  d.lda = any32(), d.ldw = any32(), d.ldc = any32();
  uint64_t *addr[3] = {&d.a_addr, &d.w_addr, &d.c_addr};
  for (int i = 0; i < 3; i++) {
    unsigned p = (unsigned)below(4);
    if (p == 0) *addr[i] = rnd();
    else if (p == 1) *addr[i] = in->wb + below(in->ws + 1);
    else *addr[i] = in->wb + (below(in->ws / 4 + 1) * 4);
  }
  d.w_nch = chance(90) ? 0 : (uint32_t)rnd();
  d.w_cstride = chance(90) ? 0 : (uint32_t)rnd();
  if (d.opcode == TSR_OP_GEMM_I8_I32 && tsr_km_check_desc(&d, in->wb, in->ws) == TSR_HWERR_OK &&
      c_over_operands(&d))
    d.c_addr = 2; /* refused (BAD_STRIDE) instead */
  tsr_desc_pack(out, &d);
}

/* The window: mostly inside the memory, sometimes odd. */
static const char *gen_window(input_t *in) {
  unsigned p = (unsigned)below(100);
  if (p < 74) {
    uint64_t align = chance(60) ? 64 : chance(50) ? 4 : 1;
    uint64_t off = below(PHYS_SIZE / 2) / align * align;
    uint64_t size = logu(192, 160 << 10);
    if (chance(50)) size = (size + 63) & ~63ull;
    if (off + size > PHYS_SIZE) size = PHYS_SIZE - off;
    in->wb = PHYS_BASE + off, in->ws = size;
    return NULL;
  }
  if (p < 76) {
    in->wb = PHYS_BASE + below(4) * 64, in->ws = PHYS_END - in->wb;
    return "window: the whole memory";
  }
  if (p < 78) {
    in->wb = PHYS_BASE - below(1ull << 30), in->ws = chance(50) ? 1ull << 40 : rnd() >> 1;
    if (in->wb + in->ws < PHYS_END) in->ws = UINT64_MAX - in->wb;
    return "window: far larger than the memory";
  }
  if (p < 82) {
    in->wb = PHYS_BASE + below(PHYS_SIZE), in->ws = chance(50) ? 0 : range(1, 63);
    return "window: empty or tiny";
  }
  if (p < 87) {
    in->wb = PHYS_END - logu(64, 32 << 10), in->ws = logu(64 << 10, 1 << 20);
    return "window: reaches past the memory";
  }
  if (p < 90) {
    in->wb = PHYS_BASE - logu(64, 64 << 10), in->ws = logu(128 << 10, 512 << 10);
    return "window: starts below the memory";
  }
  if (p < 95) {
    uint64_t x = logu(64, 1 << 20);
    in->wb = 0 - x, in->ws = chance(50) ? x + logu(1, 1 << 20) : logu(1, x);
    if (chance(30)) in->ws = UINT64_MAX;
    return "window: top of the address space";
  }
  in->wb = chance(50) ? below(1 << 20) : (1ull << 63) + below(1 << 20), in->ws = logu(64, 1 << 20);
  return "window: outside the memory";
}

/* Register writes around the arguments: interrupt registers, offsets that
 * name nothing, read-only registers, SLVERR offsets, junk argument words. */
static void gen_noise(input_t *in) {
  static const uint32_t gaps[] = {0x18, 0x24, 0x30, TSR_REG_Q_CTRL, TSR_REG_Q_TAIL, 0x78, 0x7C};
  static const uint32_t args[] = {TSR_ARG_MEM_BASE, TSR_ARG_MEM_BASE + 4, TSR_ARG_MEM_SIZE,
                                  TSR_ARG_MEM_SIZE + 4, TSR_ARG_RING, TSR_ARG_RING + 4,
                                  TSR_ARG_N_DESC};
  in->n_noise = chance(30) ? 0 : (int)range(1, MAX_NOISE / 2);
  for (int i = 0; i < in->n_noise; i++) {
    noise_t *z = &in->noise[i];
    z->val = (uint32_t)rnd();
    switch (below(8)) {
      case 0: z->off = TSR_REG_GIE; break;
      case 1: z->off = TSR_REG_IER; break;
      case 2: z->off = TSR_REG_ISR; break;
      case 3: z->off = gaps[below(sizeof gaps / 4)]; break;
      case 4: z->off = TSR_STAT_STATUS + 4 * (uint32_t)below(14); break;
      case 5: z->off = TSR_HW_CTRL_BYTES + 4 * (uint32_t)below((0x1000 - TSR_HW_CTRL_BYTES) / 4);
              break;
      case 6: z->off = (uint32_t)below(TSR_HW_CTRL_BYTES) | (uint32_t)range(1, 3); break;
      default: z->off = args[below(sizeof args / 4)]; break;
    }
  }
}

/* Input `idx` of `seed`: a function of both only. */
static void gen_input(uint64_t seed, uint64_t idx, input_t *in) {
  g_rs = seed * 0x9E3779B97F4A7C15ull ^ (idx + 1) * 0xD1B54A32D192ED03ull;
  rnd();
  memset(in, 0, sizeof *in);
  in->inst = (int)(idx % N_INST);
  in->fill_seed = rnd();
  in->fill_kind = chance(90) ? 0 : chance(50) ? 1 : 2;
  in->exact_end = (int)(idx & 1);
  const char *wcls = gen_window(in);
  span_t r = place_region(in);

  unsigned cls = (unsigned)below(100);
  int n = chance(85) ? (int)range(1, 6) : (int)range(7, MAX_SLOTS);
  in->n_slots = n;
  in->n_desc = (uint32_t)n;
  /* the ring: 64-byte aligned inside the region, room for n descriptors */
  uint64_t ring = 0;
  if (!place(r, (unsigned __int128)n * TSR_HW_DESC_BYTES, TSR_HW_DESC_BYTES, &ring))
    ring = (in->wb + 63) & ~63ull;
  in->ring = ring;
  span_t ring_sp = span_of(ring, (unsigned __int128)n * TSR_HW_DESC_BYTES);

  const char *what = "valid";
  int over = -1; /* slot whose C goes over the ring */
  if (cls >= 40 && cls < 48) {
    over = (int)below((uint64_t)n);
    what = "C over the ring";
  }
  for (int j = 0; j < n; j++) {
    tsr_desc_t d;
    unsigned kind = (unsigned)below(100);
    if (kind < 7) {
      memset(&d, 0, sizeof d);
    } else if (kind < 9) { /* a NOP ignores everything but opcode, FLAGS, RSVD */
      memset(&d, 0, sizeof d);
      d.m = (uint32_t)rnd(), d.n = (uint32_t)rnd(), d.lda = (uint32_t)rnd(), d.a_addr = rnd();
    } else {
      gen_gemm(in, r, j == over ? span_of(0, 0) : ring_sp, &d);
    }
    if (j == over && d.opcode == TSR_OP_GEMM_I8_I32) {
      /* C over one of the ring's descriptors (before, at or after j) */
      int target = (int)below((uint64_t)n);
      uint64_t c = ring + (uint64_t)target * TSR_HW_DESC_BYTES + 4 * below(16);
      tsr_desc_t t = d;
      t.c_addr = c;
      span_t cs = span_of(c, ext_c(&t));
      if (!span_overlap(cs, span_of(t.a_addr, ext_a(&t))) &&
          !span_overlap(cs, span_of(t.w_addr, ext_w(&t))) && cs.hi <= r.hi)
        d = t;
    }
    tsr_desc_pack(in->slot[j], &d);
  }

  if (cls >= 48 && cls < 82) { /* nearly valid: one descriptor, one field */
    int j = (int)below((uint64_t)n);
    tsr_desc_t d;
    tsr_desc_unpack(&d, in->slot[j]);
    what = mutate(in, &d);
    tsr_desc_pack(in->slot[j], &d);
  } else if (cls >= 82 && cls < 92) { /* the ring itself */
    switch (below(9)) {
      case 0: in->ring += range(1, 63); what = "ring misaligned"; break;
      case 1: /* the ring's last descriptor one past the window's end */
        in->ring = ((in->wb + in->ws) & ~63ull) - (uint64_t)(n - 1) * TSR_HW_DESC_BYTES;
        what = "ring one past the end"; break;
      case 2: in->ring = (in->wb & ~63ull) - TSR_HW_DESC_BYTES; what = "ring below the window";
        break;
      case 3: in->n_desc = 0; what = "N_DESC = 0"; break;
      case 4: in->n_desc = (uint32_t)(n + 1); what = "N_DESC one more than written"; break;
      case 5: in->n_desc = chance(50) ? 0xffffffffu : (uint32_t)rnd(); what = "N_DESC huge"; break;
      case 6: in->ring = 0 - (uint64_t)range(1, 4) * TSR_HW_DESC_BYTES; what = "ring wraps 2^64";
        break;
      case 7: in->ring = rnd() & ~63ull; what = "ring anywhere"; break;
      default: in->n_desc = 0, in->ring = rnd(); what = "N_DESC = 0, ring anywhere"; break;
    }
  } else if (cls >= 92) { /* random descriptors */
    for (int j = 0; j < n; j++)
      if (chance(60)) gen_random_desc(in, in->slot[j]);
    what = "random descriptors";
  }
  /* queue mode, closed at once: the first Q_TAIL descriptors run from
   * their slots, or a tail past the slots is refused (QUEUE_TAIL) */
  const bool queue = chance(15);
  if (queue) {
    in->q_ctrl = TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE;
    in->q_tail = chance(15) ? in->n_desc + (uint32_t)range(1, 3) : (uint32_t)below(in->n_desc + 1);
  }
  snprintf(in->cls, sizeof in->cls, "%s%s%s%s", wcls ? wcls : "", wcls ? "; " : "", what,
           queue ? "; queue mode" : "");
  gen_noise(in);
}

/* ---- memory images ----------------------------------------------------------- */

static void fill(uint8_t *p, size_t n, uint64_t seed, int kind) {
  uint64_t s = seed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = tsr_test_splitmix64(&s);
    if (kind == 1) v = 0x8080808080808080ull;
    else if (kind == 2) v &= 0x0303030303030303ull;
    memcpy(p + i, &v, 8);
  }
  for (; i < n; i++) p[i] = kind == 1 ? 0x80 : (uint8_t)tsr_test_splitmix64(&s);
}

/* Writes the input's memory into g_img (window contents, ring slots). */
static void build_image(const input_t *in) {
  span_t p = phys_span(), w = span_and(win_span(in), p);
  if (w.hi > w.lo)
    fill(g_img + (size_t)(w.lo - PHYS_BASE), (size_t)(w.hi - w.lo), in->fill_seed, in->fill_kind);
  for (int j = 0; j < in->n_slots; j++) {
    unsigned __int128 a = (unsigned __int128)in->ring + (unsigned __int128)j * TSR_HW_DESC_BYTES;
    for (int b = 0; b < TSR_HW_DESC_BYTES; b++)
      if (a + b >= p.lo && a + b < p.hi) g_img[(size_t)(a + b - PHYS_BASE)] = in->slot[j][b];
  }
}

/* ---- the functional model on a guarded mapping -------------------------------- */

static sigjmp_buf g_jmp;
static volatile sig_atomic_t g_in_model;
static void *volatile g_fault_addr;

static void on_segv(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (!g_in_model) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_fault_addr = si->si_addr;
  siglongjmp(g_jmp, 1);
}

#define GUARD 0x5A

typedef struct fm_map {
  size_t delta;        /* host offset of device address PHYS_BASE in g_fm */
  size_t acc_lo, acc_hi; /* accessible bytes of g_fm */
  size_t win_lo, win_hi; /* the window (in memory) in g_fm */
} fm_map_t;

/* Lays the window out in g_fm with one edge on a page boundary and the
 * rest of the mapping inaccessible; copies the window from g_img. */
static void fm_prepare(const input_t *in, fm_map_t *m) {
  mprotect(g_fm, g_fm_len, PROT_NONE);
  span_t w = span_and(win_span(in), phys_span());
  size_t lo = (size_t)(w.lo - PHYS_BASE), hi = (size_t)(w.hi - PHYS_BASE);
  memset(m, 0, sizeof *m);
  if (w.hi <= w.lo) {
    m->delta = PAGE;
    return;
  }
  /* device offset x lives at g_fm + PAGE + d + x, d a multiple of 4 (int32
   * C rows stay aligned) in [0, PAGE] */
  size_t d;
  if (in->exact_end) d = ((PAGE - hi % PAGE) % PAGE) & ~(size_t)3;   /* end on a page edge (+0..3) */
  else d = (((PAGE - lo % PAGE) % PAGE) + 3) & ~(size_t)3;           /* start on a page edge (-0..3) */
  m->delta = PAGE + d;
  m->win_lo = m->delta + lo, m->win_hi = m->delta + hi;
  m->acc_lo = m->win_lo / PAGE * PAGE;
  m->acc_hi = (m->win_hi + PAGE - 1) / PAGE * PAGE;
  mprotect(g_fm + m->acc_lo, m->acc_hi - m->acc_lo, PROT_READ | PROT_WRITE);
  memset(g_fm + m->acc_lo, GUARD, m->win_lo - m->acc_lo);
  memcpy(g_fm + m->win_lo, g_img + lo, hi - lo);
  memset(g_fm + m->win_hi, GUARD, m->acc_hi - m->win_hi);
}

/* Runs the model; returns 0, or 1 with *fault set to the device address of
 * a fault (an access outside the window). */
static int fm_run(const input_t *in, const fm_map_t *m, tsr_hal_result_t *res, uint64_t *fault) {
  tsr_km_timing_t t = timing_of(in->inst);
  tsr_km_memory_t mem = {g_fm + m->delta, PHYS_BASE, PHYS_SIZE};
  tsr_hal_command_t cmd = {in->wb, in->ws, in->ring, in->n_desc, 0};
  memset(res, 0, sizeof *res);
  /* queue mode, closed (hw/regmap.def Q_CTRL): the ring check over the
   * N_DESC slots; a tail past them is refused before any fetch; else the
   * first Q_TAIL descriptors run as a ring of their own */
  if (in->q_ctrl & TSR_HW_Q_CTRL_QUEUE) {
    const unsigned __int128 end = (unsigned __int128)in->ring +
                                  (unsigned __int128)in->n_desc * TSR_HW_DESC_BYTES;
    const bool ring_bad = in->n_desc && (in->ring % 64 || in->ring < in->wb ||
                                         end > (unsigned __int128)in->wb + in->ws);
    if (in->n_desc && ring_bad) {
      res->hw_status = TSR_HWERR_RING_RANGE;
      return 0;
    }
    if (in->n_desc && in->q_tail > in->n_desc) {
      res->hw_status = TSR_HWERR_QUEUE_TAIL;
      return 0;
    }
    cmd.n_desc = in->n_desc ? in->q_tail : 0;
  }
  if (sigsetjmp(g_jmp, 1)) {
    g_in_model = 0;
    LSAN_ON();
    *fault = PHYS_BASE + (uint64_t)((uint8_t *)g_fault_addr - (g_fm + m->delta));
    return 1;
  }
  LSAN_OFF();
  g_in_model = 1;
  tsr_km_execute(&t, &mem, &cmd, NULL, res);
  g_in_model = 0;
  LSAN_ON();
  return 0;
}

/* First guard byte changed, or -1. */
static long fm_guard_broken(const fm_map_t *m) {
  for (size_t i = m->acc_lo; i < m->win_lo; i++)
    if (g_fm[i] != GUARD) return (long)i;
  for (size_t i = m->win_hi; i < m->acc_hi; i++)
    if (g_fm[i] != GUARD) return (long)i;
  return -1;
}

/* ---- the RTL ---------------------------------------------------------------------- */

typedef struct rtl_out {
  tsr_hal_result_t r;
  int run_rc;          /* tsr_sim_run: 1 done, 0 budget out, < 0 failed */
  uint64_t ran, bound;
  tsr_sim_stray_t stray;
  char reg_err[160];   /* first register-level disagreement with hw/README.md */
  char sim_err[160];
} rtl_out_t;

static bool is_named_or_gap(uint32_t off) { return off < TSR_HW_CTRL_BYTES && off % 4 == 0; }
static bool is_arg_word(uint32_t off) {
  return off == TSR_ARG_MEM_BASE || off == TSR_ARG_MEM_BASE + 4 || off == TSR_ARG_MEM_SIZE ||
         off == TSR_ARG_MEM_SIZE + 4 || off == TSR_ARG_RING || off == TSR_ARG_RING + 4 ||
         off == TSR_ARG_N_DESC;
}
static bool is_gap(uint32_t off) {
  if (!is_named_or_gap(off) || is_arg_word(off) || off == TSR_REG_Q_CTRL || off == TSR_REG_Q_TAIL)
    return false;
  return (off >= TSR_ARG_MEM_BASE && off < TSR_STAT_STATUS) || off >= TSR_STAT_HW_FEAT + 4;
}

#define REG_FAIL(o, ...) \
  do { if (!(o)->reg_err[0]) snprintf((o)->reg_err, sizeof (o)->reg_err, __VA_ARGS__); } while (0)

static int rd32(tsr_sim_t *s, uint32_t off, uint32_t *v) { return api.reg_read(s, off, v); }
static int rd64(tsr_sim_t *s, uint32_t off, uint64_t *v) {
  uint32_t lo = 0, hi = 0;
  int rc = rd32(s, off, &lo) | rd32(s, off + 4, &hi);
  *v = (uint64_t)hi << 32 | lo;
  return rc;
}

/* Programs the launch through the register file (with the noise), starts
 * it and runs up to `bound` cycles; collects everything. */
static void rtl_run(const input_t *in, uint64_t bound, rtl_out_t *o) {
  memset(o, 0, sizeof *o);
  tsr_sim_t *s = g_sim[in->inst];
  o->bound = bound;
  api.watch(s, in->wb, in->ws);
  uint32_t argw[][2] = {
      {TSR_ARG_MEM_BASE, (uint32_t)in->wb}, {TSR_ARG_MEM_BASE + 4, (uint32_t)(in->wb >> 32)},
      {TSR_ARG_MEM_SIZE, (uint32_t)in->ws}, {TSR_ARG_MEM_SIZE + 4, (uint32_t)(in->ws >> 32)},
      {TSR_ARG_RING, (uint32_t)in->ring},   {TSR_ARG_RING + 4, (uint32_t)(in->ring >> 32)},
      {TSR_ARG_N_DESC, in->n_desc}};
  enum { NARG = sizeof argw / sizeof argw[0] };
  /* noise first, then the arguments, each arg word after any junk for it */
  for (int i = 0; i < in->n_noise; i++) {
    const noise_t *z = &in->noise[i];
    int rc = api.reg_write(s, z->off, z->val);
    bool slverr = !is_named_or_gap(z->off);
    if (slverr ? rc != -3 : rc != 0)
      REG_FAIL(o, "write 0x%03x: rc %d, want %s", z->off, rc, slverr ? "SLVERR (-3)" : "OKAY");
  }
  for (int i = 0; i < NARG; i++) {
    int rc = api.reg_write(s, argw[i][0], argw[i][1]);
    if (rc) REG_FAIL(o, "write arg 0x%02x: rc %d", argw[i][0], rc);
  }
  /* the queue registers as the input has them (the noise may have written
   * them): read back as written */
  if (api.reg_write(s, TSR_REG_Q_TAIL, in->q_tail) || api.reg_write(s, TSR_REG_Q_CTRL, in->q_ctrl))
    REG_FAIL(o, "write Q_TAIL/Q_CTRL failed");
  uint32_t qv[2] = {0, 0};
  if (rd32(s, TSR_REG_Q_TAIL, &qv[0]) || rd32(s, TSR_REG_Q_CTRL, &qv[1]) ||
      qv[0] != in->q_tail || qv[1] != in->q_ctrl)
    REG_FAIL(o, "Q_TAIL/Q_CTRL read 0x%x/0x%x, wrote 0x%x/0x%x", qv[0], qv[1], in->q_tail,
             in->q_ctrl);
  uint32_t feat = 0;
  if (rd32(s, TSR_STAT_HW_FEAT, &feat) || feat != TSR_HW_FEAT_QUEUE)
    REG_FAIL(o, "HW_FEAT 0x%08x", feat);
  for (int i = 0; i < NARG; i++) {
    uint32_t v = 0;
    if (rd32(s, argw[i][0], &v) || v != argw[i][1])
      REG_FAIL(o, "arg 0x%02x reads 0x%08x, wrote 0x%08x", argw[i][0], v, argw[i][1]);
  }
  for (int i = 0; i < in->n_noise; i++) {
    uint32_t off = in->noise[i].off, v = 0;
    if (is_gap(off) && (rd32(s, off, &v) || v != 0))
      REG_FAIL(o, "offset 0x%02x names nothing but reads 0x%08x after writing 0x%08x", off, v,
              in->noise[i].val);
    if (!is_named_or_gap(off) && api.reg_read(s, off, &v) != -3)
      REG_FAIL(o, "read 0x%03x: not SLVERR", off);
  }
  uint32_t info = 0;
  rd32(s, TSR_STAT_HW_INFO, &info);
  if ((info & 0xff) != g_rows || (info >> 8 & 0xff) != g_cols ||
      (info >> 16 & 0xff) != TSR_HW_IF_VERSION)
    REG_FAIL(o, "HW_INFO 0x%08x", info);
  /* HW_OPS: read-only (the noise may have written it), NOP and GEMM always */
  uint32_t ops = 0;
  rd32(s, TSR_STAT_HW_OPS, &ops);
  if ((ops & 3u) != 3u || ops >> (TSR_OP_GEMM_BSR_I8_I32 + 1))
    REG_FAIL(o, "HW_OPS 0x%08x", ops);

  if (api.reg_write(s, TSR_REG_CTRL, TSR_CTRL_AP_START)) REG_FAIL(o, "write ap_start failed");
  o->run_rc = api.run(s, bound, 1, &o->ran);
  if (o->run_rc != 1) {
    snprintf(o->sim_err, sizeof o->sim_err, "%s", api.last_error(s));
    api.stray(s, &o->stray);
    return;
  }
  uint32_t ctrl = 0, isr = 0;
  rd32(s, TSR_REG_CTRL, &ctrl);
  if (!(ctrl & TSR_CTRL_AP_DONE) || (ctrl & TSR_CTRL_AP_IDLE))
    REG_FAIL(o, "CTRL 0x%02x at ap_done (want done set, idle clear)", ctrl);
  rd32(s, TSR_REG_ISR, &isr);
  if (isr) api.reg_write(s, TSR_REG_ISR, isr);
  api.reg_write(s, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE);
  tsr_hal_result_t *r = &o->r;
  int rc = rd32(s, TSR_STAT_STATUS, &r->hw_status) | rd32(s, TSR_STAT_ERR_INDEX, &r->err_index) |
           rd32(s, TSR_STAT_DESC_DONE, &r->desc_done) | rd64(s, TSR_STAT_CYC_BUSY, &r->cycles) |
           rd64(s, TSR_STAT_CYC_STALL, &r->stall_cycles) |
           rd64(s, TSR_STAT_BYTES_RD, &r->bytes_rd) | rd64(s, TSR_STAT_BYTES_WR, &r->bytes_wr) |
           rd64(s, TSR_STAT_MACS, &r->macs);
  if (rc) REG_FAIL(o, "status registers unreadable");
  /* read-only: a write changes nothing */
  uint32_t st = 0;
  api.reg_write(s, TSR_STAT_STATUS, ~r->hw_status);
  rd32(s, TSR_STAT_STATUS, &st);
  if (st != r->hw_status) REG_FAIL(o, "STATUS changed by a write: 0x%x -> 0x%x", r->hw_status, st);
  rd32(s, TSR_REG_CTRL, &ctrl);
  if (!(ctrl & TSR_CTRL_AP_IDLE)) REG_FAIL(o, "CTRL 0x%02x after ap_continue, not idle", ctrl);
  api.stray(s, &o->stray);
}

/* ---- the cycle bound ----------------------------------------------------------- */

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Cycles of one descriptor with nothing overlapped: every burst waits for
 * the memory latency (divided by the bursts it keeps in flight), every
 * beat for the bandwidth, every step computes its whole chunk. */
static double serial_cycles(const input_t *in, const uint8_t raw[TSR_HW_DESC_BYTES]) {
  tsr_desc_t d;
  tsr_desc_unpack(&d, raw);
  double lat = inst_mem[in->inst].latency + 2.0, o = inst_mem[in->inst].outstanding;
  double beat = 64.0 / inst_mem[in->inst].bytes_per_cycle;
  double fetch = lat + beat + 16;
  if (d.opcode != TSR_OP_GEMM_I8_I32 || tsr_km_check_desc(&d, in->wb, in->ws)) return fetch;
  const uint64_t kc_max = 4096;
  bool gemv = (uint64_t)d.m * g_cols < 64;
  uint64_t mrows = gemv ? 1 : g_rows, nmb = div_up(d.m, mrows), nnb = div_up(d.n, g_cols);
  uint64_t nkc = div_up(d.k, kc_max), kc = d.k < kc_max ? d.k : kc_max;
  bool reuse_a = d.k <= kc_max, reuse_w = reuse_a && d.n <= g_cols;
  double segs = (double)((reuse_a ? 1 : nnb) * d.m * nkc + (reuse_w ? 1 : nmb) * d.n * nkc);
  double beats = segs * (double)(div_up(kc, 64) + 1);
  double rows = (double)d.m * (double)nnb, steps = (double)(nmb * nnb * nkc);
  return fetch + 2 * segs * lat / o + beats * beat + 2 * rows * (lat / 2 + 2) / o +
         2 * rows * beat + steps * (double)(kc + 24) + 200;
}

/* The bound: twice the serialized cycles of the descriptors the model ran
 * (as written and as found after the run, the larger), or three times the
 * model's own cycles, whichever is larger, plus 4000. */
static uint64_t cycle_bound(const input_t *in, const fm_map_t *m, const tsr_hal_result_t *fm) {
  double serial = 0;
  uint32_t upto = fm->desc_done + (fm->hw_status ? 1 : 0);
  for (uint32_t i = 0; i < upto; i++) {
    double c = 0;
    if (i < (uint32_t)in->n_slots) c = serial_cycles(in, in->slot[i]);
    unsigned __int128 a = (unsigned __int128)in->ring + (unsigned __int128)i * TSR_HW_DESC_BYTES;
    if (a >= PHYS_BASE && a - PHYS_BASE + m->delta >= m->win_lo &&
        a - PHYS_BASE + m->delta + TSR_HW_DESC_BYTES <= m->win_hi) {
      double c2 = serial_cycles(in, g_fm + (size_t)(a - PHYS_BASE + m->delta));
      if (c2 > c) c = c2;
    }
    serial += c;
  }
  double b = 2 * serial;
  if (3.0 * (double)fm->cycles > b) b = 3.0 * (double)fm->cycles;
  return (uint64_t)b + 4000;
}

/* ---- comparing -------------------------------------------------------------------- */

typedef struct stats {
  uint64_t inputs, valid, invalid, disagreements, strays, hangs;
  uint64_t by_status[16];
  uint64_t queue;       /* inputs in queue mode */
  double max_ratio; /* RTL cycles / bound */
  uint64_t rtl_cycles;
} stats_t;

/* The length of a TSR_HWERR name without its explanation ("BAD_DIMS (M, N
 * or K ...)": 8), for "%.*s". */
static int hwerr_len(const char *name) {
  const char *p = strstr(name, " (");
  return p ? (int)(p - name) : (int)strlen(name);
}

static void dump_result(const char *who, const tsr_hal_result_t *r) {
  const char *name = tsr_hal_hwerr_name(r->hw_status);
  printf("    %-6s status %u (%.*s) err_index %u desc_done %u bytes_rd %" PRIu64
         " bytes_wr %" PRIu64 " macs %" PRIu64 " cycles %" PRIu64 "\n",
         who, r->hw_status, hwerr_len(name), name, r->err_index, r->desc_done, r->bytes_rd,
         r->bytes_wr, r->macs, r->cycles);
}

static void dump_input(uint64_t seed, uint64_t idx, const input_t *in) {
  printf("  reproduce: TSR_KFUZZ_SEED=%" PRIu64 " TSR_KFUZZ_FIRST=%" PRIu64
         " TSR_KFUZZ_N=1 test_kernel_fuzz\n", seed, idx);
  printf("    class \"%s\", instance %d (latency %u, %u B/cycle, %u outstanding), fill %d/%016"
         PRIx64 ", model mapping exact at the %s\n", in->cls, in->inst,
         inst_mem[in->inst].latency, inst_mem[in->inst].bytes_per_cycle,
         inst_mem[in->inst].outstanding, in->fill_kind, in->fill_seed,
         in->exact_end ? "end" : "start");
  printf("    MEM_BASE 0x%016" PRIx64 " MEM_SIZE 0x%016" PRIx64 " RING 0x%016" PRIx64
         " N_DESC %u (memory 0x%" PRIx64 "+0x%" PRIx64 ") Q_CTRL 0x%x Q_TAIL %u\n", in->wb,
         in->ws, in->ring, in->n_desc, PHYS_BASE, PHYS_SIZE, in->q_ctrl, in->q_tail);
  for (int j = 0; j < in->n_slots; j++) {
    tsr_desc_t d;
    tsr_desc_unpack(&d, in->slot[j]);
    printf("    [%d] op %u flags 0x%x M %u N %u K %u LDA %u LDW %u LDC %u A 0x%" PRIx64
           " W 0x%" PRIx64 " C 0x%" PRIx64 " w_nch %u w_cstride %u\n", j, d.opcode, d.flags, d.m,
           d.n, d.k, d.lda, d.ldw, d.ldc, d.a_addr, d.w_addr, d.c_addr, d.w_nch, d.w_cstride);
  }
  if (in->n_noise) {
    printf("    register writes first:");
    for (int i = 0; i < in->n_noise; i++)
      printf(" [0x%03x]=0x%08x", in->noise[i].off, in->noise[i].val);
    printf("\n");
  }
}

/* The C extent of descriptor i as the model fetched it (for AXI_ERROR). */
static span_t failing_c(const input_t *in, const fm_map_t *m, uint32_t i) {
  span_t none = {0, 0};
  unsigned __int128 a = (unsigned __int128)in->ring + (unsigned __int128)i * TSR_HW_DESC_BYTES;
  size_t lo = m->win_lo, hi = m->win_hi;
  if (a < PHYS_BASE) return none;
  unsigned __int128 off = a - PHYS_BASE + m->delta;
  if (off < lo || off + TSR_HW_DESC_BYTES > hi) return none;
  tsr_desc_t d;
  tsr_desc_unpack(&d, g_fm + (size_t)off);
  if (d.opcode != TSR_OP_GEMM_I8_I32 || !d.m || !d.n) return none;
  return span_of(d.c_addr, ext_c(&d));
}

/* AXI_ERROR from an operand (kernel_model.h step 5, not the fetch): the
 * model's counters are documented as an approximation there. */
static bool operand_axi_error(const input_t *in, const tsr_hal_result_t *fm) {
  if (fm->hw_status != TSR_HWERR_AXI_ERROR) return false;
  unsigned __int128 a =
      (unsigned __int128)in->ring + (unsigned __int128)fm->err_index * TSR_HW_DESC_BYTES;
  return a >= PHYS_BASE && a + TSR_HW_DESC_BYTES <= PHYS_END;
}

/* Runs one input on both sides and checks (a), (b), (c). Returns 0 when
 * they agree, else prints a reproducer and returns 1. */
static int run_input(uint64_t seed, uint64_t idx, const input_t *in, stats_t *st) {
  g_img = g_imgs[in->inst];
  build_image(in);
  tsr_sim_t *s = g_sim[in->inst];
  span_t w = span_and(win_span(in), phys_span());
  size_t wlo = (size_t)(w.lo - PHYS_BASE), whi = (size_t)(w.hi - PHYS_BASE);
  if (whi > wlo) api.mem_write(s, PHYS_BASE + wlo, g_img + wlo, whi - wlo);
  for (int j = 0; j < in->n_slots; j++) { /* slots outside the window, in memory */
    unsigned __int128 a = (unsigned __int128)in->ring + (unsigned __int128)j * TSR_HW_DESC_BYTES;
    if (a >= PHYS_BASE && a + TSR_HW_DESC_BYTES <= PHYS_END)
      api.mem_write(s, (uint64_t)a, g_img + (size_t)(a - PHYS_BASE), TSR_HW_DESC_BYTES);
  }

  fm_map_t m;
  fm_prepare(in, &m);
  tsr_hal_result_t fm;
  uint64_t fault = 0;
  int fm_fault = fm_run(in, &m, &fm, &fault);
  long guard = fm_fault ? -1 : fm_guard_broken(&m);

  uint64_t bound = cycle_bound(in, &m, &fm);
  rtl_out_t ro;
  rtl_run(in, bound, &ro);

  char why[8][200];
  int n_why = 0;
#define WHY(...) do { if (n_why < 8) snprintf(why[n_why++], sizeof why[0], __VA_ARGS__); } while (0)
  if (fm_fault) WHY("functional model touched 0x%" PRIx64 " (outside the window)", fault);
  if (guard >= 0)
    WHY("functional model wrote 0x%" PRIx64 " (outside the window)",
        PHYS_BASE + (uint64_t)guard - m.delta);
  if (ro.stray.reads || ro.stray.writes)
    WHY("RTL: %" PRIu64 " read bursts and %" PRIu64 " write beats outside the window, first a %s"
        " at 0x%" PRIx64 " (cycle %" PRIu64 ")", ro.stray.reads, ro.stray.writes,
        ro.stray.first_is_write ? "write" : "read", ro.stray.first_addr, ro.stray.first_cycle);
  if (ro.run_rc == 0) WHY("RTL: no ap_done within %" PRIu64 " cycles (hang)", bound);
  if (ro.run_rc < 0) WHY("RTL stopped: %s", ro.sim_err);
  if (ro.reg_err[0]) WHY("RTL register file: %s", ro.reg_err);
  bool ran = ro.run_rc == 1;
  if (ran && !fm_fault) {
    const tsr_hal_result_t *r = &ro.r;
    if (r->hw_status != fm.hw_status || r->err_index != fm.err_index ||
        r->desc_done != fm.desc_done)
      WHY("status/err_index/desc_done: RTL %u/%u/%u, model %u/%u/%u", r->hw_status,
          r->err_index, r->desc_done, fm.hw_status, fm.err_index, fm.desc_done);
    else if (!operand_axi_error(in, &fm) &&
             (r->bytes_rd != fm.bytes_rd || r->bytes_wr != fm.bytes_wr || r->macs != fm.macs))
      WHY("counters bytes_rd/bytes_wr/macs: RTL %" PRIu64 "/%" PRIu64 "/%" PRIu64
          ", model %" PRIu64 "/%" PRIu64 "/%" PRIu64, r->bytes_rd, r->bytes_wr, r->macs,
          fm.bytes_rd, fm.bytes_wr, fm.macs);
  }
  /* memory: the window byte for byte, everything else unchanged */
  bool renew = !ran;
  if (api.mem_read(s, PHYS_BASE, g_after, PHYS_SIZE) == 0) {
    span_t mask = {0, 0};
    if (ran && fm.hw_status == TSR_HWERR_AXI_ERROR) mask = failing_c(in, &m, fm.err_index);
    long first_out = -1, first_in = -1;
    size_t n_in = 0;
    for (size_t i = 0; i < PHYS_SIZE; i++) {
      bool inside = i >= wlo && i < whi;
      if (!inside) {
        if (g_after[i] != g_img[i] && first_out < 0) first_out = (long)i;
      } else if (ran && !fm_fault) {
        unsigned __int128 a = PHYS_BASE + i;
        if (a >= mask.lo && a < mask.hi) continue;
        if (g_after[i] != g_fm[m.delta + i]) {
          if (first_in < 0) first_in = (long)i;
          n_in++;
        }
      }
    }
    if (first_out >= 0)
      WHY("RTL changed memory outside the window at 0x%" PRIx64 " (0x%02x -> 0x%02x)",
          PHYS_BASE + (uint64_t)first_out, g_img[first_out], g_after[first_out]);
    if (first_in >= 0)
      WHY("window contents differ in %zu bytes, first 0x%" PRIx64 ": RTL 0x%02x, model 0x%02x",
          n_in, PHYS_BASE + (uint64_t)first_in, g_after[first_in], g_fm[m.delta + first_in]);
    memcpy(g_img, g_after, PHYS_SIZE); /* the simulator's memory is the baseline */
  } else {
    WHY("RTL memory unreadable");
  }

  st->inputs++;
  if (fm.hw_status == TSR_HWERR_OK && in->n_desc) st->valid++;
  else st->invalid++;
  if (fm.hw_status < 16) st->by_status[fm.hw_status]++;
  if (in->q_ctrl) st->queue++;
  if (ro.stray.reads || ro.stray.writes || fm_fault || guard >= 0) st->strays++;
  if (ro.run_rc == 0) st->hangs++;
  if (ran) {
    st->rtl_cycles += ro.ran;
    double ratio = (double)ro.ran / (double)bound;
    if (ratio > st->max_ratio) st->max_ratio = ratio;
  }
  if (renew) sim_renew(in->inst);
  if (!n_why) return 0;
  st->disagreements++;
  printf("DISAGREEMENT input %" PRIu64 ":\n", idx);
  for (int i = 0; i < n_why; i++) printf("    %s\n", why[i]);
  dump_input(seed, idx, in);
  dump_result("RTL", &ro.r);
  dump_result("model", &fm);
  fflush(stdout);
  return 1;
}

/* ---- setup ------------------------------------------------------------------------- */

static int g_ready;

static int setup(void) {
  if (load_rtl()) return -1;
  for (int i = 0; i < N_INST; i++)
    if (!(g_imgs[i] = calloc(1, PHYS_SIZE))) return -1;
  g_after = calloc(1, PHYS_SIZE);
  g_fm_len = PHYS_SIZE + 3 * PAGE;
  g_fm = mmap(NULL, g_fm_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!g_after || g_fm == MAP_FAILED) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  for (int i = 0; i < N_INST; i++)
    if (sim_open(i)) return -1;
  g_ready = 1;
  return 0;
}

static uint64_t env_u64(const char *name, uint64_t def) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : def;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- regression inputs (each found by this fuzzer) ---------------------------------- */

/* A hand-made input: a window in memory, one valid GEMM per slot. */
static void hand_input(input_t *in, const char *cls, int inst, uint64_t wb, uint64_t ws) {
  memset(in, 0, sizeof *in);
  snprintf(in->cls, sizeof in->cls, "%s", cls);
  in->inst = inst;
  in->wb = wb, in->ws = ws;
  in->fill_seed = 0x1234 + (uint64_t)inst;
}

static void put_gemm(input_t *in, int j, uint32_t m, uint32_t n, uint32_t k, uint64_t a,
                     uint64_t w, uint64_t c) {
  tsr_desc_t d = {TSR_OP_GEMM_I8_I32, 0, m, n, k, k, k, 4 * n, a, w, c, 0, 0};
  tsr_desc_pack(in->slot[j], &d);
  if (j >= in->n_slots) in->n_slots = j + 1;
}

static void test_regressions(void) {
  stats_t st;
  memset(&st, 0, sizeof st);
  uint64_t wb = PHYS_BASE + 0x10000;
  input_t in;

  /* RTL, register file: the argument block stored writes to the words that
   * name nothing (0x18, 0x24, 0x30) and read them back; hw/README.md:
   * unnamed offsets read 0 and ignore writes. */
  static const uint32_t gaps[] = {0x18, 0x24, 0x30};
  for (int inst = 0; inst < N_INST; inst++) {
    hand_input(&in, "regression: argument gaps", inst, wb, 0x8000);
    in.ring = wb, in.n_desc = 1;
    put_gemm(&in, 0, 5, 7, 33, wb + 0x100, wb + 0x400, wb + 0x800);
    for (int i = 0; i < 3; i++) in.noise[in.n_noise++] = (noise_t){gaps[i], 0xdeadbeefu + i};
    CU_ASSERT_EQUAL(run_input(0, 1000 + (uint64_t)inst, &in, &st), 0);
  }

  /* queue mode, closed at once: two of three descriptors published run;
   * a tail one past the three slots is refused before any fetch */
  for (int inst = 0; inst < N_INST; inst++) {
    for (uint32_t tail = 2; tail <= 4; tail += 2) {
      hand_input(&in, "regression: queue mode closed", inst, wb, 0x8000);
      in.ring = wb, in.n_desc = 3;
      put_gemm(&in, 0, 5, 7, 33, wb + 0x100, wb + 0x400, wb + 0x800);
      put_gemm(&in, 1, 3, 9, 20, wb + 0x1100, wb + 0x1400, wb + 0x1800);
      put_gemm(&in, 2, 2, 2, 2, wb + 0x2100, wb + 0x2400, wb + 0x2800);
      in.q_ctrl = TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE;
      in.q_tail = tail;
      CU_ASSERT_EQUAL(run_input(0, 3000 + (uint64_t)inst * 8 + tail, &in, &st), 0);
    }
  }

  /* Model, counters: a descriptor fetch answered DECERR (the window
   * reaches past the memory, the ring's second descriptor lies beyond it)
   * counts its 64 requested bytes in BYTES_RD, as the RTL does. */
  for (int inst = 0; inst < N_INST; inst++) {
    hand_input(&in, "regression: fetch past the memory", inst, PHYS_END - 0x1000, 0x10000);
    in.ring = PHYS_END - TSR_HW_DESC_BYTES, in.n_desc = 2, in.n_slots = 1; /* slot 0: a NOP */
    CU_ASSERT_EQUAL(run_input(0, 2000 + (uint64_t)inst, &in, &st), 0);
    fm_map_t m;
    fm_prepare(&in, &m);
    tsr_hal_result_t r;
    uint64_t fault = 0;
    CU_ASSERT_EQUAL(fm_run(&in, &m, &r, &fault), 0);
    CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_AXI_ERROR);
    CU_ASSERT_EQUAL(r.err_index, 1);
    CU_ASSERT_EQUAL(r.desc_done, 1);
    CU_ASSERT_EQUAL(r.bytes_rd, 2 * TSR_HW_DESC_BYTES);
  }
  CU_ASSERT_EQUAL(st.disagreements, 0);
}

/* ---- the checks themselves can fail ---------------------------------------------------- */

static void test_checks_fire(void) {
  uint64_t wb = PHYS_BASE + 0x40000;
  input_t in;
  hand_input(&in, "self-check", 0, wb, 0x10000);
  in.ring = wb + 0xF000, in.n_desc = 1;
  put_gemm(&in, 0, 20, 20, 100, wb, wb + 0x4000, wb + 0x8000);
  g_img = g_imgs[0];
  build_image(&in);
  api.mem_write(g_sim[0], PHYS_BASE, g_img, PHYS_SIZE);

  /* (a) RTL: watching a window without A flags A's reads */
  input_t narrow = in;
  narrow.wb = wb + 0x2000, narrow.ws = 0xE000;
  rtl_out_t ro;
  api.watch(g_sim[0], narrow.wb, narrow.ws);
  api.reg_write(g_sim[0], TSR_ARG_MEM_BASE, (uint32_t)in.wb);
  api.reg_write(g_sim[0], TSR_ARG_MEM_BASE + 4, (uint32_t)(in.wb >> 32));
  api.reg_write(g_sim[0], TSR_ARG_MEM_SIZE, (uint32_t)in.ws);
  api.reg_write(g_sim[0], TSR_ARG_MEM_SIZE + 4, 0);
  api.reg_write(g_sim[0], TSR_ARG_RING, (uint32_t)in.ring);
  api.reg_write(g_sim[0], TSR_ARG_RING + 4, (uint32_t)(in.ring >> 32));
  api.reg_write(g_sim[0], TSR_ARG_N_DESC, 1);
  api.reg_write(g_sim[0], TSR_REG_CTRL, TSR_CTRL_AP_START);
  uint64_t ran = 0;
  CU_ASSERT_EQUAL(api.run(g_sim[0], 1000000, 1, &ran), 1);
  api.stray(g_sim[0], &ro.stray);
  CU_ASSERT(ro.stray.reads > 0 && !ro.stray.first_is_write && ro.stray.first_addr < narrow.wb);
  uint32_t v;
  api.reg_read(g_sim[0], TSR_REG_CTRL, &v);
  api.reg_write(g_sim[0], TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE);
  /* and a window that ends 8 bytes into C flags C's writes (and the
   * ring's fetch: the ring lies past that window too) */
  narrow.wb = wb, narrow.ws = 0x8000 + 8;
  api.watch(g_sim[0], narrow.wb, narrow.ws);
  api.reg_write(g_sim[0], TSR_REG_CTRL, TSR_CTRL_AP_START);
  CU_ASSERT_EQUAL(api.run(g_sim[0], 1000000, 1, &ran), 1);
  api.stray(g_sim[0], &ro.stray);
  CU_ASSERT(ro.stray.reads == 1 && ro.stray.first_addr == in.ring);
  CU_ASSERT(ro.stray.writes >= 20); /* beats: at least one per row of C */
  api.reg_read(g_sim[0], TSR_REG_CTRL, &v);
  api.reg_write(g_sim[0], TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE);
  api.mem_read(g_sim[0], PHYS_BASE, g_img, PHYS_SIZE); /* the new baseline */

  /* (a) model: a mapping without A faults on A's first byte */
  narrow = in;
  narrow.wb = wb + 0x2000, narrow.ws = 0xE000, narrow.exact_end = 0;
  fm_map_t m;
  fm_prepare(&narrow, &m);
  tsr_hal_result_t r;
  uint64_t fault = 0;
  CU_ASSERT_EQUAL(fm_run(&in, &m, &r, &fault), 1);
  CU_ASSERT(fault >= wb && fault < narrow.wb);
  /* a mapping that ends inside C: the bytes past its end are guard bytes
   * up to the page's end, or PROT_NONE */
  narrow.wb = wb, narrow.ws = 0x8000 + 6, narrow.exact_end = 0;
  fm_prepare(&narrow, &m);
  int faulted = fm_run(&in, &m, &r, &fault);
  CU_ASSERT(faulted || fm_guard_broken(&m) >= 0);

  /* (b) a bound too small for the work is a hang */
  g_img = g_imgs[1];
  build_image(&in);
  api.mem_write(g_sim[1], PHYS_BASE, g_imgs[1], PHYS_SIZE);
  in.inst = 1;
  rtl_run(&in, 50, &ro);
  CU_ASSERT_EQUAL(ro.run_rc, 0);
  CU_ASSERT_EQUAL(sim_renew(1), 0);
}

/* ---- the random inputs ---------------------------------------------------------------- */

static void test_random(void) {
  uint64_t seed = env_u64("TSR_KFUZZ_SEED", 1);
  uint64_t n = env_u64("TSR_KFUZZ_N", 1200);
  uint64_t first = env_u64("TSR_KFUZZ_FIRST", 0);
  stats_t st;
  memset(&st, 0, sizeof st);
  double t0 = now_s(), last = t0;
  for (uint64_t i = first; i < first + n; i++) {
    input_t in;
    gen_input(seed, i, &in);
    run_input(seed, i, &in, &st);
    if (n >= 2000 && now_s() - last > 60) {
      last = now_s();
      printf("progress: %" PRIu64 " inputs, %" PRIu64 " disagreements, %.0f s\n", st.inputs,
             st.disagreements, last - t0);
      fflush(stdout);
    }
  }
  double secs = now_s() - t0;
  printf("REPORT kernel fuzz: %" PRIu64 " inputs (%" PRIu64 " valid, %" PRIu64 " invalid), %"
         PRIu64 " disagreements, %" PRIu64 " out-of-window, %" PRIu64 " hangs; seed %" PRIu64
         ", %.1f s, %.2f M RTL cycles, worst cycles/bound %.3f; model status:", st.inputs,
         st.valid, st.invalid, st.disagreements, st.strays, st.hangs, seed, secs,
         (double)st.rtl_cycles / 1e6, st.max_ratio);
  for (int s = 0; s < 16; s++)
    if (st.by_status[s]) {
      const char *name = tsr_hal_hwerr_name((uint32_t)s);
      printf(" %.*s %" PRIu64, hwerr_len(name), name, st.by_status[s]);
    }
  printf("; %" PRIu64 " in queue mode\n", st.queue);
  CU_ASSERT_EQUAL(st.disagreements, 0);
}

int main(void) {
  if (setup()) {
    return tsr_test_skip_program("%s", g_lib_err[0] ? g_lib_err : "setup failed");
  }
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("kernel fuzz", NULL, NULL);
  CU_add_test(s, "the checks fire on stray accesses and hangs", test_checks_fire);
  CU_add_test(s, "regression inputs", test_regressions);
  CU_add_test(s, "random inputs, RTL vs functional model", test_random);
  int rc = tsr_test_run_all();
  for (int i = 0; i < N_INST; i++)
    if (g_sim[i]) api.destroy(g_sim[i]);
  return rc;
}
