/*
 * plan.h - placement of the graph's nodes for one batch size, beside the
 * graph (graph.h) rather than inside it.
 *
 * Internal header. The partitioner (plan.c) alone decides where every node
 * runs, including whether a device can hold the weights and staging it
 * would need; the executor only follows a plan. An engine keeps one plan per
 * batch size it considers (1, 2, 4, ... up to its rows per pass), so the
 * cost model sees the batch: a group that loses to the host at one row may
 * win at 64.
 */
#ifndef TSR_PLAN_H
#define TSR_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "driver/tsr_regmap.h"
#include "graph.h"

struct tsr_engine;

/* tsr_place_t.device: the host, or rows spread over the engine's row
 * devices (--split rows); otherwise an index into the engine's devices. */
#define TSR_PLACE_CPU (-1)
#define TSR_PLACE_ROWS (-2)
/* Device entries a rows split can address (a 64-bit mask). */
#define TSR_MAX_ROW_DEVICES 64

typedef struct tsr_place {
  int32_t device;
  uint64_t rows_mask; /* TSR_PLACE_ROWS: the entries sharing the rows (bit e;
                         "cpu" entries take their share on the host)      */
  char cause[192];  /* why it went there */
  double est_cpu_s, est_dev_s, est_xfer_s; /* cost model, per evaluation */
} tsr_place_t;

typedef struct tsr_plan {
  int32_t rows;      /* batch rows this plan was costed for */
  tsr_place_t *at;   /* (graph n_nodes) */
} tsr_plan_t;

/* Rows per device of a matmul spread over n devices: device i of n takes
 * rows [tsr_rows_share(R, n, i), tsr_rows_share(R, n, i + 1)). */
static inline int32_t tsr_rows_share(int32_t R, int n, int i) {
  return (int32_t)((int64_t)R * i / n);
}

/* Sequences whose int8 KV caches the memory budget keeps room for on a
 * device, in every layer whose attention it may run. */
#define TSR_PLAN_KV_RESERVE_SEQS 4

/* Places every node of the engine's graph for batches of `rows` rows (see
 * the passes in plan.c). */
tsr_status_t tsr_plan_build(struct tsr_engine *o, int32_t rows, tsr_plan_t *out);
void tsr_plan_free(tsr_plan_t *p);
/* Modeled per-evaluation seconds of `p`: host matmuls (measured kernel
 * time), transfers (link model), device (cycle model). */
void tsr_plan_totals(const tsr_plan_t *p, const tsr_graph_t *g, double *cpu_s,
                     double *xfer_s, double *dev_s);

/* Descriptors of one launch of a matmul group of `count` members of n[i]
 * outputs over m rows: N in chunks of at most n_chunk, M in chunks of at
 * most m_chunk (tiles.c; the executor and the cost model both count so). */
int32_t tsr_tile_descs(const int32_t *n, int count, int32_t n_chunk, int32_t m,
                       int32_t m_chunk);
#define TSR_TILE_N_CHUNK 4096
/* Rows per descriptor on a device: its largest M. */
static inline int32_t tsr_tile_m_chunk(const tsr_hal_caps_t *c) {
  return c->max_dim ? (int32_t)c->max_dim : TSR_TILE_N_CHUNK;
}

/* K cut in pieces on a device with several read ports: a GEMV whose K is
 * more than the kernel's k chunk (TSR_TILE_K_CHUNK bytes) reloads its A
 * row through port 0 for every n block, which halves that port's share of
 * W's bandwidth (1x4096x11008 at 128x32 with 32 ports: 49.8 % of the
 * modeled bandwidth, 97 % in pieces of 4096). Each piece is a descriptor of
 * its own writing its own int32 partial sums, which the host adds (exact).
 * The number of pieces, 1 on a device with one port or where K fits. */
#define TSR_TILE_K_CHUNK 4096
int32_t tsr_tile_k_pieces(const tsr_hal_caps_t *c, int32_t k);

