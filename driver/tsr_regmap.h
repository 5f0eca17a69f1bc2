/*
 * tsr_regmap.h - the kernel's register map and descriptor layout for C.
 *
 * Expanded from hw/regmap.def, the single source of truth (see hw/README.md).
 */
#ifndef TSR_REGMAP_H
#define TSR_REGMAP_H

#include <stdint.h>

#include "base/le.h"

enum {
#define TSR_REG(name, off, acc, desc) TSR_REG_##name = (off),
#define TSR_ARG(name, off, bits, kind, desc) TSR_ARG_##name = (off),
#define TSR_STAT(name, off, bits, desc) TSR_STAT_##name = (off),
#define TSR_DESC(name, off, bits, desc) TSR_DESC_##name = (off),
#define TSR_CONST(name, val, desc) TSR_HW_##name = (val),
#define TSR_OP(name, val, desc) TSR_OP_##name = (val),
#define TSR_HWERR(name, val, desc) TSR_HWERR_##name = (val),
#include "../hw/regmap.def"
#undef TSR_REG
#undef TSR_ARG
#undef TSR_STAT
#undef TSR_DESC
#undef TSR_CONST
#undef TSR_OP
#undef TSR_HWERR
};

/* ap_ctrl bits of TSR_REG_CTRL. */
enum {
  TSR_CTRL_AP_START = 1u << 0,
  TSR_CTRL_AP_DONE = 1u << 1,
  TSR_CTRL_AP_IDLE = 1u << 2,
  TSR_CTRL_AP_READY = 1u << 3,
  TSR_CTRL_AP_CONTINUE = 1u << 4,
  TSR_CTRL_AUTO_RESTART = 1u << 7,
};

/* A ring descriptor as the host builds it; serialized little-endian by
 * tsr_desc_pack() so the layout never depends on the host ABI. */
typedef struct tsr_desc {
  uint32_t opcode, flags, m, n, k, lda, ldw, ldc;
  uint64_t a_addr, w_addr, c_addr;
  uint32_t w_nch;     /* channels W is striped over (0 or 1: one)       */
  uint32_t w_cstride; /* bytes between the channels' rows (0: one)      */
} tsr_desc_t;

/* Device address of row n of W under the descriptor's channel layout
 * (hw/regmap.def W_NCH, W_CSTRIDE); nch is a power of two. */
static inline uint64_t tsr_desc_w_row(const tsr_desc_t *d, uint32_t n) {
  uint32_t c = d->w_nch > 1 ? d->w_nch : 1;
  return d->w_addr + (uint64_t)(n % c) * d->w_cstride + (uint64_t)(n / c) * d->ldw;
}

/* ---- GEMM_BSR_I8_I32: W block-sparse (hw/README.md "Block-sparse weights").
 * W (N x K) is cut into tiles of BN = BSR_BN rows x BK bytes, BK =
 * BSR_BK_MIN or BSR_BK_MAX as BSR_BLOCK says; tile row r
 * (rows r*BN ..) has a bitmap of ceil(K/BK) bits at W_ADDR + r*BSR_LDB
 * (bit t in byte t/8, LSB first: k tile t is stored). The stored tiles
 * follow the bitmaps from the first 64-byte boundary after
 * W_ADDR + ceil(N/BN)*BSR_LDB: tile row 0's in k order, then row 1's, ...,
 * BN*BK bytes each (row j of a tile at +j*BK; bytes past N or K are 0). In
 * tsr_desc_t the fields ldw, w_nch and w_cstride hold BSR_LDB, BSR_BLOCK and
 * BSR_NNZ. */
/* BSR_BLOCK for tiles BK bytes wide; whether a BSR_BLOCK is one the
 * kernels take (else BAD_BLOCK); the BK of a descriptor that passed. */
static inline uint32_t tsr_bsr_block_word(uint32_t bk) {
  return (uint32_t)TSR_HW_BSR_BN << 16 | bk;
}
/* The opcodes a kernel runs, from its HW_INFO and HW_OPS registers: HW_OPS
 * from interface version 3 on (if it lists GEMM_I8_I32, else it is not
 * trusted), NOP and GEMM_I8_I32 before. */
static inline uint32_t tsr_hw_ops(uint32_t hw_info, uint32_t hw_ops) {
  const uint32_t base = (1u << TSR_OP_NOP) | (1u << TSR_OP_GEMM_I8_I32);
  if ((hw_info >> 16 & 0xff) < 3 || !(hw_ops >> TSR_OP_GEMM_I8_I32 & 1)) return base;
  return hw_ops;
}

