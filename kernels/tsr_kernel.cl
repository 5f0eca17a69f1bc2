/*
 * tsr_kernel.cl - the tessera kernel in OpenCL C 1.2.
 *
 * One launch of the accelerator (a ring of 64-byte descriptors, see
 * hw/regmap.def) runs as a short sequence of OpenCL kernels on one in-order
 * queue, so every descriptor sees the memory its predecessors wrote, as in
 * the RTL and the functional model (driver/kernel_model.h):
 *
 *   tsr_fetch(index 0)  clears the status block, checks the ring (RING_RANGE)
 *   tsr_gemm            computes descriptor 0 if it was accepted (a GEMM,
 *                       or a GEMM_BSR over its stored tiles)
 *   tsr_fetch(index 1)  ...
 *
 * tsr_fetch is one work-item: it copies descriptor `index` out of the ring,
 * checks it exactly like tsr_km_check_desc (same checks, same order, same
 * TSR_HWERR_* code), updates STATUS / ERR_INDEX / DESC_DONE, logs what it did, and leaves the accepted descriptor in the plan area of
 * the status block. BYTES_WR and MACS are counted here; the modeled cycle
 * and read counters (an RTL property, not an OpenCL one) are derived by the
 * host from the log. Copying first means a GEMM whose C overwrites its own
 * ring entry still runs the descriptor as fetched. tsr_gemm is an NDRange whose work-items each own
 * a block of RM x RN outputs (grid-stride over the blocks of C) and reduce K
 * sixteen bytes at a time with char16 loads widened by convert_int16 (the
 * fastest form on PoCL; 2 x 8 blocks measured best of 1..4 x 4..8 at 512^3).
 *
 * Arguments, in the order of the RTL's registers (regmap.def TSR_ARG rows):
 *   mem_base  device address of the window the kernel may touch (MEM_BASE)
 *   mem_size  bytes in that window (MEM_SIZE)
 *   ring      device address of the first descriptor (RING)
 *   n_desc    descriptors in the ring (N_DESC)
 * then what an OpenCL device needs besides registers:
 *   mem       the device memory, one buffer; mem[0] is device address
 *             regs[TSR_CL_ORIGIN] and it holds regs[TSR_CL_PHYS] bytes
 *   regs      the status block: the register image at the regmap offsets
 *             (STATUS .. MACS, written here) followed by the private area
 *             (TSR_CL_* offsets: configuration written by the host at open,
 *             the stop flag, the fetched descriptor and the launch log)
 *
 * The host prepends #defines for every regmap.def row (TSR_STAT_*, TSR_DESC_*,
 * TSR_HW_*, TSR_OP_*, TSR_HWERR_*) and for the TSR_CL_* offsets, so this file
 * names no offset or code itself.
 *
 * Integer results are exact: |a*w| <= 2^14 and K <= 65535, so no partial
 * sum can overflow int.
 */

#define TSR_U32(off) regs[(off) / 4]
#define TSR_U64(off) (((__global ulong *)regs)[(off) / 8])

#ifndef TSR_NUM_PORTS
#define TSR_NUM_PORTS 1 /* read ports this device offers (W_NCH it accepts) */
#endif
#ifndef TSR_RM
#define TSR_RM 2 /* output rows per work-item    */
#endif
#ifndef TSR_RN
#define TSR_RN 8 /* output columns per work-item */
#endif

/* [addr, addr + len) inside [base, base + size), without overflow. */
static int tsr_inside(ulong addr, ulong len, ulong base, ulong size) {
  return addr >= base && addr - base <= size && len <= size - (addr - base);
}

static uint tsr_le32(__global const uchar *p) {
  return (uint)p[0] | (uint)p[1] << 8 | (uint)p[2] << 16 | (uint)p[3] << 24;
}

static ulong tsr_le64(__global const uchar *p) {
  return (ulong)tsr_le32(p) | (ulong)tsr_le32(p + 4) << 32;
}

