/*
 * kernel_model.h - the functional model of the tessera kernel and its
 * analytic timing model.
 *
 * Internal header. tsr_km_execute() runs one launch (a ring of descriptors,
 * hw/regmap.def) over a byte-addressed device memory exactly as the RTL
 * does: the same checks in the same order with the same TSR_HWERR_* codes,
 * the same STATUS / ERR_INDEX / DESC_DONE and the same BYTES_RD, BYTES_WR
 * and MACS counters. Cycle counts come from the timing model below (an
 * event walk of the RTL's pipeline, kernel_model.c; within 5 % of the RTL's
 * CYC_BUSY on the default memory profile, checked by tests/e2e/rtl.sh),
 * which the benchmarks and the partitioner use as well.
 *
 * Check order (per launch, then per descriptor; the first failure stops
 * the launch, descriptors before it have completed and written C):
 *   launch:  N_DESC == 0 finishes at once with STATUS 0 (nothing checked)
 *            RING_RANGE   RING not 64-byte aligned, or
 *                         [RING, RING + N_DESC*64) not inside the window
 *                         (ERR_INDEX 0, nothing read)
 *   fetch:   AXI_ERROR    the descriptor lies outside physical memory
 *   1.       BAD_OPCODE   opcode unknown or FLAGS != 0
 *            (a NOP with FLAGS 0 completes here)
 *   2.       BAD_DIMS     M, N or K is 0 or above MAX_DIM
 *   2b.      BAD_BLOCK    GEMM_BSR: BSR_BLOCK is not 16 x 64 or 16 x 128
 *   3.       BAD_STRIDE   LDA < K, LDW < K, LDC < 4*N, LDC % 4, C_ADDR % 4,
 *                         W_NCH not 0, 1 or the kernel's ports, W_CSTRIDE
 *                         != 0 with one channel; GEMM_BSR: LDA < K, LDC
 *                         as above, BSR_LDB < ceil(ceil(K/BK)/8)
 *   4.       ADDR_RANGE   the extent of A, W or C is outside the window; the
 *                         extent of X is [X_ADDR, X_ADDR + (rows-1)*LDX +
 *                         row bytes), of W striped over P channels
 *                         [W_ADDR, W_ADDR + (P-1)*W_CSTRIDE +
 *                         ((N-1)/P)*LDW + K); GEMM_BSR: A, C, the bitmaps
 *                         [W_ADDR, W_ADDR + ceil(N/BN)*BSR_LDB) and the
 *                         tiles [first tile, + BSR_NNZ*BN*BK)
 *   5.       AXI_ERROR    an operand inside the window lies outside physical
 *                         memory (the memory answers DECERR); GEMM_BSR: the
 *                         bitmaps first, before step 6
 *   6.       BAD_COUNT    GEMM_BSR: the bitmaps, read in full before any
 *                         tile, hold a set bit past a row's last k tile or
 *                         a popcount other than BSR_NNZ
 * A descriptor refused in steps 1-4 or 6 writes nothing (the RTL checks before
 * any operand access). Step 5 is an approximation: the model writes nothing
 * for such a descriptor and counts only its fetch, while the RTL notices
 * the error responses at the descriptor's barrier, having requested every
 * operand segment and written every row of C from whatever data came back
 * (BYTES_RD and BYTES_WR count them); HAL users never see this, since
 * their windows are allocations. A fetch that fails counts its 64 bytes
 * in BYTES_RD, as the RTL does.
 * ERR_INDEX is the index
 * of the failing descriptor (0 when the launch succeeded), DESC_DONE the
 * number completed.
 *
 * Dataflow (hw/rtl/tsr_core.sv and its engines), which fixes the counters: a GEMM runs in
 * GEMV mode when M * cols < bus_bytes (one A row per m block, the array's
 * rows become k lanes), else in GEMM mode (rows A rows per m block). Tiles
 * go m block (outer), n block (cols W rows), k chunk (k_chunk bytes,
 * inner). Each step loads one segment per A row and per W row, except that
 * when K fits one chunk the A block is loaded only at n block 0, and W
 * (if N also fits one n block) only at m block 0.
 * Counters: BYTES_RD = 64 per descriptor fetched (including a refused one)
 * + the bytes of every operand segment loaded; BYTES_WR = 4*M*N and MACS =
 * M*N*K per completed GEMM. Cycle counts come from the timing model below.
 *
 * GEMM_BSR (W block-sparse, driver/tsr_regmap.h): after the checks the
 * kernel reads every bitmap row (ceil(K/BK)/8 bytes each, the count of
 * step 6), then walks m blocks, tile rows (n blocks of BSR_BN rows, or of
 * cols rows when the array is narrower) and k chunks; a step loads the
 * tile row's bitmap row (at its first step), the A rows of the chunk as a
 * dense step does (A kept across tile rows when K fits one chunk, and not
 * loaded at all while no step of the m block has a tile), and one segment
 * of min(BK, K - k0) bytes per W row of each stored tile of the chunk. A
 * chunk without a stored tile is no step; for a tile row without any the
 * writer writes its rows of C as zeros (no step, no output bank, so the
 * array goes on with the next tile). W is read one segment per stored tile
 * and n block (the tile's rows of the n block, BK bytes each, bytes past N
 * or K included). GEMM mode computes one k
 * per cycle over the stored tiles only, GEMV mode rows k's per cycle.
 * Counters: BYTES_RD = 64 + the bitmaps twice (the count, then per m block;
 * the first row's second read is issued with the count, so a refused
 * descriptor counts it too) + the A and W segments; MACS = M x the stored tiles' elements inside
 * N x K; BYTES_WR = 4*M*N.
 */
