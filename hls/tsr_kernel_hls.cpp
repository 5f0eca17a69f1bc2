/*
 * tsr_kernel_hls.cpp - the tessera kernel for Vitis HLS (see the header).
 *
 * Per launch: the ring check, then per descriptor a fetch, the checks of
 * tsr_km_check_desc in its order, the physical-memory check (AXI_ERROR), and
 * for a GEMM the output tiles of ROWS x COLS: for each k chunk a dataflow
 * region loads the A rows and the W rows of the chunk (load), multiplies
 * them into the accumulators (compute), and after the last chunk the tile is
 * written back (store). A GEMM_BSR reads and counts its bitmaps first, then
 * runs the same regions over each tile row's stored tiles only (one tile =
 * one chunk of BSR_BK bytes). A refused descriptor writes nothing and stops the
 * launch; the ones before it have completed.
 */
#include "tsr_kernel_hls.h"

#include "driver/tsr_regmap.h"

namespace {

typedef struct {
  uint32_t opcode, flags, m, n, k, lda, ldw, ldc;
  uint64_t a, w, c;
  uint32_t nch, cstride; /* W layout: W_NCH, W_CSTRIDE */
} desc_t;

/* W's layout (hw/regmap.def): channels, offset of row n, extent. */
uint64_t w_nch(const desc_t &d) { return d.nch > 1 ? d.nch : 1; }
uint64_t w_row(const desc_t &d, uint64_t n) {
  return (n % w_nch(d)) * d.cstride + (n / w_nch(d)) * d.ldw;
}
uint64_t w_len(const desc_t &d) {
  return (w_nch(d) - 1) * d.cstride + (uint64_t)((d.n - 1) / w_nch(d)) * d.ldw + d.k;
}

bool inside(uint64_t addr, uint64_t len, uint64_t base, uint64_t size) {
  return addr >= base && addr - base <= size && len <= size - (addr - base);
}

uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* load: one descriptor (64 bytes, one AXI beat on a 512-bit bus). */
void load_desc(const uint8_t *gmem, uint64_t addr, desc_t &d) {
  uint8_t raw[TSR_HW_DESC_BYTES];
fetch:
  for (int i = 0; i < TSR_HW_DESC_BYTES; i++) {
#pragma HLS PIPELINE II = 1
    raw[i] = gmem[addr + i];
  }
  d.opcode = get32(raw + TSR_DESC_OPCODE);
  d.flags = get32(raw + TSR_DESC_FLAGS);
  d.m = get32(raw + TSR_DESC_M);
  d.n = get32(raw + TSR_DESC_N);
  d.k = get32(raw + TSR_DESC_K);
  d.lda = get32(raw + TSR_DESC_LDA);
  d.ldw = get32(raw + TSR_DESC_LDW);
  d.ldc = get32(raw + TSR_DESC_LDC);
  d.a = get64(raw + TSR_DESC_A_ADDR);
  d.w = get64(raw + TSR_DESC_W_ADDR);
  d.c = get64(raw + TSR_DESC_C_ADDR);
  d.nch = get32(raw + TSR_DESC_W_NCH);
  d.cstride = get32(raw + TSR_DESC_W_CSTRIDE);
}

/* GEMM_BSR (hw/README.md "Block-sparse weights"): in desc_t, ldw is
 * BSR_LDB, nch BSR_BLOCK and cstride BSR_NNZ; w is the bitmap of tile row
 * 0. Tile rows, k tiles, bitmap bytes of a row, the bitmaps' span and the
 * first tile's address. */
uint32_t bsr_rows(const desc_t &d) { return (d.n + TSR_HW_BSR_BN - 1) / TSR_HW_BSR_BN; }
uint32_t bsr_bk(const desc_t &d) { return d.nch & 0xFFFFu; } /* after the BAD_BLOCK check */
uint32_t bsr_ktiles(const desc_t &d) { return (d.k + bsr_bk(d) - 1) / bsr_bk(d); }
uint32_t bsr_rb(const desc_t &d) { return (bsr_ktiles(d) + 7) / 8; }
uint64_t bsr_span(const desc_t &d) { return (uint64_t)bsr_rows(d) * d.ldw; }
uint64_t bsr_pad(const desc_t &d) { return (0 - (d.w + bsr_span(d))) & 63u; }
uint64_t bsr_tiles(const desc_t &d) { return d.w + bsr_span(d) + bsr_pad(d); }
uint64_t bsr_tile_bytes(const desc_t &d) { return (uint64_t)TSR_HW_BSR_BN * bsr_bk(d); }

/* Checks 2b-4 for GEMM_BSR, in the model's order. */
uint32_t check_bsr(const desc_t &d, uint64_t wb, uint64_t ws) {
  const uint32_t bn = (uint32_t)TSR_HW_BSR_BN << 16;
  if (d.nch != (bn | (uint32_t)TSR_HW_BSR_BK_MIN) && d.nch != (bn | (uint32_t)TSR_HW_BSR_BK_MAX))
    return TSR_HWERR_BAD_BLOCK;
  if (d.lda < d.k || (uint64_t)d.ldc < 4ull * d.n || d.ldc % 4 || d.c % 4 || d.ldw < bsr_rb(d))
    return TSR_HWERR_BAD_STRIDE;
  uint64_t span = bsr_span(d);
  if (!inside(d.a, (uint64_t)(d.m - 1) * d.lda + d.k, wb, ws) || !inside(d.w, span, wb, ws) ||
      !inside(d.c, (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n, wb, ws))
    return TSR_HWERR_ADDR_RANGE;
  uint64_t rel = d.w - wb + span, pad = bsr_pad(d), tiles = (uint64_t)d.cstride * bsr_tile_bytes(d);
  if (pad > ws - rel || tiles > ws - rel - pad) return TSR_HWERR_ADDR_RANGE;
  return TSR_HWERR_OK;
}

/* Check 6 for GEMM_BSR: read the bitmaps, count; *elems gets the stored
 * tiles' elements inside N x K (MACS = M x elems). */
uint32_t count_bsr(const uint8_t *gmem, const desc_t &d, uint64_t &elems) {
  const uint32_t ntr = bsr_rows(d), nkt = bsr_ktiles(d), rb = bsr_rb(d);
  const uint32_t last_mask = nkt % 8 ? (1u << (nkt % 8)) - 1 : 0xFFu;
  const uint32_t bk = bsr_bk(d);
  const uint32_t last_kl = d.k - (nkt - 1) * bk;
  uint64_t total = 0;
  elems = 0;
count_row:
  for (uint32_t r = 0; r < ntr; r++) {
    uint64_t row = d.w + (uint64_t)r * d.ldw;
    const uint32_t bn = TSR_HW_BSR_BN;
    uint32_t nl = d.n - r * bn < bn ? d.n - r * bn : bn;
    uint64_t in_row = 0;
    uint32_t last_set = 0;
  count_byte:
    for (uint32_t b = 0; b < rb; b++) {
#pragma HLS PIPELINE II = 1
      uint32_t v = gmem[row + b];
      if (b + 1 == rb) {
        if (v & ~last_mask) return TSR_HWERR_BAD_COUNT;
        v &= last_mask;
        last_set = (v >> ((nkt - 1) % 8)) & 1;
      }
      for (int bit = 0; bit < 8; bit++) in_row += (v >> bit) & 1;
    }
    total += in_row;
    elems += (uint64_t)nl * ((in_row - last_set) * bk + last_set * last_kl);
  }
  return total == d.cstride ? TSR_HWERR_OK : TSR_HWERR_BAD_COUNT;
}

/* The functional model's checks 1-4, in its order. */
uint32_t check_desc(const desc_t &d, uint64_t wb, uint64_t ws) {
  if (d.opcode != TSR_OP_NOP && d.opcode != TSR_OP_GEMM_I8_I32 &&
      d.opcode != TSR_OP_GEMM_BSR_I8_I32)
    return TSR_HWERR_BAD_OPCODE;
  if (d.flags != 0) return TSR_HWERR_BAD_OPCODE;
  if (d.opcode == TSR_OP_NOP) return TSR_HWERR_OK;
  if (d.m == 0 || d.n == 0 || d.k == 0 || d.m > TSR_HW_MAX_DIM || d.n > TSR_HW_MAX_DIM ||
      d.k > TSR_HW_MAX_DIM)
    return TSR_HWERR_BAD_DIMS;
  if (d.opcode == TSR_OP_GEMM_BSR_I8_I32) return check_bsr(d, wb, ws);
  bool bad_layout = d.nch > 1 ? d.nch != TSR_HLS_PORTS : d.cstride != 0;
  if (d.lda < d.k || d.ldw < d.k || (uint64_t)d.ldc < 4ull * d.n || d.ldc % 4 || d.c % 4 ||
      bad_layout)
    return TSR_HWERR_BAD_STRIDE;
  if (!inside(d.a, (uint64_t)(d.m - 1) * d.lda + d.k, wb, ws) || !inside(d.w, w_len(d), wb, ws) ||
      !inside(d.c, (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n, wb, ws))
    return TSR_HWERR_ADDR_RANGE;
  return TSR_HWERR_OK;
}

/* Check 5: every operand byte exists (else the memory answers DECERR). */
bool in_memory(const desc_t &d) {
  const uint64_t phys = TSR_HLS_PHYS_BYTES;
  return inside(d.a, (uint64_t)(d.m - 1) * d.lda + d.k, 0, phys) &&
         inside(d.w, w_len(d), 0, phys) &&
         inside(d.c, (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n, 0, phys);
}

/* load: `rows` operand rows (<= R) of `kc` bytes (<= KC) from `addr` with
 * stride `ld`; the rest of the buffer is zero and nothing past the operand
 * is read. */
template <int R>
void load_rows(const uint8_t *gmem, uint64_t addr, uint32_t ld, uint32_t rows, uint32_t kc,
               int8_t buf[R][TSR_HLS_KC]) {
load_row:
  for (int r = 0; r < R; r++) {
  load_byte:
    for (int k = 0; k < TSR_HLS_KC; k++) {
#pragma HLS PIPELINE II = 1
      buf[r][k] = ((uint32_t)r < rows && (uint32_t)k < kc)
                      ? (int8_t)gmem[addr + (uint64_t)r * ld + (uint64_t)k]
                      : (int8_t)0;
    }
  }
}

/* load: the W rows n0 .. n0+rows-1 of a chunk, each at its place in W's
 * channel layout; the rest of the buffer is zero. */
void load_wrows(const uint8_t *gmem, const desc_t &d, uint32_t n0, uint32_t k0, uint32_t rows,
                uint32_t kc, int8_t buf[TSR_HLS_COLS][TSR_HLS_KC]) {
load_wrow:
  for (int r = 0; r < TSR_HLS_COLS; r++) {
    uint64_t row = d.w + w_row(d, n0 + (uint32_t)r) + k0;
  load_wbyte:
    for (int k = 0; k < TSR_HLS_KC; k++) {
#pragma HLS PIPELINE II = 1
      buf[r][k] = ((uint32_t)r < rows && (uint32_t)k < kc) ? (int8_t)gmem[row + (uint64_t)k]
                                                          : (int8_t)0;
    }
  }
}

/* compute: the ROWS x COLS array takes one k per cycle. */
void mac_chunk(int8_t a[TSR_HLS_ROWS][TSR_HLS_KC], int8_t w[TSR_HLS_COLS][TSR_HLS_KC],
               uint32_t kc, int32_t acc[TSR_HLS_ROWS][TSR_HLS_COLS]) {
mac_k:
  for (int k = 0; k < TSR_HLS_KC; k++) {
#pragma HLS PIPELINE II = 1
  mac_r:
    for (int r = 0; r < TSR_HLS_ROWS; r++) {
#pragma HLS UNROLL
    mac_c:
      for (int c = 0; c < TSR_HLS_COLS; c++) {
#pragma HLS UNROLL
        if ((uint32_t)k < kc) acc[r][c] += (int32_t)a[r][k] * (int32_t)w[c][k];
      }
    }
  }
}

/* One k chunk of one tile: load A and W in parallel, then compute. */
void run_chunk(const uint8_t *gmem, const desc_t &d, uint32_t m0, uint32_t n0, uint32_t k0,
               uint32_t mt, uint32_t nt, uint32_t kc,
               int32_t acc[TSR_HLS_ROWS][TSR_HLS_COLS]) {
#pragma HLS DATAFLOW
  int8_t a_buf[TSR_HLS_ROWS][TSR_HLS_KC];
  int8_t w_buf[TSR_HLS_COLS][TSR_HLS_KC];
#pragma HLS ARRAY_PARTITION variable = a_buf dim = 1 complete
#pragma HLS ARRAY_PARTITION variable = w_buf dim = 1 complete
  load_rows<TSR_HLS_ROWS>(gmem, d.a + (uint64_t)m0 * d.lda + k0, d.lda, mt, kc, a_buf);
  load_wrows(gmem, d, n0, k0, nt, kc, w_buf);
  mac_chunk(a_buf, w_buf, kc, acc);
}

/* store: the mt x nt valid accumulators, little-endian int32. */
void store_tile(uint8_t *gmem, const desc_t &d, uint32_t m0, uint32_t n0, uint32_t mt,
                uint32_t nt, int32_t acc[TSR_HLS_ROWS][TSR_HLS_COLS]) {
store_r:
  for (int r = 0; r < TSR_HLS_ROWS; r++) {
  store_c:
    for (int c = 0; c < TSR_HLS_COLS; c++) {
#pragma HLS PIPELINE II = 4
      if ((uint32_t)r >= mt || (uint32_t)c >= nt) continue;
      uint64_t at = d.c + (uint64_t)(m0 + r) * d.ldc + 4ull * (n0 + c);
      uint32_t v = (uint32_t)acc[r][c];
      gmem[at + 0] = (uint8_t)v;
      gmem[at + 1] = (uint8_t)(v >> 8);
      gmem[at + 2] = (uint8_t)(v >> 16);
      gmem[at + 3] = (uint8_t)(v >> 24);
    }
  }
}

/* A whole GEMM; returns the operand bytes read. */
uint64_t run_gemm(uint8_t *gmem, const desc_t &d) {
  uint64_t rd = 0;
tile_m:
  for (uint32_t m0 = 0; m0 < d.m; m0 += TSR_HLS_ROWS) {
  tile_n:
    for (uint32_t n0 = 0; n0 < d.n; n0 += TSR_HLS_COLS) {
      uint32_t mt = d.m - m0 < TSR_HLS_ROWS ? d.m - m0 : TSR_HLS_ROWS;
      uint32_t nt = d.n - n0 < TSR_HLS_COLS ? d.n - n0 : TSR_HLS_COLS;
      int32_t acc[TSR_HLS_ROWS][TSR_HLS_COLS];
#pragma HLS ARRAY_PARTITION variable = acc complete dim = 0
      for (int r = 0; r < TSR_HLS_ROWS; r++)
        for (int c = 0; c < TSR_HLS_COLS; c++) acc[r][c] = 0;
    chunk_k:
      for (uint32_t k0 = 0; k0 < d.k; k0 += TSR_HLS_KC) {
        uint32_t kc = d.k - k0 < TSR_HLS_KC ? d.k - k0 : TSR_HLS_KC;
        run_chunk(gmem, d, m0, n0, k0, mt, nt, kc, acc);
        rd += (uint64_t)(mt + nt) * kc;
      }
      store_tile(gmem, d, m0, n0, mt, nt, acc);
    }
  }
  return rd;
}

/* One stored tile of a GEMM_BSR: its k range of the A rows and its rows
 * (BK bytes apart) into the buffers, then compute. */
void run_tile(const uint8_t *gmem, const desc_t &d, uint32_t m0, uint64_t tile, uint32_t k0,
              uint32_t mt, uint32_t nt, uint32_t kl, int32_t acc[TSR_HLS_ROWS][TSR_HLS_COLS]) {
#pragma HLS DATAFLOW
  int8_t a_buf[TSR_HLS_ROWS][TSR_HLS_KC];
  int8_t w_buf[TSR_HLS_COLS][TSR_HLS_KC];
#pragma HLS ARRAY_PARTITION variable = a_buf dim = 1 complete
#pragma HLS ARRAY_PARTITION variable = w_buf dim = 1 complete
  load_rows<TSR_HLS_ROWS>(gmem, d.a + (uint64_t)m0 * d.lda + k0, d.lda, mt, kl, a_buf);
  load_rows<TSR_HLS_COLS>(gmem, tile, bsr_bk(d), nt, kl, w_buf);
  mac_chunk(a_buf, w_buf, kl, acc);
}

/* A whole GEMM_BSR: output tiles of ROWS x BN (BN = COLS), each reduced
 * over its tile row's stored tiles only; returns the bytes read. */
uint64_t run_bsr(uint8_t *gmem, const desc_t &d) {
  static_assert(TSR_HW_BSR_BN == TSR_HLS_COLS, "a tile row is one output tile");
  static_assert(TSR_HW_BSR_BK_MAX <= TSR_HLS_KC, "a tile fits the chunk buffers");
  const uint32_t ntr = bsr_rows(d), nkt = bsr_ktiles(d), rb = bsr_rb(d);
  const uint64_t tiles = bsr_tiles(d);
  uint64_t rd = 0;
bsr_m:
  for (uint32_t m0 = 0; m0 < d.m; m0 += TSR_HLS_ROWS) {
    uint64_t idx = 0;
  bsr_row:
    for (uint32_t tr = 0; tr < ntr; tr++) {
      uint32_t n0 = tr * TSR_HW_BSR_BN;
      uint32_t mt = d.m - m0 < TSR_HLS_ROWS ? d.m - m0 : TSR_HLS_ROWS;
      uint32_t nt = d.n - n0 < TSR_HLS_COLS ? d.n - n0 : TSR_HLS_COLS;
      int32_t acc[TSR_HLS_ROWS][TSR_HLS_COLS];
#pragma HLS ARRAY_PARTITION variable = acc complete dim = 0
      for (int r = 0; r < TSR_HLS_ROWS; r++)
        for (int c = 0; c < TSR_HLS_COLS; c++) acc[r][c] = 0;
      uint64_t row = d.w + (uint64_t)tr * d.ldw;
      rd += rb;
    bsr_tile:
      for (uint32_t x = 0; x < nkt; x++) {
        if (!((gmem[row + x / 8] >> (x % 8)) & 1)) continue;
        const uint32_t bk = bsr_bk(d);
        uint32_t k0 = x * bk;
        uint32_t kl = d.k - k0 < bk ? d.k - k0 : bk;
        run_tile(gmem, d, m0, tiles + idx * bsr_tile_bytes(d), k0, mt, nt, kl, acc);
        rd += (uint64_t)(mt + nt) * kl;
        idx++;
      }
      store_tile(gmem, d, m0, n0, mt, nt, acc);
    }
  }
  return rd;
}

}  // namespace

extern "C" void tsr_kernel(uint64_t mem_base, uint64_t mem_size, uint64_t ring, uint32_t n_desc,
                           uint8_t *gmem, uint32_t &status, uint32_t &err_index,
                           uint32_t &desc_done, uint64_t &bytes_rd, uint64_t &bytes_wr,
                           uint64_t &macs) {
#pragma HLS INTERFACE mode = m_axi port = gmem offset = off bundle = gmem max_widen_bitwidth = 512
#pragma HLS INTERFACE mode = s_axilite port = mem_base bundle = control
#pragma HLS INTERFACE mode = s_axilite port = mem_size bundle = control
#pragma HLS INTERFACE mode = s_axilite port = ring bundle = control
#pragma HLS INTERFACE mode = s_axilite port = n_desc bundle = control
#pragma HLS INTERFACE mode = s_axilite port = status bundle = control
#pragma HLS INTERFACE mode = s_axilite port = err_index bundle = control
#pragma HLS INTERFACE mode = s_axilite port = desc_done bundle = control
#pragma HLS INTERFACE mode = s_axilite port = bytes_rd bundle = control
#pragma HLS INTERFACE mode = s_axilite port = bytes_wr bundle = control
#pragma HLS INTERFACE mode = s_axilite port = macs bundle = control
#pragma HLS INTERFACE mode = s_axilite port = return bundle = control
  uint32_t st = TSR_HWERR_OK, i = 0;
  uint64_t rd = 0, wr = 0, mac = 0;
  if (n_desc != 0) { /* N_DESC == 0 finishes at once, checking nothing */
    if (ring % TSR_HW_DESC_BYTES ||
        !inside(ring, (uint64_t)n_desc * TSR_HW_DESC_BYTES, mem_base, mem_size)) {
      st = TSR_HWERR_RING_RANGE;
    } else {
    descriptors:
      for (; i < n_desc; i++) {
        uint64_t da = ring + (uint64_t)i * TSR_HW_DESC_BYTES;
        if (!inside(da, TSR_HW_DESC_BYTES, 0, TSR_HLS_PHYS_BYTES)) {
          rd += TSR_HW_DESC_BYTES; /* requested, answered DECERR: counted as the RTL does */
          st = TSR_HWERR_AXI_ERROR;
          break;
        }
        desc_t d;
        load_desc(gmem, da, d);
        rd += TSR_HW_DESC_BYTES;
        st = check_desc(d, mem_base, mem_size);
        if (st == TSR_HWERR_OK && d.opcode == TSR_OP_GEMM_I8_I32 && !in_memory(d))
          st = TSR_HWERR_AXI_ERROR;
        if (st != TSR_HWERR_OK) break;
        if (d.opcode == TSR_OP_NOP) continue;
        if (d.opcode == TSR_OP_GEMM_BSR_I8_I32) {
          /* the bitmaps first (and counted), then the operands' memory */
          const uint64_t phys = TSR_HLS_PHYS_BYTES;
          if (!inside(d.w, bsr_span(d), 0, phys)) {
            st = TSR_HWERR_AXI_ERROR;
            break;
          }
          uint64_t elems = 0;
          st = count_bsr(gmem, d, elems);
          rd += (uint64_t)bsr_rows(d) * bsr_rb(d);
          if (st != TSR_HWERR_OK) break;
          if (!inside(d.a, (uint64_t)(d.m - 1) * d.lda + d.k, 0, phys) ||
              !inside(bsr_tiles(d), (uint64_t)d.cstride * bsr_tile_bytes(d), 0, phys) ||
              !inside(d.c, (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n, 0, phys)) {
            st = TSR_HWERR_AXI_ERROR;
            break;
          }
          rd += run_bsr(gmem, d);
          wr += 4ull * d.m * d.n;
          mac += (uint64_t)d.m * elems;
          continue;
        }
        rd += run_gemm(gmem, d);
        wr += 4ull * d.m * d.n;
        mac += (uint64_t)d.m * d.n * d.k;
      }
    }
  }
  status = st;
  err_index = st ? i : 0;
  desc_done = st == TSR_HWERR_RING_RANGE ? 0 : i;
  bytes_rd = rd;
  bytes_wr = wr;
  macs = mac;
}
