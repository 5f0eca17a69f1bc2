/*
 * tsr_rtl_test.c - tests of the tessera kernel RTL through the tsr_sim.h ABI.
 *
 * The Verilated library is loaded with dlopen (as the sim backend does), so
 * one program tests the normal and the coverage build. Results are compared
 * bit for bit with the naive int8 reference below.
 *
 *   tsr_rtl_test --lib PATH [--quick] [--cycles] [--wave F --wave-start N --wave-end N
 *                --wave-depth D] [--coverage F] [--seed S] [test...]
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/tsr_regmap.h"
#include "tsr_sim.h"

/* ---- the library ---- */
static tsr_sim_api_t api;

static const char *g_wave, *g_cov;
static uint64_t g_wave_start, g_wave_end;
static int g_wave_depth, g_quick, g_cycles;
static uint32_t g_ports = 1; /* read ports of the library (HW_INFO 31:24) */
static uint64_t g_seed = 1;
static int g_fail;
static const char *g_test;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL %s:%d [%s] %s: ", __FILE__, __LINE__, g_test,  \
              #cond);                                                      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      g_fail++;                                                            \
      return -1;                                                           \
    }                                                                      \
  } while (0)

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint32_t rnd_range(uint32_t lo, uint32_t hi) { return lo + (uint32_t)(rnd() % (hi - lo + 1)); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- a simulator instance and its device memory ---- */
typedef struct {
  tsr_sim_t *sim;
  tsr_sim_config_t cfg;
  uint64_t next; /* bump allocator */
  uint32_t rows, cols;
} dev_t_;

/* Memory model overrides for the next dev_open (0 = default). */
static uint32_t g_lat, g_bw, g_outst;

static int dev_open(dev_t_ *d, uint64_t mem_size) {
  memset(d, 0, sizeof *d);
  api.config_init(&d->cfg);
  if (mem_size) d->cfg.mem_size = mem_size;
  if (g_lat) d->cfg.mem_latency = g_lat;
  if (g_bw) d->cfg.mem_bytes_per_cycle = g_bw;
  if (g_outst) d->cfg.mem_max_outstanding = g_outst;
  d->cfg.wave_path = g_wave;
  d->cfg.wave_start = g_wave_start;
  d->cfg.wave_end = g_wave_end;
  d->cfg.wave_depth = g_wave_depth;
  /* one coverage file per instance (each context counts on its own); make
   * coverage merges them */
  static int n_cov;
  static char cov_path[1024];
  if (g_cov) {
    snprintf(cov_path, sizeof cov_path, "%s.%d", g_cov, n_cov++);
    d->cfg.coverage_path = cov_path;
  }
  char err[256] = "";
  int rc = api.create(&d->cfg, &d->sim, err, sizeof err);
  CHECK(rc == 0 && d->sim, "create: %d %s", rc, err);
  api.geometry(d->sim, &d->rows, &d->cols);
  if (api.ports) g_ports = api.ports(d->sim);
  d->next = d->cfg.mem_base + 4096;
  return 0;
}

static void dev_close(dev_t_ *d) {
  if (d->sim) api.destroy(d->sim);
  d->sim = NULL;
}

static uint64_t dev_alloc(dev_t_ *d, uint64_t n, uint64_t align, uint64_t skew) {
  uint64_t a = (d->next + align - 1) / align * align + skew;
  d->next = a + n + 64;
  return a;
}

static int wr32(dev_t_ *d, uint32_t off, uint32_t v) {
  int rc = api.reg_write(d->sim, off, v);
  CHECK(rc == 0, "reg_write 0x%x: %d %s", off, rc, api.last_error(d->sim));
  return 0;
}
static int rd32(dev_t_ *d, uint32_t off, uint32_t *v) {
  int rc = api.reg_read(d->sim, off, v);
  CHECK(rc == 0, "reg_read 0x%x: %d %s", off, rc, api.last_error(d->sim));
  return 0;
}
static int rd64(dev_t_ *d, uint32_t off, uint64_t *v) {
  uint32_t lo, hi;
  if (rd32(d, off, &lo) || rd32(d, off + 4, &hi)) return -1;
  *v = (uint64_t)hi << 32 | lo;
  return 0;
}

typedef struct {
  uint32_t status, err_index, desc_done;
  uint64_t busy, stall, bytes_rd, bytes_wr, macs, wall_cycles;
  double wall_s;
} result_t;

static int set_args(dev_t_ *d, uint64_t base, uint64_t size, uint64_t ring, uint32_t n) {
  if (wr32(d, TSR_ARG_MEM_BASE, (uint32_t)base) || wr32(d, TSR_ARG_MEM_BASE + 4, base >> 32) ||
      wr32(d, TSR_ARG_MEM_SIZE, (uint32_t)size) || wr32(d, TSR_ARG_MEM_SIZE + 4, size >> 32) ||
      wr32(d, TSR_ARG_RING, (uint32_t)ring) || wr32(d, TSR_ARG_RING + 4, ring >> 32) ||
      wr32(d, TSR_ARG_N_DESC, n))
    return -1;
  return 0;
}

static int read_result(dev_t_ *d, result_t *r) {
  if (rd32(d, TSR_STAT_STATUS, &r->status) || rd32(d, TSR_STAT_ERR_INDEX, &r->err_index) ||
      rd32(d, TSR_STAT_DESC_DONE, &r->desc_done) || rd64(d, TSR_STAT_CYC_BUSY, &r->busy) ||
      rd64(d, TSR_STAT_CYC_STALL, &r->stall) || rd64(d, TSR_STAT_BYTES_RD, &r->bytes_rd) ||
      rd64(d, TSR_STAT_BYTES_WR, &r->bytes_wr) || rd64(d, TSR_STAT_MACS, &r->macs))
    return -1;
  return 0;
}

/* Runs until ap_done; then reads CTRL (clears ap_done), collects the
 * status and acknowledges with ap_continue (ap_ctrl_chain). */
static int wait_done(dev_t_ *d, result_t *r, uint64_t budget) {
  uint64_t ran = 0;
  double t0 = now_s();
  int rc = api.run(d->sim, budget, 1, &ran);
  if (r) {
    r->wall_s = now_s() - t0;
    r->wall_cycles = ran;
  }
  CHECK(rc == 1, "run returned %d after %" PRIu64 " cycles: %s", rc, ran, api.last_error(d->sim));
  uint32_t ctrl;
  if (rd32(d, TSR_REG_CTRL, &ctrl)) return -1;
  CHECK(ctrl & TSR_CTRL_AP_DONE, "CTRL 0x%x without ap_done", ctrl);
  if (r && read_result(d, r)) return -1;
  return wr32(d, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE);
}

static int launch(dev_t_ *d, uint64_t base, uint64_t size, uint64_t ring, uint32_t n, result_t *r) {
  if (set_args(d, base, size, ring, n) || wr32(d, TSR_REG_CTRL, TSR_CTRL_AP_START)) return -1;
  return wait_done(d, r, 50000000);
}

/* ---- matmul problems ---- */
typedef struct {
  uint32_t m, n, k, lda, ldw, ldc;
  uint64_t a, w, c;
  int8_t *ha, *hw;
  int32_t *ref;
  size_t c_bytes;
  uint32_t nch, cstride; /* W layout (W_NCH, W_CSTRIDE) */
} prob_t;

static void ref_gemm(prob_t *p) {
  for (uint32_t i = 0; i < p->m; i++)
    for (uint32_t j = 0; j < p->n; j++) {
      int32_t s = 0;
      for (uint32_t k = 0; k < p->k; k++)
        s += (int32_t)p->ha[(size_t)i * p->lda + k] * (int32_t)p->hw[(size_t)j * p->ldw + k];
      p->ref[(size_t)i * (p->ldc / 4) + j] = s;
    }
}

/* C and the bytes around it (before, after, row padding) set to the guard
 * value 0xA5, as before a run. */
static int prob_guard(dev_t_ *d, const prob_t *p) {
  uint8_t *g = malloc(p->c_bytes + 128);
  memset(g, 0xA5, p->c_bytes + 128);
  int rc = api.mem_write(d->sim, p->c - 64, g, p->c_bytes + 128);
  free(g);
  CHECK(rc == 0, "mem_write C guard");
  return 0;
}

/* fill: 0 random, 1 all -128, 2 small */
static int prob_make(dev_t_ *d, prob_t *p, uint32_t m, uint32_t n, uint32_t k, int pad,
                     int fill) {
  memset(p, 0, sizeof *p);
  p->m = m, p->n = n, p->k = k;
  p->lda = k + (pad ? rnd_range(0, 70) : 0);
  p->ldw = k + (pad ? rnd_range(0, 70) : 0);
  p->ldc = 4 * (n + (pad ? rnd_range(0, 20) : 0));
  size_t asz = (size_t)(m - 1) * p->lda + k, wsz = (size_t)(n - 1) * p->ldw + k;
  p->c_bytes = (size_t)(m - 1) * p->ldc + 4 * n;
  p->ha = malloc((size_t)m * p->lda);
  p->hw = malloc((size_t)n * p->ldw);
  p->ref = calloc((size_t)m * p->ldc / 4 + 1, 4);
  for (size_t i = 0; i < (size_t)m * p->lda; i++)
    p->ha[i] = fill == 1 ? -128 : fill == 2 ? (int8_t)(rnd() % 7 - 3) : (int8_t)(rnd() >> 56);
  for (size_t i = 0; i < (size_t)n * p->ldw; i++)
    p->hw[i] = fill == 1 ? -128 : fill == 2 ? (int8_t)(rnd() % 7 - 3) : (int8_t)(rnd() >> 56);
  p->a = dev_alloc(d, asz, pad ? 1 : 64, pad ? rnd_range(0, 63) : 0);
  p->w = dev_alloc(d, wsz, pad ? 1 : 64, pad ? rnd_range(0, 63) : 0);
  p->c = dev_alloc(d, p->c_bytes + 128, 64, 64 + (pad ? 4 * rnd_range(0, 15) : 0));
  CHECK(api.mem_write(d->sim, p->a, p->ha, asz) == 0, "mem_write A");
  CHECK(api.mem_write(d->sim, p->w, p->hw, wsz) == 0, "mem_write W");
  /* guard bytes before and after C and between its rows */
  if (prob_guard(d, p)) return -1;
  ref_gemm(p);
  return 0;
}

static void prob_free(prob_t *p) {
  free(p->ha), free(p->hw), free(p->ref);
  memset(p, 0, sizeof *p);
}

static void prob_desc(const prob_t *p, uint8_t out[64]) {
  tsr_desc_t dsc = {TSR_OP_GEMM_I8_I32, 0, p->m, p->n, p->k, p->lda, p->ldw, p->ldc,
                    p->a, p->w, p->c, p->nch, p->cstride};
  tsr_desc_pack(out, &dsc);
}

/* Places W again, striped over nch channels (hw/regmap.def W_NCH): row n at
 * W + (n % nch) * S + (n / nch) * LDW, with S the bytes of the fullest
 * channel plus a random skew; the classic copy stays where it was. */
static int prob_stripe(dev_t_ *d, prob_t *p, uint32_t nch) {
  uint32_t per = (p->n + nch - 1) / nch;
  uint32_t stride = per * p->ldw + rnd_range(0, 200);
  uint64_t base = dev_alloc(d, (uint64_t)nch * stride, 1, rnd_range(0, 63));
  for (uint32_t r = 0; r < p->n; r++) {
    uint64_t a = base + (uint64_t)(r % nch) * stride + (uint64_t)(r / nch) * p->ldw;
    CHECK(api.mem_write(d->sim, a, p->hw + (size_t)r * p->ldw, p->k) == 0, "mem_write W row");
  }
  p->w = base;
  p->nch = nch;
  p->cstride = stride;
  return 0;
}

/* C equals the reference, guard bytes (before, after, row padding) intact. */
static int prob_check(dev_t_ *d, const prob_t *p) {
  size_t n = p->c_bytes + 128;
  uint8_t *got = malloc(n);
  CHECK(api.mem_read(d->sim, p->c - 64, got, n) == 0, "mem_read C");
  for (size_t i = 0; i < n; i++) {
    size_t off = i - 64;
    int in_c = i >= 64 && off < p->c_bytes && (off % p->ldc) < 4 * p->n;
    if (!in_c) {
      if (got[i] != 0xA5) {
        free(got);
        CHECK(0, "guard byte at C%+ld changed to 0x%02x (M=%u N=%u K=%u)", (long)i - 64,
              got[i], p->m, p->n, p->k);
      }
    } else if (off % 4 == 0) {
      int32_t v;
      memcpy(&v, got + i, 4);
      size_t row = off / p->ldc, col = (off % p->ldc) / 4;
      int32_t want = p->ref[row * (p->ldc / 4) + col];
      if (v != want) {
        free(got);
        CHECK(0, "C[%zu][%zu] = %d, want %d (M=%u N=%u K=%u lda=%u ldw=%u ldc=%u)", row, col, v,
              want, p->m, p->n, p->k, p->lda, p->ldw, p->ldc);
      }
    }
  }
  free(got);
  return 0;
}

static uint64_t write_ring(dev_t_ *d, prob_t *ps, int n) {
  uint64_t ring = dev_alloc(d, 64 * (uint64_t)n, 64, 0);
  uint8_t *buf = malloc(64 * (size_t)n);
  for (int i = 0; i < n; i++) prob_desc(&ps[i], buf + 64 * i);
  api.mem_write(d->sim, ring, buf, 64 * (size_t)n);
  free(buf);
  return ring;
}

/* Runs problems in one ring and checks each, plus MACS and BYTES_WR. */
static int run_probs(dev_t_ *d, prob_t *ps, int n, result_t *out) {
  uint64_t ring = write_ring(d, ps, n);
  result_t r;
  if (launch(d, d->cfg.mem_base, d->cfg.mem_size, ring, n, &r)) return -1;
  CHECK(r.status == 0, "status %u at descriptor %u", r.status, r.err_index);
  CHECK(r.desc_done == (uint32_t)n, "desc_done %u of %d", r.desc_done, n);
  uint64_t macs = 0, wr = 0, rd_min = 64ull * n;
  for (int i = 0; i < n; i++) {
    if (prob_check(d, &ps[i])) return -1;
    macs += (uint64_t)ps[i].m * ps[i].n * ps[i].k;
    wr += 4ull * ps[i].m * ps[i].n;
    rd_min += (uint64_t)ps[i].m * ps[i].k + (uint64_t)ps[i].n * ps[i].k;
  }
  CHECK(r.macs == macs, "MACS %" PRIu64 " want %" PRIu64, r.macs, macs);
  CHECK(r.bytes_wr == wr, "BYTES_WR %" PRIu64 " want %" PRIu64, r.bytes_wr, wr);
  CHECK(r.bytes_rd >= rd_min, "BYTES_RD %" PRIu64 " below %" PRIu64, r.bytes_rd, rd_min);
  CHECK(r.busy > 0 && r.stall <= r.busy, "CYC_BUSY %" PRIu64 " CYC_STALL %" PRIu64, r.busy,
        r.stall);
  if (g_cycles)
    printf("cycles %s: %d descriptors busy %" PRIu64 " stall %" PRIu64 " rd %" PRIu64 "\n",
           g_test, n, r.busy, r.stall, r.bytes_rd);
  if (out) *out = r;
  return 0;
}

/* ---- tests ---- */
static int t_regs(void) {
  dev_t_ d;
  if (dev_open(&d, 1 << 20)) return -1;
  uint32_t v;
  if (rd32(&d, TSR_STAT_HW_INFO, &v)) return -1;
  CHECK((v & 0xff) == d.rows && (v >> 8 & 0xff) == d.cols && (v >> 16 & 0xff) == TSR_HW_IF_VERSION,
        "HW_INFO 0x%08x", v);
  CHECK((v >> 24) == g_ports && (!api.ports || api.ports(d.sim) == g_ports),
        "HW_INFO ports %u, library %u", v >> 24, api.ports ? api.ports(d.sim) : 0);
  if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK(v == TSR_CTRL_AP_IDLE, "CTRL after reset 0x%x", v);
  uint32_t offs[] = {TSR_ARG_MEM_BASE, TSR_ARG_MEM_BASE + 4, TSR_ARG_MEM_SIZE, TSR_ARG_MEM_SIZE + 4,
                     TSR_ARG_RING, TSR_ARG_RING + 4, TSR_ARG_N_DESC};
  for (unsigned i = 0; i < sizeof offs / sizeof offs[0]; i++)
    if (wr32(&d, offs[i], 0x11111111u * (i + 1))) return -1;
  for (unsigned i = 0; i < sizeof offs / sizeof offs[0]; i++) {
    if (rd32(&d, offs[i], &v)) return -1;
    CHECK(v == 0x11111111u * (i + 1), "arg 0x%x read 0x%x", offs[i], v);
  }
  /* queue registers: reset 0, read back (Q_CTRL keeps its two bits) */
  uint32_t qc, qt;
  if (rd32(&d, TSR_REG_Q_CTRL, &qc) || rd32(&d, TSR_REG_Q_TAIL, &qt)) return -1;
  CHECK(qc == 0 && qt == 0, "Q_CTRL 0x%x Q_TAIL 0x%x after reset", qc, qt);
  if (wr32(&d, TSR_REG_Q_CTRL, 0xFFFFFFFFu) || wr32(&d, TSR_REG_Q_TAIL, 0xDEADBEEFu) ||
      rd32(&d, TSR_REG_Q_CTRL, &qc) || rd32(&d, TSR_REG_Q_TAIL, &qt))
    return -1;
  CHECK(qc == (TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE) && qt == 0xDEADBEEFu,
        "Q_CTRL 0x%x Q_TAIL 0x%x", qc, qt);
  if (wr32(&d, TSR_REG_Q_CTRL, 0) || wr32(&d, TSR_REG_Q_TAIL, 0)) return -1;
  /* the arguments did not move */
  for (unsigned i = 0; i < sizeof offs / sizeof offs[0]; i++) {
    if (rd32(&d, offs[i], &v)) return -1;
    CHECK(v == 0x11111111u * (i + 1), "arg 0x%x read 0x%x after the queue registers", offs[i], v);
  }
  /* status registers are read-only, unmapped offsets read 0 */
  if (wr32(&d, TSR_STAT_STATUS, 7) || rd32(&d, TSR_STAT_STATUS, &v)) return -1;
  CHECK(v == 0, "STATUS writable: %u", v);
  if (wr32(&d, TSR_STAT_HW_FEAT, 0) || rd32(&d, TSR_STAT_HW_FEAT, &v)) return -1;
  CHECK(v == TSR_HW_FEAT_QUEUE, "HW_FEAT 0x%x, want queue mode only", v);
  uint32_t gaps[] = {TSR_ARG_MEM_BASE + 8, TSR_ARG_MEM_SIZE + 8, TSR_ARG_RING + 8};
  for (unsigned i = 0; i < sizeof gaps / sizeof gaps[0]; i++) {
    if (wr32(&d, gaps[i], 0x5A5A5A5Au) || rd32(&d, gaps[i], &v)) return -1;
    CHECK(v == 0, "unnamed word 0x%x reads 0x%x", gaps[i], v);
  }
  /* outside the 0x80 window or misaligned: SLVERR */
  CHECK(api.reg_read(d.sim, TSR_HW_CTRL_BYTES, &v) < 0, "read beyond the window accepted");
  CHECK(api.reg_write(d.sim, 0x102, 1) < 0, "misaligned write accepted");
  if (rd32(&d, TSR_REG_GIE, &v)) return -1; /* bus still works */
  dev_close(&d);
  return 0;
}

static int t_ctrl(void) {
  dev_t_ d;
  if (dev_open(&d, 1 << 20)) return -1;
  uint32_t v, isr;
  uint64_t ran;
  /* ap_ctrl_hs: empty ring, interrupts off */
  if (set_args(&d, d.cfg.mem_base, d.cfg.mem_size, d.cfg.mem_base, 0)) return -1;
  if (wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_START)) return -1;
  CHECK(api.run(d.sim, 100, 1, &ran) == 1, "no ap_done");
  CHECK(api.irq(d.sim) == 0, "interrupt without GIE");
  if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK((v & (TSR_CTRL_AP_DONE | TSR_CTRL_AP_READY)) == (TSR_CTRL_AP_DONE | TSR_CTRL_AP_READY) &&
        !(v & TSR_CTRL_AP_START) && !(v & TSR_CTRL_AP_IDLE), "CTRL at done 0x%x", v);
  if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK(!(v & (TSR_CTRL_AP_DONE | TSR_CTRL_AP_READY)), "done/ready not cleared on read: 0x%x", v);
  if (rd32(&d, TSR_REG_ISR, &isr)) return -1;
  CHECK(isr == 0, "ISR set with IER=0: %u", isr);
  /* ap_continue returns the kernel to idle */
  if (wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE) || rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK(v == TSR_CTRL_AP_IDLE, "CTRL after continue 0x%x", v);
  /* interrupts: IER both, GIE on */
  if (wr32(&d, TSR_REG_IER, 3) || wr32(&d, TSR_REG_GIE, 1)) return -1;
  if (wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_START)) return -1;
  CHECK(api.run(d.sim, 100, 1, &ran) == 1, "no ap_done");
  CHECK(api.irq(d.sim) == 1, "no interrupt");
  if (rd32(&d, TSR_REG_ISR, &isr)) return -1;
  CHECK(isr == 3, "ISR 0x%x, want done|ready", isr);
  if (wr32(&d, TSR_REG_ISR, 1) || rd32(&d, TSR_REG_ISR, &isr)) return -1; /* toggle done */
  CHECK(isr == 2 && api.irq(d.sim) == 1, "ISR after toggling bit 0: 0x%x", isr);
  if (wr32(&d, TSR_REG_ISR, 2) || rd32(&d, TSR_REG_ISR, &isr)) return -1;
  CHECK(isr == 0 && api.irq(d.sim) == 0, "ISR after toggling bit 1: 0x%x irq %d", isr,
        api.irq(d.sim));
  if (wr32(&d, TSR_REG_ISR, 1) || rd32(&d, TSR_REG_ISR, &isr)) return -1; /* toggle sets too */
  CHECK(isr == 1 && api.irq(d.sim) == 1, "ISR toggle from 0: 0x%x", isr);
  if (wr32(&d, TSR_REG_GIE, 0)) return -1;
  CHECK(api.irq(d.sim) == 0, "interrupt with GIE=0");
  if (wr32(&d, TSR_REG_ISR, 1) || rd32(&d, TSR_REG_CTRL, &v) ||
      wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE))
    return -1;

  /* ap_ctrl_chain: queue a second start while the first runs */
  prob_t p1, p2;
  if (prob_make(&d, &p1, 40, 40, 200, 0, 0) || prob_make(&d, &p2, 17, 5, 33, 1, 0)) return -1;
  uint64_t r1 = write_ring(&d, &p1, 1), r2 = write_ring(&d, &p2, 1);
  if (set_args(&d, d.cfg.mem_base, d.cfg.mem_size, r1, 1) ||
      wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_START))
    return -1;
  if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK((v & TSR_CTRL_AP_READY) && !(v & TSR_CTRL_AP_IDLE) && !(v & TSR_CTRL_AP_START),
        "CTRL while running 0x%x", v);
  if (set_args(&d, d.cfg.mem_base, d.cfg.mem_size, r2, 1) ||
      wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_START))
    return -1; /* queued */
  CHECK(api.run(d.sim, 1000000, 1, &ran) == 1, "first run never done");
  if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK((v & TSR_CTRL_AP_DONE) && (v & TSR_CTRL_AP_START) && !(v & TSR_CTRL_AP_IDLE),
        "CTRL at first done with a queued start: 0x%x", v);
  /* held until ap_continue: nothing else runs */
  CHECK(api.run(d.sim, 2000, 1, &ran) == 0, "ap_done again without continue");
  if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
  CHECK(!(v & TSR_CTRL_AP_READY) && (v & TSR_CTRL_AP_START), "second start taken early 0x%x", v);
  result_t r;
  if (read_result(&d, &r)) return -1;
  CHECK(r.macs == 40ull * 40 * 200 && r.status == 0, "first run status %u macs %" PRIu64, r.status,
        r.macs);
  if (prob_check(&d, &p1)) return -1;
  if (wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE)) return -1;
  if (wait_done(&d, &r, 1000000)) return -1;
  CHECK(r.macs == 17ull * 5 * 33 && r.status == 0, "second run status %u macs %" PRIu64, r.status,
        r.macs);
  if (prob_check(&d, &p2)) return -1;

  /* auto_restart: the kernel restarts by itself until it is cleared */
  if (set_args(&d, d.cfg.mem_base, d.cfg.mem_size, r2, 0)) return -1;
  if (wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_START | TSR_CTRL_AUTO_RESTART)) return -1;
  int dones = 0;
  for (int i = 0; i < 5; i++) {
    if (api.run(d.sim, 200, 1, &ran) != 1) break;
    if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
    CHECK(v & TSR_CTRL_AUTO_RESTART, "auto_restart lost: 0x%x", v);
    dones++;
  }
  CHECK(dones == 5, "auto_restart gave %d runs", dones);
  if (wr32(&d, TSR_REG_CTRL, 0)) return -1; /* clear auto_restart */
  /* the run under way (and one whose start was taken as the bit cleared)
   * still completes and waits for ap_continue */
  for (int i = 0; i < 4; i++) {
    api.run(d.sim, 200, 0, &ran);
    if (rd32(&d, TSR_REG_CTRL, &v)) return -1;
    if ((v & TSR_CTRL_AP_IDLE) && !(v & TSR_CTRL_AP_START)) break;
    if (wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE)) return -1;
  }
  CHECK((v & TSR_CTRL_AP_IDLE) && !(v & TSR_CTRL_AP_START), "after auto_restart off: 0x%x", v);
  prob_free(&p1), prob_free(&p2);
  dev_close(&d);
  return 0;
}