/* One entry of the launch log per fetched descriptor (TSR_CL_LOG): what
 * happened to it and, for a GEMM, the descriptor it ran. The host derives
 * the modeled cycle and read counters from the log with the analytic model
 * of kernel_model.c, which times a GEMM on its shape and addresses. */
static void tsr_log(__global uint *regs, uint index, uint kind, __global const uchar *desc) {
  __global uchar *e = (__global uchar *)regs + TSR_CL_LOG + TSR_CL_LOG_ENTRY * (ulong)index;
  ((__global uint *)e)[0] = kind;
  if (desc)
    for (int i = 0; i < TSR_HW_DESC_BYTES; i++) e[16 + i] = desc[i];
}

/* A descriptor that passed every check: logged, its written bytes and MACs
 * counted, done, and handed to tsr_gemm as `opcode`. */
static void tsr_accept(__global uint *regs, uint index, uint kind, __global const uchar *plan,
                       ulong bytes_wr, ulong macs, uint opcode) {
  tsr_log(regs, index, kind, plan);
  TSR_U64(TSR_STAT_BYTES_WR) += bytes_wr;
  TSR_U64(TSR_STAT_MACS) += macs;
  TSR_U32(TSR_STAT_DESC_DONE) = index + 1;
  TSR_U32(TSR_CL_PLAN) = opcode;
}

static void tsr_stop(__global uint *regs, uint status, uint index) {
  TSR_U32(TSR_STAT_STATUS) = status;
  TSR_U32(TSR_STAT_ERR_INDEX) = index;
  TSR_U32(TSR_STAT_DESC_DONE) = index;
  TSR_U32(TSR_CL_STOPPED) = 1;
  TSR_U32(TSR_CL_PLAN) = 0;
}

/* A descriptor refused (or a fetch that failed): logged as `kind`, the
 * launch stopped with `status` at it. */
static void tsr_refuse(__global uint *regs, uint index, uint kind, __global const uchar *plan,
                       uint status) {
  tsr_log(regs, index, kind, plan);
  tsr_stop(regs, status, index);
}

/* W's layout (hw/regmap.def W_NCH, W_CSTRIDE): channel count, row address
 * offset of row r, and the extent the checks use. */
static ulong tsr_w_nch(__global const uchar *d) {
  uint nch = tsr_le32(d + TSR_DESC_W_NCH);
  return nch > 1 ? nch : 1;
}
static ulong tsr_w_row(__global const uchar *d, ulong r) {
  ulong nch = tsr_w_nch(d);
  return (r % nch) * tsr_le32(d + TSR_DESC_W_CSTRIDE) + (r / nch) * tsr_le32(d + TSR_DESC_LDW);
}
static ulong tsr_w_len(__global const uchar *d) {
  ulong nch = tsr_w_nch(d), n = tsr_le32(d + TSR_DESC_N);
  return (nch - 1) * tsr_le32(d + TSR_DESC_W_CSTRIDE) +
         ((n - 1) / nch) * tsr_le32(d + TSR_DESC_LDW) + tsr_le32(d + TSR_DESC_K);
}

/* GEMM_BSR's layout (hw/regmap.def, driver/tsr_regmap.h): tile rows, k
 * tiles, bitmap bytes read per row, the bitmaps' span from W_ADDR and the
 * padding to the first tile. */
