/* kernel_model.c - functional and timing model of the tessera kernel. */
#include "driver/kernel_model.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compute/qgemm.h"

void tsr_km_timing_init(tsr_km_timing_t *t) {
  t->rows = 16;
  t->cols = 16;
  t->bus_bytes = 64;
  t->k_chunk = 4096;
  t->mem_bytes_per_cycle = 64.0;
  t->mem_latency = 40;
  t->clock_hz = 300e6;
  t->ports = 1;
}

void tsr_km_timing_from_caps(const tsr_hal_caps_t *caps, tsr_km_timing_t *out) {
  tsr_km_timing_init(out);
  if (caps->array_rows) out->rows = caps->array_rows;
  if (caps->array_cols) out->cols = caps->array_cols;
  if (caps->clock_hz > 0) out->clock_hz = caps->clock_hz;
  if (caps->mem_bytes_per_cycle > 0) out->mem_bytes_per_cycle = caps->mem_bytes_per_cycle;
}

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static uint64_t bytes_to_cycles(const tsr_km_timing_t *t, uint64_t bytes) {
  double bw = t->mem_bytes_per_cycle > 0 ? t->mem_bytes_per_cycle : 1.0;
  double c = (double)bytes / bw;
  uint64_t ci = (uint64_t)c;
  return ci + ((double)ci < c ? 1 : 0);
}

/* Geometry with zero fields replaced by the defaults. */
static void geometry(const tsr_km_timing_t *t, uint64_t *rows, uint64_t *cols, uint64_t *bus,
                     uint64_t *kc) {
  *rows = t->rows ? t->rows : 16;
  *cols = t->cols ? t->cols : 16;
  *bus = t->bus_bytes ? t->bus_bytes : 64;
  *kc = t->k_chunk ? t->k_chunk : 4096;
}

/* Timing follows the RTL's pipeline (hw/rtl/tsr_core.sv):
 *   - a launch costs a few control cycles; each descriptor is fetched
 *     (memory latency + one beat) and checked in three cycles before its
 *     tiles start, and ends at a barrier when its last results are written;
 *   - the loader queues one step per (m block, n block, k chunk), issuing
 *     one read segment per operand row it must load; two buffer slots per
 *     operand let step i+1 load while step i computes, so a step takes the
 *     longest of: its compute (GEMM: one k per cycle; GEMV: rows k's per
 *     cycle), its loads at the memory bandwidth, the loader's issue time
 *     plus the memory latency and, for a tile's last step, the
 *     draining of the previous tile's output bank (about two cycles a row);
 *   - the first step waits for the memory latency, the last tile for the
 *     array pipeline and its write-back.
 * Excess over the compute time is counted as stall, as CYC_STALL does. */
uint64_t tsr_km_launch_cycles(const tsr_km_timing_t *t) {
  (void)t;
  return 4;
}

static void add_fetch(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  acc->cycles += t->mem_latency + 8;
  acc->bytes_rd += TSR_HW_DESC_BYTES;
}

void tsr_km_estimate_nop(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  add_fetch(t, acc);
  acc->cycles += 2;
}

