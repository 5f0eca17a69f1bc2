/*
 * tsr_cycle_check.c - the functional model's cycles next to the RTL's.
 *
 * Runs launches on the Verilated kernel (libtessera_rtl.so through the
 * tsr_sim.h ABI) and prints, per launch, CYC_BUSY of the RTL and the cycles
 * the functional model (driver/kernel_model.h) gives the same descriptors,
 * with the memory model's profile as the model's timing. Results are
 * checked against a naive reference, so a wrong kernel cannot pass.
 *
 *   tsr_cycle_check --lib PATH [--stripe] [--bsr D[:BK]] [--tol PCT] [--tol-total PCT]
 *                   [--lat N] [--bw N] LAUNCH...
 *   tsr_cycle_check --model ROWSxCOLSpPORTS [--lat N] [--bw N] LAUNCH...
 *
 * LAUNCH is a ring: shapes MxNxK separated by commas, a shape may repeat
 * (MxNxK*R). --stripe places W striped over all read ports of the library
 * (W_NCH = ports). Presets: stories260k-decode, stories260k-prefill,
 * stories15m-decode, attn (score and value products of a head). --tol makes
 * the exit status 1 when any launch (or the total) is off by more than PCT
 * percent; --tol-total when the total is (a bound on the whole run tighter
 * than the one on each launch). The last line is "REPORT cycle model ... total rtl R model M
 * (E %)". --model runs the functional model alone (no RTL) for a geometry
 * the RTL was not built at, W striped over the ports, and prints the
 * cycles and, for a single-row launch (GEMV), the fraction of the ports'
 * summed bandwidth that N*K + K + 4N bytes use. --bsr D:BK lays every W
 * out block-sparse (GEMM_BSR_I8_I32, hw/README.md) with a fraction D of
 * its 16 x BK tiles stored, chosen at random, the others zero in the
 * reference.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/kernel_model.h"
#include "driver/tsr_regmap.h"
#include "tsr_sim.h"

static tsr_sim_api_t api;
static double g_bsr = -1; /* --bsr density, or < 0: dense W */
static uint32_t g_bk = 128;

typedef struct {
  uint32_t m, n, k;
} shape_t;

static uint64_t g_rng = 7;
static int8_t rnd8(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (int8_t)(g_rng >> 56);
}

/* Expands the presets into launch strings. */
static const char *preset(const char *name) {
  /* stories260K: dim 64, hidden 172, kv dim 32, vocab 512, 5 layers; one
   * launch per layer for the projections of a token, the classifier apart */
  if (!strcmp(name, "stories260k-decode"))
    return "1x64x64,1x32x64*2,1x64x64,1x172x64*2,1x64x172;1x512x64";
  if (!strcmp(name, "stories260k-prefill"))
    return "24x64x64,24x32x64*2,24x64x64,24x172x64*2,24x64x172;24x512x64";
  /* stories15M: dim 288, hidden 768, vocab 32000 */
  if (!strcmp(name, "stories15m-decode"))
    return "1x288x288*4,1x768x288*2,1x288x768;1x32000x288";
  /* attention of one head (head size 48): scores q.K^T over 64 positions,
   * values P.V; one token and a prefill chunk of 16 */
  if (!strcmp(name, "attn")) return "1x64x48,1x48x64;16x64x48,16x48x64";
  return NULL;
}

static int parse_ring(const char *s, shape_t *out, int max) {
  int n = 0;
  while (*s) {
    unsigned m, nn, k, rep = 1;
    int used = 0;
    if (sscanf(s, "%ux%ux%u%n", &m, &nn, &k, &used) != 3 || !m || !nn || !k) return -1;
    s += used;
    if (*s == '*') {
      int u2 = 0;
      if (sscanf(s + 1, "%u%n", &rep, &u2) != 1 || !rep) return -1;
      s += 1 + u2;
    }
    for (unsigned r = 0; r < rep; r++) {
      if (n == max) return -1;
      out[n++] = (shape_t){m, nn, k};
    }
    if (*s == ',') s++;
    else if (*s) return -1;
  }
  return n;
}