static uint tsr_bsr_rows(__global const uchar *d) {
  return (tsr_le32(d + TSR_DESC_N) + TSR_HW_BSR_BN - 1) / TSR_HW_BSR_BN;
}
/* BK (bits 15:0 of BSR_BLOCK; one of the two the checks accept). */
static uint tsr_bsr_bk(__global const uchar *d) { return tsr_le32(d + TSR_DESC_BSR_BLOCK) & 0xFFFFu; }
static uint tsr_bsr_ktiles(__global const uchar *d) {
  return (tsr_le32(d + TSR_DESC_K) + tsr_bsr_bk(d) - 1) / tsr_bsr_bk(d);
}
static ulong tsr_bsr_span(__global const uchar *d) {
  return (ulong)tsr_bsr_rows(d) * tsr_le32(d + TSR_DESC_BSR_LDB);
}
static ulong tsr_bsr_pad(__global const uchar *d) {
  return (0 - (tsr_le64(d + TSR_DESC_W_ADDR) + tsr_bsr_span(d))) & 63ul;
}
static ulong tsr_bsr_tiles(__global const uchar *d) {
  return tsr_le64(d + TSR_DESC_W_ADDR) + tsr_bsr_span(d) + tsr_bsr_pad(d);
}

/* Steps 2b-4 of the checks for GEMM_BSR (tsr_km_check_desc_ops). */
static uint tsr_check_bsr(__global const uchar *d, ulong wb, ulong ws) {
  ulong m = tsr_le32(d + TSR_DESC_M), n = tsr_le32(d + TSR_DESC_N);
  ulong k = tsr_le32(d + TSR_DESC_K);
  uint blk = tsr_le32(d + TSR_DESC_BSR_BLOCK);
  if (blk != (TSR_HW_BSR_BN << 16 | TSR_HW_BSR_BK_MIN) && blk != (TSR_HW_BSR_BN << 16 | TSR_HW_BSR_BK_MAX))
    return TSR_HWERR_BAD_BLOCK;
  ulong lda = tsr_le32(d + TSR_DESC_LDA), ldc = tsr_le32(d + TSR_DESC_LDC);
  ulong c = tsr_le64(d + TSR_DESC_C_ADDR);
  if (lda < k || ldc < 4 * n || ldc % 4 || c % 4 ||
      tsr_le32(d + TSR_DESC_BSR_LDB) < (tsr_bsr_ktiles(d) + 7) / 8)
    return TSR_HWERR_BAD_STRIDE;
  ulong a = tsr_le64(d + TSR_DESC_A_ADDR), w = tsr_le64(d + TSR_DESC_W_ADDR);
  ulong span = tsr_bsr_span(d);
  if (!tsr_inside(a, (m - 1) * lda + k, wb, ws) || !tsr_inside(w, span, wb, ws) ||
      !tsr_inside(c, (m - 1) * ldc + 4 * n, wb, ws))
    return TSR_HWERR_ADDR_RANGE;
  ulong rel = w - wb + span, pad = tsr_bsr_pad(d);
  ulong tiles = (ulong)tsr_le32(d + TSR_DESC_BSR_NNZ) * TSR_HW_BSR_BN * tsr_bsr_bk(d);
  if (pad > ws - rel || tiles > ws - rel - pad) return TSR_HWERR_ADDR_RANGE;
  return TSR_HWERR_OK;
}

/* Step 6 for GEMM_BSR: the bitmaps' popcount against BSR_NNZ, no bit past
 * a row's last k tile. *elems gets the stored tiles' elements inside
 * N x K (for MACS). */
static uint tsr_bsr_count(__global const uchar *d, __global const uchar *bm, ulong *elems) {
  uint ntr = tsr_bsr_rows(d), nkt = tsr_bsr_ktiles(d), rb = (nkt + 7) / 8;
  uint n = tsr_le32(d + TSR_DESC_N), k = tsr_le32(d + TSR_DESC_K);
  ulong ldb = tsr_le32(d + TSR_DESC_BSR_LDB);
  uint last_mask = nkt % 8 ? (1u << (nkt % 8)) - 1 : 0xFFu;
  uint bk = tsr_bsr_bk(d);
  uint last_kl = k - (nkt - 1) * bk; /* k bytes of the last k tile */
  ulong total = 0, el = 0;
  for (uint r = 0; r < ntr; r++) {
    __global const uchar *row = bm + (ulong)r * ldb;
    uint nl = n - r * (uint)TSR_HW_BSR_BN;
    if (nl > TSR_HW_BSR_BN) nl = TSR_HW_BSR_BN;
    ulong in_row = 0;
    for (uint b = 0; b < rb; b++) {
      uint v = row[b];
      if (b + 1 == rb) {
        if (v & ~last_mask) return TSR_HWERR_BAD_COUNT;
        v &= last_mask;
      }
      in_row += popcount(v);
    }
    total += in_row;
    uint last_set = (row[(nkt - 1) / 8] >> ((nkt - 1) % 8)) & 1;
    el += (ulong)nl * ((in_row - last_set) * bk + last_set * last_kl);
  }
  *elems = el;
  return total == tsr_le32(d + TSR_DESC_BSR_NNZ) ? TSR_HWERR_OK : TSR_HWERR_BAD_COUNT;
}