static int t_gemm_small(void) {
  dev_t_ d;
  if (dev_open(&d, 16 << 20)) return -1;
  prob_t p[4];
  if (prob_make(&d, &p[0], 1, 1, 1, 0, 0) || prob_make(&d, &p[1], 16, 16, 64, 0, 0) ||
      prob_make(&d, &p[2], 5, 7, 9, 1, 0) || prob_make(&d, &p[3], 2, 33, 100, 1, 0))
    return -1;
  int rc = run_probs(&d, p, 4, NULL);
  for (int i = 0; i < 4; i++) prob_free(&p[i]);
  dev_close(&d);
  return rc;
}

/* Random shapes and strides, several descriptors per ring, under memory
 * models from one-cycle latency to a slow narrow memory with one burst in
 * flight. */
static int t_gemm_random(void) {
  static const uint32_t mems[][3] = {{0, 0, 0}, {1, 64, 64}, {200, 16, 1}, {7, 24, 3}, {90, 64, 4}};
  int rounds = g_quick ? 2 : 10, per = g_quick ? 6 : 12;
  dev_t_ d;
  d.sim = NULL;
  for (int round = 0; round < rounds; round++) {
    const uint32_t *mm = mems[round % 5];
    g_lat = mm[0], g_bw = mm[1], g_outst = mm[2];
    int rc0 = dev_open(&d, 64 << 20);
    g_lat = g_bw = g_outst = 0;
    if (rc0) return -1;
    prob_t p[12];
    for (int i = 0; i < per; i++) {
      uint32_t m = rnd_range(1, i % 3 == 0 ? 4 : 70), n = rnd_range(1, 70),
               k = rnd_range(1, i % 4 == 0 ? 300 : 90);
      if (prob_make(&d, &p[i], m, n, k, (int)(rnd() & 1), 0)) return -1;
    }
    int rc = run_probs(&d, p, per, NULL);
    for (int i = 0; i < per; i++) prob_free(&p[i]);
    dev_close(&d);
    if (rc) return rc;
  }
  return 0;
}