typedef struct {
  tsr_sim_t *sim;
  tsr_sim_config_t cfg;
  uint32_t rows, cols, ports;
} dev_t_;

static int reg_w(dev_t_ *d, uint32_t off, uint32_t v) { return api.reg_write(d->sim, off, v); }

/* Runs one ring on the RTL; fills *rtl with CYC_BUSY and *model with the
 * functional model's cycles of the same descriptors. */
static int run_ring(dev_t_ *d, const shape_t *sh, int n, int stripe, uint64_t *rtl,
                    uint64_t *model) {
  uint64_t next = d->cfg.mem_base + 4096;
  tsr_desc_t *ds = calloc((size_t)n, sizeof *ds);
  int32_t **refs = calloc((size_t)n, sizeof *refs);
  uint8_t **bms = calloc((size_t)n, sizeof *bms);
  int rc = -1;
  for (int i = 0; i < n; i++) {
    uint32_t m = sh[i].m, nn = sh[i].n, k = sh[i].k;
    int8_t *a = malloc((size_t)m * k), *w = malloc((size_t)nn * k);
    for (size_t j = 0; j < (size_t)m * k; j++) a[j] = rnd8();
    for (size_t j = 0; j < (size_t)nn * k; j++) w[j] = rnd8();
    tsr_desc_t *q = &ds[i];
    q->opcode = TSR_OP_GEMM_I8_I32;
    q->m = m, q->n = nn, q->k = k, q->lda = k, q->ldw = k, q->ldc = 4 * nn;
    q->a_addr = next;
    next += ((uint64_t)m * k + 63) / 64 * 64;
    if (g_bsr >= 0) {
      /* bitmaps at W_ADDR (LDB = a row's bytes), the kept tiles from the
       * next 64 bytes; W's other tiles become zeros */
      const uint32_t bk = g_bk, ntr = (nn + 15) / 16, nkt = (k + bk - 1) / bk, rb = (nkt + 7) / 8;
      uint8_t *bm = bms[i] = calloc((size_t)ntr * rb, 1);
      uint8_t *tiles = calloc((size_t)ntr * nkt, 16ull * bk);
      uint32_t nnz = 0;
      for (uint32_t tr = 0; tr < ntr; tr++)
        for (uint32_t t = 0; t < nkt; t++) {
          int keep = g_bsr >= 1 || (double)((uint8_t)rnd8()) < g_bsr * 256.0;
          for (uint32_t j = 0; j < 16 && tr * 16 + j < nn; j++)
            for (uint32_t x = 0; x < bk && t * bk + x < k; x++) {
              int8_t *v = &w[(size_t)(tr * 16 + j) * k + t * bk + x];
              if (keep) tiles[(size_t)nnz * 16 * bk + (size_t)j * bk + x] = (uint8_t)*v;
              else *v = 0;
            }
          if (keep) bm[(size_t)tr * rb + t / 8] |= (uint8_t)(1u << (t % 8)), nnz++;
        }
      q->opcode = TSR_OP_GEMM_BSR_I8_I32;
      q->ldw = rb;
      q->w_nch = 16u << 16 | bk;
      q->w_cstride = nnz;
      q->w_addr = next;
      api.mem_write(d->sim, next, bm, (size_t)ntr * rb);
      next = (next + (uint64_t)ntr * rb + 63) / 64 * 64;
      api.mem_write(d->sim, next, tiles, (size_t)nnz * 16 * bk);
      next += (uint64_t)nnz * 16 * bk;
      free(tiles);
    } else if (stripe && d->ports > 1) {
      q->w_nch = d->ports;
      q->w_cstride = ((nn + d->ports - 1) / d->ports * k + 63) / 64 * 64;
    }
    if (g_bsr < 0) {
      q->w_addr = next;
      next += (stripe && d->ports > 1) ? (uint64_t)d->ports * q->w_cstride
                                       : ((uint64_t)nn * k + 63) / 64 * 64;
    }
    q->c_addr = next;
    next += ((uint64_t)m * nn * 4 + 63) / 64 * 64;
    if (next > d->cfg.mem_base + d->cfg.mem_size) {
      fprintf(stderr, "ring does not fit the simulated memory\n");
      goto out;
    }
    api.mem_write(d->sim, q->a_addr, a, (size_t)m * k);
    if (g_bsr < 0)
      for (uint32_t r = 0; r < nn; r++) api.mem_write(d->sim, tsr_desc_w_row(q, r), w + (size_t)r * k, k);
    refs[i] = malloc((size_t)m * nn * 4);
    for (uint32_t r = 0; r < m; r++)
      for (uint32_t c = 0; c < nn; c++) {
        int32_t s = 0;
        for (uint32_t j = 0; j < k; j++) s += (int32_t)a[(size_t)r * k + j] * w[(size_t)c * k + j];
        refs[i][(size_t)r * nn + c] = s;
      }
    free(a), free(w);
  }
  uint64_t ring = (next + 63) / 64 * 64;
  for (int i = 0; i < n; i++) {
    uint8_t raw[64];
    tsr_desc_pack(raw, &ds[i]);
    api.mem_write(d->sim, ring + 64ull * i, raw, 64);
  }
  uint64_t base = d->cfg.mem_base, size = d->cfg.mem_size;
  if (reg_w(d, TSR_ARG_MEM_BASE, (uint32_t)base) || reg_w(d, TSR_ARG_MEM_BASE + 4, base >> 32) ||
      reg_w(d, TSR_ARG_MEM_SIZE, (uint32_t)size) || reg_w(d, TSR_ARG_MEM_SIZE + 4, size >> 32) ||
      reg_w(d, TSR_ARG_RING, (uint32_t)ring) || reg_w(d, TSR_ARG_RING + 4, ring >> 32) ||
      reg_w(d, TSR_ARG_N_DESC, (uint32_t)n) || reg_w(d, TSR_REG_CTRL, TSR_CTRL_AP_START)) {
    fprintf(stderr, "register write failed: %s\n", api.last_error(d->sim));
    goto out;
  }
  uint64_t ran;
  if (api.run(d->sim, 200000000ull, 1, &ran) != 1) {
    fprintf(stderr, "the RTL did not finish: %s\n", api.last_error(d->sim));
    goto out;
  }
  uint32_t st, lo, hi, ctrl;
  api.reg_read(d->sim, TSR_REG_CTRL, &ctrl);
  api.reg_read(d->sim, TSR_STAT_STATUS, &st);
  api.reg_read(d->sim, TSR_STAT_CYC_BUSY, &lo);
  api.reg_read(d->sim, TSR_STAT_CYC_BUSY + 4, &hi);
  reg_w(d, TSR_REG_CTRL, TSR_CTRL_AP_CONTINUE);
  if (st != 0) {
    fprintf(stderr, "the RTL refused the ring: status %u\n", st);
    goto out;
  }
  *rtl = (uint64_t)hi << 32 | lo;
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)ds[i].m * ds[i].n * 4;
    int32_t *got = malloc(bytes);
    api.mem_read(d->sim, ds[i].c_addr, got, bytes);
    int bad = memcmp(got, refs[i], bytes) != 0;
    free(got);
    if (bad) {
      fprintf(stderr, "descriptor %d (%ux%ux%u): C differs from the reference\n", i, ds[i].m,
              ds[i].n, ds[i].k);
      goto out;
    }
  }
  tsr_km_timing_t t;
  tsr_km_timing_init(&t);
  t.rows = d->rows, t.cols = d->cols, t.ports = d->ports;
  t.mem_latency = d->cfg.mem_latency;
  t.mem_bytes_per_cycle = d->cfg.mem_bytes_per_cycle;
  tsr_km_estimate_t e = {0};
  for (int i = 0; i < n; i++) {
    if (g_bsr >= 0) tsr_km_estimate_bsr_desc(&t, &ds[i], bms[i], &e);
    else tsr_km_estimate_gemm_desc(&t, &ds[i], &e);
  }
  *model = e.cycles + tsr_km_launch_cycles(&t);
  rc = 0;
