/* kernel_model.c - functional and timing model of the tessera kernel. */
#include "driver/kernel_model.h"

#include <math.h>
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
  if (caps->mem_ports) out->ports = caps->mem_ports; /* a board's channels */
  if (caps->mem_latency) out->mem_latency = caps->mem_latency;
}

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

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
  return 1;
}

static void add_fetch(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  acc->cycles += t->mem_latency + 8;
  acc->bytes_rd += TSR_HW_DESC_BYTES;
}

void tsr_km_estimate_nop(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  add_fetch(t, acc);
  acc->cycles += 2;
}

/* ---- the step pipeline, cycle by cycle in outline ----
 * A GEMM descriptor is played through the engines of hw/rtl/tsr_core.sv
 * with the RTL's handshake timing, one event per segment and step:
 *   loader   LPrep waits for free buffer slots, then offers one segment per
 *            operand row; a read master takes one every second cycle (its
 *            AR goes out the cycle after), at most MaxOutstanding (16) in
 *            flight per port; LPush and LNext follow the last one;
 *   memory   a burst's first beat comes `latency` cycles after its AR, the
 *            beats of one channel in order at its bandwidth (channel 0 also
 *            carries the writes); a segment is done with its last beat (one
 *            cycle later when an unaligned tail needs a flush beat);
 *   compute  a step starts once its segments are done and the step before
 *            issues its last reduction step; it issues one reduction step a
 *            cycle (GEMM: one k; GEMV: rows k's); a tile's last step waits
 *            until the writer has drained the previous tile;
 *   writer   five cycles after that last step the bank is loaded; each row
 *            is one request to the write master (one cycle, then one cycle
 *            per beat); the barrier waits for the last write response.
 * CYC_STALL counts the cycles with no step issuing while steps are pending,
 * as the RTL does. */
#define KM_MAX_PORTS 64
#define KM_OUTSTANDING 16

typedef struct {
  double chan;                      /* next beat may come at this cycle */
  double tok;                       /* bandwidth tokens at `chan`, bytes */
  double ready;                     /* the read master takes a segment  */
  double done[KM_OUTSTANDING];      /* completion of the last segments  */
  unsigned head;
} km_port_t;

typedef struct {
  const tsr_km_timing_t *t;
  double beat;                      /* cycles per beat on a channel     */
  double lat;
  uint64_t bus;
  km_port_t port[KM_MAX_PORTS];
  double last_done;                 /* latest segment completion        */
} km_sim_t;

/* One segment of len bytes at addr through port p, offered at cycle c;
 * returns the cycle of its handshake. */
static double km_segment(km_sim_t *s, unsigned p, uint64_t addr, uint64_t len, double c) {
  km_port_t *pt = &s->port[p];
  if (c < pt->ready) c = pt->ready;
  double slot = pt->done[pt->head] + 1; /* the meta FIFO entry this one reuses */
  if (c < slot) c = slot;
  uint64_t off = addr % s->bus;
  uint64_t nin = (off + len + s->bus - 1) / s->bus;
  uint64_t page = 4096 - addr % 4096;
  int bursts = (off + len > page) ? 2 : 1; /* a segment crossing a page */
  double first = c + 1 + s->lat;
  if (first < pt->chan) first = pt->chan;
  double end;
  if (s->beat <= 1) {
    end = first + (double)(nin - 1);
  } else {
    /* A narrow channel's bucket holds two beats: after an idle spell the
     * first beats come one a cycle, then one every `beat` cycles. */
    double bw = (double)s->bus / s->beat, cap = 2.0 * (double)s->bus;
    double t0 = pt->tok + (first - pt->chan) * bw;
    if (t0 > cap) t0 = cap;
    double fast = floor((t0 - (double)s->bus) / ((double)s->bus - bw)) + 1;
    if (fast < 1) fast = 1;
    if (fast > (double)nin) fast = (double)nin;
    end = first + (fast - 1) + ((double)nin - fast) * s->beat;
    double left = t0 + (end - first) * bw - (double)nin * (double)s->bus;
    pt->tok = left > 0 ? left : 0;
  }
  uint64_t nout = (len + s->bus - 1) / s->bus;
  bool flush = off && nout == nin; /* R held a cycle for the last word */
  pt->chan = end + s->beat + (flush ? 1 : 0);
  double done = end + (flush ? 1 : 0);
  pt->done[pt->head] = done;
  pt->head = (pt->head + 1) % KM_OUTSTANDING;
  pt->ready = c + 1 + bursts;
  if (done > s->last_done) s->last_done = done;
  return c;
}