#ifndef TSR_KERNEL_MODEL_H
#define TSR_KERNEL_MODEL_H

#include <stdint.h>

#include "driver/hal.h"
#include "base/threadpool.h"
#include "driver/tsr_regmap.h"

/* What the timing model needs to know about a device. */
typedef struct tsr_km_timing {
  uint32_t rows;              /* MAC array rows (M direction)               */
  uint32_t cols;              /* MAC array columns (N direction)            */
  uint32_t bus_bytes;         /* AXI data bus width in bytes                */
  uint32_t k_chunk;           /* k bytes buffered per operand row           */
  double mem_bytes_per_cycle; /* read bandwidth of ONE memory channel, bytes
                                 per kernel cycle                           */
  uint32_t ports;             /* AXI read masters, each on its own memory
                                 channel (>= 1; 0 is taken as 1)            */
  uint32_t mem_latency;       /* cycles from read request to first data     */
  double clock_hz;            /* kernel clock, to project cycles to seconds */
  uint32_t ops;               /* opcodes the kernel build implements, a mask
                                 of 1 << TSR_OP_*; 0 = every opcode the
                                 model knows (a kernel without the sparse
                                 unit refuses GEMM_BSR with BAD_OPCODE)    */
} tsr_km_timing_t;

/* Every opcode the model implements. */
#define TSR_KM_OPS_ALL \
  ((1u << TSR_OP_NOP) | (1u << TSR_OP_GEMM_I8_I32) | (1u << TSR_OP_GEMM_BSR_I8_I32))

/* Defaults: the RTL's default build (16x16 array, 64-byte bus, 4096-byte
 * k chunks) at 300 MHz on one DDR4-2400 bank (19.2 GB/s = 64 bytes/cycle at
 * 300 MHz), 40 cycles of read latency (the sim's board profile), one
 * read port. */
void tsr_km_timing_init(tsr_km_timing_t *t);

/* Timing of a device from its caps (array, clock, bandwidth); the fields
 * caps do not carry (bus width, k chunk, latency) keep their defaults. */
void tsr_km_timing_from_caps(const tsr_hal_caps_t *caps, tsr_km_timing_t *out);