/* One class of steps that share lengths and loads. */
static void add_steps(const tsr_km_timing_t *t, uint64_t count, bool load_a, bool load_w,
                      uint64_t mlen, uint64_t nlen, uint64_t kc, bool gemv, bool last,
                      uint64_t nch, tsr_km_estimate_t *acc) {
  if (!count) return;
  uint64_t rows, cols, bus, kchunk;
  geometry(t, &rows, &cols, &bus, &kchunk);
  uint64_t segs = (load_a ? mlen : 0) + (load_w ? nlen : 0);
  /* Each channel streams its own rows; the busiest one (channel 0: the A
   * rows and its share of W) sets the step's memory time. */
  uint64_t ch0 = (load_a ? mlen : 0) + (load_w ? div_up(nlen, nch) : 0);
  uint64_t mem = bytes_to_cycles(t, ch0 * div_up(kc, bus) * bus);
  /* The loader issues a step's segments (about a cycle each) only once
   * a buffer slot is free, i.e. when the step before starts computing; the
   * data then needs the memory latency: a floor on the step time when
   * neither compute nor bandwidth is the limit. */
  uint64_t loader = segs ? 3 + segs + t->mem_latency : 3;
  uint64_t comp = gemv ? div_up(kc, rows) : kc;
  /* A tile's last step captures into the output bank, which must have been
   * drained by the writer (about two cycles per row) since the previous
   * capture; the array pipeline adds a few cycles. */
  uint64_t drain = 2 * (gemv ? 1 : mlen) + 9;
  uint64_t busy = last ? (comp + 3 > drain ? comp + 3 : drain) : comp;
  uint64_t step = busy;
  if (mem > step) step = mem;
  if (loader > step) step = loader;
  acc->cycles += count * step;
  acc->stall_cycles += count * (step - comp);
}

static uint64_t ports_of(const tsr_km_timing_t *t) { return t->ports > 1 ? t->ports : 1; }

static void estimate_gemm(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                          uint64_t nch, tsr_km_estimate_t *acc) {
  add_fetch(t, acc);
  uint64_t rows, cols, bus, kchunk;
  geometry(t, &rows, &cols, &bus, &kchunk);
  bool gemv = (uint64_t)m * cols < bus;
  uint64_t mrows = gemv ? 1 : rows;
  uint64_t nmb = div_up(m, mrows), nnb = div_up(n, cols);
  bool reuse_a = k <= kchunk;             /* A loaded only at n block 0 */
  bool reuse_w = k <= kchunk && n <= cols; /* W loaded only at m block 0 */

  /* Counters. */
  acc->bytes_rd += (reuse_a ? 1 : nnb) * (uint64_t)m * k + (reuse_w ? 1 : nmb) * (uint64_t)n * k;
  acc->bytes_wr += (uint64_t)m * n * 4;
  acc->macs += (uint64_t)m * n * k;

  /* Timing, by classes of blocks: full and remainder in m, n and k. */
  struct cls { uint64_t count, len, first; };
  struct cls mc[2] = {{m / mrows, mrows, 0}, {m % mrows ? 1 : 0, m % mrows, 0}};
  struct cls nc[2] = {{n / cols, cols, 0}, {n % cols ? 1 : 0, n % cols, 0}};
  struct cls kcl[2] = {{k / kchunk, kchunk, 0}, {k % kchunk ? 1 : 0, k % kchunk, 0}};
  mc[mc[0].count ? 0 : 1].first = 1; /* which class holds block 0 */
  nc[nc[0].count ? 0 : 1].first = 1;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int q = 0; q < 2; q++) {
        uint64_t cm = mc[i].count, cn = nc[j].count, ck = kcl[q].count;
        uint64_t all = cm * cn * ck;
        if (!all) continue;
        /* The last chunk of a tile is the remainder chunk if there is one. */
        bool last = (q == 1) || kcl[1].count == 0;
        uint64_t both, a_only = 0, w_only = 0;
        if (!reuse_a) {
          both = all;
        } else if (!reuse_w) {
          both = cm * nc[j].first * ck;
          w_only = all - both;
        } else {
          both = mc[i].first * cn * ck;
          a_only = all - both;
        }
        add_steps(t, both, true, true, mc[i].len, nc[j].len, kcl[q].len, gemv, last, nch, acc);
        add_steps(t, a_only, true, false, mc[i].len, nc[j].len, kcl[q].len, gemv, last, nch,
                  acc);
        add_steps(t, w_only, false, true, mc[i].len, nc[j].len, kcl[q].len, gemv, last, nch,
                  acc);
      }
  /* The first step waits for all its operands; at the end the array
   * pipeline, the last write-back and the barrier. */
  uint64_t k0 = k < kchunk ? k : kchunk;
  uint64_t first_segs = mc[mc[0].count ? 0 : 1].len + nc[nc[0].count ? 0 : 1].len;
  uint64_t first_ch0 = mc[mc[0].count ? 0 : 1].len + div_up(nc[nc[0].count ? 0 : 1].len, nch);
  acc->cycles += t->mem_latency + bytes_to_cycles(t, first_ch0 * div_up(k0, bus) * bus) +
                 first_segs;
  uint64_t last_rows = gemv ? 1 : (m % mrows ? m % mrows : mrows);
  acc->cycles += t->mem_latency / 2 + 2 * last_rows + 8;
}

