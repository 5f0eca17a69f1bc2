/* project.c - the offload cost model shared by plan.c and bench (project.h). */
#include "project.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "plan.h"

double tsr_proj_cpu_matmul_s(const tsr_cpu_profile_t *p, int32_t m, int32_t n, int32_t k) {
  const double bytes = (double)n * k, macs = (double)m * n * k;
  const double tb = p->weight_bytes_per_s > 0 ? bytes / p->weight_bytes_per_s : 0;
  const double tm = p->int8_macs_per_s > 0 ? macs / p->int8_macs_per_s : 0;
  return tb > tm ? tb : tm;
}

tsr_status_t tsr_proj_cpu_profile_env(tsr_cpu_profile_t *out, bool *set) {
  *set = false;
  const char *v = getenv("TSR_CPU_PROFILE");
  if (!v || !*v) return TSR_OK;
  char *e1 = NULL, *e2 = NULL;
  double gbps = strtod(v, &e1);
  double gmacs = e1 && *e1 == ',' ? strtod(e1 + 1, &e2) : 0;
  if (!e2 || *e2 || !(gbps > 0) || !(gmacs > 0) || !isfinite(gbps) || !isfinite(gmacs))
    return TSR_ERR(INVALID_ARGUMENT, "TSR_CPU_PROFILE '%s': expected GBPS,GMACS (two positive "
                   "numbers: int8 weight GB/s of a GEMV, int8 GMAC/s of a GEMM; e.g. 40,400)",
                   v);
  out->weight_bytes_per_s = gbps * 1e9;
  out->int8_macs_per_s = gmacs * 1e9;
  *set = true;
  return TSR_OK;
}

uint64_t tsr_proj_gemm_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k) {
  const uint32_t ports = t->ports ? t->ports : 1;
  const uint64_t c = tsr_km_gemm_cycles(t, m, n, k);
  if (ports == 1) return c;
  /* Does the kernel model see the ports? Compare with one port on a shape
   * that streams (a GEMV of 64 KiB of weights per port). */
  tsr_km_timing_t one = *t;
  one.ports = 1;
  if (tsr_km_gemm_cycles(&one, 1, 64 * ports, 1024) != tsr_km_gemm_cycles(t, 1, 64 * ports, 1024))
    return c;
  /* It does not: the ports modeled here as one port of their summed
   * bandwidth (rows striped, n % ports, so every port streams n / ports
   * rows at once). */
  one.mem_bytes_per_cycle = t->mem_bytes_per_cycle * ports;
  return tsr_km_gemm_cycles(&one, m, n, k);
}

uint64_t tsr_proj_bsr_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                             double density) {
  const uint32_t bk = tsr_tile_bsr_bk((int32_t)k);
  const uint32_t ntr = tsr_bsr_tile_rows(n), nkt = tsr_bsr_k_tiles(k, bk);
  const uint32_t rb = tsr_bsr_row_bytes(k, bk);
  const uint64_t total = (uint64_t)ntr * nkt;
  uint64_t keep = (uint64_t)llround((density < 0 ? 0 : density > 1 ? 1 : density) * (double)total);
  uint8_t *bm = calloc((size_t)ntr * rb, 1);
  if (!bm) return tsr_proj_gemm_cycles(t, m, n, k);
  for (uint64_t i = 0; i < total; i++) /* keep of total, evenly */
    if ((i + 1) * keep / total != i * keep / total)
      bm[(i / nkt) * rb + (i % nkt) / 8] |= (uint8_t)(1u << (i % nkt % 8));
  const uint64_t a = 4096, w = a + ((uint64_t)m * k + 63) / 64 * 64;
  const uint64_t c = w + ((uint64_t)ntr * rb + 63) / 64 * 64 + keep * tsr_bsr_tile_bytes(bk);
  tsr_desc_t d = {TSR_OP_GEMM_BSR_I8_I32, 0, m, n, k, k, rb, 4 * n, a, w, c,
                  tsr_bsr_block_word(bk), (uint32_t)keep};
  tsr_km_estimate_t e = {0};
  tsr_km_estimate_bsr_desc(t, &d, bm, &e);
  free(bm);
  return e.cycles;
}

uint64_t tsr_proj_pieces_cycles(const tsr_hal_caps_t *caps, const tsr_km_timing_t *t,
                                uint32_t m, uint32_t n, uint32_t k, bool ports) {
  const int32_t kp = tsr_tile_k_pieces(caps, (int32_t)k);
  uint64_t c = 0;
  for (int32_t q = 0; q < kp; q++) {
    const uint32_t k0 = (uint32_t)q * TSR_TILE_K_CHUNK;
    const uint32_t kk = kp == 1 ? k : k - k0 < TSR_TILE_K_CHUNK ? k - k0 : TSR_TILE_K_CHUNK;
    c += ports ? tsr_proj_gemm_cycles(t, m, n, kk) : tsr_km_gemm_cycles(t, m, n, kk);
  }
  return c;
}

