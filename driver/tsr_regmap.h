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