void tsr_km_estimate_gemm(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                          tsr_km_estimate_t *acc) {
  estimate_gemm(t, m, n, k, ports_of(t), acc);
}

void tsr_km_estimate_gemm_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                               tsr_km_estimate_t *acc) {
  estimate_gemm(t, d->m, d->n, d->k, d->w_nch > 1 ? d->w_nch : 1, acc);
}

uint64_t tsr_km_gemm_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k) {
  tsr_km_estimate_t e = {0};
  tsr_km_estimate_gemm(t, m, n, k, &e);
  return e.cycles + tsr_km_launch_cycles(t);
}

uint32_t tsr_km_check_desc_ports(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size,
                                 uint32_t ports) {
  if (d->opcode != TSR_OP_NOP && d->opcode != TSR_OP_GEMM_I8_I32) return TSR_HWERR_BAD_OPCODE;
  if (d->flags != 0) return TSR_HWERR_BAD_OPCODE;
  if (d->opcode == TSR_OP_NOP) return TSR_HWERR_OK;
  if (d->m == 0 || d->n == 0 || d->k == 0 || d->m > TSR_HW_MAX_DIM ||
      d->n > TSR_HW_MAX_DIM || d->k > TSR_HW_MAX_DIM)
    return TSR_HWERR_BAD_DIMS;
  if (ports < 1) ports = 1;
  bool striped = d->w_nch > 1;
  if (d->lda < d->k || d->ldw < d->k || (uint64_t)d->ldc < 4ull * d->n || d->ldc % 4 ||
      d->c_addr % 4 || (striped && d->w_nch != ports) || (!striped && d->w_cstride != 0))
    return TSR_HWERR_BAD_STRIDE;
  uint64_t nch = striped ? d->w_nch : 1;
  uint64_t a_len = (uint64_t)(d->m - 1) * d->lda + d->k;
  /* W's extent: the last channel's first row plus the rows of the fullest
   * channel (hw/regmap.def) */
  uint64_t w_len = (nch - 1) * d->w_cstride + (uint64_t)((d->n - 1) / nch) * d->ldw + d->k;
  uint64_t c_len = (uint64_t)(d->m - 1) * d->ldc + 4ull * d->n;
  if (!tsr_km_inside(d->a_addr, a_len, window_base, window_size) ||
      !tsr_km_inside(d->w_addr, w_len, window_base, window_size) ||
      !tsr_km_inside(d->c_addr, c_len, window_base, window_size))
    return TSR_HWERR_ADDR_RANGE;
  return TSR_HWERR_OK;
}

uint32_t tsr_km_check_desc(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size) {
  return tsr_km_check_desc_ports(d, window_base, window_size, 1);
}