/* Weights on a device with several read ports (caps.mem_ports = P, a power
 * of two dividing TSR_TILE_N_CHUNK; else 1): striped as the kernel reads
 * them (hw/regmap.def W_NCH, W_CSTRIDE), row r of an n x k matrix at
 * (r % P) * cstride + (r / P) * k with cstride = ceil(n / P) * k, so every
 * port streams its own channel's rows (tiles.c). */
uint32_t tsr_tile_w_channels(const tsr_hal_caps_t *c);
/* Device bytes of an n x k matrix striped over p channels. */
static inline uint64_t tsr_tile_w_bytes(int32_t n, int32_t k, uint32_t p) {
  const uint64_t per = ((uint64_t)n + p - 1) / p;
  return per * p * (uint64_t)k;
}
/* Writes the striped copy of src (n x k, row-major) into dst
 * (tsr_tile_w_bytes; padding rows zero). */
void tsr_tile_w_stripe(int8_t *dst, const int8_t *src, int32_t n, int32_t k, uint32_t p);
/* The W fields of a descriptor for rows [n0, ...) of a matrix at device
 * address `base` (n0 a multiple of p). */
void tsr_tile_w_desc(tsr_desc_t *d, uint64_t base, int32_t n, int32_t n0, int32_t k,
                     uint32_t p);

/* Weights stored block-sparse for GEMM_BSR_I8_I32 (hw/README.md "Block-
 * sparse weights"): a matrix whose BSR_BN x BSR_BK tiles are at most
 * TSR_TILE_BSR_MAX_DENSITY non-zero goes to a device that has the opcode
 * (caps.ops) and one read port in the compressed form; its matmuls issue
 * GEMM_BSR descriptors. The executor cuts N in chunks of TSR_TILE_N_CHUNK
 * rows (a multiple of BSR_BN), so every chunk is laid out as the kernel
 * reads one descriptor's W: from a 64-byte-aligned offset its bitmaps
 * (ceil(rows/BN) rows of `ldb` bytes), then from the next 64-byte boundary
 * its stored tiles. */
#define TSR_TILE_BSR_MAX_DENSITY 0.8
typedef struct tsr_tile_bsr {
  int32_t chunks;          /* chunks of N; 0 = stored dense               */
  uint32_t bk;             /* tile width, BSR_BK_MIN or BSR_BK_MAX        */
  uint32_t ldb;            /* bytes of a bitmap row                       */
  uint64_t *off;           /* (chunks) byte offset of a chunk's bitmaps   */
  uint32_t *nnz;           /* (chunks) tiles a chunk stores               */
  uint64_t stored, total;  /* tiles stored, tiles of the matrix           */
  uint64_t bytes;          /* device bytes of the compressed form         */
} tsr_tile_bsr_t;
/* The tile width for K: BSR_BK_MAX unless its last tile pads K more than
 * BSR_BK_MIN's would (K = 64 or 172: 64; 256 or 4096: 128). */
uint32_t tsr_tile_bsr_bk(int32_t k);
/* Fraction of the BN x bk tiles of w (n x k, row-major; edge tiles count
 * whole) holding a non-zero. */
double tsr_tile_bsr_density(const int8_t *w, int32_t n, int32_t k, uint32_t bk);
/* Whether a matrix of that tile density goes block-sparse to a device with
 * these caps. */
bool tsr_tile_bsr_wanted(const tsr_hal_caps_t *c, double density);
/* Builds the compressed form of w: *out (malloc'd, out->bytes, the caller
 * frees it) laid out as above, the layout in *b (tsr_tile_bsr_free). */
tsr_status_t tsr_tile_bsr_pack(const int8_t *w, int32_t n, int32_t k, uint32_t bk,
                               tsr_tile_bsr_t *b, uint8_t **out);
void tsr_tile_bsr_free(tsr_tile_bsr_t *b);
/* The W fields and the opcode of a GEMM_BSR descriptor for the chunk of
 * rows [n0, ...) (n0 a multiple of TSR_TILE_N_CHUNK) of a matrix stored
 * at device address `base`. */
void tsr_tile_bsr_desc(tsr_desc_t *d, uint64_t base, const tsr_tile_bsr_t *b, int32_t n0);

#endif