static int t_gemm_edges(void) {
  dev_t_ d;
  if (dev_open(&d, 64 << 20)) return -1;
  /* K = 1; M = 1 and 3 (GEMV lanes); long K over two chunks with -128 * -128;
   * N, M not multiples of the array; K just above a chunk */
  prob_t p[7];
  if (prob_make(&d, &p[0], 37, 29, 1, 1, 0) || prob_make(&d, &p[1], 1, 300, 257, 1, 0) ||
      prob_make(&d, &p[2], 3, 19, 77, 1, 0) ||
      prob_make(&d, &p[3], 17, 18, g_quick ? 4200 : 9000, 0, 1) ||
      prob_make(&d, &p[4], 1, 33, 4097, 1, 1) || prob_make(&d, &p[5], 33, 1, 65, 1, 0) ||
      prob_make(&d, &p[6], 2, 2, 4096 + 17, 1, 0))
    return -1;
  int rc = run_probs(&d, p, 7, NULL);
  if (!rc) {
    int32_t v;
    api.mem_read(d.sim, p[3].c, &v, 4);
    CHECK(v == 16384 * (int32_t)p[3].k, "extreme accumulation %d", v);
  }
  for (int i = 0; i < 7; i++) prob_free(&p[i]);
  dev_close(&d);
  return rc;
}