out:
  for (int i = 0; i < n; i++) free(refs[i]), free(bms[i]);
  free(refs), free(ds), free(bms);
  return rc;
}

/* The model alone: cycles of each launch on ROWSxCOLS with PORTS channels. */
static int model_only(const char *geom, uint32_t lat, uint32_t bw, const char **launches,
                      int n_launch) {
  unsigned r, c, p = 1;
  if (sscanf(geom, "%ux%up%u", &r, &c, &p) < 2 || !r || !c || !p) {
    fprintf(stderr, "bad --model '%s' (want ROWSxCOLS[pPORTS])\n", geom);
    return 2;
  }
  tsr_km_timing_t t;
  tsr_km_timing_init(&t);
  t.rows = r, t.cols = c, t.ports = p;
  if (lat) t.mem_latency = lat;
  if (bw) t.mem_bytes_per_cycle = bw;
  printf("model only: %ux%u array, %u port(s), %.0f B/cycle per channel, latency %u\n", r, c, p,
         t.mem_bytes_per_cycle, t.mem_latency);
  for (int i = 0; i < n_launch; i++) {
    shape_t sh[512];
    int n = parse_ring(launches[i], sh, 512);
    if (n <= 0) {
      fprintf(stderr, "bad launch '%s'\n", launches[i]);
      return 2;
    }
    tsr_km_estimate_t e = {0};
    for (int j = 0; j < n; j++) tsr_km_estimate_gemm(&t, sh[j].m, sh[j].n, sh[j].k, &e);
    uint64_t cyc = e.cycles + tsr_km_launch_cycles(&t);
    if (n == 1 && sh[0].m == 1) {
      double bytes = (double)sh[0].n * sh[0].k + sh[0].k + 4.0 * sh[0].n;
      printf("REPORT model %ux%u, %u ports: %s %" PRIu64 " cycles, %.1f%% of modeled bandwidth "
             "(%u x %.0f B/cycle)\n", r, c, p, launches[i], cyc,
             100 * bytes / ((double)cyc * t.mem_bytes_per_cycle * p), p, t.mem_bytes_per_cycle);
    } else {
      printf("REPORT model %ux%u, %u ports: %s %" PRIu64 " cycles\n", r, c, p, launches[i], cyc);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *lib = NULL, *geom = NULL;
  double tol = -1, tol_total = -1;
  int stripe = 0;
  uint32_t lat = 0, bw = 0;
  const char *launches[256];
  int n_launch = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--lib") && i + 1 < argc) lib = argv[++i];
    else if (!strcmp(a, "--tol") && i + 1 < argc) tol = atof(argv[++i]);
    else if (!strcmp(a, "--tol-total") && i + 1 < argc) tol_total = atof(argv[++i]);
    else if (!strcmp(a, "--lat") && i + 1 < argc) lat = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(a, "--bw") && i + 1 < argc) bw = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(a, "--stripe")) stripe = 1;
    else if (!strcmp(a, "--model") && i + 1 < argc) geom = argv[++i];
    else if (!strcmp(a, "--bsr") && i + 1 < argc) {
      char *end;
      g_bsr = strtod(argv[++i], &end);
      if (*end == ':') g_bk = (uint32_t)strtoul(end + 1, &end, 10);
      if (*end || g_bsr < 0 || g_bsr > 1 || (g_bk != 64 && g_bk != 128)) {
        fprintf(stderr, "bad --bsr '%s' (want DENSITY[:BK], density 0..1, BK 64 or 128)\n",
                argv[i]);
        return 2;
      }
    }
    else if (a[0] != '-' && n_launch < 256) {
      const char *p = preset(a);
      if (!p) {
        launches[n_launch++] = a;
        continue;
      }
      /* a preset may hold several launches separated by ';' (split in a
       * copy kept in `presets` for the whole run) */
      static char presets[8192];
      static size_t used;
      size_t len = strlen(p) + 1;
      if (len > sizeof presets - used) {
        fprintf(stderr, "too many presets on the command line\n");
        return 2;
      }
      char *copy = memcpy(presets + used, p, len), *save = NULL;
      used += len;
      for (char *tok = strtok_r(copy, ";", &save); tok && n_launch < 256;
           tok = strtok_r(NULL, ";", &save))
        launches[n_launch++] = tok;
    } else {
      fprintf(stderr,
              "usage: %s --lib PATH [--stripe] [--bsr D[:BK]] [--tol PCT] [--tol-total PCT] "
              "[--lat N] [--bw N] LAUNCH...\n",
              argv[0]);
      return 2;
    }
  }
  if (geom && g_bsr >= 0) {
    fprintf(stderr, "--bsr needs the RTL (--lib)\n");
    return 2;
  }
  if (geom && n_launch) return model_only(geom, lat, bw, launches, n_launch);
  if (!lib || !n_launch) {
    fprintf(stderr, "--lib PATH and at least one launch are required\n");
    return 2;
  }
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot load %s: %s\n", lib, dlerror());
    return 2;
  }
  const char *missing = tsr_sim_api_resolve(h, dlsym, &api);
  if (missing || !api.last_error) {
    fprintf(stderr, "missing symbol %s\n", missing ? missing : "tsr_sim_last_error");
    return 2;
  }
  dev_t_ d;
  memset(&d, 0, sizeof d);
  api.config_init(&d.cfg);
  if (lat) d.cfg.mem_latency = lat;
  if (bw) d.cfg.mem_bytes_per_cycle = bw;
  char err[256] = "";
  if (api.create(&d.cfg, &d.sim, err, sizeof err)) {
    fprintf(stderr, "create: %s\n", err);
    return 2;
  }
  api.geometry(d.sim, &d.rows, &d.cols);
  d.ports = api.ports ? api.ports(d.sim) : 1;
  if (g_bsr >= 0) stripe = 0;
  printf("%ux%u array, %u read port(s)%s, memory %u B/cycle per channel, latency %u\n", d.rows,
         d.cols, d.ports, stripe && d.ports > 1 ? ", W striped" : "", d.cfg.mem_bytes_per_cycle,
         d.cfg.mem_latency);
  if (g_bsr >= 0) printf("W block-sparse: density %.3f, tiles 16 x %u\n", g_bsr, g_bk);
  printf("%-60s %10s %10s %8s\n", "launch", "rtl", "model", "error");
  uint64_t sum_rtl = 0, sum_model = 0;
  double worst = 0;
  int fail = 0;
  for (int i = 0; i < n_launch; i++) {
    shape_t sh[512];
    int n = parse_ring(launches[i], sh, 512);
    if (n <= 0) {
      fprintf(stderr, "bad launch '%s' (want MxNxK[*R],...)\n", launches[i]);
      return 2;
    }
    uint64_t rtl, model;
    if (run_ring(&d, sh, n, stripe, &rtl, &model)) return 1;
    double e = 100.0 * ((double)model - (double)rtl) / (double)rtl;
    printf("%-60.60s %10" PRIu64 " %10" PRIu64 " %+7.1f%%\n", launches[i], rtl, model, e);
    sum_rtl += rtl, sum_model += model;
    if (fabs(e) > worst) worst = fabs(e);
  }
  double et = 100.0 * ((double)sum_model - (double)sum_rtl) / (double)sum_rtl;
  char what[64] = "";
  if (g_bsr >= 0) snprintf(what, sizeof what, " bsr %.3f x %u", g_bsr, g_bk);
  printf("REPORT cycle model %ux%u, %u port(s)%s%s: %d launches, total rtl %" PRIu64
         " model %" PRIu64 " (%+.1f %%), worst launch %.1f %%\n",
         d.rows, d.cols, d.ports, stripe && d.ports > 1 ? " striped" : "", what, n_launch,
         sum_rtl, sum_model, et, worst);
  if (tol >= 0 && (worst > tol || fabs(et) > tol)) {
    printf("FAIL: the model is off by more than %.1f %%\n", tol);
    fail = 1;
  }
  if (tol_total >= 0 && fabs(et) > tol_total) {
    printf("FAIL: the model's total is off by more than %.1f %%\n", tol_total);
    fail = 1;
  }
  api.destroy(d.sim);
  return fail;
}
