// tsr_regs_pkg.svh - GENERATED from hw/regmap.def by scripts/gen_regs_svh.py.
// Do not edit: run `make regmap`. `make regmap-check` fails when this file
// differs from what the generator produces.
//
// `include this inside a module body; names match driver/tsr_regmap.h.
/* verilator lint_off UNUSEDPARAM */
localparam logic [11:0] TSR_REG_CTRL = 12'h000;  // bit0 ap_start (W1S, self-clearing on ap_ready), bit1 ap_done (COR), bit2 ap_idle, bit3 ap_ready (COR), bit4 ap_continue (W1S), bit7 auto_restart
localparam logic [11:0] TSR_REG_GIE = 12'h004;  // bit0 global interrupt enable
localparam logic [11:0] TSR_REG_IER = 12'h008;  // bit0 ap_done interrupt enable, bit1 ap_ready interrupt enable
localparam logic [11:0] TSR_REG_ISR = 12'h00c;  // bit0 ap_done interrupt status, bit1 ap_ready interrupt status (toggle on write 1)
localparam logic [11:0] TSR_ARG_MEM_BASE = 12'h010;  // base device address of the buffer window the kernel may touch
localparam int TSR_ARG_MEM_BASE_BITS = 64;
localparam logic [11:0] TSR_ARG_MEM_SIZE = 12'h01c;  // size in bytes of that window
localparam int TSR_ARG_MEM_SIZE_BITS = 64;
localparam logic [11:0] TSR_ARG_RING = 12'h028;  // device address of the first descriptor (must lie in the window)
localparam int TSR_ARG_RING_BITS = 64;
localparam logic [11:0] TSR_ARG_N_DESC = 12'h034;  // number of descriptors to run (queue mode: slots of the ring)
localparam int TSR_ARG_N_DESC_BITS = 32;
localparam logic [11:0] TSR_REG_Q_CTRL = 12'h038;  // bit0 queue mode (taken at ap_start): descriptor i is at RING + (i mod N_DESC)*64 and runs once Q_TAIL > i; bit1 close (read live): when every published descriptor has run, the kernel finishes (ap_done)
localparam logic [11:0] TSR_REG_Q_TAIL = 12'h03c;  // queue mode: descriptors published since ap_start (the doorbell; raised by the host while the kernel runs, at most N_DESC past DESC_DONE)
localparam logic [11:0] TSR_STAT_STATUS = 12'h040;  // 0 = ok, else a TSR_HWERR code; sticky until next ap_start
localparam int TSR_STAT_STATUS_BITS = 32;
localparam logic [11:0] TSR_STAT_ERR_INDEX = 12'h044;  // index of the descriptor that failed
localparam int TSR_STAT_ERR_INDEX_BITS = 32;
localparam logic [11:0] TSR_STAT_DESC_DONE = 12'h048;  // descriptors completed in the last run
localparam int TSR_STAT_DESC_DONE_BITS = 32;
localparam logic [11:0] TSR_STAT_HW_INFO = 12'h04c;  // bits 7:0 array rows, 15:8 array cols, 23:16 interface version, 31:24 read ports (memory channels)
localparam int TSR_STAT_HW_INFO_BITS = 32;
localparam logic [11:0] TSR_STAT_CYC_BUSY = 12'h050;  // cycles from ap_start to ap_done, less those a queue waited for its doorbell (live while running)
localparam int TSR_STAT_CYC_BUSY_BITS = 64;
localparam logic [11:0] TSR_STAT_CYC_STALL = 12'h058;  // cycles the compute array waited for memory
localparam int TSR_STAT_CYC_STALL_BITS = 64;
localparam logic [11:0] TSR_STAT_BYTES_RD = 12'h060;  // bytes read from device memory
localparam int TSR_STAT_BYTES_RD_BITS = 64;
localparam logic [11:0] TSR_STAT_BYTES_WR = 12'h068;  // bytes written to device memory
localparam int TSR_STAT_BYTES_WR_BITS = 64;
localparam logic [11:0] TSR_STAT_MACS = 12'h070;  // useful multiply-accumulates done (M*N*K per tile)
localparam int TSR_STAT_MACS_BITS = 64;
localparam logic [11:0] TSR_STAT_HW_OPS = 12'h078;  // bit i set: this build runs opcode i (a TSR_OP value); an opcode it lacks is refused with BAD_OPCODE
localparam int TSR_STAT_HW_OPS_BITS = 32;
localparam logic [11:0] TSR_STAT_HW_FEAT = 12'h07c;  // interface version 4 on: bit0 the build runs queue mode (Q_CTRL, Q_TAIL); other bits 0
localparam int TSR_STAT_HW_FEAT_BITS = 32;
localparam int TSR_DESC_OPCODE = 0;  // byte offset, 32 bits: a TSR_OP value
localparam int TSR_DESC_OPCODE_BITS = 32;
localparam int TSR_DESC_FLAGS = 4;  // byte offset, 32 bits: reserved, must be 0
localparam int TSR_DESC_FLAGS_BITS = 32;
localparam int TSR_DESC_M = 8;  // byte offset, 32 bits: rows of A and C, 1..MAX_DIM
localparam int TSR_DESC_M_BITS = 32;
localparam int TSR_DESC_N = 12;  // byte offset, 32 bits: rows of W = columns of C, 1..MAX_DIM
localparam int TSR_DESC_N_BITS = 32;
localparam int TSR_DESC_K = 16;  // byte offset, 32 bits: reduction length, 1..MAX_DIM
localparam int TSR_DESC_K_BITS = 32;
localparam int TSR_DESC_LDA = 20;  // byte offset, 32 bits: bytes between rows of A, >= K
localparam int TSR_DESC_LDA_BITS = 32;
localparam int TSR_DESC_LDW = 24;  // byte offset, 32 bits: bytes between rows of W, >= K
localparam int TSR_DESC_LDW_BITS = 32;
localparam int TSR_DESC_LDC = 28;  // byte offset, 32 bits: bytes between rows of C, >= 4*N, multiple of 4
localparam int TSR_DESC_LDC_BITS = 32;
localparam int TSR_DESC_A_ADDR = 32;  // byte offset, 64 bits: device address of A[0][0] (int8, M x K)
localparam int TSR_DESC_A_ADDR_BITS = 64;
localparam int TSR_DESC_W_ADDR = 40;  // byte offset, 64 bits: device address of W[0][0] (int8, N x K)
localparam int TSR_DESC_W_ADDR_BITS = 64;
localparam int TSR_DESC_C_ADDR = 48;  // byte offset, 64 bits: device address of C[0][0] (int32, M x N), 4-byte aligned
localparam int TSR_DESC_C_ADDR_BITS = 64;
localparam int TSR_DESC_W_NCH = 56;  // byte offset, 32 bits: memory channels W is striped over: 0 or 1 = one (row n at W_ADDR + n*LDW), else the kernel's read ports P (row n at W_ADDR + (n % P)*W_CSTRIDE + (n / P)*LDW, read through port n % P)
localparam int TSR_DESC_W_NCH_BITS = 32;
localparam int TSR_DESC_W_CSTRIDE = 60;  // byte offset, 32 bits: bytes from the rows of one channel to those of the next; 0 unless W_NCH > 1
localparam int TSR_DESC_W_CSTRIDE_BITS = 32;
localparam int TSR_DESC_BSR_LDB = 24;  // byte offset, 32 bits: GEMM_BSR: bytes between the bitmaps of two tile rows, >= ceil(ceil(K/BK)/8) (bit t of a row, byte t/8 LSB first = k tile t is stored)
localparam int TSR_DESC_BSR_LDB_BITS = 32;
localparam int TSR_DESC_BSR_BLOCK = 56;  // byte offset, 32 bits: GEMM_BSR: tile shape, BN (bits 31:16) x BK (bits 15:0); BN must be BSR_BN, BK BSR_BK_MIN or BSR_BK_MAX
localparam int TSR_DESC_BSR_BLOCK_BITS = 32;
localparam int TSR_DESC_BSR_NNZ = 60;  // byte offset, 32 bits: GEMM_BSR: tiles stored (BN*BK bytes each, tile rows in order, k order inside a row); must equal the bitmap's popcount
localparam int TSR_DESC_BSR_NNZ_BITS = 32;
localparam int TSR_HW_DESC_BYTES = 64;  // size of one descriptor
localparam int TSR_HW_MAX_DIM = 65535;  // largest M, N or K
localparam int TSR_HW_IF_VERSION = 4;  // interface version reported in HW_INFO (2: W_NCH/W_CSTRIDE, read ports in HW_INFO; 3: HW_OPS; 4: HW_FEAT, queue mode)
localparam int TSR_HW_Q_CTRL_QUEUE = 1;  // Q_CTRL bit: queue mode
localparam int TSR_HW_Q_CTRL_CLOSE = 2;  // Q_CTRL bit: close the queue
localparam int TSR_HW_FEAT_QUEUE = 1;  // HW_FEAT bit: queue mode
localparam int TSR_HW_CTRL_BYTES = 128;  // size of the AXI4-Lite register window
localparam int TSR_HW_BSR_BN = 16;  // GEMM_BSR: rows of W (output columns) per tile
localparam int TSR_HW_BSR_BK_MIN = 64;  // GEMM_BSR: the smaller BK, k bytes per tile (one bus word per W row)
localparam int TSR_HW_BSR_BK_MAX = 128;  // GEMM_BSR: the larger BK (two bus words per W row)
localparam logic [31:0] TSR_OP_NOP = 32'd0;  // does nothing, counts as done
localparam logic [31:0] TSR_OP_GEMM_I8_I32 = 32'd1;  // C[m][n] = sum_k A[m][k] * W[n][k]; int8 x int8 -> int32
localparam logic [31:0] TSR_OP_GEMM_BSR_I8_I32 = 32'd2;  // the same product with W block-sparse: a bitmap of stored BN x BK tiles per tile row, absent tiles are zeros
localparam logic [31:0] TSR_HWERR_OK = 32'd0;  // no error
localparam logic [31:0] TSR_HWERR_BAD_OPCODE = 32'd1;  // unknown opcode (or one this kernel build lacks) or non-zero FLAGS
localparam logic [31:0] TSR_HWERR_BAD_DIMS = 32'd2;  // M, N or K is 0 or above MAX_DIM
localparam logic [31:0] TSR_HWERR_BAD_STRIDE = 32'd3;  // LDA < K, LDW < K, LDC < 4*N, LDC/C_ADDR not 4-byte aligned, W_NCH not 0, 1 or the read ports, or W_CSTRIDE != 0 with one channel; GEMM_BSR: BSR_LDB below a bitmap row
localparam logic [31:0] TSR_HWERR_ADDR_RANGE = 32'd4;  // an operand reaches outside [MEM_BASE, MEM_BASE+MEM_SIZE)
localparam logic [31:0] TSR_HWERR_RING_RANGE = 32'd5;  // the ring (RING + N_DESC*64) reaches outside the window, or RING is not 64-byte aligned
localparam logic [31:0] TSR_HWERR_AXI_ERROR = 32'd6;  // the memory returned SLVERR/DECERR
localparam logic [31:0] TSR_HWERR_BAD_BLOCK = 32'd7;  // GEMM_BSR: BSR_BLOCK is not BSR_BN x BSR_BK_MIN or BSR_BN x BSR_BK_MAX
localparam logic [31:0] TSR_HWERR_BAD_COUNT = 32'd8;  // GEMM_BSR: the bitmap's popcount differs from BSR_NNZ, or a bit past a row's last k tile is set
localparam logic [31:0] TSR_HWERR_QUEUE_TAIL = 32'd9;  // queue mode: Q_TAIL ran more than N_DESC past the descriptors done, or went back (ERR_INDEX: the next descriptor)
/* verilator lint_on UNUSEDPARAM */