static int t_many_tiles(void) {
  dev_t_ d;
  if (dev_open(&d, 64 << 20)) return -1;
  enum { N = 40 };
  prob_t p[N];
  for (int i = 0; i < N; i++)
    if (prob_make(&d, &p[i], rnd_range(1, 20), rnd_range(1, 20), rnd_range(1, 40), 1, 2)) return -1;
  int rc = run_probs(&d, p, N, NULL);
  for (int i = 0; i < N; i++) prob_free(&p[i]);
  dev_close(&d);
  return rc;
}

/* ---- block-sparse W (GEMM_BSR_I8_I32, hw/README.md "Block-sparse weights") ----
 * The test's own layout: a bitmap row of ceil(ceil(K/BK)/8) bytes per tile
 * row of 16 W rows, LDB apart; the stored tiles (16 x BK bytes, row j at
 * +j*BK) from the next 64-byte boundary, tile rows in order, k order inside
 * a row. Tiles not kept are zeros in the dense W the reference multiplies;
 * bytes the kernel must not use (bitmap padding, tile bytes past N or K)
 * are random. */
typedef struct {
  prob_t p;
  uint32_t bk, ldb, nnz;
  uint64_t bm, elems;
  uint64_t rd; /* bytes the documented dataflow reads */
} bsr_t;

/* Bytes read by the dataflow of hw/README.md: the descriptor; every bitmap
 * row for the count and row 0 for the walk; the next tile row's bitmap row
 * in each tile row but the last; per m block and tile row, the A rows of
 * each k chunk holding a stored tile (once per m block when K fits one
 * chunk) and every stored tile (once in all when N fits one tile row too). */
static uint64_t bsr_bytes(const bsr_t *b, const uint8_t *bm, uint32_t rows, uint32_t cols) {
  const prob_t *p = &b->p;
  const uint64_t kchunk = 4096, ktc = kchunk / b->bk;
  uint32_t ntr = (p->n + 15) / 16, nkt = (p->k + b->bk - 1) / b->bk, rb = (nkt + 7) / 8;
  int gemv = (uint64_t)p->m * cols < 64;
  uint32_t mrows = gemv ? 1 : rows, mblocks = (p->m + mrows - 1) / mrows;
  int kfits = nkt <= ktc, wfits = p->n <= 16;
  uint64_t rd = 64 + (uint64_t)(ntr + 1) * rb + ((uint64_t)mblocks * ntr - 1) * rb;
  for (uint32_t mb = 0; mb < mblocks; mb++) {
    uint64_t ml = gemv ? 1 : (p->m - mb * mrows < mrows ? p->m - mb * mrows : mrows);
    int a_held = 0;
    for (uint32_t tr = 0; tr < ntr; tr++) {
      const uint8_t *row = bm + (size_t)tr * b->ldb;
      for (uint64_t t0 = 0; t0 < nkt; t0 += ktc) {
        uint64_t in = 0;
        for (uint64_t t = t0; t < t0 + ktc && t < nkt; t++) in += (row[t / 8] >> (t % 8)) & 1;
        if (!in) continue;
        uint64_t k0 = t0 * b->bk, kc = p->k - k0 < kchunk ? p->k - k0 : kchunk;
        if (!(kfits && a_held)) rd += ml * kc;
        a_held = 1;
        if (!(kfits && wfits && mb)) rd += in * 16 * b->bk;
      }
    }
  }
  return rd;
}

static int bsr_make(dev_t_ *d, bsr_t *b, uint32_t m, uint32_t n, uint32_t k, uint32_t bk,
                    double density, int pad) {
  memset(b, 0, sizeof *b);
  if (prob_make(d, &b->p, m, n, k, pad, 0)) return -1;
  prob_t *p = &b->p;
  uint32_t ntr = (n + 15) / 16, nkt = (k + bk - 1) / bk, rb = (nkt + 7) / 8;
  b->bk = bk;
  b->ldb = rb + (pad ? rnd_range(0, 9) : 0);
  uint8_t *bm = malloc((size_t)ntr * b->ldb);
  for (size_t i = 0; i < (size_t)ntr * b->ldb; i++) bm[i] = (uint8_t)rnd();
  uint32_t cap = ntr * nkt;
  uint8_t *tiles = malloc((size_t)cap * 16 * bk);
  for (size_t i = 0; i < (size_t)cap * 16 * bk; i++) tiles[i] = (uint8_t)rnd();
  for (uint32_t tr = 0; tr < ntr; tr++) {
    uint8_t *row = bm + (size_t)tr * b->ldb;
    memset(row, 0, rb);
    for (uint32_t t = 0; t < nkt; t++) {
      int keep = density >= 1.0 || (double)(rnd() % 1000) < density * 1000.0;
      uint32_t nl = n - 16 * tr < 16 ? n - 16 * tr : 16, kl = k - t * bk < bk ? k - t * bk : bk;
      for (uint32_t j = 0; j < nl; j++) {
        int8_t *w = p->hw + (size_t)(16 * tr + j) * p->ldw + (size_t)t * bk;
        if (keep) memcpy(tiles + (size_t)b->nnz * 16 * bk + (size_t)j * bk, w, kl);
        else memset(w, 0, kl);
      }
      if (keep) {
        row[t / 8] |= (uint8_t)(1u << (t % 8));
        b->nnz++;
        b->elems += (uint64_t)nl * kl;
      }
    }
  }
  ref_gemm(p);
  b->rd = bsr_bytes(b, bm, d->rows, d->cols);
  uint64_t span = (uint64_t)ntr * b->ldb, tb = (uint64_t)b->nnz * 16 * bk;
  b->bm = dev_alloc(d, span + 64 + tb, pad ? 1 : 64, pad ? rnd_range(0, 63) : 0);
  uint64_t t0 = (b->bm + span + 63) / 64 * 64;
  CHECK(api.mem_write(d->sim, b->bm, bm, span) == 0, "mem_write bitmaps");
  if (tb) CHECK(api.mem_write(d->sim, t0, tiles, tb) == 0, "mem_write tiles");
  free(bm);
  free(tiles);
  return 0;
}

static void bsr_desc(const bsr_t *b, uint8_t out[64]) {
  const prob_t *p = &b->p;
  tsr_desc_t dsc = {TSR_OP_GEMM_BSR_I8_I32, 0, p->m, p->n, p->k, p->lda, b->ldb, p->ldc,
                    p->a, b->bm, p->c, (uint32_t)TSR_HW_BSR_BN << 16 | b->bk, b->nnz};
  tsr_desc_pack(out, &dsc);
}

/* Runs block-sparse problems in one ring: C bit-exact, guards intact,
 * MACS = M x the stored tiles' elements inside N x K, BYTES_WR. */
static int run_bsrs(dev_t_ *d, bsr_t *bs, int n, result_t *out) {
  uint64_t ring = dev_alloc(d, 64 * (uint64_t)n, 64, 0);
  uint8_t *buf = malloc(64 * (size_t)n);
  for (int i = 0; i < n; i++) bsr_desc(&bs[i], buf + 64 * i);
  api.mem_write(d->sim, ring, buf, 64 * (size_t)n);
  free(buf);
  result_t r;
  if (launch(d, d->cfg.mem_base, d->cfg.mem_size, ring, n, &r)) return -1;
  CHECK(r.status == 0, "status %u at descriptor %u", r.status, r.err_index);
  CHECK(r.desc_done == (uint32_t)n, "desc_done %u of %d", r.desc_done, n);
  uint64_t macs = 0, wr = 0, rd = 0;
  for (int i = 0; i < n; i++) {
    if (prob_check(d, &bs[i].p)) return -1;
    macs += (uint64_t)bs[i].p.m * bs[i].elems;
    wr += 4ull * bs[i].p.m * bs[i].p.n;
    rd += bs[i].rd;
  }
  CHECK(r.bytes_rd == rd, "BYTES_RD %" PRIu64 " want %" PRIu64, r.bytes_rd, rd);
  CHECK(r.macs == macs, "MACS %" PRIu64 " want %" PRIu64, r.macs, macs);
  CHECK(r.bytes_wr == wr, "BYTES_WR %" PRIu64 " want %" PRIu64, r.bytes_wr, wr);
  if (g_cycles)
    printf("cycles %s: %d descriptors busy %" PRIu64 " stall %" PRIu64 " rd %" PRIu64 "\n",
           g_test, n, r.busy, r.stall, r.bytes_rd);
  if (out) *out = r;
  return 0;
}

static int bsr_ops(dev_t_ *d, int *has) {
  uint32_t ops;
  if (rd32(d, TSR_STAT_HW_OPS, &ops)) return -1;
  *has = (ops >> TSR_OP_GEMM_BSR_I8_I32) & 1;
  CHECK((ops & 3u) == 3u, "HW_OPS 0x%x without NOP and GEMM", ops);
  return 0;
}

/* Odd shapes at densities 0 .. 1, both tile widths, GEMV and GEMM, K over
 * two chunks, random strides and alignments. */