/* Modeled cost of work on the device. */
typedef struct tsr_km_estimate {
  uint64_t cycles;       /* busy cycles                                   */
  uint64_t stall_cycles; /* cycles the array waited for memory            */
  uint64_t bytes_rd;     /* descriptor + operand bytes read               */
  uint64_t bytes_wr;     /* result bytes written                          */
  uint64_t macs;         /* useful multiply-accumulates                   */
} tsr_km_estimate_t;

/* Fixed cycles of one launch (ap_start to the first descriptor fetch and
 * from the last write to ap_done). */
uint64_t tsr_km_launch_cycles(const tsr_km_timing_t *t);

/* Adds the cost of one descriptor fetch plus one GEMM of m x n x k (all >= 1)
 * to *acc. A NOP is tsr_km_estimate_nop(). With t->ports > 1 it assumes
 * the weights striped over all the device's channels (W_NCH = ports, the
 * layout a host gives a multi-channel board); tsr_km_estimate_gemm_desc()
 * follows the layout a descriptor actually has. */
void tsr_km_estimate_gemm(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                          tsr_km_estimate_t *acc);
void tsr_km_estimate_gemm_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                               tsr_km_estimate_t *acc);
void tsr_km_estimate_nop(const tsr_km_timing_t *t, tsr_km_estimate_t *acc);
/* A descriptor fetched and decoded (then refused): memory latency + decode,
 * its bytes read. */
void tsr_km_estimate_fetch(const tsr_km_timing_t *t, tsr_km_estimate_t *acc);
/* A GEMM_BSR descriptor that passed the checks: `bitmap` is a host copy of
 * its bitmaps (row r at bitmap + r*BSR_LDB, tsr_bsr_bitmap_span bytes,
 * borrowed). */
void tsr_km_estimate_bsr_desc(const tsr_km_timing_t *t, const tsr_desc_t *d,
                              const uint8_t *bitmap, tsr_km_estimate_t *acc);
/* Step 6 of the checks on a host copy of the bitmaps; also the cost of
 * the count (its reads), added to *acc when acc is not NULL. */
uint32_t tsr_km_bsr_count(const tsr_km_timing_t *t, const tsr_desc_t *d, const uint8_t *bitmap,
                          tsr_km_estimate_t *acc);

/* Convenience for planners: modeled cycles of a single-descriptor launch. */
uint64_t tsr_km_gemm_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k);

/* Device memory as the model sees it: `size` bytes at device address
 * `base`, host copy at `data` (borrowed). */
typedef struct tsr_km_memory {
  uint8_t *data;
  uint64_t base;
  uint64_t size;
} tsr_km_memory_t;

/* Checks one descriptor against a window (steps 1-4 above) for a kernel
 * with `ports` read ports (W_NCH must be 0, 1 or ports); returns a
 * TSR_HWERR_* code. Does not look at memory. tsr_km_check_desc() is the
 * one-port kernel's check. */
uint32_t tsr_km_check_desc_ports(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size,
                                 uint32_t ports);
uint32_t tsr_km_check_desc(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size);
/* The same for a kernel build that implements only the opcodes in `ops`
 * (a mask of 1 << TSR_OP_*, 0 = all the model knows). */
uint32_t tsr_km_check_desc_ops(const tsr_desc_t *d, uint64_t window_base, uint64_t window_size,
                               uint32_t ports, uint32_t ops);

/* Runs one launch over `mem` and fills *out (every field). Never fails:
 * problems are reported in out->hw_status like the RTL reports them. The
 * GEMMs run on `pool` (borrowed, may be NULL for the calling thread only). */
void tsr_km_execute(const tsr_km_timing_t *t, const tsr_km_memory_t *mem,
                    const tsr_hal_command_t *cmd, tsr_threadpool_t *pool,
                    tsr_hal_result_t *out);

/* True if [addr, addr + len) lies inside [base, base + size), without
 * overflow. Shared by the model and the backends. */
static inline int tsr_km_inside(uint64_t addr, uint64_t len, uint64_t base, uint64_t size) {
  return addr >= base && addr - base <= size && len <= size - (addr - base);
}

#endif /* TSR_KERNEL_MODEL_H */