/* Writes of one tile's rows from cycle c; returns the cycle of the last
 * request's handshake, *resp the cycle of its write response. */
static double km_write_rows(km_sim_t *s, uint64_t c_addr, uint64_t ldc, uint64_t rows,
                            uint64_t row_bytes, double c, double *wfree, double *resp) {
  km_port_t *ch0 = &s->port[0];
  double h = c;
  for (uint64_t r = 0; r < rows; r++) {
    if (h < *wfree) h = *wfree;
    uint64_t a = c_addr + r * ldc;
    uint64_t nb = (a % s->bus + row_bytes + s->bus - 1) / s->bus;
    double b = h + 1;
    /* W beats share channel 0's bandwidth: each delays the reads queued
     * there by one beat; on an idle channel it is free (the token bucket
     * holds two beats). */
    for (uint64_t i = 0; i < nb; i++) {
      if (ch0->chan > b) ch0->chan += s->beat;
      b += s->beat; /* a narrow channel paces the writes too */
    }
    *wfree = b;
    *resp = b + s->lat / 2 + 1;
    if (r + 1 < rows) h = h + 1;
  }
  return *wfree - 1;
}

typedef struct {
  uint64_t cycles, stall;
} km_desc_time_t;

/* Cycles of one GEMM from the loader's start to the end of its barrier. */
static km_desc_time_t km_gemm_time(const tsr_km_timing_t *t, const tsr_desc_t *d, double t0) {
  uint64_t rows, cols, bus, kchunk;
  geometry(t, &rows, &cols, &bus, &kchunk);
  km_sim_t s;
  memset(&s, 0, sizeof s);
  s.t = t;
  s.bus = bus;
  s.lat = t->mem_latency;
  s.beat = (double)bus / (t->mem_bytes_per_cycle > 0 ? t->mem_bytes_per_cycle : 1.0);
  if (s.beat < 1) s.beat = 1;
  for (unsigned p = 0; p < KM_MAX_PORTS; p++)
    for (unsigned i = 0; i < KM_OUTSTANDING; i++) s.port[p].done[i] = -1e18;
  uint64_t nch = d->w_nch > 1 ? d->w_nch : 1;
  if (nch > KM_MAX_PORTS) nch = KM_MAX_PORTS;
  uint64_t m = d->m, n = d->n, k = d->k;
  bool gemv = m * cols < bus;
  uint64_t mrows = gemv ? 1 : rows;
  bool kfits = k <= kchunk;

  double L = t0;                    /* loader in LPrep                     */
  double slot_a[2] = {0, 0}, slot_w[2] = {0, 0}; /* free from this cycle   */
  int sa = 0, sw = 0;
  double prev_f = t0;               /* finishing cycle of the last step    */
  bool any = false;
  double out_free = 0;              /* output bank free (writer drained)   */
  double wfree = 0, resp = 0;
  double stall = 0;
  double lanes = (double)(gemv ? rows : 1);
  for (uint64_t m0 = 0; m0 < m; m0 += mrows) {
    uint64_t ml = gemv ? 1 : (m - m0 < rows ? m - m0 : rows);
    for (uint64_t n0 = 0; n0 < n; n0 += cols) {
      uint64_t nl = n - n0 < cols ? n - n0 : cols;
      for (uint64_t k0 = 0; k0 < k; k0 += kchunk) {
        uint64_t kc = k - k0 < kchunk ? k - k0 : kchunk;
        bool reuse_a = kfits && n0 != 0;
        bool reuse_w = kfits && n <= cols && m0 != 0;
        int na = reuse_a ? sa : !sa, nw = reuse_w ? sw : !sw;
        if (!reuse_a && L < slot_a[na]) L = slot_a[na];
        if (!reuse_w && L < slot_w[nw]) L = slot_w[nw];
        sa = na, sw = nw;
        double c = L + 1, last_hs = L;
        bool segs = false;
        if (!reuse_a)
          for (uint64_t r = 0; r < ml; r++) {
            last_hs = km_segment(&s, 0, d->a_addr + (m0 + r) * d->lda + k0, kc, c);
            c = last_hs + 1;
            segs = true;
          }
        if (!reuse_w)
          for (uint64_t j = 0; j < nl; j++) {
            unsigned p = nch > 1 ? (unsigned)(j % nch) : 0;
            last_hs = km_segment(&s, p, tsr_desc_w_row(d, (uint32_t)(n0 + j)) + k0, kc, c);
            c = last_hs + 1;
            segs = true;
          }
        double pushed = segs ? last_hs + 1 : L + 1; /* LPush */
        L = pushed + 2;                             /* LNext, then LPrep */
        /* compute: record visible after LPush, data seen a cycle after
         * the last segment's completion */
        double ready = pushed + 1;
        if (segs && ready < s.last_done + 1) ready = s.last_done + 1;
        double start = ready > prev_f ? ready : prev_f;
        if (any && start > prev_f) stall += start - prev_f;
        if (!any && start > t0) stall += start - t0 - 1; /* cycles before the first */
        uint64_t comp = gemv ? (kc + rows - 1) / rows : kc;
        double f = start + (double)comp;
        bool last = k0 + kc == k;
        if (last && f < out_free) f = out_free;
        (void)lanes;
        prev_f = f;
        any = true;
        slot_a[sa] = f + 1;
        slot_w[sw] = f + 1;
        if (last) {
          double h = km_write_rows(&s, d->c_addr + m0 * d->ldc + 4 * n0, d->ldc, ml, 4 * nl,
                                   f + 6, &wfree, &resp);
          out_free = h + 1;
        }
      }
    }
  }
  double end = resp > prev_f ? resp : prev_f;
  if (end < s.last_done) end = s.last_done;
  km_desc_time_t r;
  r.cycles = (uint64_t)(end - t0 + 0.999) + 1;
  r.stall = (uint64_t)(stall + 0.5);
  return r;
}