static int t_bsr(void) {
  dev_t_ d;
  if (dev_open(&d, 64 << 20)) return -1;
  int has;
  if (bsr_ops(&d, &has)) return -1;
  if (!has) {
    printf("SKIP bsr: this geometry (%ux%u) has no GEMM_BSR (HW_OPS)\n", d.rows, d.cols);
    dev_close(&d);
    return 0;
  }
  static const struct { uint32_t m, n, k, bk; double dens; } cs[] = {
      {1, 16, 64, 64, 1.0},     {16, 16, 64, 64, 1.0},   {5, 7, 9, 64, 1.0},
      {3, 40, 200, 128, 0.5},   {37, 29, 172, 64, 0.5},  {1, 300, 257, 128, 0.25},
      {20, 33, 100, 64, 0.0},   {2, 50, 4097, 128, 0.5}, {17, 18, 4300, 64, 0.25},
      {1, 64, 8192, 64, 0.125}, {40, 64, 128, 128, 1.0}, {1, 17, 1, 64, 1.0},
  };
  int nc = (int)(sizeof cs / sizeof cs[0]);
  bsr_t b[12];
  for (int i = 0; i < nc; i++)
    if (bsr_make(&d, &b[i], cs[i].m, cs[i].n, cs[i].k, cs[i].bk, cs[i].dens, i % 3 != 0)) return -1;
  int rc = run_bsrs(&d, b, nc, NULL);
  for (int i = 0; i < nc; i++) prob_free(&b[i].p);
  /* rings of one density and tile width after another on one instance */
  static const uint32_t sh[][3] = {
      {1, 1, 1},     {3, 17, 130},  {17, 33, 257}, {5, 40, 1000}, {33, 16, 128},
      {1, 300, 700}, {20, 47, 4100}, {2, 5, 65535}, {64, 64, 64}, {4, 31, 383},
  };
  static const double dens[] = {0, 0.25, 0.5, 1};
  for (int di = 0; di < 8 && !rc; di++) {
    d.next = d.cfg.mem_base + 4096;
    for (int i = 0; i < 10; i++)
      if (bsr_make(&d, &b[i], sh[i][0], sh[i][1], sh[i][2], di % 2 ? 128 : 64, dens[di / 2], 1))
        return -1;
    rc = run_bsrs(&d, b, 10, NULL);
    for (int i = 0; i < 10; i++) prob_free(&b[i].p);
  }
  dev_close(&d);
  return rc;
}

/* Every refusal: error code, index, nothing touched outside the results of
 * the descriptors before the bad one. */
static int t_refuse(void) {
  dev_t_ d;
  if (dev_open(&d, 4 << 20)) return -1;
  uint64_t base = d.cfg.mem_base, wbase = base + 4096, wsize = (2 << 20) - 4096;
  prob_t good, bad;
  d.next = wbase;
  if (prob_make(&d, &good, 9, 9, 9, 1, 0) || prob_make(&d, &bad, 4, 4, 4, 0, 0)) return -1;
  typedef struct { const char *what; uint32_t want; tsr_desc_t d; } rcase_t;
  tsr_desc_t ok = {TSR_OP_GEMM_I8_I32, 0, bad.m, bad.n, bad.k, bad.lda, bad.ldw, bad.ldc,
                   bad.a, bad.w, bad.c, 0, 0};
  rcase_t rc[32];
  int n = 0;
#define ADD(w, code, field, val) \
  do { rc[n].what = w; rc[n].want = code; rc[n].d = ok; rc[n].d.field = val; n++; } while (0)
  ADD("opcode 7", TSR_HWERR_BAD_OPCODE, opcode, 7);
  ADD("flags", TSR_HWERR_BAD_OPCODE, flags, 1);
  ADD("W_NCH 3", TSR_HWERR_BAD_STRIDE, w_nch, 3);
  ADD("W_NCH above the ports", TSR_HWERR_BAD_STRIDE, w_nch, 2 * g_ports);
  ADD("W_CSTRIDE with one channel", TSR_HWERR_BAD_STRIDE, w_cstride, 64);
  ADD("M = 0", TSR_HWERR_BAD_DIMS, m, 0);
  ADD("N = 0", TSR_HWERR_BAD_DIMS, n, 0);
  ADD("K = 0", TSR_HWERR_BAD_DIMS, k, 0);
  ADD("K > MAX_DIM", TSR_HWERR_BAD_DIMS, k, TSR_HW_MAX_DIM + 1);
  ADD("LDA < K", TSR_HWERR_BAD_STRIDE, lda, bad.k - 1);
  ADD("LDW < K", TSR_HWERR_BAD_STRIDE, ldw, bad.k - 1);
  ADD("LDC < 4N", TSR_HWERR_BAD_STRIDE, ldc, 4 * bad.n - 4);
  ADD("LDC % 4", TSR_HWERR_BAD_STRIDE, ldc, 4 * bad.n + 2);
  ADD("C % 4", TSR_HWERR_BAD_STRIDE, c_addr, bad.c + 2);
  ADD("A below", TSR_HWERR_ADDR_RANGE, a_addr, wbase - 1);
  ADD("A above", TSR_HWERR_ADDR_RANGE, a_addr, wbase + wsize - bad.k);
  ADD("W below", TSR_HWERR_ADDR_RANGE, w_addr, base);
  ADD("W above", TSR_HWERR_ADDR_RANGE, w_addr, wbase + wsize);
  ADD("C below", TSR_HWERR_ADDR_RANGE, c_addr, wbase - 4);
  ADD("C above", TSR_HWERR_ADDR_RANGE, c_addr, wbase + wsize - 4 * bad.n);
  ADD("A wraps", TSR_HWERR_ADDR_RANGE, a_addr, UINT64_MAX - 8);
  ADD("LDA huge", TSR_HWERR_ADDR_RANGE, lda, 0x80000000u);
  if (g_ports > 1) { /* the last channel's rows past the window */
    ADD("W striped above", TSR_HWERR_ADDR_RANGE, w_nch, g_ports);
    rc[n - 1].d.w_cstride = (uint32_t)(wsize / (g_ports - 1));
  }
  size_t snap_n = 3 << 20;
  uint8_t *before = malloc(snap_n), *after = malloc(snap_n);
  for (int i = 0; i < n; i++) {
    /* ring: [good, bad] */
    uint8_t ringb[128];
    prob_desc(&good, ringb);
    tsr_desc_pack(ringb + 64, &rc[i].d);
    uint64_t ring = wbase + wsize - 128;
    api.mem_write(d.sim, ring, ringb, 128);
    uint8_t guard[256];
    memset(guard, 0xA5, sizeof guard);
    api.mem_write(d.sim, good.c - 64, guard, 64);
    api.mem_read(d.sim, base, before, snap_n);
    result_t r;
    if (launch(&d, wbase, wsize, ring, 2, &r)) return -1;
    CHECK(r.status == rc[i].want && r.err_index == 1 && r.desc_done == 1,
          "%s: status %u index %u done %u, want status %u", rc[i].what, r.status, r.err_index,
          r.desc_done, rc[i].want);
    if (prob_check(&d, &good)) return -1;
    api.mem_read(d.sim, base, after, snap_n);
    for (size_t j = 0; j < snap_n; j++) {
      uint64_t a = base + j;
      int in_good_c = a >= good.c && a < good.c + good.c_bytes;
      if (!in_good_c && before[j] != after[j])
        CHECK(0, "%s: byte at 0x%" PRIx64 " changed", rc[i].what, a);
    }
  }
  /* ring checks: misaligned, outside, straddling the end */
  struct { const char *what; uint64_t ring; uint32_t n; } rr[] = {
      {"ring misaligned", wbase + 32, 1},
      {"ring below", base, 1},
      {"ring past end", wbase + wsize - 64, 2},
  };
  for (unsigned i = 0; i < sizeof rr / sizeof rr[0]; i++) {
    api.mem_read(d.sim, base, before, snap_n);
    result_t r;
    if (launch(&d, wbase, wsize, rr[i].ring, rr[i].n, &r)) return -1;
    CHECK(r.status == TSR_HWERR_RING_RANGE && r.desc_done == 0 && r.bytes_rd == 0,
          "%s: status %u done %u bytes_rd %" PRIu64, rr[i].what, r.status, r.desc_done,
          r.bytes_rd);
    api.mem_read(d.sim, base, after, snap_n);
    CHECK(memcmp(before, after, snap_n) == 0, "%s: memory changed", rr[i].what);
  }
  /* memory error: window larger than the memory: DECERR -> AXI_ERROR */
  {
    prob_t e = bad;
    tsr_desc_t dd = ok;
    dd.w_addr = base + d.cfg.mem_size + 4096; /* inside the window, outside memory */
    uint8_t ringb[64];
    tsr_desc_pack(ringb, &dd);
    uint64_t ring = wbase;
    api.mem_write(d.sim, ring, ringb, 64);
    result_t r;
    if (launch(&d, base, 1ull << 30, ring, 1, &r)) return -1;
    CHECK(r.status == TSR_HWERR_AXI_ERROR && r.err_index == 0, "DECERR: status %u", r.status);
    (void)e;
  }
  /* and the kernel still works afterwards */
  {
    result_t r;
    uint64_t ring = write_ring(&d, &good, 1);
    if (launch(&d, wbase, wsize, ring, 1, &r)) return -1;
    CHECK(r.status == 0, "after errors: status %u", r.status);
  }
  free(before), free(after);
  prob_free(&good), prob_free(&bad);
  dev_close(&d);
  return 0;
}