void tsr_km_execute(const tsr_km_timing_t *t, const tsr_km_memory_t *mem,
                    const tsr_hal_command_t *cmd, tsr_threadpool_t *pool,
                    tsr_hal_result_t *out) {
  memset(out, 0, sizeof *out);
  tsr_km_estimate_t e = {0};
  uint64_t wb = cmd->window_base, ws = cmd->window_size;
  uint64_t ring_len = (uint64_t)cmd->n_desc * TSR_HW_DESC_BYTES;
  uint64_t launch = tsr_km_launch_cycles(t);

  if (cmd->n_desc == 0) { /* the RTL finishes at once, checking nothing */
    out->cycles = launch;
    return;
  }
  if (cmd->ring % TSR_HW_DESC_BYTES || !tsr_km_inside(cmd->ring, ring_len, wb, ws)) {
    out->hw_status = TSR_HWERR_RING_RANGE;
    out->cycles = launch;
    return;
  }

  tsr_isa_t isa = tsr_isa_detect();
  uint32_t i = 0, status = TSR_HWERR_OK;
  for (; i < cmd->n_desc; i++) {
    uint64_t da = cmd->ring + (uint64_t)i * TSR_HW_DESC_BYTES;
    if (!tsr_km_inside(da, TSR_HW_DESC_BYTES, mem->base, mem->size)) {
      /* the fetch was requested (and counted) before DECERR came back */
      status = TSR_HWERR_AXI_ERROR;
      e.cycles += t->mem_latency;
      e.bytes_rd += TSR_HW_DESC_BYTES;
      break;
    }
    tsr_desc_t d;
    tsr_desc_unpack(&d, mem->data + (da - mem->base));
    status = tsr_km_check_desc_ports(&d, wb, ws, (uint32_t)ports_of(t));
    if (status != TSR_HWERR_OK) {
      add_fetch(t, &e);
      break;
    }
    if (d.opcode == TSR_OP_NOP) {
      tsr_km_estimate_nop(t, &e);
      continue;
    }
    uint64_t nch = d.w_nch > 1 ? d.w_nch : 1;
    uint64_t a_len = (uint64_t)(d.m - 1) * d.lda + d.k;
    uint64_t w_len = (nch - 1) * d.w_cstride + (uint64_t)((d.n - 1) / nch) * d.ldw + d.k;
    uint64_t c_len = (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n;
    if (!tsr_km_inside(d.a_addr, a_len, mem->base, mem->size) ||
        !tsr_km_inside(d.w_addr, w_len, mem->base, mem->size) ||
        !tsr_km_inside(d.c_addr, c_len, mem->base, mem->size)) {
      status = TSR_HWERR_AXI_ERROR;
      add_fetch(t, &e);
      break;
    }
    const int8_t *a = (const int8_t *)(mem->data + (d.a_addr - mem->base));
    const int8_t *w = (const int8_t *)(mem->data + (d.w_addr - mem->base));
    int32_t *c = (int32_t *)(void *)(mem->data + (d.c_addr - mem->base));
    if (nch == 1) {
      tsr_qgemm_strided(pool, isa, c, d.ldc / 4, a, d.lda, w, d.ldw, (int32_t)d.m,
                        (int32_t)d.n, (int32_t)d.k);
    } else {
      /* rows striped over channels: gather them into one N x K matrix */
      int8_t *wg = malloc((size_t)d.n * d.k);
      if (!wg) {
        status = TSR_HWERR_AXI_ERROR; /* the model ran out of host memory */
        add_fetch(t, &e);
        break;
      }
      for (uint32_t r = 0; r < d.n; r++)
        memcpy(wg + (size_t)r * d.k, mem->data + (tsr_desc_w_row(&d, r) - mem->base), d.k);
      tsr_qgemm_strided(pool, isa, c, d.ldc / 4, a, d.lda, wg, d.k, (int32_t)d.m,
                        (int32_t)d.n, (int32_t)d.k);
      free(wg);
    }
    tsr_km_estimate_gemm_desc(t, &d, &e);
  }
  out->hw_status = status;
  out->err_index = status ? i : 0;
  out->desc_done = i;
  out->cycles = e.cycles + launch;
  out->stall_cycles = e.stall_cycles;
  out->bytes_rd = e.bytes_rd;
  out->bytes_wr = e.bytes_wr;
  out->macs = e.macs;
}