static inline int tsr_bsr_block_ok(uint32_t word) {
  return word == tsr_bsr_block_word(TSR_HW_BSR_BK_MIN) ||
         word == tsr_bsr_block_word(TSR_HW_BSR_BK_MAX);
}
static inline uint32_t tsr_desc_bsr_bk(const tsr_desc_t *d) { return d->w_nch & 0xFFFFu; }
static inline uint64_t tsr_bsr_tile_bytes(uint32_t bk) { return (uint64_t)TSR_HW_BSR_BN * bk; }

static inline uint32_t tsr_bsr_tile_rows(uint32_t n) {
  return (n + TSR_HW_BSR_BN - 1) / TSR_HW_BSR_BN;
}
static inline uint32_t tsr_bsr_k_tiles(uint32_t k, uint32_t bk) { return (k + bk - 1) / bk; }
/* Bytes of a tile row's bitmap the kernel reads. */
static inline uint32_t tsr_bsr_row_bytes(uint32_t k, uint32_t bk) {
  return (tsr_bsr_k_tiles(k, bk) + 7) / 8;
}
/* Bytes from W_ADDR to the end of the last bitmap row (ceil(N/BN) rows of
 * LDB bytes). */
static inline uint64_t tsr_bsr_bitmap_span(const tsr_desc_t *d) {
  return (uint64_t)tsr_bsr_tile_rows(d->n) * d->ldw;
}
/* Padding from the end of the bitmaps to the first tile (to 64 bytes). */
static inline uint64_t tsr_bsr_tile_pad(const tsr_desc_t *d) {
  return (0 - (d->w_addr + tsr_bsr_bitmap_span(d))) & 63u;
}
/* Device address of the first stored tile. */
static inline uint64_t tsr_desc_bsr_tiles(const tsr_desc_t *d) {
  return d->w_addr + tsr_bsr_bitmap_span(d) + tsr_bsr_tile_pad(d);
}
/* Whether k tile t of a bitmap row is stored. */
static inline int tsr_bsr_bit(const uint8_t *row, uint32_t t) { return (row[t / 8] >> (t % 8)) & 1; }

static inline void tsr_desc_pack(uint8_t out[TSR_HW_DESC_BYTES], const tsr_desc_t *d) {
  tsr_put_le32(out + TSR_DESC_OPCODE, d->opcode);
  tsr_put_le32(out + TSR_DESC_FLAGS, d->flags);
  tsr_put_le32(out + TSR_DESC_M, d->m);
  tsr_put_le32(out + TSR_DESC_N, d->n);
  tsr_put_le32(out + TSR_DESC_K, d->k);
  tsr_put_le32(out + TSR_DESC_LDA, d->lda);
  tsr_put_le32(out + TSR_DESC_LDW, d->ldw);
  tsr_put_le32(out + TSR_DESC_LDC, d->ldc);
  tsr_put_le64(out + TSR_DESC_A_ADDR, d->a_addr);
  tsr_put_le64(out + TSR_DESC_W_ADDR, d->w_addr);
  tsr_put_le64(out + TSR_DESC_C_ADDR, d->c_addr);
  tsr_put_le32(out + TSR_DESC_W_NCH, d->w_nch);
  tsr_put_le32(out + TSR_DESC_W_CSTRIDE, d->w_cstride);
}

static inline void tsr_desc_unpack(tsr_desc_t *d, const uint8_t in[TSR_HW_DESC_BYTES]) {
  d->opcode = tsr_get_le32(in + TSR_DESC_OPCODE);
  d->flags = tsr_get_le32(in + TSR_DESC_FLAGS);
  d->m = tsr_get_le32(in + TSR_DESC_M);
  d->n = tsr_get_le32(in + TSR_DESC_N);
  d->k = tsr_get_le32(in + TSR_DESC_K);
  d->lda = tsr_get_le32(in + TSR_DESC_LDA);
  d->ldw = tsr_get_le32(in + TSR_DESC_LDW);
  d->ldc = tsr_get_le32(in + TSR_DESC_LDC);
  d->a_addr = tsr_get_le64(in + TSR_DESC_A_ADDR);
  d->w_addr = tsr_get_le64(in + TSR_DESC_W_ADDR);
  d->c_addr = tsr_get_le64(in + TSR_DESC_C_ADDR);
  d->w_nch = tsr_get_le32(in + TSR_DESC_W_NCH);
  d->w_cstride = tsr_get_le32(in + TSR_DESC_W_CSTRIDE);
}

#endif /* TSR_REGMAP_H */
