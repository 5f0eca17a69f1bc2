// tsr_desc_unit - the run sequencer: ring check, descriptor fetch, the
// descriptor checks, and the barrier between descriptors.
//
// One start walks the ring: descriptor i is fetched (one 64-byte segment
// through the read master), checked in three cycles (products, sums,
// compares; no operand access for a descriptor that fails), handed to the
// loader (exec_o), and followed by a barrier (every result written, nothing
// in flight) before descriptor i+1. The first failure stops the run with
// STATUS and ERR_INDEX; MACS and DESC_DONE count completed descriptors.
//
// Queue mode (queue_i at start): n_desc_i is the ring's slot count S and
// descriptor i (counted from the start, mod 2^32) is in slot i mod S. Before
// descriptor i is fetched (after the ring check, after each barrier) the
// live Q_TAIL decides: Q_TAIL - i == 0 finishes the run if close is set and
// otherwise waits in RQWait, looking again every cycle (q_wait_o: those
// cycles are not busy); Q_TAIL - i > S ends the run with QUEUE_TAIL at
// ERR_INDEX i; else descriptor i is fetched. Descriptor i+1 is fetched only
// after descriptor i's barrier, so the host may fill a slot before it raises
// Q_TAIL past it.
//
// A GEMM_BSR descriptor that passes the checks has its bitmap rows read
// (one segment each) and counted as they arrive, then row 0 once more into
// the loader's walk entry 0; once every read has arrived the count decides
// (BAD_COUNT, or the loader starts). The count also sums the stored tiles'
// elements inside N x K for MACS.
module tsr_desc_unit #(
  parameter int Cols      = 16,  // array columns (GEMV choice)
  parameter int DataBytes = 64,  // AXI data bus bytes
  parameter int NumPorts  = 1,   // read ports (memory channels), power of two
  parameter int Bsr       = 1    // 1: GEMM_BSR_I8_I32 is implemented (needs DataBytes 64)
) (
  input  logic         clk_i,          // clock
  input  logic         rst_ni,         // asynchronous reset, active low
  input  logic         start_i,        // pulse: run the ring
  input  logic [63:0]  mem_base_i,     // window base
  input  logic [63:0]  mem_size_i,     // window size
  input  logic [63:0]  ring_i,         // first descriptor
  input  logic [31:0]  n_desc_i,       // descriptors (queue mode: ring slots)
  input  logic         queue_i,        // with start_i: queue mode
  input  logic         q_close_i,      // queue mode: close (live)
  input  logic [31:0]  q_tail_i,       // queue mode: Q_TAIL (live)
  // descriptor fetch through the read master
  output logic         fetch_valid_o,  // a descriptor segment is offered
  output logic [63:0]  fetch_addr_o,   // its address
  output logic [7:0]   fetch_len_o,    // its bytes
  output logic [7:0]   fetch_bank_o,   // BankDesc, BankCount or BankWalk (tsr_dest.svh)
  input  logic         fetch_ready_i,  // the read master takes it
  input  logic         desc_we_i,      // a descriptor word arrives
  input  logic         bm_we_i,        // a word of a bitmap row to count arrives
  input  logic         bm_word_i,      // index in its row of the bitmap word arriving
  output logic [511:0] bm_kmask_o,     // bits of that word inside the row's k tiles
  input  logic [511:0] desc_word_i,    // that word
  input  logic         reads_idle_i,   // every issued segment has arrived
  input  logic         axi_err_i,      // pulse: an error response on either master
  // the engines
  output logic         exec_o,         // pulse: the loader starts this descriptor
  output logic         gemv_o,         // with exec_o: GEMV mode
  input  logic         loader_idle_i,  // the loader has issued every step
  input  logic         barrier_ok_i,   // nothing pending anywhere
  output logic         running_o,      // between start and done
  output logic         executing_o,    // a GEMM descriptor is under way
  output logic         q_wait_o,       // queue mode: waiting for the doorbell
  // the current descriptor (valid from exec_o to the barrier)
  output logic [15:0]  m_o,            // M
  output logic [15:0]  n_o,            // N
  output logic [15:0]  k_o,            // K
  output logic [31:0]  lda_o,          // LDA
  output logic [31:0]  ldw_o,          // LDW
  output logic [31:0]  ldc_o,          // LDC
  output logic [63:0]  a_addr_o,       // A_ADDR
  output logic [63:0]  w_addr_o,       // W_ADDR
  output logic [63:0]  c_addr_o,       // C_ADDR
  output logic         striped_o,      // W striped over the NumPorts channels
  output logic [31:0]  w_cstride_o,    // W_CSTRIDE
  output logic         bsr_o,          // a GEMM_BSR descriptor
  output logic         bk128_o,        // GEMM_BSR: BK = 128 (else 64)
  output logic [7:0]   rb_o,           // GEMM_BSR: bytes of a bitmap row
  output logic [63:0]  tiles_o,        // GEMM_BSR: the first stored tile
  output logic [63:0]  win_base_o,     // window of the run (assertions)
  output logic [64:0]  win_end_o,      // window end, 65 bits
  // results of the run
  output logic         done_o,         // pulse: run finished
  output logic [31:0]  status_o,       // TSR_HWERR_* of the run
  output logic [31:0]  err_index_o,    // failing descriptor
  output logic [31:0]  desc_done_o,    // descriptors completed
  output logic [63:0]  macs_o          // M*N*K of completed descriptors
);
`include "tsr_regs_pkg.svh"
`include "tsr_dest.svh"

  typedef enum logic [3:0] {
    RIdle, RRing, RQWait, RFetch, RFWait, RChk1, RChk2, RChk3, RBmIss, RBmWait, RBmChk, RExec,
    RBar, RFin
  } run_e;

  run_e        st_q, st_d;
  logic [63:0] base_q, base_d, ring_q, ring_d, dptr_q, dptr_d;
  logic [31:0] ndesc_q, ndesc_d, di_q, di_d;
  logic [31:0] status_q, status_d, err_index_q, err_index_d, desc_done_q, desc_done_d;
  logic [63:0] macs_q, macs_d;
  logic        axi_err_q, axi_err_d, done_q, done_d;
  logic        queue_q, queue_d;
  logic [64:0] win_end_q, win_end_d;
  logic [511:0] dword_q;

  // Descriptor fields.
  logic [31:0] d_op, d_flags, d_m, d_n, d_k, d_lda, d_ldw, d_ldc;
  logic [63:0] d_a, d_w, d_c;
  logic [31:0] d_nch, d_cstride;
  assign d_op    = dword_q[TSR_DESC_OPCODE*8 +: 32];
  assign d_flags = dword_q[TSR_DESC_FLAGS*8 +: 32];
  assign d_m     = dword_q[TSR_DESC_M*8 +: 32];
  assign d_n     = dword_q[TSR_DESC_N*8 +: 32];
  assign d_k     = dword_q[TSR_DESC_K*8 +: 32];
  assign d_lda   = dword_q[TSR_DESC_LDA*8 +: 32];
  assign d_ldw   = dword_q[TSR_DESC_LDW*8 +: 32];
  assign d_ldc   = dword_q[TSR_DESC_LDC*8 +: 32];
  assign d_a     = dword_q[TSR_DESC_A_ADDR*8 +: 64];
  assign d_w     = dword_q[TSR_DESC_W_ADDR*8 +: 64];
  assign d_c     = dword_q[TSR_DESC_C_ADDR*8 +: 64];
  assign d_nch     = dword_q[TSR_DESC_W_NCH*8 +: 32];
  assign d_cstride = dword_q[TSR_DESC_W_CSTRIDE*8 +: 32];

  // W striped over the channels: row n at W + (n % P)*W_CSTRIDE + (n / P)*LDW.
  localparam int LogPorts = $clog2(NumPorts);
  logic striped, nch_bad, is_bsr;
  assign is_bsr  = (d_op == TSR_OP_GEMM_BSR_I8_I32);
  assign striped = !is_bsr && (d_nch > 32'd1);
  assign nch_bad = striped ? (d_nch != 32'(NumPorts)) : (d_cstride != 32'd0);

  logic [15:0] m16, n16, k16;
  assign m16 = d_m[15:0];
  assign n16 = d_n[15:0];
  assign k16 = d_k[15:0];

  // GEMM_BSR geometry: BSR_BLOCK (W_NCH) is 16 << 16 | BK, BSR_NNZ is W_CSTRIDE.
  logic        block_ok, bk128;
  logic [10:0] nkt;        // k tiles of a tile row, <= 1024
  logic [7:0]  rb;         // bitmap row bytes, <= 128
  logic [12:0] ntr;        // tile rows, <= 4096
  logic [4:0]  nlast;      // W rows of the last tile row, 1 .. 16
  logic [7:0]  padk;       // bytes of the last k tile past K
  assign block_ok = (d_nch == {16'(TSR_HW_BSR_BN), 16'(TSR_HW_BSR_BK_MIN)}) ||
                    (d_nch == {16'(TSR_HW_BSR_BN), 16'(TSR_HW_BSR_BK_MAX)});
  assign bk128 = d_nch[7];
  assign nkt   = bk128 ? 11'((17'(k16) + 17'd127) >> 7) : 11'((17'(k16) + 17'd63) >> 6);
  assign rb    = 8'((12'(nkt) + 12'd7) >> 3);
  assign ntr   = 13'((17'(n16) + 17'd15) >> 4);
  assign nlast = 5'(n16[3:0]) + ((n16[3:0] == 4'd0) ? 5'd16 : 5'd0);
  assign padk  = 8'((bk128 ? {nkt, 7'd0} : {1'b0, nkt, 6'd0}) - 18'(k16));

  // Check pipeline: products (RChk1), extents (RChk2), compares (RChk3).
  logic [47:0] pa_q, pa_d, pw_q, pw_d, pc_q, pc_d, mnk_q, mnk_d, pch_q, pch_d;
  logic [15:0] wrows;                     // rows of W in the fullest channel, - 1
  assign wrows = striped ? 16'(16'(n16 - 16'd1) >> LogPorts) : 16'(n16 - 16'd1);
  logic [31:0] mn_q, mn_d;
  logic [64:0] a_end_q, a_end_d, w_end_q, w_end_d, c_end_q, c_end_d;
  logic [64:0] ts_q, ts_d;                // GEMM_BSR: bitmaps' end + 63
  logic [47:0] tb_q, tb_d;                // GEMM_BSR: bytes of the stored tiles
  logic [64:0] tiles_end;
  logic [31:0] chk_err;
  logic        is_nop, op_ok;
  assign tiles_end = {ts_q[64:6], 6'd0} + 65'(tb_q);
  assign op_ok = (d_op == TSR_OP_NOP) || (d_op == TSR_OP_GEMM_I8_I32) || (Bsr != 0 && is_bsr);

  always_comb begin
    chk_err = TSR_HWERR_OK;
    if (!op_ok || d_flags != 32'd0) begin
      chk_err = TSR_HWERR_BAD_OPCODE;
    end else if (d_op != TSR_OP_NOP) begin
      if (d_m == 32'd0 || d_n == 32'd0 || d_k == 32'd0 || d_m > TSR_HW_MAX_DIM ||
          d_n > TSR_HW_MAX_DIM || d_k > TSR_HW_MAX_DIM) begin
        chk_err = TSR_HWERR_BAD_DIMS;
      end else if (is_bsr && !block_ok) begin
        chk_err = TSR_HWERR_BAD_BLOCK;
      end else if (d_lda < d_k || {2'b00, d_ldc} < {d_n, 2'b00} ||
                   d_ldc[1:0] != 2'b00 || d_c[1:0] != 2'b00 ||
                   (is_bsr ? (d_ldw < 32'(rb)) : (d_ldw < d_k || nch_bad))) begin
        chk_err = TSR_HWERR_BAD_STRIDE;
      end else if ({1'b0, d_a} < {1'b0, base_q} || a_end_q > win_end_q ||
                   {1'b0, d_w} < {1'b0, base_q} || w_end_q > win_end_q ||
                   {1'b0, d_c} < {1'b0, base_q} || c_end_q > win_end_q ||
                   (is_bsr && tiles_end > win_end_q)) begin
        chk_err = TSR_HWERR_ADDR_RANGE;
      end
    end
  end

  // GEMM_BSR count, on the bitmap words as they arrive: bits of k tiles in
  // the row are counted, a set bit past the last k tile (inside the row's
  // bytes) is an error, bytes past the row are not the bitmap's.
  logic [12:0]  bm_iss_q, bm_iss_d;       // bitmap segments issued
  logic [63:0]  bm_ptr_q, bm_ptr_d;       // the next one's address
  logic [12:0]  bm_row_q;                 // rows counted
  logic [10:0]  bm_rcnt_q;                // stored tiles of the row so far
  logic [31:0]  bm_cnt_q;                 // stored tiles so far
  logic         bm_bad_q;                 // a bit past K
  logic         bm_lb_q;                  // the row's last k tile is stored
  logic [47:0]  bm_elems_q;               // sum over rows of W rows x k bytes stored
  logic [10:0]  vbits;                    // bits of k tiles in the word arriving
  logic [6:0]   vbytes;                   // bytes of the row in it
  logic [511:0] kmask, bmask;
  logic [9:0]   bmw_pc_q;                 // the last word's k tiles stored
  logic         bmw_lb_q;                 // its bit of the row's last k tile
  logic         bmw_v_q, bmw_word_q;      // it is to be counted; its index in the row
  logic         bm_lb, row_end;
  logic [10:0]  row_tiles;
  logic [18:0]  row_k;                    // k bytes stored in the row
  logic [23:0]  row_elems;
  // the word arriving: its k tiles' bits (also the loader's mask)
  assign vbits  = bm_word_i ? ((nkt > 11'd512) ? nkt - 11'd512 : 11'd0)
                            : ((nkt > 11'd512) ? 11'd512 : nkt);
  assign vbytes = bm_word_i ? ((rb > 8'd64) ? 7'(rb - 8'd64) : 7'd0)
                            : ((rb > 8'd64) ? 7'd64 : 7'(rb));
  // Thermometer masks, bit i set when i < vbits (byte b when b < vbytes):
  // bit 32h + l from vbits' high part compared with h and, when equal, its
  // low part with l (no shifter and no 512-bit subtraction).
  logic [15:0] kgt_h, keq_h;
  logic [31:0] kgt_l;
  logic [63:0] bgt;
  for (genvar h = 0; h < 16; h++) begin : g_kh
    assign kgt_h[h] = vbits[10:5] > 6'(h);
    assign keq_h[h] = vbits[10:5] == 6'(h);
  end
  for (genvar l = 0; l < 32; l++) begin : g_kl
    assign kgt_l[l] = {1'b0, vbits[4:0]} > 6'(l);
  end
  for (genvar i = 0; i < 512; i++) begin : g_kmask
    assign kmask[i] = kgt_h[i/32] || (keq_h[i/32] && kgt_l[i%32]);
  end
  for (genvar b = 0; b < 64; b++) begin : g_bmask
    assign bgt[b] = vbytes > 7'(b);
    assign bmask[b*8 +: 8] = {8{bgt[b]}};
  end
  // the registered word, counted a cycle after it arrived
  // the row's last k tile lies in word (nkt - 1) / 512
  assign bm_lb     = (bmw_word_q == (nkt > 11'd512)) ? bmw_lb_q : bm_lb_q;
  assign row_end   = bmw_word_q == (rb > 8'd64);
  assign row_tiles = bm_rcnt_q + 11'(bmw_pc_q);
  assign row_k     = (bk128 ? {1'b0, row_tiles, 7'd0} : {2'b00, row_tiles, 6'd0}) -
                     (bm_lb ? 19'(padk) : 19'd0);
  assign row_elems = 24'(row_k) * ((bm_row_q + 13'd1 == ntr) ? 24'(nlast) : 24'd16);

  // bits set in each 6-bit value, 4 bits a value
  localparam logic [255:0] Pop6 = 256'h6554_5443_5443_4332_5443_4332_4332_3221_5443_4332_4332_3221_4332_3221_3221_2110;
  // the count of the word arriving, registered (a loop in a clocked block:
  // the one form iverilog settles without re-running the design)
  always_ff @(posedge clk_i) begin
    if (bm_we_i) begin
      // a tree: the counts of 6-bit groups from a table (a LUT6 per count
      // bit), then pairs added (a chain of 512 adders would cost a 10-bit
      // adder per bit)
      logic [515:0] mw;
      logic [257:0] p6;    // 86 counts of 6 bits, 3 bits each
      logic [175:0] s1;    // 44 x 4 bits (the last one 0)
      logic [109:0] s2;    // 22 x 5
      logic [65:0]  s3;    // 11 x 6
      logic [41:0]  s4;    // 6 x 7 (the last one 0)
      logic [23:0]  s5;    // 3 x 8
      mw = {4'd0, desc_word_i & kmask};
      for (int g = 0; g < 86; g++) p6[g*3 +: 3] = Pop6[{mw[g*6 +: 6], 2'b00} +: 3];
      s1 = '0;
      for (int i = 0; i < 43; i++) s1[i*4 +: 4] = 4'(p6[6*i +: 3]) + 4'(p6[6*i+3 +: 3]);
      for (int i = 0; i < 22; i++) s2[i*5 +: 5] = 5'(s1[8*i +: 4]) + 5'(s1[8*i+4 +: 4]);
      for (int i = 0; i < 11; i++) s3[i*6 +: 6] = 6'(s2[10*i +: 5]) + 6'(s2[10*i+5 +: 5]);
      s4 = '0;
      for (int i = 0; i < 5; i++) s4[i*7 +: 7] = 7'(s3[12*i +: 6]) + 7'(s3[12*i+6 +: 6]);
      s4[35 +: 7] = 7'(s3[60 +: 6]);
      for (int i = 0; i < 3; i++) s5[i*8 +: 8] = 8'(s4[14*i +: 7]) + 8'(s4[14*i+7 +: 7]);
      bmw_pc_q   <= 10'(s5[7:0]) + 10'(s5[15:8]) + 10'(s5[23:16]);
      bmw_lb_q   <= desc_word_i[9'(nkt - 11'd1)];
      bmw_word_q <= bm_word_i;
    end
  end
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      bm_row_q <= '0; bm_rcnt_q <= '0; bm_cnt_q <= '0; bm_bad_q <= 1'b0; bm_lb_q <= 1'b0;
      bm_elems_q <= '0; bmw_v_q <= 1'b0;
    end else if (st_q == RChk3) begin
      bm_row_q <= '0; bm_rcnt_q <= '0; bm_cnt_q <= '0; bm_bad_q <= 1'b0; bm_lb_q <= 1'b0;
      bm_elems_q <= '0; bmw_v_q <= 1'b0;
    end else begin
      bmw_v_q <= bm_we_i;
      if (bm_we_i && (desc_word_i & bmask & ~kmask) != '0) bm_bad_q <= 1'b1;
      if (bmw_v_q) begin
        bm_cnt_q <= bm_cnt_q + 32'(bmw_pc_q);
        if (row_end) begin
          bm_row_q   <= bm_row_q + 13'd1;
          bm_rcnt_q  <= '0;
          bm_lb_q    <= 1'b0;
          bm_elems_q <= bm_elems_q + 48'(row_elems);
        end else begin
          bm_rcnt_q <= row_tiles;
          bm_lb_q   <= bm_lb;
        end
      end
    end
  end
  assign is_nop = (d_op == TSR_OP_NOP);

  // Ring check.
  logic [64:0] ring_end;
  logic        ring_bad;
  assign ring_end = {1'b0, ring_q} + {27'd0, ndesc_q, 6'd0};
  assign ring_bad = (ring_q[5:0] != 6'd0) || ({1'b0, ring_q} < {1'b0, base_q}) ||
                    (ring_end > win_end_q);

  // Queue mode: the doorbell for the next descriptor (i + 1 at a barrier, i
  // after the ring check and while waiting). Past the last slot the next
  // descriptor is in slot 0 (outside queue mode the run ends there).
  logic [31:0] q_next, q_avail;
  logic        q_empty, q_over, slot_last;
  assign q_next    = (st_q == RBar) ? di_q + 32'd1 : di_q;
  assign q_avail   = q_tail_i - q_next;
  assign q_empty   = (q_avail == 32'd0);
  assign q_over    = (q_avail > ndesc_q);
  assign slot_last = ({1'b0, dptr_q} + 65'(TSR_HW_DESC_BYTES) == ring_end);

  // Where the run goes before fetching descriptor q_next in queue mode.
  run_e q_st;
  logic q_take;   // this cycle the doorbell decides (set in the state machine)
  always_comb begin
    if (q_empty && !q_close_i) q_st = RQWait;
    else if (q_empty || q_over) q_st = RFin;
    else q_st = RFetch;
  end

  always_comb begin
    st_d = st_q;
    base_d = base_q; ring_d = ring_q; dptr_d = dptr_q; ndesc_d = ndesc_q; di_d = di_q;
    queue_d = queue_q;
    q_take = 1'b0;
    status_d = status_q; err_index_d = err_index_q; desc_done_d = desc_done_q;
    macs_d = macs_q; win_end_d = win_end_q;
    axi_err_d = axi_err_q || ((st_q != RIdle) && axi_err_i);
    done_d = 1'b0;
    pa_d = pa_q; pw_d = pw_q; pc_d = pc_q; mn_d = mn_q; mnk_d = mnk_q; pch_d = pch_q;
    a_end_d = a_end_q; w_end_d = w_end_q; c_end_d = c_end_q; ts_d = ts_q; tb_d = tb_q;
    bm_iss_d = bm_iss_q; bm_ptr_d = bm_ptr_q;
    exec_o = 1'b0;
    unique case (st_q)
      RIdle: begin
        if (start_i) begin
          base_d = mem_base_i; ring_d = ring_i; ndesc_d = n_desc_i; queue_d = queue_i;
          di_d = '0; dptr_d = ring_i;
          status_d = TSR_HWERR_OK; err_index_d = '0; desc_done_d = '0; macs_d = '0;
          axi_err_d = 1'b0;
          win_end_d = {1'b0, mem_base_i} + {1'b0, mem_size_i};
          st_d = RRing;
        end
      end
      RRing: begin
        if (ndesc_q == 32'd0) begin
          st_d = RFin;
        end else if (ring_bad) begin
          status_d = TSR_HWERR_RING_RANGE;
          st_d = RFin;
        end else if (queue_q) begin
          q_take = 1'b1;
          st_d = q_st;
        end else begin
          st_d = RFetch;
        end
      end
      RQWait: begin
        q_take = 1'b1;
        st_d = q_st;
      end
      RFetch: if (fetch_ready_i) st_d = RFWait;
      RFWait: begin
        if (reads_idle_i) begin
          if (axi_err_q) begin
            status_d = TSR_HWERR_AXI_ERROR;
            err_index_d = di_q;
            st_d = RFin;
          end else begin
            st_d = RChk1;
          end
        end
      end
      RChk1: begin
        pa_d = 48'(16'(m16 - 16'd1)) * 48'(d_lda);
        pw_d = is_bsr ? 48'(ntr) * 48'(d_ldw) : 48'(wrows) * 48'(d_ldw);
        tb_d = 48'(d_cstride) << (bk128 ? 11 : 10);
        // (P - 1) * W_CSTRIDE: only a striped W has a channel offset
        pch_d = striped ? (48'(d_cstride) << LogPorts) - 48'(d_cstride) : 48'd0;
        pc_d = 48'(16'(m16 - 16'd1)) * 48'(d_ldc);
        mn_d = 32'(m16) * 32'(n16);
        st_d = RChk2;
      end
      RChk2: begin
        a_end_d = {1'b0, d_a} + 65'(pa_q) + 65'(k16);
        // GEMM_BSR: the bitmaps' end (the tiles follow at the next 64 bytes)
        w_end_d = {1'b0, d_w} + 65'(pw_q) + (is_bsr ? 65'd0 : 65'(pch_q) + 65'(k16));
        ts_d    = {1'b0, d_w} + 65'(pw_q) + 65'd63;
        c_end_d = {1'b0, d_c} + 65'(pc_q) + 65'({n16, 2'b00});
        mnk_d   = 48'(mn_q) * 48'(k16);
        st_d = RChk3;
      end
      RChk3: begin
        if (chk_err != TSR_HWERR_OK) begin
          status_d = chk_err;
          err_index_d = di_q;
          st_d = RFin;
        end else if (is_nop) begin
          st_d = RBar;
        end else if (is_bsr) begin
          bm_iss_d = '0;
          bm_ptr_d = d_w;
          st_d = RBmIss;
        end else begin
          exec_o = 1'b1;
          st_d = RExec;
        end
      end
      // GEMM_BSR: ntr rows for the count, then row 0 for the walk.
      RBmIss: begin
        if (fetch_ready_i) begin
          bm_iss_d = bm_iss_q + 13'd1;
          bm_ptr_d = bm_ptr_q + 64'(d_ldw);
          if (bm_iss_q == ntr) st_d = RBmWait;
        end
      end
      RBmWait: if (reads_idle_i) st_d = RBmChk;
      RBmChk: begin
        mnk_d = 48'(m16) * bm_elems_q;
        if (axi_err_q) begin
          status_d = TSR_HWERR_AXI_ERROR;
          err_index_d = di_q;
          st_d = RFin;
        end else if (bm_bad_q || bm_cnt_q != d_cstride) begin
          status_d = TSR_HWERR_BAD_COUNT;
          err_index_d = di_q;
          st_d = RFin;
        end else begin
          exec_o = 1'b1;
          st_d = RExec;
        end
      end
      RExec: if (loader_idle_i) st_d = RBar;
      RBar: begin
        if (barrier_ok_i) begin
          if (axi_err_q) begin
            status_d = TSR_HWERR_AXI_ERROR;
            err_index_d = di_q;
            st_d = RFin;
          end else begin
            desc_done_d = desc_done_q + 32'd1;
            if (!is_nop) macs_d = macs_q + 64'(mnk_q);
            di_d = di_q + 32'd1;
            dptr_d = slot_last ? ring_q : dptr_q + 64'(TSR_HW_DESC_BYTES);
            if (queue_q) begin
              q_take = 1'b1;
              st_d = q_st;
            end else if (di_q + 32'd1 == ndesc_q) st_d = RFin;
            else st_d = RFetch;
          end
        end
      end
      RFin: begin
        done_d = 1'b1;
        st_d = RIdle;
      end
      default: st_d = RIdle;
    endcase
    // the doorbell decided: Q_TAIL too far ahead of (or behind) the next descriptor
    if (q_take && !q_empty && q_over) begin
      status_d = TSR_HWERR_QUEUE_TAIL;
      err_index_d = q_next;
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      st_q <= RIdle;
      base_q <= '0; ring_q <= '0; dptr_q <= '0; ndesc_q <= '0; di_q <= '0;
      status_q <= '0; err_index_q <= '0; desc_done_q <= '0; macs_q <= '0;
      axi_err_q <= 1'b0; done_q <= 1'b0; win_end_q <= '0; queue_q <= 1'b0;
    end else begin
      st_q <= st_d;
      base_q <= base_d; ring_q <= ring_d; dptr_q <= dptr_d; ndesc_q <= ndesc_d; di_q <= di_d;
      status_q <= status_d; err_index_q <= err_index_d; desc_done_q <= desc_done_d;
      macs_q <= macs_d;
      axi_err_q <= axi_err_d; done_q <= done_d; win_end_q <= win_end_d; queue_q <= queue_d;
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pa_q <= '0; pw_q <= '0; pc_q <= '0; mn_q <= '0; mnk_q <= '0; pch_q <= '0;
      a_end_q <= '0; w_end_q <= '0; c_end_q <= '0; ts_q <= '0; tb_q <= '0;
      bm_iss_q <= '0; bm_ptr_q <= '0;
    end else begin
      pa_q <= pa_d; pw_q <= pw_d; pc_q <= pc_d; mn_q <= mn_d; mnk_q <= mnk_d; pch_q <= pch_d;
      a_end_q <= a_end_d; w_end_q <= w_end_d; c_end_q <= c_end_d; ts_q <= ts_d; tb_q <= tb_d;
      bm_iss_q <= bm_iss_d; bm_ptr_q <= bm_ptr_d;
    end
  end

  // The descriptor word (no reset: written before it is read).
  always_ff @(posedge clk_i) begin
    if (desc_we_i) dword_q <= desc_word_i;
  end

  // Small M: stream W through the lanes (GEMV) rather than waste array rows;
  // it wins while M*Cols < DataBytes.
  assign gemv_o        = (32'(m16) * Cols < DataBytes);
  assign fetch_valid_o = (st_q == RFetch) || (st_q == RBmIss);
  assign fetch_addr_o  = (st_q == RBmIss) ? ((bm_iss_q == ntr) ? d_w : bm_ptr_q) : dptr_q;
  assign fetch_len_o   = (st_q == RBmIss) ? rb : 8'(TSR_HW_DESC_BYTES);
  assign fetch_bank_o  = (st_q != RBmIss) ? BankDesc : ((bm_iss_q == ntr) ? BankWalk : BankCount);
  assign running_o     = (st_q != RIdle);
  assign executing_o   = (st_q == RExec || st_q == RBar);
  assign q_wait_o      = (st_q == RQWait);
  assign m_o = m16;
  assign n_o = n16;
  assign k_o = k16;
  assign lda_o = d_lda;
  assign ldw_o = d_ldw;
  assign ldc_o = d_ldc;
  assign a_addr_o = d_a;
  assign w_addr_o = d_w;
  assign c_addr_o = d_c;
  assign striped_o   = striped && (NumPorts > 1);
  assign w_cstride_o = d_cstride;
  assign bsr_o       = is_bsr;
  assign bk128_o     = bk128;
  assign rb_o        = rb;
  assign tiles_o     = {ts_q[63:6], 6'd0};
  assign bm_kmask_o  = kmask;
  assign win_base_o  = base_q;
  assign win_end_o   = win_end_q;
  assign done_o      = done_q;
  assign status_o    = status_q;
  assign err_index_o = err_index_q;
  assign desc_done_o = desc_done_q;
  assign macs_o      = macs_q;
endmodule
