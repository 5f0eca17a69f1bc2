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
  t->ops = TSR_KM_OPS_ALL;
}

void tsr_km_timing_from_caps(const tsr_hal_caps_t *caps, tsr_km_timing_t *out) {
  tsr_km_timing_init(out);
  if (caps->array_rows) out->rows = caps->array_rows;
  if (caps->array_cols) out->cols = caps->array_cols;
  if (caps->clock_hz > 0) out->clock_hz = caps->clock_hz;
  if (caps->mem_bytes_per_cycle > 0) out->mem_bytes_per_cycle = caps->mem_bytes_per_cycle;
  if (caps->mem_ports) out->ports = caps->mem_ports; /* a board's channels */
  if (caps->mem_latency) out->mem_latency = caps->mem_latency;
  if (caps->ops) out->ops = caps->ops;
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
 *     one read segment per operand row it must load; four buffer slots
 *     per operand let steps i+1 to i+3 load while step i computes, so a
 *     step takes the longest of: its compute (GEMM: one k per cycle; GEMV:
 *     rows k's per cycle), its loads at the memory bandwidth, the loader's
 *     issue time plus the memory latency and, for a tile's last step, the
 *     draining of the previous tile's output bank (about two cycles a row,
 *     after the column sums of a GEMV tile);
 *   - the first step waits for the memory latency, the last tile for the
 *     array pipeline and its write-back.
 * Excess over the compute time is counted as stall, as CYC_STALL does. */
uint64_t tsr_km_launch_cycles(const tsr_km_timing_t *t) {
  (void)t;
  return 1;
}

void tsr_km_estimate_fetch(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  acc->cycles += t->mem_latency + 8;
  acc->bytes_rd += TSR_HW_DESC_BYTES;
}

void tsr_km_estimate_nop(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  tsr_km_estimate_fetch(t, acc);
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
#define KM_SLOTS 4 /* buffer slots per operand (tsr_loader Slots) */

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

static void km_sim_init(km_sim_t *s, const tsr_km_timing_t *t, uint64_t bus) {
  memset(s, 0, sizeof *s);
  s->t = t;
  s->bus = bus;
  s->lat = t->mem_latency;
  s->beat = (double)bus / (t->mem_bytes_per_cycle > 0 ? t->mem_bytes_per_cycle : 1.0);
  if (s->beat < 1) s->beat = 1;
  for (unsigned p = 0; p < KM_MAX_PORTS; p++)
    for (unsigned i = 0; i < KM_OUTSTANDING; i++) s->port[p].done[i] = -1e18;
}

/* Completion cycle of the segment port p took last. */
static double km_last_done(const km_sim_t *s, unsigned p) {
  return s->port[p].done[(s->port[p].head + KM_OUTSTANDING - 1) % KM_OUTSTANDING];
}

/* The compute side of the step pipeline, shared by GEMM and GEMM_BSR: the
 * cycle the last step finished, the output bank's and the writer's state,
 * the stall count. */
typedef struct {
  double t0;       /* the loader's start                                */
  double prev_f;   /* finishing cycle of the last step                  */
  double out_free; /* output bank free (writer drained)                 */
  double wfree, resp;
  double stall;
  bool any;        /* a step has issued                                 */
} km_issue_t;

static void km_issue_init(km_issue_t *q, double t0) {
  memset(q, 0, sizeof *q);
  q->t0 = t0;
  q->prev_f = t0;
}

/* Cycles the array takes to sum a GEMV tile's bank (hw/rtl/tsr_mac_array.sv
 * SumSteps: rows / 16 bank rows a cycle, at most 16 cycles). */
static uint64_t km_sum_steps(uint64_t rows) { return rows < 16 ? rows : 16; }

/* One step pushed by the loader at `pushed` (segs: it loaded segments, so
 * its data is seen a cycle after the last one's completion), computing
 * `comp` cycles; a tile's last step waits for the output bank, then its
 * rows (ml rows of row_bytes at c_addr, ldc apart) go to the writer five
 * cycles after, `sum` cycles later for a GEMV tile (its column sums).
 * Returns the step's finishing cycle. */
static double km_issue_step(km_sim_t *s, km_issue_t *q, double pushed, bool segs, uint64_t comp,
                            bool last, uint64_t c_addr, uint64_t ldc, uint64_t ml,
                            uint64_t row_bytes, uint64_t sum) {
  double ready = pushed + 1;
  if (segs && ready < s->last_done + 1) ready = s->last_done + 1;
  double start = ready > q->prev_f ? ready : q->prev_f;
  if (q->any && start > q->prev_f) q->stall += start - q->prev_f;
  if (!q->any && start > q->t0) q->stall += start - q->t0 - 1; /* cycles before the first */
  double f = start + (double)comp;
  if (last && f < q->out_free) f = q->out_free;
  q->prev_f = f;
  q->any = true;
  if (last) {
    double h = km_write_rows(s, c_addr, ldc, ml, row_bytes, f + 6 + (double)sum, &q->wfree,
                             &q->resp);
    q->out_free = h + 1;
  }
  return f;
}

/* The cycle the last write response or read completed. */
static double km_issue_end(const km_sim_t *s, const km_issue_t *q) {
  double end = q->resp > q->prev_f ? q->resp : q->prev_f;
  return end < s->last_done ? s->last_done : end;
}

/* Cycles of one GEMM from the loader's start to the end of its barrier. */
static km_desc_time_t km_gemm_time(const tsr_km_timing_t *t, const tsr_desc_t *d, double t0) {
  uint64_t rows, cols, bus, kchunk;
  geometry(t, &rows, &cols, &bus, &kchunk);
  km_sim_t s;
  km_sim_init(&s, t, bus);
  uint64_t nch = d->w_nch > 1 ? d->w_nch : 1;
  if (nch > KM_MAX_PORTS) nch = KM_MAX_PORTS;
  uint64_t m = d->m, n = d->n, k = d->k;
  bool gemv = m * cols < bus;
  uint64_t mrows = gemv ? 1 : rows;
  bool kfits = k <= kchunk;

  double L = t0;                    /* loader in LPrep                     */
  double slot_a[KM_SLOTS] = {0}, slot_w[KM_SLOTS] = {0}; /* free from this cycle */
  int sa = 0, sw = 0;
  km_issue_t q;
  km_issue_init(&q, t0);
  for (uint64_t m0 = 0; m0 < m; m0 += mrows) {
    uint64_t ml = gemv ? 1 : (m - m0 < rows ? m - m0 : rows);
    for (uint64_t n0 = 0; n0 < n; n0 += cols) {
      uint64_t nl = n - n0 < cols ? n - n0 : cols;
      for (uint64_t k0 = 0; k0 < k; k0 += kchunk) {
        uint64_t kc = k - k0 < kchunk ? k - k0 : kchunk;
        bool reuse_a = kfits && n0 != 0;
        bool reuse_w = kfits && n <= cols && m0 != 0;
        int na = reuse_a ? sa : (sa + 1) % KM_SLOTS, nw = reuse_w ? sw : (sw + 1) % KM_SLOTS;
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
        /* compute: record visible after LPush */
        uint64_t comp = gemv ? (kc + rows - 1) / rows : kc;
        double f = km_issue_step(&s, &q, pushed, segs, comp, k0 + kc == k,
                                 d->c_addr + m0 * d->ldc + 4 * n0, d->ldc, ml, 4 * nl,
                                 gemv ? km_sum_steps(rows) : 0);
        slot_a[sa] = f + 1;
        slot_w[sw] = f + 1;
      }
    }
  }
  km_desc_time_t r;
  r.cycles = (uint64_t)(km_issue_end(&s, &q) - t0 + 0.999) + 1;
  r.stall = (uint64_t)(q.stall + 0.5);
  return r;
}

/* ---- GEMM_BSR: the count, then the walk over the stored tiles ----
 * (kernel_model.h). The count reads one segment per bitmap row on port 0
 * and compares two cycles after the last one's data; the walk then plays
 * the steps through the same engines as a dense GEMM. A tile row's bitmap
 * row is read before its first step can issue: the first right after the
 * count's reads (before the count's result), each next one as the first
 * segment of the tile row before it, so its latency hides behind that
 * row's loads. */
/* Stored tiles of bitmap row `row` in k tiles [t0, t1). */
static uint64_t bsr_stored(const uint8_t *row, uint32_t t0, uint32_t t1) {
  uint64_t c = 0;
  for (uint32_t t = t0; t < t1; t++) c += (uint64_t)tsr_bsr_bit(row, t);
  return c;
}

static uint32_t bsr_check_bits(const tsr_desc_t *d, const uint8_t *bm) {
  const uint32_t bk = tsr_desc_bsr_bk(d);
  const uint32_t ntr = tsr_bsr_tile_rows(d->n), nkt = tsr_bsr_k_tiles(d->k, bk);
  const uint32_t rb = tsr_bsr_row_bytes(d->k, bk);
  const unsigned last_mask = nkt % 8 ? (1u << (nkt % 8)) - 1 : 0xFFu;
  uint64_t total = 0;
  for (uint32_t r = 0; r < ntr; r++) {
    const uint8_t *row = bm + (uint64_t)r * d->ldw;
    for (uint32_t b = 0; b < rb; b++) {
      unsigned v = row[b];
      if (b + 1 == rb) {
        if (v & ~last_mask) return TSR_HWERR_BAD_COUNT; /* a tile past K */
        v &= last_mask;
      }
      total += (uint64_t)__builtin_popcount(v);
    }
  }
  return total == d->w_cstride ? TSR_HWERR_OK : TSR_HWERR_BAD_COUNT;
}

static uint32_t km_bsr(const tsr_km_timing_t *t, const tsr_desc_t *d, const uint8_t *bm,
                       bool walk, tsr_km_estimate_t *acc) {
  uint64_t rows, cols, bus, kchunk;
  geometry(t, &rows, &cols, &bus, &kchunk);
  const uint64_t BN = TSR_HW_BSR_BN, BK = tsr_desc_bsr_bk(d), TB = tsr_bsr_tile_bytes(tsr_desc_bsr_bk(d));
  const uint32_t ntr = tsr_bsr_tile_rows(d->n), nkt = tsr_bsr_k_tiles(d->k, (uint32_t)BK);
  const uint32_t rb = tsr_bsr_row_bytes(d->k, (uint32_t)BK);
  km_sim_t s;
  km_sim_init(&s, t, bus);
  /* the count, then (before its result) the walk's first bitmap row:
   * reading bitmaps is all a refused descriptor may do */
  double c = 0;
  for (uint32_t r = 0; r < ntr; r++) c = km_segment(&s, 0, d->w_addr + (uint64_t)r * d->ldw, rb, c) + 1;
  double t0 = s.last_done + 2;
  km_segment(&s, 0, d->w_addr, rb, c);
  double bm_ready = km_last_done(&s, 0);
  acc->bytes_rd += (uint64_t)(ntr + 1) * rb;
  uint32_t status = bsr_check_bits(d, bm);
  if (!walk || status != TSR_HWERR_OK) {
    acc->cycles += (uint64_t)((t0 > bm_ready ? t0 : bm_ready) + 0.999) + 1;
    return status;
  }

  const uint64_t m = d->m, n = d->n, k = d->k;
  const bool gemv = m * cols < bus;
  const uint64_t mrows = gemv ? 1 : rows;
  const uint64_t nbr = cols < BN ? cols : BN; /* W rows of an n block */
  uint64_t ktc = kchunk / BK;                  /* k tiles of a chunk */
  if (ktc < 1) ktc = 1;
  const bool kfits = nkt <= ktc;
  const bool wfits = n <= nbr; /* one n block: W kept across m blocks */
  const uint64_t tiles = tsr_desc_bsr_tiles(d);

  double L = t0, z_free = 0;
  double slot_a[KM_SLOTS] = {0}, slot_w[KM_SLOTS] = {0};
  int sa = 0, sw = 0;
  km_issue_t q;
  km_issue_init(&q, t0);
  for (uint64_t m0 = 0; m0 < m; m0 += mrows) {
    const uint64_t ml = gemv ? 1 : (m - m0 < rows ? m - m0 : rows);
    bool a_held = false;  /* the m block's A chunk is in its slot (kfits) */
    uint64_t first = 0;   /* index of the tile row's first stored tile */
    for (uint32_t tr = 0; tr < ntr; tr++) {
      const uint8_t *row = bm + (uint64_t)tr * d->ldw;
      const uint64_t stored = bsr_stored(row, 0, nkt);
      if (L < bm_ready + 1) L = bm_ready + 1;
      bool next = tr + 1 < ntr || m0 + mrows < m, prefetched = false;
      uint32_t last_t = 0; /* k tile after the row's last stored one */
      for (uint32_t x = nkt; x > 0; x--)
        if (tsr_bsr_bit(row, x - 1)) { last_t = x; break; }
      for (uint64_t n0 = tr * BN; n0 < n && n0 < (tr + 1) * BN; n0 += nbr) {
        const uint64_t nl = n - n0 < nbr ? n - n0 : nbr;
        const uint64_t jr = n0 - tr * BN; /* first row of the n block inside the tile */
        uint64_t rank = first;
        if (stored == 0) {
          /* no step: the loader hands the writer a zero record (after the
           * next bitmap row's request), which writes the rows as zeros
           * after the tiles before it, without the output bank */
          double hs = L;
          if (next && !prefetched) {
            uint64_t ntrw = tr + 1 < ntr ? tr + 1 : 0;
            hs = km_segment(&s, 0, d->w_addr + ntrw * d->ldw, rb, L + 1);
            bm_ready = km_last_done(&s, 0);
            acc->bytes_rd += rb;
            prefetched = true;
          }
          /* the writer takes a zero record once the one before is written
           * (a row a cycle, in the gaps between the output bank's rows) */
          double zh = hs + 1 > z_free ? hs + 1 : z_free;
          L = zh + 2;
          z_free = zh + 2 + (double)ml;
          double at = L > q.prev_f + 6 ? L : q.prev_f + 6;
          km_write_rows(&s, d->c_addr + m0 * d->ldc + 4 * n0, d->ldc, ml, 4 * nl, at, &q.wfree,
                        &q.resp);
          continue;
        }
        for (uint64_t t0k = 0; t0k < nkt; t0k += ktc) {
          const uint64_t t1k = t0k + ktc < nkt ? t0k + ktc : nkt;
          const uint64_t in_chunk = bsr_stored(row, (uint32_t)t0k, (uint32_t)t1k);
          const bool last = t1k >= last_t;
          if (!in_chunk) continue;
          const uint64_t k0 = t0k * BK, kc = (k - k0 < ktc * BK) ? k - k0 : ktc * BK;
          const bool load_a = in_chunk && !(kfits && a_held);
          const bool load_w = in_chunk && !(kfits && wfits && m0 != 0);
          int na = load_a ? (sa + 1) % KM_SLOTS : sa, nw = load_w ? (sw + 1) % KM_SLOTS : sw;
          if (load_a && L < slot_a[na]) L = slot_a[na];
          if (load_w && L < slot_w[nw]) L = slot_w[nw];
          sa = na, sw = nw;
          double cc = L + 1, last_hs = L;
          bool segs = false;
          if (next && !prefetched) { /* the next tile row's bitmap row */
            uint64_t ntrw = tr + 1 < ntr ? tr + 1 : 0;
            last_hs = km_segment(&s, 0, d->w_addr + ntrw * d->ldw, rb, cc);
            cc = last_hs + 1;
            bm_ready = km_last_done(&s, 0);
            acc->bytes_rd += rb;
            prefetched = true;
          }
          if (load_a) {
            for (uint64_t r = 0; r < ml; r++) {
              last_hs = km_segment(&s, 0, d->a_addr + (m0 + r) * d->lda + k0, kc, cc);
              cc = last_hs + 1;
              segs = true;
            }
            acc->bytes_rd += ml * kc;
            a_held = true;
          }
          uint64_t comp = 0, kin = 0;
          for (uint64_t x = t0k; x < t1k; x++) {
            if (!tsr_bsr_bit(row, (uint32_t)x)) continue;
            const uint64_t kl = k - x * BK < BK ? k - x * BK : BK;
            if (load_w) { /* the n block's rows of the tile, one segment */
              const uint64_t len = (BN - jr < nbr ? BN - jr : nbr) * BK;
              last_hs = km_segment(&s, 0, tiles + rank * TB + jr * BK, len, cc);
              cc = last_hs + 1;
              segs = true;
              acc->bytes_rd += len;
            }
            comp += gemv ? (kl + rows - 1) / rows : kl;
            kin += kl;
            rank++;
          }
          acc->macs += ml * nl * kin;
          double pushed = (segs || prefetched) ? last_hs + 1 : L + 1;
          L = pushed + 2;
          double f = km_issue_step(&s, &q, pushed, segs, comp, last,
                                   d->c_addr + m0 * d->ldc + 4 * n0, d->ldc, ml, 4 * nl,
                                   gemv ? km_sum_steps(rows) : 0);
          slot_a[sa] = f + 1;
          slot_w[sw] = f + 1;
          if (last) break;
        }
      }
      first += stored;
    }
  }
  acc->cycles += (uint64_t)(km_issue_end(&s, &q) + 0.999) + 1;
  acc->stall_cycles += (uint64_t)(q.stall + 0.5);
  acc->bytes_wr += m * n * 4;
  return TSR_HWERR_OK;
}

void tsr_km_estimate_bsr_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                              const uint8_t *bitmap, tsr_km_estimate_t *acc) {
  tsr_km_estimate_fetch(t, acc);
  km_bsr(t, d, bitmap, true, acc);
}

uint32_t tsr_km_bsr_count(const tsr_km_timing_t *t, const tsr_desc_t *d, const uint8_t *bitmap,
                          tsr_km_estimate_t *acc) {
  tsr_km_estimate_t scratch = {0};
  return km_bsr(t, d, bitmap, false, acc ? acc : &scratch);
}

static void estimate_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                          tsr_km_estimate_t *acc) {
  tsr_km_estimate_fetch(t, acc);
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

/* Steps 2b-4 for GEMM_BSR (kernel_model.h). The tiles' extent is checked
 * relative to the window so that nothing wraps at the top of the address
 * space. */
static uint32_t check_bsr(const tsr_desc_t *d, uint64_t wb, uint64_t ws) {
  if (!tsr_bsr_block_ok(d->w_nch)) return TSR_HWERR_BAD_BLOCK;
  if (d->lda < d->k || (uint64_t)d->ldc < 4ull * d->n || d->ldc % 4 || d->c_addr % 4 ||
      d->ldw < tsr_bsr_row_bytes(d->k, tsr_desc_bsr_bk(d)))
    return TSR_HWERR_BAD_STRIDE;
  uint64_t a_len = (uint64_t)(d->m - 1) * d->lda + d->k;
  uint64_t c_len = (uint64_t)(d->m - 1) * d->ldc + 4ull * d->n;
  uint64_t span = tsr_bsr_bitmap_span(d);
  if (!tsr_km_inside(d->a_addr, a_len, wb, ws) || !tsr_km_inside(d->w_addr, span, wb, ws) ||
      !tsr_km_inside(d->c_addr, c_len, wb, ws))
    return TSR_HWERR_ADDR_RANGE;
  uint64_t rel = d->w_addr - wb + span, pad = tsr_bsr_tile_pad(d);
  uint64_t tiles = (uint64_t)d->w_cstride * tsr_bsr_tile_bytes(tsr_desc_bsr_bk(d));
  if (pad > ws - rel || tiles > ws - rel - pad) return TSR_HWERR_ADDR_RANGE;
  return TSR_HWERR_OK;
}

uint32_t tsr_km_check_desc_ops(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size,
                               uint32_t ports, uint32_t ops) {
  if (!ops) ops = TSR_KM_OPS_ALL;
  if (d->opcode >= 32 || !((ops & TSR_KM_OPS_ALL) >> d->opcode & 1)) return TSR_HWERR_BAD_OPCODE;
  if (d->flags != 0) return TSR_HWERR_BAD_OPCODE;
  if (d->opcode == TSR_OP_NOP) return TSR_HWERR_OK;
  if (d->m == 0 || d->n == 0 || d->k == 0 || d->m > TSR_HW_MAX_DIM ||
      d->n > TSR_HW_MAX_DIM || d->k > TSR_HW_MAX_DIM)
    return TSR_HWERR_BAD_DIMS;
  if (d->opcode == TSR_OP_GEMM_BSR_I8_I32) return check_bsr(d, window_base, window_size);
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

uint32_t tsr_km_check_desc_ports(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size,
                                 uint32_t ports) {
  return tsr_km_check_desc_ops(d, window_base, window_size, ports, TSR_KM_OPS_ALL);
}

uint32_t tsr_km_check_desc(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size) {
  return tsr_km_check_desc_ports(d, window_base, window_size, 1);
}

/* GEMM_BSR on the model's memory: C one tile row at a time, each tile row's
 * stored tiles spread into a BN x K strip of zeros (absent tiles are zeros,
 * so the product is the dense one, bit for bit). Returns an AXI_ERROR when
 * host memory runs out. */
static uint32_t run_bsr(const tsr_desc_t *d, const tsr_km_memory_t *mem, tsr_threadpool_t *pool,
                        tsr_isa_t isa) {
  const uint32_t BN = TSR_HW_BSR_BN, BK = tsr_desc_bsr_bk(d);
  const uint32_t ntr = tsr_bsr_tile_rows(d->n), nkt = tsr_bsr_k_tiles(d->k, BK);
  const uint8_t *bm = mem->data + (d->w_addr - mem->base);
  const uint8_t *tiles = mem->data + (tsr_desc_bsr_tiles(d) - mem->base);
  const int8_t *a = (const int8_t *)(mem->data + (d->a_addr - mem->base));
  uint8_t *cb = mem->data + (d->c_addr - mem->base);
  int8_t *strip = malloc((size_t)BN * d->k);
  if (!strip) return TSR_HWERR_AXI_ERROR;
  uint64_t idx = 0;
  for (uint32_t tr = 0; tr < ntr; tr++) {
    const uint8_t *row = bm + (uint64_t)tr * d->ldw;
    const uint32_t n0 = tr * BN, nl = d->n - n0 < BN ? d->n - n0 : BN;
    bool any = false;
    memset(strip, 0, (size_t)BN * d->k);
    for (uint32_t x = 0; x < nkt; x++) {
      if (!tsr_bsr_bit(row, x)) continue;
      const uint32_t kl = d->k - x * BK < BK ? d->k - x * BK : BK;
      const uint8_t *tile = tiles + idx++ * tsr_bsr_tile_bytes(BK);
      for (uint32_t j = 0; j < nl; j++)
        memcpy(strip + (size_t)j * d->k + (size_t)x * BK, tile + (size_t)j * BK, kl);
      any = true;
    }
    int32_t *c = (int32_t *)(void *)(cb + 4ull * n0);
    if (any) {
      tsr_qgemm_strided(pool, isa, c, d->ldc / 4, a, d->lda, strip, d->k, (int32_t)d->m,
                        (int32_t)nl, (int32_t)d->k);
    } else {
      for (uint32_t r = 0; r < d->m; r++) memset(cb + (uint64_t)r * d->ldc + 4ull * n0, 0, 4ull * nl);
    }
  }
  free(strip);
  return TSR_HWERR_OK;
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
    status = tsr_km_check_desc_ops(&d, wb, ws, (uint32_t)ports_of(t), t->ops);
    if (status != TSR_HWERR_OK) {
      tsr_km_estimate_fetch(t, &e);
      break;
    }
    if (d.opcode == TSR_OP_NOP) {
      tsr_km_estimate_nop(t, &e);
      continue;
    }
    if (d.opcode == TSR_OP_GEMM_BSR_I8_I32) {
      uint64_t a_len = (uint64_t)(d.m - 1) * d.lda + d.k;
      uint64_t c_len = (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n;
      uint64_t t_len = (uint64_t)d.w_cstride * tsr_bsr_tile_bytes(tsr_desc_bsr_bk(&d));
      tsr_km_estimate_fetch(t, &e);
      if (!tsr_km_inside(d.w_addr, tsr_bsr_bitmap_span(&d), mem->base, mem->size)) {
        status = TSR_HWERR_AXI_ERROR;
        break;
      }
      const uint8_t *bm = mem->data + (d.w_addr - mem->base);
      /* the count and, when it passes, the walk's estimate, which reads the
       * bitmaps before C may overwrite them; a refusal costs the count */
      tsr_km_estimate_t est = {0};
      status = km_bsr(t, &d, bm, true, &est);
      if (status != TSR_HWERR_OK) {
        e.cycles += est.cycles;
        e.bytes_rd += est.bytes_rd;
        break;
      }
      if (!tsr_km_inside(d.a_addr, a_len, mem->base, mem->size) ||
          !tsr_km_inside(tsr_desc_bsr_tiles(&d), t_len, mem->base, mem->size) ||
          !tsr_km_inside(d.c_addr, c_len, mem->base, mem->size)) {
        status = TSR_HWERR_AXI_ERROR;
        break;
      }
      status = run_bsr(&d, mem, pool, isa);
      if (status != TSR_HWERR_OK) break;
      e.cycles += est.cycles;
      e.stall_cycles += est.stall_cycles;
      e.bytes_rd += est.bytes_rd;
      e.bytes_wr += est.bytes_wr;
      e.macs += est.macs;
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
      tsr_km_estimate_fetch(t, &e);
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
        tsr_km_estimate_fetch(t, &e);
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