/* The checks of tsr_km_check_desc, in its order. */
static uint tsr_check_desc(__global const uchar *d, ulong wb, ulong ws) {
  uint op = tsr_le32(d + TSR_DESC_OPCODE);
  if (op != TSR_OP_NOP && op != TSR_OP_GEMM_I8_I32 && op != TSR_OP_GEMM_BSR_I8_I32)
    return TSR_HWERR_BAD_OPCODE;
  if (tsr_le32(d + TSR_DESC_FLAGS) != 0) return TSR_HWERR_BAD_OPCODE;
  if (op == TSR_OP_NOP) return TSR_HWERR_OK;
  ulong m = tsr_le32(d + TSR_DESC_M), n = tsr_le32(d + TSR_DESC_N);
  ulong k = tsr_le32(d + TSR_DESC_K);
  if (m == 0 || n == 0 || k == 0 || m > TSR_HW_MAX_DIM || n > TSR_HW_MAX_DIM ||
      k > TSR_HW_MAX_DIM)
    return TSR_HWERR_BAD_DIMS;
  if (op == TSR_OP_GEMM_BSR_I8_I32) return tsr_check_bsr(d, wb, ws);
  ulong lda = tsr_le32(d + TSR_DESC_LDA), ldw = tsr_le32(d + TSR_DESC_LDW);
  ulong ldc = tsr_le32(d + TSR_DESC_LDC);
  ulong a = tsr_le64(d + TSR_DESC_A_ADDR), w = tsr_le64(d + TSR_DESC_W_ADDR);
  ulong c = tsr_le64(d + TSR_DESC_C_ADDR);
  ulong nch = tsr_le32(d + TSR_DESC_W_NCH), cs = tsr_le32(d + TSR_DESC_W_CSTRIDE);
  int bad_layout = nch > 1 ? nch != TSR_NUM_PORTS : cs != 0;
  if (lda < k || ldw < k || ldc < 4 * n || ldc % 4 || c % 4 || bad_layout)
    return TSR_HWERR_BAD_STRIDE;
  if (!tsr_inside(a, (m - 1) * lda + k, wb, ws) || !tsr_inside(w, tsr_w_len(d), wb, ws) ||
      !tsr_inside(c, (m - 1) * ldc + 4 * n, wb, ws))
    return TSR_HWERR_ADDR_RANGE;
  return TSR_HWERR_OK;
}