static int t_instances(void) {
  dev_t_ a, b;
  if (dev_open(&a, 8 << 20) || dev_open(&b, 8 << 20)) return -1;
  prob_t pa, pb;
  if (prob_make(&a, &pa, 20, 30, 50, 1, 0) || prob_make(&b, &pb, 31, 3, 70, 1, 0)) return -1;
  uint64_t ra = write_ring(&a, &pa, 1), rb = write_ring(&b, &pb, 1);
  if (set_args(&a, a.cfg.mem_base, a.cfg.mem_size, ra, 1) ||
      set_args(&b, b.cfg.mem_base, b.cfg.mem_size, rb, 1) ||
      wr32(&a, TSR_REG_CTRL, TSR_CTRL_AP_START) || wr32(&b, TSR_REG_CTRL, TSR_CTRL_AP_START))
    return -1;
  uint64_t ran;
  for (int i = 0; i < 100; i++) api.run(a.sim, 50, 1, &ran), api.run(b.sim, 50, 1, &ran);
  result_t r;
  if (wait_done(&a, &r, 1000000) || wait_done(&b, &r, 1000000)) return -1;
  if (prob_check(&a, &pa) || prob_check(&b, &pb)) return -1;
  prob_free(&pa), prob_free(&pb);
  dev_close(&a), dev_close(&b);
  return 0;
}

/* W striped over the read ports: random shapes, strides and skews, GEMV and
 * GEMM, classic and striped descriptors in one ring, channels with
 * different latencies and bandwidths. */
static int t_striped(void) {
  if (g_ports < 2) {
    printf("SKIP case striped: the library has one read port (build with RTL_PORTS=2 or more)\n");
    return 0;
  }
  int rounds = g_quick ? 2 : 4, per = g_quick ? 6 : 10;
  for (int round = 0; round < rounds; round++) {
    dev_t_ d;
    memset(&d, 0, sizeof d);
    api.config_init(&d.cfg);
    d.cfg.mem_size = 64 << 20;
    for (uint32_t p = 1; p < g_ports; p++) {
      d.cfg.ch_latency[p] = round % 2 ? 1 + (uint32_t)rnd_range(0, 120) : 0;
      d.cfg.ch_bytes_per_cycle[p] = round % 2 ? 16 * (uint32_t)rnd_range(1, 4) : 0;
    }
    char err[256] = "";
    CHECK(api.create(&d.cfg, &d.sim, err, sizeof err) == 0, "create: %s", err);
    api.geometry(d.sim, &d.rows, &d.cols);
    d.next = d.cfg.mem_base + 4096;
    prob_t p[10];
    for (int i = 0; i < per; i++) {
      uint32_t m = rnd_range(1, i % 2 ? 3 : 70), n = rnd_range(1, 3 * d.cols),
               k = rnd_range(1, i % 3 == 0 ? 5000 : 200);
      if (prob_make(&d, &p[i], m, n, k, (int)(rnd() & 1), 0)) return -1;
      if (i % 4 != 3 && prob_stripe(&d, &p[i], g_ports)) return -1;
    }
    int rc = run_probs(&d, p, per, NULL);
    for (int i = 0; i < per; i++) prob_free(&p[i]);
    api.destroy(d.sim);
    if (rc) return rc;
  }
  return 0;
}

/* ---- queue mode (hw/regmap.def Q_CTRL, Q_TAIL) ----
 * One start runs over a ring of S slots: descriptor i (counted from the
 * start) is in slot i mod S and runs once Q_TAIL passes i; the host fills
 * slots through the memory backdoor and raises Q_TAIL while the kernel
 * runs, follows DESC_DONE, and sets close to end the run. */

/* Starts a queue-mode run over `slots` slots at `ring` (the whole memory as
 * the window) with Q_CTRL = ctrl and Q_TAIL = tail. */
static int q_start(dev_t_ *d, uint64_t ring, uint32_t slots, uint32_t ctrl, uint32_t tail) {
  if (set_args(d, d->cfg.mem_base, d->cfg.mem_size, ring, slots) ||
      wr32(d, TSR_REG_Q_TAIL, tail) || wr32(d, TSR_REG_Q_CTRL, ctrl) ||
      wr32(d, TSR_REG_CTRL, TSR_CTRL_AP_START))
    return -1;
  /* the start is taken (and the status registers cleared) a few cycles
   * after the write */
  uint64_t ran;
  CHECK(api.run(d->sim, 8, 1, &ran) >= 0, "run: %s", api.last_error(d->sim));
  return 0;
}

/* Writes descriptor i of a queue into its slot. */
static int q_put(dev_t_ *d, uint64_t ring, uint32_t slots, uint32_t i, const uint8_t desc[64]) {
  CHECK(api.mem_write(d->sim, ring + 64ull * (i % slots), desc, 64) == 0, "mem_write slot");
  return 0;
}

/* Runs in slices until DESC_DONE reads `want`; the kernel must not finish
 * meanwhile. */
static int q_until(dev_t_ *d, uint32_t want, uint64_t budget) {
  uint64_t spent = 0;
  for (;;) {
    uint32_t done;
    if (rd32(d, TSR_STAT_DESC_DONE, &done)) return -1;
    if (done == want) return 0;
    CHECK(done < want, "DESC_DONE %u past the %u published", done, want);
    CHECK(spent < budget, "DESC_DONE %u of %u after %" PRIu64 " cycles", done, want, spent);
    uint64_t ran = 0;
    int rc = api.run(d->sim, 2000, 1, &ran);
    spent += ran;
    if (rc == 1) {
      result_t r;
      if (read_result(d, &r)) return -1;
      CHECK(0, "the queue finished with work published: STATUS %u ERR_INDEX %u DESC_DONE %u of %u",
            r.status, r.err_index, r.desc_done, want);
    }
    CHECK(rc == 0, "run: %d %s", rc, api.last_error(d->sim));
  }
}

/* The kernel waits for its doorbell: `cycles` more cycles change neither
 * CYC_BUSY nor DESC_DONE, and the run is not done. *busy gets CYC_BUSY. */
static int q_waiting(dev_t_ *d, uint32_t want_done, uint64_t cycles, uint64_t *busy) {
  uint64_t b1, b2, ran;
  uint32_t ctrl, done;
  if (rd64(d, TSR_STAT_CYC_BUSY, &b1)) return -1;
  CHECK(api.run(d->sim, cycles, 1, &ran) == 0, "the queue finished while waiting");
  if (rd64(d, TSR_STAT_CYC_BUSY, &b2) || rd32(d, TSR_STAT_DESC_DONE, &done) ||
      rd32(d, TSR_REG_CTRL, &ctrl))
    return -1;
  CHECK(b1 == b2, "CYC_BUSY grew from %" PRIu64 " to %" PRIu64 " while waiting", b1, b2);
  CHECK(done == want_done, "DESC_DONE %u while waiting, want %u", done, want_done);
  CHECK(!(ctrl & (TSR_CTRL_AP_DONE | TSR_CTRL_AP_IDLE)), "CTRL 0x%x while waiting", ctrl);
  *busy = b2;
  return 0;
}