static void estimate_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                          tsr_km_estimate_t *acc) {
  add_fetch(t, acc);
  uint64_t rows, cols, bus, kchunk;
  geometry(t, &rows, &cols, &bus, &kchunk);
  uint64_t m = d->m, n = d->n, k = d->k;
  bool gemv = m * cols < bus;
  uint64_t mrows = gemv ? 1 : rows;
  uint64_t nmb = div_up(m, mrows), nnb = div_up(n, cols);
  bool reuse_a = k <= kchunk;             /* A loaded only at n block 0 */
  bool reuse_w = k <= kchunk && n <= cols; /* W loaded only at m block 0 */
  acc->bytes_rd += (reuse_a ? 1 : nnb) * m * k + (reuse_w ? 1 : nmb) * n * k;
  acc->bytes_wr += m * n * 4;
  acc->macs += m * n * k;
  km_desc_time_t tm = km_gemm_time(t, d, 0);
  acc->cycles += tm.cycles;
  acc->stall_cycles += tm.stall;
}

static uint64_t ports_of(const tsr_km_timing_t *t) { return t->ports > 1 ? t->ports : 1; }

/* The layout a host gives packed operands: rows K bytes apart from 64-byte
 * aligned buffers, W striped over nch channels. */
static void estimate_gemm(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                          uint64_t nch, tsr_km_estimate_t *acc) {
  tsr_desc_t d = {TSR_OP_GEMM_I8_I32, 0, m, n, k, k, k, 4 * n, 0, 0, 0, 0, 0};
  d.w_addr = ((uint64_t)m * k + 63) / 64 * 64;
  if (nch > 1) {
    d.w_nch = (uint32_t)nch;
    d.w_cstride = (uint32_t)(((n + nch - 1) / nch * (uint64_t)k + 63) / 64 * 64);
  }
  d.c_addr = d.w_addr + (nch > 1 ? nch * d.w_cstride : ((uint64_t)n * k + 63) / 64 * 64);
  estimate_desc(t, &d, acc);
}

void tsr_km_estimate_gemm(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                          tsr_km_estimate_t *acc) {
  estimate_gemm(t, m, n, k, ports_of(t), acc);
}

void tsr_km_estimate_gemm_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                               tsr_km_estimate_t *acc) {
  estimate_desc(t, d, acc);
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