__kernel void tsr_fetch(ulong mem_base, ulong mem_size, ulong ring, uint n_desc,
                        __global uchar *mem, __global uint *regs, uint index) {
  if (get_global_id(0) != 0) return;
  ulong origin = TSR_U64(TSR_CL_ORIGIN), phys = TSR_U64(TSR_CL_PHYS);
  if (index == 0) {
    for (uint off = TSR_STAT_STATUS; off < TSR_HW_CTRL_BYTES; off += 4) TSR_U32(off) = 0;
    TSR_U32(TSR_CL_STOPPED) = 0;
    TSR_U32(TSR_CL_PLAN) = 0;
    if (n_desc == 0) return; /* finishes at once, checking nothing */
    if (ring % TSR_HW_DESC_BYTES ||
        !tsr_inside(ring, (ulong)n_desc * TSR_HW_DESC_BYTES, mem_base, mem_size)) {
      tsr_stop(regs, TSR_HWERR_RING_RANGE, 0);
      return;
    }
  }
  TSR_U32(TSR_CL_PLAN) = 0;
  if (TSR_U32(TSR_CL_STOPPED) || index >= n_desc) return;

  ulong da = ring + (ulong)index * TSR_HW_DESC_BYTES;
  if (!tsr_inside(da, TSR_HW_DESC_BYTES, origin, phys)) {
    tsr_refuse(regs, index, TSR_CL_LOG_FETCH_FAILED, 0, TSR_HWERR_AXI_ERROR);
    return;
  }
  __global uchar *plan = (__global uchar *)regs + TSR_CL_DESC;
  __global const uchar *src = mem + (da - origin);
  for (int i = 0; i < TSR_HW_DESC_BYTES; i++) plan[i] = src[i];

  uint st = tsr_check_desc(plan, mem_base, mem_size);
  if (st != TSR_HWERR_OK) {
    tsr_refuse(regs, index, TSR_CL_LOG_REFUSED, 0, st);
    return;
  }
  if (tsr_le32(plan + TSR_DESC_OPCODE) == TSR_OP_NOP) {
    tsr_log(regs, index, TSR_CL_LOG_NOP, 0);
    TSR_U32(TSR_STAT_DESC_DONE) = index + 1;
    return;
  }
  uint m = tsr_le32(plan + TSR_DESC_M), n = tsr_le32(plan + TSR_DESC_N);
  uint k = tsr_le32(plan + TSR_DESC_K);
  ulong a = tsr_le64(plan + TSR_DESC_A_ADDR), w = tsr_le64(plan + TSR_DESC_W_ADDR);
  ulong c = tsr_le64(plan + TSR_DESC_C_ADDR);
  ulong lda = tsr_le32(plan + TSR_DESC_LDA);
  ulong ldc = tsr_le32(plan + TSR_DESC_LDC);
  if (tsr_le32(plan + TSR_DESC_OPCODE) == TSR_OP_GEMM_BSR_I8_I32) {
    /* the bitmaps are read (and counted) before any tile */
    if (!tsr_inside(w, tsr_bsr_span(plan), origin, phys)) {
      tsr_refuse(regs, index, TSR_CL_LOG_REFUSED, 0, TSR_HWERR_AXI_ERROR);
      return;
    }
    ulong elems = 0;
    uint cs = tsr_bsr_count(plan, mem + (w - origin), &elems);
    if (cs != TSR_HWERR_OK) {
      tsr_refuse(regs, index, TSR_CL_LOG_BSR_COUNT, plan, cs);
      return;
    }
    ulong t_len = (ulong)tsr_le32(plan + TSR_DESC_BSR_NNZ) * TSR_HW_BSR_BN * tsr_bsr_bk(plan);
    if (!tsr_inside(a, (m - 1) * lda + k, origin, phys) ||
        !tsr_inside(tsr_bsr_tiles(plan), t_len, origin, phys) ||
        !tsr_inside(c, (m - 1) * ldc + 4ul * n, origin, phys)) {
      tsr_refuse(regs, index, TSR_CL_LOG_REFUSED, 0, TSR_HWERR_AXI_ERROR);
      return;
    }
    tsr_accept(regs, index, TSR_CL_LOG_BSR, plan, (ulong)m * n * 4, (ulong)m * elems,
               TSR_OP_GEMM_BSR_I8_I32);
    return;
  }
  if (!tsr_inside(a, (m - 1) * lda + k, origin, phys) ||
      !tsr_inside(w, tsr_w_len(plan), origin, phys) ||
      !tsr_inside(c, (m - 1) * ldc + 4ul * n, origin, phys)) {
    tsr_refuse(regs, index, TSR_CL_LOG_REFUSED, 0, TSR_HWERR_AXI_ERROR);
    return;
  }
  tsr_accept(regs, index, TSR_CL_LOG_GEMM, plan, (ulong)m * n * 4, (ulong)m * n * k,
             TSR_OP_GEMM_I8_I32);
}

