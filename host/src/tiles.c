/* tiles.c - how many descriptors a matmul launch carries, the layout of
 * weights striped over a device's read ports, and the block-sparse layout
 * of GEMM_BSR weights (see plan.h). */
#include "plan.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

int32_t tsr_tile_descs(const int32_t *n, int count, int32_t n_chunk, int32_t m,
                       int32_t m_chunk) {
  if (m_chunk < 1) m_chunk = 1;
  int32_t d = 0;
  for (int i = 0; i < count; i++) d += (n[i] + n_chunk - 1) / n_chunk;
  return d * ((m + m_chunk - 1) / m_chunk);
}

uint32_t tsr_tile_w_channels(const tsr_hal_caps_t *c) {
  const uint32_t p = c->mem_ports;
  if (p <= 1 || (p & (p - 1)) || TSR_TILE_N_CHUNK % p) return 1;
  return p;
}

int32_t tsr_tile_k_pieces(const tsr_hal_caps_t *c, int32_t k) {
  if (tsr_tile_w_channels(c) <= 1 || k <= TSR_TILE_K_CHUNK) return 1;
  return (k + TSR_TILE_K_CHUNK - 1) / TSR_TILE_K_CHUNK;
}

void tsr_tile_w_stripe(int8_t *dst, const int8_t *src, int32_t n, int32_t k, uint32_t p) {
  const uint64_t per = ((uint64_t)n + p - 1) / p, cstride = per * (uint64_t)k;
  memset(dst, 0, tsr_tile_w_bytes(n, k, p));
  for (int32_t r = 0; r < n; r++)
    memcpy(dst + (uint64_t)(r % p) * cstride + (uint64_t)(r / p) * (uint64_t)k,
           src + (uint64_t)r * (uint64_t)k, (size_t)k);
}

void tsr_tile_w_desc(tsr_desc_t *d, uint64_t base, int32_t n, int32_t n0, int32_t k,
                     uint32_t p) {
  if (p <= 1) {
    d->w_addr = base + (uint64_t)n0 * (uint64_t)k;
    d->w_nch = 0;
    d->w_cstride = 0;
    return;
  }
  const uint64_t per = ((uint64_t)n + p - 1) / p;
  d->w_addr = base + (uint64_t)(n0 / (int32_t)p) * (uint64_t)k;
  d->w_nch = p;
  d->w_cstride = (uint32_t)(per * (uint64_t)k);
}

/* ---- block-sparse weights (GEMM_BSR_I8_I32) ---- */

uint32_t tsr_tile_bsr_bk(int32_t k) {
  const uint64_t lo = TSR_HW_BSR_BK_MIN, hi = TSR_HW_BSR_BK_MAX;
  const uint64_t pad_lo = ((uint64_t)k + lo - 1) / lo * lo, pad_hi = ((uint64_t)k + hi - 1) / hi * hi;
  return pad_hi == pad_lo ? (uint32_t)hi : (uint32_t)lo;
}

/* Whether tile (tile row tr, k tile t) of w (tiles bk wide) holds a non-zero. */
static bool tile_nonzero(const int8_t *w, int32_t n, int32_t k, int32_t bk, int32_t tr,
                         int32_t t) {
  const int32_t r1 = (tr + 1) * TSR_HW_BSR_BN < n ? (tr + 1) * TSR_HW_BSR_BN : n;
  const int32_t k0 = t * bk;
  const int32_t kl = k - k0 < bk ? k - k0 : bk;
  for (int32_t r = tr * TSR_HW_BSR_BN; r < r1; r++) {
    const int8_t *p = w + (size_t)r * (size_t)k + k0;
    for (int32_t x = 0; x < kl; x++)
      if (p[x]) return true;
  }
  return false;
}

double tsr_tile_bsr_density(const int8_t *w, int32_t n, int32_t k, uint32_t bk) {
  const int32_t ntr = (int32_t)tsr_bsr_tile_rows((uint32_t)n);
  const int32_t nkt = (int32_t)tsr_bsr_k_tiles((uint32_t)k, bk);
  uint64_t nz = 0;
  for (int32_t tr = 0; tr < ntr; tr++)
    for (int32_t t = 0; t < nkt; t++) nz += tile_nonzero(w, n, k, (int32_t)bk, tr, t);
  return ntr && nkt ? (double)nz / ((double)ntr * (double)nkt) : 1.0;
}

bool tsr_tile_bsr_wanted(const tsr_hal_caps_t *c, double density) {
  return (c->ops >> TSR_OP_GEMM_BSR_I8_I32 & 1) && tsr_tile_w_channels(c) == 1 &&
         density <= TSR_TILE_BSR_MAX_DENSITY;
}

void tsr_tile_bsr_free(tsr_tile_bsr_t *b) {
  free(b->off);
  free(b->nnz);
  memset(b, 0, sizeof *b);
}

