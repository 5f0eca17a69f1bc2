/* kernel_model.c - functional and timing model of the tessera kernel. */
#include "kernel_model.h"

#include <string.h>

#include "qgemm.h"

void tsr_km_timing_init(tsr_km_timing_t *t) {
  t->rows = 16;
  t->cols = 16;
  t->mem_bytes_per_cycle = 64.0;
  t->mem_latency = 100;
  t->clock_hz = 300e6;
}

static uint64_t bytes_to_cycles(const tsr_km_timing_t *t, uint64_t bytes) {
  double bw = t->mem_bytes_per_cycle > 0 ? t->mem_bytes_per_cycle : 1.0;
  double c = (double)bytes / bw;
  uint64_t ci = (uint64_t)c;
  return ci + ((double)ci < c ? 1 : 0);
}

/* The model of the array (output-stationary, rows x cols accumulators):
 *   - a launch costs a few control cycles at each end;
 *   - each descriptor is fetched (latency + 64 bytes) and decoded before its
 *     tiles start; fetches are not overlapped with compute;
 *   - a GEMM is cut into ceil(M/rows) x ceil(N/cols) output tiles; a tile
 *     streams mt rows of A and nt rows of W through the array, one k per
 *     cycle, so it takes max(K, (mt+nt)*K / bandwidth) cycles; the excess
 *     over K is counted as stall;
 *   - the first tile of a descriptor pays the memory latency and the array's
 *     fill/drain (rows + cols); later tiles overlap both (prefetch of the
 *     next tile's operands, double-buffered accumulators);
 *   - results drain through the write channel in parallel with the next
 *     tile; only the last tile's write-back is exposed. */
uint64_t tsr_km_launch_cycles(const tsr_km_timing_t *t) {
  (void)t;
  return 8;
}

static void add_fetch(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  acc->cycles += t->mem_latency + bytes_to_cycles(t, TSR_HW_DESC_BYTES) + 2;
  acc->bytes_rd += TSR_HW_DESC_BYTES;
}

void tsr_km_estimate_nop(const tsr_km_timing_t *t, tsr_km_estimate_t *acc) {
  add_fetch(t, acc);
}

void tsr_km_estimate_gemm(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                          tsr_km_estimate_t *acc) {
  add_fetch(t, acc);
  uint32_t rows = t->rows ? t->rows : 1, cols = t->cols ? t->cols : 1;
  uint64_t tm_full = m / rows, tn_full = n / cols;
  uint32_t m_rem = m % rows, n_rem = n % cols;
  /* Four tile classes: full x full, full x rem, rem x full, rem x rem. */
  struct { uint64_t count; uint32_t mt, nt; } cls[4] = {
      {tm_full * tn_full, rows, cols},
      {tm_full * (n_rem ? 1 : 0), rows, n_rem},
      {(m_rem ? 1 : 0) * tn_full, m_rem, cols},
      {(m_rem && n_rem) ? 1 : 0, m_rem, n_rem},
  };
  uint64_t last_tile_out = 0;
  for (int i = 0; i < 4; i++) {
    if (!cls[i].count) continue;
    uint64_t in_bytes = (uint64_t)(cls[i].mt + cls[i].nt) * k;
    uint64_t mem = bytes_to_cycles(t, in_bytes);
    uint64_t tile = mem > k ? mem : k;
    acc->cycles += cls[i].count * tile;
    acc->stall_cycles += cls[i].count * (tile - k);
    acc->bytes_rd += cls[i].count * in_bytes;
    last_tile_out = (uint64_t)cls[i].mt * cls[i].nt * 4;
  }
  acc->cycles += t->mem_latency + rows + cols + bytes_to_cycles(t, last_tile_out);
  acc->bytes_wr += (uint64_t)m * n * 4;
  acc->macs += (uint64_t)m * n * k;
}

uint64_t tsr_km_gemm_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k) {
  tsr_km_estimate_t e = {0};
  tsr_km_estimate_gemm(t, m, n, k, &e);
  return e.cycles + tsr_km_launch_cycles(t);
}

uint32_t tsr_km_check_desc(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size) {
  if (d->opcode != TSR_OP_NOP && d->opcode != TSR_OP_GEMM_I8_I32) return TSR_HWERR_BAD_OPCODE;
  if (d->flags != 0 || d->rsvd != 0) return TSR_HWERR_BAD_OPCODE;
  if (d->opcode == TSR_OP_NOP) return TSR_HWERR_OK;
  if (d->m == 0 || d->n == 0 || d->k == 0 || d->m > TSR_HW_MAX_DIM ||
      d->n > TSR_HW_MAX_DIM || d->k > TSR_HW_MAX_DIM)
    return TSR_HWERR_BAD_DIMS;
  if (d->lda < d->k || d->ldw < d->k || (uint64_t)d->ldc < 4ull * d->n || d->ldc % 4 ||
      d->c_addr % 4)
    return TSR_HWERR_BAD_STRIDE;
  uint64_t a_len = (uint64_t)(d->m - 1) * d->lda + d->k;
  uint64_t w_len = (uint64_t)(d->n - 1) * d->ldw + d->k;
  uint64_t c_len = (uint64_t)(d->m - 1) * d->ldc + 4ull * d->n;
  if (!tsr_km_inside(d->a_addr, a_len, window_base, window_size) ||
      !tsr_km_inside(d->w_addr, w_len, window_base, window_size) ||
      !tsr_km_inside(d->c_addr, c_len, window_base, window_size))
    return TSR_HWERR_ADDR_RANGE;
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
      status = TSR_HWERR_AXI_ERROR;
      e.cycles += t->mem_latency;
      break;
    }
    tsr_desc_t d;
    tsr_desc_unpack(&d, mem->data + (da - mem->base));
    status = tsr_km_check_desc(&d, wb, ws);
    if (status != TSR_HWERR_OK) {
      add_fetch(t, &e);
      break;
    }
    if (d.opcode == TSR_OP_NOP) {
      tsr_km_estimate_nop(t, &e);
      continue;
    }
    uint64_t a_len = (uint64_t)(d.m - 1) * d.lda + d.k;
    uint64_t w_len = (uint64_t)(d.n - 1) * d.ldw + d.k;
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
    tsr_qgemm_strided(pool, isa, c, d.ldc / 4, a, d.lda, w, d.ldw, (int32_t)d.m,
                      (int32_t)d.n, (int32_t)d.k);
    tsr_km_estimate_gemm(t, d.m, d.n, d.k, &e);
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