static int tsr_hsum16(int16 v) {
  int8 a = v.lo + v.hi;
  int4 b = a.lo + a.hi;
  int2 c = b.lo + b.hi;
  return c.x + c.y;
}

/* GEMM_BSR: work-item blocks of RM x RN outputs inside one tile row (RN
 * divides BN); each finds its tile row's first stored tile by counting the
 * bitmaps before it, then reduces over the stored tiles only (a tile row
 * without one gives zeros). */
static void tsr_gemm_bsr(__global uchar *mem, __global uint *regs) {
  __global const uchar *d = (__global const uchar *)regs + TSR_CL_DESC;
  ulong origin = TSR_U64(TSR_CL_ORIGIN);
  uint M = tsr_le32(d + TSR_DESC_M), N = tsr_le32(d + TSR_DESC_N);
  uint K = tsr_le32(d + TSR_DESC_K);
  ulong lda = tsr_le32(d + TSR_DESC_LDA), ldc = tsr_le32(d + TSR_DESC_LDC);
  ulong ldb = tsr_le32(d + TSR_DESC_BSR_LDB);
  uint nkt = tsr_bsr_ktiles(d), rb = (nkt + 7) / 8, bk = tsr_bsr_bk(d);
  __global const char *A = (__global const char *)(mem + (tsr_le64(d + TSR_DESC_A_ADDR) - origin));
  __global const uchar *BM = mem + (tsr_le64(d + TSR_DESC_W_ADDR) - origin);
  __global const char *T = (__global const char *)(mem + (tsr_bsr_tiles(d) - origin));
  __global uchar *C = mem + (tsr_le64(d + TSR_DESC_C_ADDR) - origin);
  const uint per_row = TSR_HW_BSR_BN / TSR_RN;
  uint bm_n = (M + TSR_RM - 1) / TSR_RM, bn_n = tsr_bsr_rows(d) * per_row;
  ulong blocks = (ulong)bm_n * bn_n;
  for (ulong b = get_global_id(0); b < blocks; b += get_global_size(0)) {
    uint m0 = (uint)(b / bn_n) * TSR_RM, nb = (uint)(b % bn_n);
    uint tr = nb / per_row, jr = (nb % per_row) * TSR_RN, n0 = tr * TSR_HW_BSR_BN + jr;
    if (n0 >= N) continue;
    ulong idx = 0; /* stored tiles before tile row tr */
    for (uint r = 0; r < tr; r++)
      for (uint x = 0; x < rb; x++) idx += popcount((uint)BM[(ulong)r * ldb + x]);
    __global const uchar *row = BM + (ulong)tr * ldb;
    int acc[TSR_RM][TSR_RN];
    for (int i = 0; i < TSR_RM; i++)
      for (int j = 0; j < TSR_RN; j++) acc[i][j] = 0;
    for (uint x = 0; x < nkt; x++) {
      if (!((row[x / 8] >> (x % 8)) & 1)) continue;
      uint k0 = x * bk, kl = min(bk, K - k0);
      __global const char *tile = T + idx * (TSR_HW_BSR_BN * bk);
      idx++;
      for (int i = 0; i < TSR_RM; i++) {
        __global const char *ar = A + (ulong)min(m0 + i, M - 1) * lda + k0;
        for (int j = 0; j < TSR_RN; j++) {
          __global const char *wr = tile + (jr + j) * bk;
          int16 v = (int16)(0);
          uint kk = 0;
          for (; kk + 16 <= kl; kk += 16)
            v += convert_int16(vload16(0, ar + kk)) * convert_int16(vload16(0, wr + kk));
          int s = tsr_hsum16(v);
          for (; kk < kl; kk++) s += (int)ar[kk] * (int)wr[kk];
          acc[i][j] += s;
        }
      }
    }
    for (int i = 0; i < TSR_RM; i++) {
      if (m0 + i >= M) break;
      for (int j = 0; j < TSR_RN; j++) {
        if (n0 + j >= N) break;
        *(__global int *)(C + (ulong)(m0 + i) * ldc + 4ul * (n0 + j)) = acc[i][j];
      }
    }
  }
}