static int t_queue(void) {
  dev_t_ d;
  if (dev_open(&d, 64 << 20)) return -1;
  enum { S = 4, NQ = 11, NB = 5 };
  static const uint32_t batch[NB] = {1, 3, 2, 4, 1};
  static const uint32_t sh[NQ][3] = {
      {1, 70, 300}, {20, 33, 100}, {1, 200, 64}, {37, 29, 172}, {2, 48, 500}, {64, 64, 64},
      {5, 7, 9},    {1, 1, 1},     {17, 90, 257}, {3, 130, 130}, {50, 20, 40},
  };
  prob_t p[NQ];
  uint8_t desc[NQ][64];
  for (int i = 0; i < NQ; i++) {
    if (prob_make(&d, &p[i], sh[i][0], sh[i][1], sh[i][2], i % 2, 0)) return -1;
    if (g_ports > 1 && i % 3 != 2 && prob_stripe(&d, &p[i], g_ports)) return -1;
    prob_desc(&p[i], desc[i]);
  }
  /* slots hold an invalid opcode until filled: fetching one early fails */
  uint64_t ring = dev_alloc(&d, 64 * S, 64, 0);
  uint8_t junk[64 * S];
  memset(junk, 0xFF, sizeof junk);
  CHECK(api.mem_write(d.sim, ring, junk, sizeof junk) == 0, "mem_write ring");

  /* nothing published: the kernel waits */
  if (q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE, 0)) return -1;
  uint64_t busy0, busy, busy_b[NB];
  if (q_waiting(&d, 0, 5000, &busy0)) return -1;
  uint32_t pub = 0;
  uint64_t macs = 0, wr = 0, prev = busy0;
  for (int b = 0; b < NB; b++) {
    for (uint32_t j = 0; j < batch[b]; j++)
      if (q_put(&d, ring, S, pub + j, desc[pub + j])) return -1;
    if (wr32(&d, TSR_REG_Q_TAIL, pub + batch[b])) return -1;
    if (q_until(&d, pub + batch[b], 20000000)) return -1;
    for (uint32_t j = pub; j < pub + batch[b]; j++) {
      if (prob_check(&d, &p[j])) return -1;
      macs += (uint64_t)p[j].m * p[j].n * p[j].k;
      wr += 4ull * p[j].m * p[j].n;
    }
    pub += batch[b];
    /* the counters are live */
    uint64_t lm, lw;
    uint32_t st;
    if (rd64(&d, TSR_STAT_MACS, &lm) || rd64(&d, TSR_STAT_BYTES_WR, &lw) ||
        rd32(&d, TSR_STAT_STATUS, &st))
      return -1;
    CHECK(lm == macs && lw == wr && st == TSR_HWERR_OK,
          "after %u: MACS %" PRIu64 " want %" PRIu64 ", BYTES_WR %" PRIu64 " want %" PRIu64
          ", STATUS %u", pub, lm, macs, lw, wr, st);
    if (q_waiting(&d, pub, 5000, &busy)) return -1;
    if (b == 1) {
      /* the queue bit counts at ap_start only: clearing it changes nothing */
      uint64_t again;
      if (wr32(&d, TSR_REG_Q_CTRL, 0) || q_waiting(&d, pub, 3000, &again) ||
          wr32(&d, TSR_REG_Q_CTRL, TSR_HW_Q_CTRL_QUEUE))
        return -1;
      CHECK(again == busy, "CYC_BUSY %" PRIu64 " then %" PRIu64, busy, again);
    }
    busy_b[b] = busy - prev;
    prev = busy;
  }
  /* close: the kernel finishes */
  if (wr32(&d, TSR_REG_Q_CTRL, TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE)) return -1;
  result_t rq;
  if (wait_done(&d, &rq, 1000)) return -1;
  CHECK(rq.status == TSR_HWERR_OK && rq.desc_done == NQ && rq.macs == macs && rq.bytes_wr == wr,
        "closed: STATUS %u DESC_DONE %u MACS %" PRIu64 " BYTES_WR %" PRIu64, rq.status,
        rq.desc_done, rq.macs, rq.bytes_wr);
  /* RFin's cycle: the one busy cycle after the last wait */
  CHECK(rq.busy == prev + 1, "CYC_BUSY %" PRIu64 " at the end, %" PRIu64 " at the last wait",
        rq.busy, prev);

  /* the same descriptors as one ring of NQ in one normal launch */
  for (int i = 0; i < NQ; i++)
    if (prob_guard(&d, &p[i])) return -1;
  if (wr32(&d, TSR_REG_Q_CTRL, 0)) return -1;
  result_t rn;
  if (run_probs(&d, p, NQ, &rn)) return -1;
  long long diff = (long long)rq.busy - (long long)rn.busy;
  printf("REPORT rtl queue %ux%u, %u read port(s): %d descriptors through %d slots in %d doorbells "
         "(batches 1,3,2,4,1): CYC_BUSY %" PRIu64 " (start %" PRIu64 ", batches %" PRIu64
         " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 ", end 1); one launch of the same %d: "
         "%" PRIu64 " (%+lld)\n",
         d.rows, d.cols, g_ports, NQ, S, NB, rq.busy, busy0, busy_b[0], busy_b[1], busy_b[2],
         busy_b[3], busy_b[4], NQ, rn.busy, diff);
  /* The wait state's cycles are not busy and the doorbell is looked at in
   * the cycle that leaves the barrier (or the ring check), so a queue costs
   * no cycle a launch does not: equal at every geometry so far. The bound
   * leaves room for a memory model whose state after an idle wait differs
   * from that after a barrier. */
  CHECK(diff >= -2 && diff <= 2, "queue CYC_BUSY %" PRIu64 " vs one launch %" PRIu64, rq.busy,
        rn.busy);
  for (int i = 0; i < NQ; i++) prob_free(&p[i]);

  /* errors; small problems of their own */
  prob_t e[6];
  uint8_t ed[6][64];
  for (int i = 0; i < 6; i++) {
    if (prob_make(&d, &e[i], rnd_range(1, 20), rnd_range(1, 40), rnd_range(1, 90), 1, 0)) return -1;
    prob_desc(&e[i], ed[i]);
  }
  result_t r;
  /* Q_TAIL S + 1 past DESC_DONE: QUEUE_TAIL at the next descriptor */
  if (q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE, 0) || q_put(&d, ring, S, 0, ed[0]) ||
      q_put(&d, ring, S, 1, ed[1]) || wr32(&d, TSR_REG_Q_TAIL, 2) || q_until(&d, 2, 1000000) ||
      wr32(&d, TSR_REG_Q_TAIL, 2 + S + 1) || wait_done(&d, &r, 1000))
    return -1;
  CHECK(r.status == TSR_HWERR_QUEUE_TAIL && r.err_index == 2 && r.desc_done == 2,
        "Q_TAIL S+1 ahead: STATUS %u ERR_INDEX %u DESC_DONE %u", r.status, r.err_index,
        r.desc_done);
  if (prob_check(&d, &e[0]) || prob_check(&d, &e[1])) return -1;
  /* Q_TAIL back below DESC_DONE */
  if (prob_guard(&d, &e[0]) || q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE, 1) ||
      q_until(&d, 1, 1000000) || wr32(&d, TSR_REG_Q_TAIL, 0) || wait_done(&d, &r, 1000))
    return -1;
  CHECK(r.status == TSR_HWERR_QUEUE_TAIL && r.err_index == 1 && r.desc_done == 1,
        "Q_TAIL back: STATUS %u ERR_INDEX %u DESC_DONE %u", r.status, r.err_index, r.desc_done);
  if (prob_check(&d, &e[0])) return -1;
  /* Q_TAIL S + 1 at the start: nothing is read */
  if (q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE, S + 1) || wait_done(&d, &r, 1000)) return -1;
  CHECK(r.status == TSR_HWERR_QUEUE_TAIL && r.err_index == 0 && r.desc_done == 0 &&
        r.bytes_rd == 0, "Q_TAIL S+1 at start: STATUS %u ERR_INDEX %u DESC_DONE %u BYTES_RD %"
        PRIu64, r.status, r.err_index, r.desc_done, r.bytes_rd);
  /* a bad descriptor at absolute index 5 (slot 1): BAD_DIMS at 5 */
  for (int i = 0; i < 5; i++)
    if (prob_guard(&d, &e[i])) return -1;
  if (q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE, 0)) return -1;
  for (uint32_t i = 0; i < 3; i++)
    if (q_put(&d, ring, S, i, ed[i])) return -1;
  if (wr32(&d, TSR_REG_Q_TAIL, 3) || q_until(&d, 3, 1000000)) return -1;
  {
    tsr_desc_t bad;
    tsr_desc_unpack(&bad, ed[5]);
    bad.m = 0;
    uint8_t bd[64];
    tsr_desc_pack(bd, &bad);
    if (q_put(&d, ring, S, 3, ed[3]) || q_put(&d, ring, S, 4, ed[4]) || q_put(&d, ring, S, 5, bd) ||
        wr32(&d, TSR_REG_Q_TAIL, 6) || wait_done(&d, &r, 1000000))
      return -1;
  }
  CHECK(r.status == TSR_HWERR_BAD_DIMS && r.err_index == 5 && r.desc_done == 5,
        "M = 0 at 5: STATUS %u ERR_INDEX %u DESC_DONE %u", r.status, r.err_index, r.desc_done);
  for (int i = 0; i < 5; i++)
    if (prob_check(&d, &e[i])) return -1;
  /* close with nothing published: done at once */
  uint64_t ran;
  if (q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE, 0)) return -1;
  CHECK(api.run(d.sim, 100, 1, &ran) == 1, "closed empty queue not done");
  if (wait_done(&d, &r, 10)) return -1;
  CHECK(r.status == TSR_HWERR_OK && r.desc_done == 0 && r.bytes_rd == 0,
        "closed empty queue: STATUS %u DESC_DONE %u", r.status, r.desc_done);
  /* closed with three published at the start: runs them, then done */
  for (int i = 0; i < 3; i++)
    if (prob_guard(&d, &e[i]) || q_put(&d, ring, S, (uint32_t)i, ed[i])) return -1;
  if (q_start(&d, ring, S, TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE, 3) ||
      wait_done(&d, &r, 1000000))
    return -1;
  CHECK(r.status == TSR_HWERR_OK && r.desc_done == 3, "closed with 3: STATUS %u DESC_DONE %u",
        r.status, r.desc_done);
  for (int i = 0; i < 3; i++)
    if (prob_check(&d, &e[i])) return -1;
  /* S = 0: done at once, as a normal launch of 0 */
  if (q_start(&d, ring, 0, TSR_HW_Q_CTRL_QUEUE, 5) || wait_done(&d, &r, 100)) return -1;
  CHECK(r.status == TSR_HWERR_OK && r.desc_done == 0, "S = 0: STATUS %u DESC_DONE %u", r.status,
        r.desc_done);
  /* the ring check covers the S slots */
  if (set_args(&d, ring, 64 * S - 64, ring, S) || wr32(&d, TSR_REG_Q_TAIL, 1) ||
      wr32(&d, TSR_REG_CTRL, TSR_CTRL_AP_START) || wait_done(&d, &r, 100))
    return -1;
  CHECK(r.status == TSR_HWERR_RING_RANGE && r.bytes_rd == 0, "ring past the window: STATUS %u",
        r.status);
  /* a normal launch afterwards */
  if (wr32(&d, TSR_REG_Q_CTRL, 0) || wr32(&d, TSR_REG_Q_TAIL, 0)) return -1;
  for (int i = 0; i < 6; i++)
    if (prob_guard(&d, &e[i])) return -1;
  if (run_probs(&d, e, 6, NULL)) return -1;
  for (int i = 0; i < 6; i++) prob_free(&e[i]);
  dev_close(&d);
  return 0;
}