void tsr_proj_group(const tsr_hal_caps_t *caps, const tsr_km_timing_t *t, int32_t m, int32_t k,
                    const int32_t *ns, const double *dens, int count, double *dev_s,
                    double *xfer_s) {
  double d = tsr_hal_ring_latency_s(caps);
  for (int j = 0; j < count; j++) {
    const uint64_t cyc =
        dens && dens[j] >= 0
            ? tsr_proj_bsr_cycles(t, (uint32_t)m, (uint32_t)ns[j], (uint32_t)k, dens[j])
            : tsr_proj_pieces_cycles(caps, t, (uint32_t)m, (uint32_t)ns[j], (uint32_t)k, true);
    d += (double)cyc / t->clock_hz;
  }
  /* as the executor issues them in steady state: activation rows up, the
   * results of every member down in one read (exec.c launch_submit/
   * launch_finish); the ring is resident in device memory after the group's
   * first launch of m rows (exec.c ring_place). In queue mode the
   * descriptors go into the queue's slots every time: a third copy (exec.c
   * queue_submit). */
  /* (C: every K piece's partial sums) */
  const int32_t kp = tsr_tile_k_pieces(caps, k);
  double bytes = (double)m * k;
  for (int j = 0; j < count; j++) bytes += 4.0 * m * ns[j] * kp;
  int copies = 2;
  if (caps->flags & TSR_HAL_CAP_QUEUE) {
    int32_t ns2[8];
    const int nc = count < 8 ? count : 8;
    for (int j = 0; j < nc; j++) ns2[j] = ns[j];
    bytes += (double)TSR_HW_DESC_BYTES * kp *
             tsr_tile_descs(ns2, nc, TSR_TILE_N_CHUNK, m, tsr_tile_m_chunk(caps));
    copies = 3;
  }
  *dev_s = d;
  *xfer_s = tsr_hal_copy_latency_s(caps) * copies +
            (caps->link_bytes_per_s > 0 ? bytes / caps->link_bytes_per_s : 0);
}

void tsr_proj_model(const tsr_proj_shape_t *s, const tsr_hal_caps_t *caps,
                    const tsr_km_timing_t *t, const tsr_cpu_profile_t *cpu, int32_t rows,
                    double light_s, tsr_proj_result_t *out) {
  memset(out, 0, sizeof *out);
  const int32_t hd = s->dim / s->heads, q = s->heads * hd, kv = s->kv_heads * hd;
  /* the graph's groups of a layer (graph.c): what each reads, its members */
  struct { int32_t k; int count; int32_t ns[3]; } g[4] = {
      {s->dim, 3, {q, kv, kv}}, {q, 1, {s->dim}}, {s->dim, 2, {s->hidden, s->hidden}},
      {s->hidden, 1, {s->dim}}};
  /* the host's light work of a pass, in front of each of the 4 groups of
   * every layer (and of the classifier: none, the final norm is in it) */
  const double h = s->layers > 0 ? light_s / (4.0 * s->layers) : 0;
  double host = 0, board = 0, serial = 0, all = 0;
  for (int i = 0; i < 5; i++) {
    const bool cls = i == 4;
    const int32_t k = cls ? s->dim : g[i].k;
    const int count = cls ? 1 : g[i].count;
    const int32_t *ns = cls ? &s->vocab : g[i].ns;
    double c = 0;
    for (int j = 0; j < count; j++) c += tsr_proj_cpu_matmul_s(cpu, rows, ns[j], k);
    double dev = 0, xfer = 0;
    tsr_proj_group(caps, t, rows, k, ns, NULL, count, &dev, &xfer);
    const bool pays = dev + xfer < c;
    const double reps = cls ? 1 : s->layers, before = cls ? 0 : h;
    host += reps * (c + before);
    /* queued ahead: a launch's latency runs while the host does the light
     * ops before it; only what exceeds them shows. A doorbell (queue mode)
     * follows the host work that writes its input: nothing hides it. */
    const double lat = tsr_hal_ring_latency_s(caps);
    const double shows = (caps->flags & TSR_HAL_CAP_QUEUE) ? lat : lat > before ? lat - before : 0;
    all += reps * (before + shows + dev - lat + xfer);
    if (pays) {
      const double work = dev - lat + xfer;
      board += reps * (before + shows + work);
      serial += reps * (before + lat + work);
      out->launches += (int)reps;
      if (cls) out->classifier_on = true;
      else {
        out->on[i] = true;
        out->dev_groups++;
      }
    } else {
      board += reps * (before + c);
      serial += reps * (before + c);
    }
  }
  out->cpu_s = host;
  out->board_s = board;
  out->serial_s = serial;
  out->all_s = all;
}