__kernel void tsr_gemm(ulong mem_base, ulong mem_size, ulong ring, uint n_desc,
                       __global uchar *mem, __global uint *regs) {
  if (TSR_U32(TSR_CL_PLAN) == TSR_OP_GEMM_BSR_I8_I32) {
    tsr_gemm_bsr(mem, regs);
    return;
  }
  if (TSR_U32(TSR_CL_PLAN) != TSR_OP_GEMM_I8_I32) return;
  __global const uchar *d = (__global const uchar *)regs + TSR_CL_DESC;
  ulong origin = TSR_U64(TSR_CL_ORIGIN);
  uint M = tsr_le32(d + TSR_DESC_M), N = tsr_le32(d + TSR_DESC_N);
  uint K = tsr_le32(d + TSR_DESC_K);
  ulong lda = tsr_le32(d + TSR_DESC_LDA);
  ulong ldc = tsr_le32(d + TSR_DESC_LDC);
  __global const char *A = (__global const char *)(mem + (tsr_le64(d + TSR_DESC_A_ADDR) - origin));
  __global const char *W = (__global const char *)(mem + (tsr_le64(d + TSR_DESC_W_ADDR) - origin));
  __global uchar *C = mem + (tsr_le64(d + TSR_DESC_C_ADDR) - origin);

  uint bm_n = (M + TSR_RM - 1) / TSR_RM, bn_n = (N + TSR_RN - 1) / TSR_RN;
  ulong blocks = (ulong)bm_n * bn_n;
  uint K16 = K & ~15u;
  for (ulong b = get_global_id(0); b < blocks; b += get_global_size(0)) {
    uint m0 = (uint)(b / bn_n) * TSR_RM, n0 = (uint)(b % bn_n) * TSR_RN;
    /* Rows past the edge re-read the last row and are not stored. */
    __global const char *ar[TSR_RM];
    __global const char *wr[TSR_RN];
    for (int i = 0; i < TSR_RM; i++) ar[i] = A + (ulong)min(m0 + i, M - 1) * lda;
    for (int j = 0; j < TSR_RN; j++) wr[j] = W + tsr_w_row(d, min(n0 + j, N - 1));
    int16 acc[TSR_RM][TSR_RN];
    for (int i = 0; i < TSR_RM; i++)
      for (int j = 0; j < TSR_RN; j++) acc[i][j] = (int16)(0);
    for (uint k = 0; k < K16; k += 16) {
      int16 av[TSR_RM], wv[TSR_RN];
      for (int i = 0; i < TSR_RM; i++) av[i] = convert_int16(vload16(0, ar[i] + k));
      for (int j = 0; j < TSR_RN; j++) wv[j] = convert_int16(vload16(0, wr[j] + k));
      for (int i = 0; i < TSR_RM; i++)
        for (int j = 0; j < TSR_RN; j++) acc[i][j] += av[i] * wv[j];
    }
    for (int i = 0; i < TSR_RM; i++) {
      if (m0 + i >= M) break;
      for (int j = 0; j < TSR_RN; j++) {
        if (n0 + j >= N) break;
        int s = tsr_hsum16(acc[i][j]);
        for (uint k = K16; k < K; k++) s += (int)ar[i][k] * (int)wr[j][k];
        *(__global int *)(C + (ulong)(m0 + i) * ldc + 4ul * (n0 + j)) = s;
      }
    }
  }
}