/* Performance: MAC utilization at 256^3, GEMV 1 x 4096 x 4096 vs memory. */
static int t_perf(void) {
  dev_t_ d;
  if (dev_open(&d, 64 << 20)) return -1;
  prob_t p;
  result_t r;
  if (prob_make(&d, &p, 256, 256, 256, 0, 0) || run_probs(&d, &p, 1, &r)) return -1;
  double util = (double)p.m * p.n * p.k / ((double)r.busy * d.rows * d.cols);
  printf("REPORT rtl gemm 256x256x256 (%ux%u array): %" PRIu64 " cycles, MAC utilization %.1f%%, "
         "stall %" PRIu64 ", sim %.0f cycles/s\n", d.rows, d.cols, r.busy, 100 * util, r.stall,
         r.wall_cycles / r.wall_s);
  CHECK(util >= 0.90, "MAC utilization %.3f below 0.90", util);
  prob_free(&p);
  d.next = d.cfg.mem_base + 4096;
  uint32_t nk = g_quick ? 1024 : 4096;
  if (prob_make(&d, &p, 1, nk, nk, 0, 0) || run_probs(&d, &p, 1, &r)) return -1;
  double bytes = (double)nk * nk + nk + 4.0 * nk;
  double frac = bytes / ((double)r.busy * d.cfg.mem_bytes_per_cycle);
  printf("REPORT rtl gemv 1x%ux%u: %" PRIu64 " cycles, %.1f%% of modeled bandwidth "
         "(%u B/cycle, latency %u, %u outstanding), sim %.0f cycles/s\n", nk, nk, r.busy,
         100 * frac, d.cfg.mem_bytes_per_cycle, d.cfg.mem_latency, d.cfg.mem_max_outstanding,
         r.wall_cycles / r.wall_s);
  CHECK(frac >= 0.85, "GEMV bandwidth fraction %.3f below 0.85", frac);
  prob_free(&p);
  if (g_ports > 1) { /* W striped: the channels' bandwidths add up */
    d.next = d.cfg.mem_base + 4096;
    if (prob_make(&d, &p, 1, nk, nk, 0, 0) || prob_stripe(&d, &p, g_ports) ||
        run_probs(&d, &p, 1, &r))
      return -1;
    frac = bytes / ((double)r.busy * d.cfg.mem_bytes_per_cycle * g_ports);
    /* the array takes rows*cols bytes of W a cycle in GEMV mode: with many
     * ports that, not the memory, is the bound */
    double lim = (double)d.cfg.mem_bytes_per_cycle * g_ports;
    if ((double)d.rows * d.cols < lim) lim = (double)d.rows * d.cols;
    double frac_lim = bytes / ((double)r.busy * lim);
    printf("REPORT rtl gemv 1x%ux%u, W striped over %u ports (%ux%u array): %" PRIu64
           " cycles, %.1f%% of modeled bandwidth (%u x %u B/cycle), %.1f%% of the bound "
           "(%.0f B/cycle: memory or array)\n", nk, nk, g_ports, d.rows, d.cols, r.busy,
           100 * frac, g_ports, d.cfg.mem_bytes_per_cycle, 100 * frac_lim, lim);
    CHECK(frac_lim >= 0.80, "striped GEMV fraction of the bound %.3f below 0.80", frac_lim);
    prob_free(&p);
  }
  dev_close(&d);
  return 0;
}

/* Writes a small case for the iverilog testbench (hw/tb/tsr_kernel_tb.sv):
 * DIR/mem.hex (memory before), DIR/expect.hex (after, from this model,
 * checked against the reference), DIR/args.hex (base, size, ring, n). */
static const char *g_iv_dir;
static int dump_hex(dev_t_ *d, const char *path, uint64_t n) {
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  uint8_t w[64];
  for (uint64_t off = 0; off < n; off += 64) {
    api.mem_read(d->sim, d->cfg.mem_base + off, w, 64);
    for (int i = 63; i >= 0; i--) fprintf(f, "%02x", w[i]);
    fputc('\n', f);
  }
  fclose(f);
  return 0;
}

static int t_iverilog_case(void) {
  enum { WORDS = 4096, N = 4 };
  uint64_t size = 64ull * WORDS;
  dev_t_ d;
  if (dev_open(&d, size)) return -1;
  prob_t p[N];
  uint32_t shapes[N][3] = {{3, 5, 7}, {17, 9, 33}, {1, 20, 70}, {6, 33, 5}};
  for (int i = 0; i < N; i++)
    if (prob_make(&d, &p[i], shapes[i][0], shapes[i][1], shapes[i][2], 1, 0)) return -1;
  /* and, where the build has it, two block-sparse products (one with an
   * empty tile row at most of the seeds) */
  int has_bsr;
  if (bsr_ops(&d, &has_bsr)) return -1;
  enum { NB = 2 };
  bsr_t b[NB];
  int nb = has_bsr ? NB : 0;
  if (nb && (bsr_make(&d, &b[0], 5, 40, 200, 64, 0.4, 1) ||
             bsr_make(&d, &b[1], 2, 20, 300, 128, 0.5, 1)))
    return -1;
  uint64_t ring = dev_alloc(&d, 64ull * (N + NB), 64, 0);
  uint8_t raw[64 * (N + NB)];
  for (int i = 0; i < N; i++) prob_desc(&p[i], raw + 64 * i);
  for (int i = 0; i < nb; i++) bsr_desc(&b[i], raw + 64 * (N + i));
  api.mem_write(d.sim, ring, raw, 64ull * (N + nb));
  CHECK(d.next < d.cfg.mem_base + size, "case does not fit");
  char path[1024];
  snprintf(path, sizeof path, "%s/mem.hex", g_iv_dir);
  if (dump_hex(&d, path, size)) return -1;
  result_t r;
  if (launch(&d, d.cfg.mem_base, size, ring, N + nb, &r)) return -1;
  CHECK(r.status == 0 && r.desc_done == (uint32_t)(N + nb), "status %u", r.status);
  for (int i = 0; i < N; i++)
    if (prob_check(&d, &p[i])) return -1;
  for (int i = 0; i < nb; i++)
    if (prob_check(&d, &b[i].p)) return -1;
  snprintf(path, sizeof path, "%s/expect.hex", g_iv_dir);
  if (dump_hex(&d, path, size)) return -1;
  snprintf(path, sizeof path, "%s/args.hex", g_iv_dir);
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  fprintf(f, "%016" PRIx64 "\n%016" PRIx64 "\n%016" PRIx64 "\n%016x\n", d.cfg.mem_base, size,
          ring, N + nb);
  fclose(f);
  for (int i = 0; i < N; i++) prob_free(&p[i]);
  for (int i = 0; i < nb; i++) prob_free(&b[i].p);
  dev_close(&d);
  return 0;
}

static const struct { const char *name; int (*fn)(void); int quick; } tests[] = {
    {"regs", t_regs, 1},           {"ctrl", t_ctrl, 1},
    {"gemm_small", t_gemm_small, 1}, {"gemm_edges", t_gemm_edges, 1},
    {"gemm_random", t_gemm_random, 1}, {"many_tiles", t_many_tiles, 1},
    {"refuse", t_refuse, 1},       {"instances", t_instances, 1},
    {"striped", t_striped, 1},     {"bsr", t_bsr, 1},
    {"queue", t_queue, 1},
    {"perf", t_perf, 0},
};

int main(int argc, char **argv) {
  const char *lib = NULL;
  const char *only[32];
  int n_only = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--lib") && i + 1 < argc) lib = argv[++i];
    else if (!strcmp(a, "--wave") && i + 1 < argc) g_wave = argv[++i];
    else if (!strcmp(a, "--wave-start") && i + 1 < argc) g_wave_start = strtoull(argv[++i], 0, 0);
    else if (!strcmp(a, "--wave-end") && i + 1 < argc) g_wave_end = strtoull(argv[++i], 0, 0);
    else if (!strcmp(a, "--wave-depth") && i + 1 < argc) g_wave_depth = atoi(argv[++i]);
    else if (!strcmp(a, "--coverage") && i + 1 < argc) g_cov = argv[++i];
    else if (!strcmp(a, "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], 0, 0);
    else if (!strcmp(a, "--quick")) g_quick = 1;
    else if (!strcmp(a, "--cycles")) g_cycles = 1; /* counters of every ring */
    else if (!strcmp(a, "--iverilog-case") && i + 1 < argc) g_iv_dir = argv[++i];
    else if (a[0] != '-' && n_only < 32) only[n_only++] = a;
    else {
      fprintf(stderr, "usage: %s --lib PATH [--quick] [--seed S] [--wave F ...] [test...]\n",
              argv[0]);
      return 2;
    }
  }
  /* A test name that matches nothing is a typo: say which names exist. */
  for (int j = 0; j < n_only; j++) {
    int known = 0;
    for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++)
      known |= !strcmp(only[j], tests[t].name);
    if (!known) {
      fprintf(stderr, "unknown test '%s'; the tests are:", only[j]);
      for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++)
        fprintf(stderr, " %s", tests[t].name);
      fprintf(stderr, "\n");
      return 2;
    }
  }
  if (!lib) {
    fprintf(stderr, "--lib PATH is required\n");
    return 2;
  }
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot load %s: %s\n", lib, dlerror());
    return 2;
  }
  const char *missing = tsr_sim_api_resolve(h, dlsym, &api);
  if (!missing && !api.last_error) missing = "tsr_sim_last_error";
  if (missing) {
    fprintf(stderr, "missing symbol %s\n", missing);
    return 2;
  }
  if (api.abi_version() != TSR_SIM_ABI_VERSION) {
    fprintf(stderr, "ABI version %d, want %d\n", api.abi_version(), TSR_SIM_ABI_VERSION);
    return 2;
  }
  if (g_iv_dir) {
    g_test = "iverilog_case";
    rng_state = g_seed;
    t_iverilog_case();
    return g_fail ? 1 : 0;
  }
  int ran = 0;
  for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) {
    int sel = n_only == 0 ? (!g_quick || tests[t].quick) : 0;
    for (int i = 0; i < n_only; i++) sel |= !strcmp(only[i], tests[t].name);
    if (!sel) continue;
    g_test = tests[t].name;
    rng_state = g_seed * 1000 + t;
    double t0 = now_s();
    int before = g_fail;
    tests[t].fn();
    printf("%s %s (%.1fs)\n", g_fail == before ? "ok  " : "FAIL", tests[t].name, now_s() - t0);
    fflush(stdout);
    ran++;
  }
  printf("%d tests, %d failed\n", ran, g_fail);
  return g_fail ? 1 : (ran ? 0 : 2);
}