tsr_status_t tsr_tile_bsr_pack(const int8_t *w, int32_t n, int32_t k, uint32_t bk,
                               tsr_tile_bsr_t *b, uint8_t **out) {
  memset(b, 0, sizeof *b);
  *out = NULL;
  const uint64_t BN = TSR_HW_BSR_BN, BK = bk;
  const int32_t nkt = (int32_t)tsr_bsr_k_tiles((uint32_t)k, bk);
  const int32_t chunks = (n + TSR_TILE_N_CHUNK - 1) / TSR_TILE_N_CHUNK;
  b->ldb = tsr_bsr_row_bytes((uint32_t)k, bk);
  b->bk = bk;
  b->off = calloc((size_t)chunks, sizeof *b->off);
  b->nnz = calloc((size_t)chunks, sizeof *b->nnz);
  if (!b->off || !b->nnz) {
    tsr_tile_bsr_free(b);
    return TSR_ERR(RESOURCE_EXHAUSTED, "block-sparse layout of %d chunks", chunks);
  }
  b->chunks = chunks;
  /* which tiles hold a non-zero, once for the sizes and the image */
  const int32_t ntr_all = (int32_t)tsr_bsr_tile_rows((uint32_t)n);
  uint8_t *nzmap = malloc((size_t)ntr_all * (size_t)nkt + 1);
  if (!nzmap) {
    tsr_tile_bsr_free(b);
    return TSR_ERR(RESOURCE_EXHAUSTED, "block-sparse tile map of %d x %d", ntr_all, nkt);
  }
  for (int32_t g = 0; g < ntr_all; g++)
    for (int32_t t = 0; t < nkt; t++)
      nzmap[(size_t)g * (size_t)nkt + (size_t)t] = tile_nonzero(w, n, k, (int32_t)bk, g, t);
  /* sizes first: per chunk its bitmaps, padding, tiles */
  uint64_t at = 0;
  for (int32_t c = 0; c < chunks; c++) {
    const int32_t n0 = c * TSR_TILE_N_CHUNK;
    const int32_t nn = n - n0 < TSR_TILE_N_CHUNK ? n - n0 : TSR_TILE_N_CHUNK;
    const int32_t ntr = (int32_t)tsr_bsr_tile_rows((uint32_t)nn);
    uint64_t nz = 0;
    for (int32_t tr = 0; tr < ntr; tr++)
      for (int32_t t = 0; t < nkt; t++)
        nz += nzmap[(size_t)(n0 / (int32_t)BN + tr) * (size_t)nkt + (size_t)t];
    b->off[c] = at;
    b->nnz[c] = (uint32_t)nz;
    b->stored += nz;
    b->total += (uint64_t)ntr * (uint64_t)nkt;
    at += ((uint64_t)ntr * b->ldb + 63) / 64 * 64 + nz * BN * BK;
    at = (at + 63) / 64 * 64;
  }
  b->bytes = at ? at : 64;
  uint8_t *img = calloc(1, (size_t)b->bytes);
  if (!img) {
    free(nzmap);
    tsr_tile_bsr_free(b);
    return TSR_ERR(RESOURCE_EXHAUSTED, "block-sparse weights of %" PRIu64 " bytes", at);
  }
  for (int32_t c = 0; c < chunks; c++) {
    const int32_t n0 = c * TSR_TILE_N_CHUNK;
    const int32_t nn = n - n0 < TSR_TILE_N_CHUNK ? n - n0 : TSR_TILE_N_CHUNK;
    const int32_t ntr = (int32_t)tsr_bsr_tile_rows((uint32_t)nn);
    uint8_t *bm = img + b->off[c];
    uint8_t *tile = bm + ((uint64_t)ntr * b->ldb + 63) / 64 * 64;
    for (int32_t tr = 0; tr < ntr; tr++) {
      const int32_t g = n0 / (int32_t)BN + tr; /* tile row in the matrix */
      for (int32_t t = 0; t < nkt; t++) {
        if (!nzmap[(size_t)g * (size_t)nkt + (size_t)t]) continue;
        bm[(size_t)tr * b->ldb + (size_t)t / 8] |= (uint8_t)(1u << (t % 8));
        const int32_t kl = k - t * (int32_t)BK < (int32_t)BK ? k - t * (int32_t)BK : (int32_t)BK;
        for (int32_t j = 0; j < (int32_t)BN && g * (int32_t)BN + j < n; j++)
          memcpy(tile + (size_t)j * BK, w + (size_t)(g * (int32_t)BN + j) * (size_t)k + t * BK,
                 (size_t)kl);
        tile += BN * BK;
      }
    }
  }
  free(nzmap);
  *out = img;
  return TSR_OK;
}

void tsr_tile_bsr_desc(tsr_desc_t *d, uint64_t base, const tsr_tile_bsr_t *b, int32_t n0) {
  const int32_t c = n0 / TSR_TILE_N_CHUNK;
  d->opcode = TSR_OP_GEMM_BSR_I8_I32;
  d->ldw = b->ldb;
  d->w_addr = base + b->off[c];
  d->w_nch = tsr_bsr_block_word(b->bk);
  d->w_cstride = b->nnz[c];
}
