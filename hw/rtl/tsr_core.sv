// tsr_core - runs a descriptor ring: fetch, check, tile, load, compute, store.
//
// Dataflow (see hw/README.md):
//   run FSM    fetches descriptor i of the ring, checks it (no memory access
//              for a descriptor that fails), then hands it to the loader and
//              waits at a barrier (all its results written) before the next;
//   loader     walks the tiles: m blocks (Rows rows, or one row in GEMV mode)
//              x n blocks (Cols rows of W) x k chunks (KChunk bytes), issues
//              one read segment per operand row into a free buffer slot
//              (A and W have two slots each: the next tile loads while the
//              current one computes) and queues a step record;
//   compute    starts a step as soon as its data has arrived, one reduction
//              step (GEMM: one k; GEMV: Rows k's) per cycle, back to back;
//   writer     drains the output bank row by row through the write master
//              while the array already works on the next tile.
// A segment is skipped when the previous step left the same operand chunk in
// its slot (A across n blocks, W across m blocks when K fits one chunk).
module tsr_core #(
  parameter int Rows           = 16,    // array rows (m, or GEMV lanes)
  parameter int Cols           = 16,    // array columns (n)
  parameter int DataBytes      = 64,    // AXI data bus bytes
  parameter int KChunk         = 4096,  // k bytes per buffered chunk
  parameter int MaxOutstanding = 16,    // AXI bursts in flight per direction
  parameter int DW             = DataBytes * 8  // AXI data bits
) (
  input  logic                 clk_i,         // clock
  input  logic                 rst_ni,        // asynchronous reset, active low
  input  logic                 start_i,       // pulse: run the ring
  input  logic [63:0]          mem_base_i,    // window base
  input  logic [63:0]          mem_size_i,    // window size
  input  logic [63:0]          ring_i,        // first descriptor
  input  logic [31:0]          n_desc_i,      // descriptors
  output logic                 done_o,        // pulse: run finished
  output logic [31:0]          status_o,      // TSR_HWERR_* of the run
  output logic [31:0]          err_index_o,   // failing descriptor
  output logic [31:0]          desc_done_o,   // descriptors completed
  output logic [63:0]          cyc_busy_o,    // cycles running
  output logic [63:0]          cyc_stall_o,   // cycles the array waited for memory
  output logic [63:0]          bytes_rd_o,    // bytes read
  output logic [63:0]          bytes_wr_o,    // bytes written
  output logic [63:0]          macs_o,        // M*N*K of completed descriptors
  // AXI4 master
  output logic                 arvalid_o,     // AR valid
  input  logic                 arready_i,     // AR ready
  output logic [63:0]          araddr_o,      // AR address
  output logic [7:0]           arlen_o,       // AR beats - 1
  output logic [2:0]           arsize_o,      // AR size
  output logic [1:0]           arburst_o,     // AR burst type
  input  logic                 rvalid_i,      // R valid
  output logic                 rready_o,      // R ready
  input  logic [DW-1:0]        rdata_i,       // R data
  input  logic [1:0]           rresp_i,       // R response
  input  logic                 rlast_i,       // R last
  output logic                 awvalid_o,     // AW valid
  input  logic                 awready_i,     // AW ready
  output logic [63:0]          awaddr_o,      // AW address
  output logic [7:0]           awlen_o,       // AW beats - 1
  output logic [2:0]           awsize_o,      // AW size
  output logic [1:0]           awburst_o,     // AW burst type
  output logic                 wvalid_o,      // W valid
  input  logic                 wready_i,      // W ready
  output logic [DW-1:0]        wdata_o,       // W data
  output logic [DataBytes-1:0] wstrb_o,       // W strobes
  output logic                 wlast_o,       // W last
  input  logic                 bvalid_i,      // B valid
  output logic                 bready_o,      // B ready
  input  logic [1:0]           bresp_i        // B response
);
`include "tsr_regs_pkg.svh"

  localparam int OffW       = $clog2(DataBytes);
  localparam int WordsSlot  = KChunk / DataBytes;
  localparam int SlotAw     = $clog2(WordsSlot);
  localparam int RamAw      = SlotAw + 1;
  localparam int KcW        = $clog2(KChunk) + 1;    // holds KChunk
  localparam int LenW       = KcW;
  localparam int BankW      = 8;
  localparam int MLenW      = $clog2(Rows + 1);
  localparam int NLenW      = $clog2(Cols + 1);
  localparam int LaneW      = $clog2(Rows + 1);
  localparam int RowBytes   = 4 * Cols;
  localparam int NbW        = $clog2(RowBytes + 1);
  localparam int LogRows    = $clog2(Rows);
  localparam int LogCols    = $clog2(Cols);
  localparam int TW         = KcW;                   // reduction step counter
  localparam logic [1:0]  DestDesc = 2'd0, DestA = 2'd1, DestW = 2'd2;

  // ---------------------------------------------------------------- run FSM
  localparam logic [3:0] RIdle = 4'd0, RRing = 4'd1, RFetch = 4'd2, RFWait = 4'd3,
                         RChk1 = 4'd4, RChk2 = 4'd5, RChk3 = 4'd6, RExec = 4'd7,
                         RBar = 4'd8, RFin = 4'd9;
  logic [3:0]  rst_q;                     // run state
  logic [63:0] base_q, ring_q;
  logic [31:0] ndesc_q, di_q;             // descriptors, current index
  logic [63:0] dptr_q;                    // address of descriptor di_q
  logic [31:0] status_q, err_index_q, desc_done_q;
  logic [63:0] cyc_busy_q, cyc_stall_q, bytes_rd_q, bytes_wr_q, macs_q;
  logic        axi_err_q;

  // Descriptor fields.
  logic [DW-1:0] dword_q;
  logic [31:0] d_op, d_flags, d_m, d_n, d_k, d_lda, d_ldw, d_ldc;
  logic [63:0] d_a, d_w, d_c, d_rsvd;
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
  assign d_rsvd  = dword_q[TSR_DESC_RSVD*8 +: 64];

  // Checks, spread over three cycles (products, sums, compares).
  logic [15:0] m16, n16, k16;
  assign m16 = d_m[15:0];
  assign n16 = d_n[15:0];
  assign k16 = d_k[15:0];
  logic [47:0] pa_q, pw_q, pc_q, mnk_q;
  logic [31:0] mn_q;
  logic [64:0] a_end_q, w_end_q, c_end_q, win_end_q;
  logic [31:0] chk_err;
  logic        is_nop;

  always_comb begin
    chk_err = TSR_HWERR_OK;
    if ((d_op != TSR_OP_NOP && d_op != TSR_OP_GEMM_I8_I32) || d_flags != 32'd0 ||
        d_rsvd != 64'd0) begin
      chk_err = TSR_HWERR_BAD_OPCODE;
    end else if (d_op == TSR_OP_GEMM_I8_I32) begin
      if (d_m == 32'd0 || d_n == 32'd0 || d_k == 32'd0 || d_m > TSR_HW_MAX_DIM ||
          d_n > TSR_HW_MAX_DIM || d_k > TSR_HW_MAX_DIM) begin
        chk_err = TSR_HWERR_BAD_DIMS;
      end else if (d_lda < d_k || d_ldw < d_k || {2'b00, d_ldc} < {d_n, 2'b00} ||
                   d_ldc[1:0] != 2'b00 || d_c[1:0] != 2'b00) begin
        chk_err = TSR_HWERR_BAD_STRIDE;
      end else if ({1'b0, d_a} < {1'b0, base_q} || a_end_q > win_end_q ||
                   {1'b0, d_w} < {1'b0, base_q} || w_end_q > win_end_q ||
                   {1'b0, d_c} < {1'b0, base_q} || c_end_q > win_end_q) begin
        chk_err = TSR_HWERR_ADDR_RANGE;
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

  // ---------------------------------------------------------------- loader
  localparam logic [2:0] LIdle = 3'd0, LPrep = 3'd1, LASeg = 3'd2, LWSeg = 3'd3,
                         LPush = 3'd4, LNext = 3'd5;
  logic [2:0]  lst_q;
  logic        gemv_q;                     // descriptor runs in GEMV mode
  logic [16:0] m0_q, n0_q, k0_q;           // tile origin
  logic [63:0] a_blk_q, w_blk_q, c_row_q;  // A + m0*LDA, W + n0*LDW, C + m0*LDC
  logic [63:0] seg_ptr_q;
  logic [7:0]  seg_idx_q;
  logic        sa_q, sw_q;                 // slots of the step being loaded
  logic [MLenW-1:0] st_mlen_q;
  logic [NLenW-1:0] st_nlen_q;
  logic [KcW-1:0]   st_kc_q;
  logic             st_reuse_w_q;
  logic [2:0]  busy_a_q [2];
  logic [2:0]  busy_w_q [2];
  logic [31:0] segs_issued_q, segs_done_q;

  // Step parameters of the next tile (combinational from the loop state).
  logic [16:0] m_rem, n_rem, k_rem;
  logic [MLenW-1:0] m_len;
  logic [NLenW-1:0] n_len;
  logic [KcW-1:0]   kc_len;
  logic        reuse_a, reuse_w, na, nw, prep_ok;
  assign m_rem  = {1'b0, m16} - m0_q;
  assign n_rem  = {1'b0, n16} - n0_q;
  assign k_rem  = {1'b0, k16} - k0_q;
  assign m_len  = gemv_q ? MLenW'(1) : ((m_rem >= 17'(Rows)) ? MLenW'(Rows) : MLenW'(m_rem));
  assign n_len  = (n_rem >= 17'(Cols)) ? NLenW'(Cols) : NLenW'(n_rem);
  assign kc_len = (k_rem >= 17'(KChunk)) ? KcW'(KChunk) : KcW'(k_rem);
  assign reuse_a = (d_k <= 32'(KChunk)) && (n0_q != 17'd0);
  assign reuse_w = (d_k <= 32'(KChunk)) && (d_n <= 32'(Cols)) && (m0_q != 17'd0);
  assign na      = reuse_a ? sa_q : !sa_q;
  assign nw      = reuse_w ? sw_q : !sw_q;

  // Step FIFO: one record per tile step whose loads have been issued.
  localparam int StepW = 1 + 1 + KcW + 1 + 1 + 1 + MLenW + NLenW + 64 + 32;
  logic             sf_push, sf_pop, sf_empty, sf_full;
  logic [StepW-1:0] sf_wdata, sf_rdata;
  logic             h_sa, h_sw, h_first, h_last, h_gemv;
  logic [KcW-1:0]   h_kc;
  logic [MLenW-1:0] h_mlen;
  logic [NLenW-1:0] h_nlen;
  logic [63:0]      h_c;
  logic [31:0]      h_target;
  assign sf_wdata = {sa_q, sw_q, st_kc_q, (k0_q == 17'd0), (k0_q + 17'(st_kc_q) == {1'b0, k16}),
                     gemv_q, st_mlen_q, st_nlen_q,
                     c_row_q + {45'd0, n0_q, 2'b00}, segs_issued_q};
  assign {h_sa, h_sw, h_kc, h_first, h_last, h_gemv, h_mlen, h_nlen, h_c, h_target} = sf_rdata;
  assign sf_push  = (lst_q == LPush);

  tsr_fifo #(.Width(StepW), .Depth(4)) u_steps (
    .clk_i, .rst_ni,
    .push_i (sf_push), .wdata_i (sf_wdata),
    .pop_i (sf_pop), .rdata_o (sf_rdata),
    .empty_o (sf_empty), .full_o (sf_full)
  );

  assign prep_ok = !sf_full && (reuse_a || busy_a_q[na] == 3'd0) &&
                   (reuse_w || busy_w_q[nw] == 3'd0);

  // Read segments come from the loader or the descriptor fetch.
  logic             seg_valid, seg_ready, seg_hs;
  logic [63:0]      seg_addr;
  logic [LenW-1:0]  seg_len;
  logic [1:0]       seg_dest;
  logic [BankW-1:0] seg_bank;
  logic [RamAw-1:0] seg_waddr;
  always_comb begin
    seg_valid = 1'b0;
    seg_addr  = seg_ptr_q;
    seg_len   = LenW'(st_kc_q);
    seg_dest  = DestA;
    seg_bank  = seg_idx_q;
    seg_waddr = {sa_q, {SlotAw{1'b0}}};
    if (rst_q == RFetch) begin
      seg_valid = 1'b1;
      seg_addr  = dptr_q;
      seg_len   = LenW'(TSR_HW_DESC_BYTES);
      seg_dest  = DestDesc;
      seg_bank  = '0;
      seg_waddr = '0;
    end else if (lst_q == LASeg) begin
      seg_valid = 1'b1;
    end else if (lst_q == LWSeg) begin
      seg_valid = 1'b1;
      seg_dest  = DestW;
      seg_waddr = {sw_q, {SlotAw{1'b0}}};
    end
  end
  assign seg_hs = seg_valid && seg_ready;

  // ---------------------------------------------------------------- compute
  logic             c_act_q, c_sa_q, c_sw_q, c_first_q, c_last_q, c_gemv_q;
  logic [KcW-1:0]   c_kc_q;
  logic [TW-1:0]    t_q, tlast_q;
  logic             out_res_q;            // output bank reserved for a tile
  logic             arrived, finishing, c_start, hold, issue;
  logic [63:0]      c_c_q;                // output tile of the current step
  logic [MLenW-1:0] c_mlen_q;
  logic [NLenW-1:0] c_nlen_q;
  logic [63:0]      p_c_q;                // pending output tile
  logic [MLenW-1:0] p_mlen_q;
  logic [NLenW-1:0] p_nlen_q;
  logic             p_gemv_q;

  assign arrived   = $signed(segs_done_q - h_target) >= 0;
  // The last reduction step of a tile copies the accumulators into the output
  // bank three cycles later: it waits (hold) while the writer still drains
  // the previous tile; all other steps run regardless.
  assign hold      = c_act_q && c_last_q && (t_q == tlast_q) && out_res_q;
  assign issue     = c_act_q && !hold;
  assign finishing = issue && (t_q == tlast_q);
  assign c_start   = !sf_empty && arrived && (!c_act_q || finishing);
  assign sf_pop    = c_start;

  logic [TW-1:0] tbyte;                    // byte position of step t in the chunk
  assign tbyte = c_gemv_q ? TW'({t_q, {LogRows{1'b0}}}) : t_q;

  // Buffer read (all banks of an operand read the same word).
  logic [RamAw-1:0] a_raddr, w_raddr;
  assign a_raddr = {c_sa_q, tbyte[OffW +: SlotAw]};
  assign w_raddr = {c_sw_q, tbyte[OffW +: SlotAw]};

  // Operand-select stage inputs, aligned with the RAM outputs.
  logic             p_v_q, p_first_q, p_last_q, p_gemv_q2;
  logic [OffW-1:0]  p_idx_q;
  logic [LaneW-1:0] p_lanes_q;
  logic [KcW:0]     lanes_left;
  assign lanes_left = {1'b0, c_kc_q} - {1'b0, tbyte};

  // ---------------------------------------------------------------- buffers
  logic              buf_we;
  logic [1:0]        buf_dest;
  logic [BankW-1:0]  buf_bank;
  logic [RamAw-1:0]  buf_waddr;
  logic [DW-1:0]     buf_wdata;
  logic [Rows*DW-1:0] a_words;
  logic [Cols*DW-1:0] w_words;

  for (genvar r = 0; r < Rows; r++) begin : g_abank
    tsr_ram_1r1w #(.Width(DW), .Depth(2 * WordsSlot)) u_ram (
      .clk_i,
      .we_i    (buf_we && buf_dest == DestA && buf_bank == BankW'(r)),
      .waddr_i (buf_waddr),
      .wdata_i (buf_wdata),
      .re_i    (issue),
      .raddr_i (a_raddr),
      .rdata_o (a_words[r*DW +: DW])
    );
  end
  for (genvar j = 0; j < Cols; j++) begin : g_wbank
    tsr_ram_1r1w #(.Width(DW), .Depth(2 * WordsSlot)) u_ram (
      .clk_i,
      .we_i    (buf_we && buf_dest == DestW && buf_bank == BankW'(j)),
      .waddr_i (buf_waddr),
      .wdata_i (buf_wdata),
      .re_i    (issue),
      .raddr_i (w_raddr),
      .rdata_o (w_words[j*DW +: DW])
    );
  end

  logic                    cap, out_gemv;
  logic [Cols*32-1:0]      out_row, colsum;
  logic [MLenW-1:0]        wr_row_q;
  tsr_mac_array #(.Rows(Rows), .Cols(Cols), .DataBytes(DataBytes)) u_array (
    .clk_i, .rst_ni,
    .v_i (p_v_q), .first_i (p_first_q), .last_i (p_last_q), .gemv_i (p_gemv_q2),
    .idx_i (p_idx_q), .lanes_i (p_lanes_q),
    .a_words_i (a_words), .w_words_i (w_words),
    .cap_o (cap), .gemv_o (out_gemv), .row_i (LaneW'(wr_row_q)), .row_o (out_row),
    .colsum_o (colsum)
  );

  // ---------------------------------------------------------------- writer
  logic             wr_act_q;
  logic [63:0]      wr_addr_q;
  logic             wreq_valid, wreq_ready, wreq_hs, wr_idle, wr_err, rd_idle, rd_err, seg_done;
  logic [RowBytes*8-1:0] wreq_data;
  logic [NbW-1:0]   wreq_nbytes;
  logic [MLenW-1:0] wr_rows;
  assign wr_rows     = p_gemv_q ? MLenW'(1) : p_mlen_q;
  assign wreq_valid  = wr_act_q;
  assign wreq_nbytes = NbW'({p_nlen_q, 2'b00});
  assign wreq_data   = out_gemv ? colsum : out_row;
  assign wreq_hs     = wreq_valid && wreq_ready;

  tsr_wr_master #(.DataBytes(DataBytes), .RowBytes(RowBytes),
                  .MaxOutstanding(MaxOutstanding)) u_wr (
    .clk_i, .rst_ni,
    .req_valid_i (wreq_valid), .req_ready_o (wreq_ready), .req_addr_i (wr_addr_q),
    .req_nbytes_i (wreq_nbytes), .req_data_i (wreq_data),
    .awvalid_o, .awready_i, .awaddr_o, .awlen_o, .awsize_o, .awburst_o,
    .wvalid_o, .wready_i, .wdata_o, .wstrb_o, .wlast_o,
    .bvalid_i, .bready_o, .bresp_i,
    .idle_o (wr_idle), .err_o (wr_err)
  );

  tsr_rd_master #(.DataBytes(DataBytes), .MaxOutstanding(MaxOutstanding),
                  .BankW(BankW), .WordAw(RamAw), .LenW(LenW)) u_rd (
    .clk_i, .rst_ni,
    .seg_valid_i (seg_valid), .seg_ready_o (seg_ready), .seg_addr_i (seg_addr),
    .seg_len_i (seg_len), .seg_dest_i (seg_dest), .seg_bank_i (seg_bank),
    .seg_waddr_i (seg_waddr),
    .arvalid_o, .arready_i, .araddr_o, .arlen_o, .arsize_o, .arburst_o,
    .rvalid_i, .rready_o, .rdata_i, .rresp_i, .rlast_i,
    .buf_we_o (buf_we), .buf_dest_o (buf_dest), .buf_bank_o (buf_bank),
    .buf_waddr_o (buf_waddr), .buf_wdata_o (buf_wdata),
    .seg_done_o (seg_done), .err_o (rd_err), .idle_o (rd_idle)
  );

  // ---------------------------------------------------------------- sequential
  logic running, barrier_ok;
  assign running    = (rst_q != RIdle);
  assign barrier_ok = (lst_q == LIdle) && sf_empty && !c_act_q && !out_res_q &&
                      wr_idle && rd_idle && (segs_done_q == segs_issued_q);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      rst_q <= RIdle;
      base_q <= '0; ring_q <= '0; ndesc_q <= '0; di_q <= '0; dptr_q <= '0;
      status_q <= '0; err_index_q <= '0; desc_done_q <= '0;
      cyc_busy_q <= '0; cyc_stall_q <= '0; bytes_rd_q <= '0; bytes_wr_q <= '0; macs_q <= '0;
      axi_err_q <= 1'b0;
      done_o <= 1'b0;
      pa_q <= '0; pw_q <= '0; pc_q <= '0; mnk_q <= '0; mn_q <= '0;
      a_end_q <= '0; w_end_q <= '0; c_end_q <= '0; win_end_q <= '0;
      lst_q <= LIdle; gemv_q <= 1'b0;
      m0_q <= '0; n0_q <= '0; k0_q <= '0;
      a_blk_q <= '0; w_blk_q <= '0; c_row_q <= '0; seg_ptr_q <= '0; seg_idx_q <= '0;
      sa_q <= 1'b0; sw_q <= 1'b0;
      st_mlen_q <= '0; st_nlen_q <= '0; st_kc_q <= '0; st_reuse_w_q <= 1'b0;
      busy_a_q[0] <= '0; busy_a_q[1] <= '0; busy_w_q[0] <= '0; busy_w_q[1] <= '0;
      segs_issued_q <= '0; segs_done_q <= '0;
      c_act_q <= 1'b0; c_sa_q <= 1'b0; c_sw_q <= 1'b0; c_first_q <= 1'b0; c_last_q <= 1'b0;
      c_gemv_q <= 1'b0; c_kc_q <= '0; t_q <= '0; tlast_q <= '0;
      c_c_q <= '0; c_mlen_q <= '0; c_nlen_q <= '0;
      out_res_q <= 1'b0; p_c_q <= '0; p_mlen_q <= '0; p_nlen_q <= '0; p_gemv_q <= 1'b0;
      p_v_q <= 1'b0; p_first_q <= 1'b0; p_last_q <= 1'b0; p_gemv_q2 <= 1'b0;
      p_idx_q <= '0; p_lanes_q <= '0;
      wr_act_q <= 1'b0; wr_row_q <= '0; wr_addr_q <= '0;
    end else begin
      done_o <= 1'b0;

      // -- counters --
      if (running) cyc_busy_q <= cyc_busy_q + 64'd1;
      if (running && (rst_q == RExec || rst_q == RBar) && !c_act_q &&
          (lst_q != LIdle || !sf_empty)) begin
        cyc_stall_q <= cyc_stall_q + 64'd1;
      end
      if (seg_hs) begin
        bytes_rd_q    <= bytes_rd_q + 64'(seg_len);
        segs_issued_q <= segs_issued_q + 32'd1;
      end
      if (seg_done) segs_done_q <= segs_done_q + 32'd1;
      if (wreq_hs) bytes_wr_q <= bytes_wr_q + 64'(wreq_nbytes);
      if (running && (rd_err || wr_err)) axi_err_q <= 1'b1;
      if (buf_we && buf_dest == DestDesc) dword_q <= buf_wdata;

      // -- run FSM --
      unique case (rst_q)
        RIdle: begin
          if (start_i) begin
            base_q <= mem_base_i; ring_q <= ring_i;
            ndesc_q <= n_desc_i; di_q <= '0; dptr_q <= ring_i;
            status_q <= TSR_HWERR_OK; err_index_q <= '0; desc_done_q <= '0;
            cyc_busy_q <= 64'd1; cyc_stall_q <= '0; bytes_rd_q <= '0; bytes_wr_q <= '0;
            macs_q <= '0; axi_err_q <= 1'b0;
            win_end_q <= {1'b0, mem_base_i} + {1'b0, mem_size_i};
            rst_q <= RRing;
          end
        end
        RRing: begin
          if (ndesc_q == 32'd0) begin
            rst_q <= RFin;
          end else if (ring_bad) begin
            status_q <= TSR_HWERR_RING_RANGE;
            rst_q <= RFin;
          end else begin
            rst_q <= RFetch;
          end
        end
        RFetch: if (seg_hs) rst_q <= RFWait;
        RFWait: begin
          if (segs_done_q == segs_issued_q) begin
            if (axi_err_q) begin
              status_q <= TSR_HWERR_AXI_ERROR;
              err_index_q <= di_q;
              rst_q <= RFin;
            end else begin
              rst_q <= RChk1;
            end
          end
        end
        RChk1: begin
          pa_q <= 48'(16'(m16 - 16'd1)) * 48'(d_lda);
          pw_q <= 48'(16'(n16 - 16'd1)) * 48'(d_ldw);
          pc_q <= 48'(16'(m16 - 16'd1)) * 48'(d_ldc);
          mn_q <= 32'(m16) * 32'(n16);
          rst_q <= RChk2;
        end
        RChk2: begin
          a_end_q <= {1'b0, d_a} + 65'(pa_q) + 65'(k16);
          w_end_q <= {1'b0, d_w} + 65'(pw_q) + 65'(k16);
          c_end_q <= {1'b0, d_c} + 65'(pc_q) + 65'({n16, 2'b00});
          mnk_q   <= 48'(mn_q) * 48'(k16);
          rst_q <= RChk3;
        end
        RChk3: begin
          if (chk_err != TSR_HWERR_OK) begin
            status_q <= chk_err;
            err_index_q <= di_q;
            rst_q <= RFin;
          end else if (is_nop) begin
            rst_q <= RBar;
          end else begin
            // Small M: stream W through the lanes (GEMV) rather than waste
            // array rows; it wins while M*Cols < DataBytes.
            gemv_q  <= (32'(m16) * Cols < DataBytes);
            m0_q <= '0; n0_q <= '0; k0_q <= '0;
            a_blk_q <= d_a; w_blk_q <= d_w; c_row_q <= d_c;
            lst_q <= LPrep;
            rst_q <= RExec;
          end
        end
        RExec: if (lst_q == LIdle) rst_q <= RBar;
        RBar: begin
          if (barrier_ok) begin
            if (axi_err_q) begin
              status_q <= TSR_HWERR_AXI_ERROR;
              err_index_q <= di_q;
              rst_q <= RFin;
            end else begin
              desc_done_q <= desc_done_q + 32'd1;
              if (!is_nop) macs_q <= macs_q + 64'(mnk_q);
              di_q <= di_q + 32'd1;
              dptr_q <= dptr_q + 64'(TSR_HW_DESC_BYTES);
              rst_q <= (di_q + 32'd1 == ndesc_q) ? RFin : RFetch;
            end
          end
        end
        RFin: begin
          done_o <= 1'b1;
          rst_q <= RIdle;
        end
        default: rst_q <= RIdle;
      endcase

      // -- loader --
      unique case (lst_q)
        LIdle: ;
        LPrep: begin
          if (prep_ok) begin
            sa_q <= na;
            sw_q <= nw;
            st_mlen_q <= m_len;
            st_nlen_q <= n_len;
            st_kc_q <= kc_len;
            st_reuse_w_q <= reuse_w;
            seg_idx_q <= '0;
            if (!reuse_a) begin
              seg_ptr_q <= a_blk_q + 64'(k0_q);
              lst_q <= LASeg;
            end else if (!reuse_w) begin
              seg_ptr_q <= w_blk_q + 64'(k0_q);
              lst_q <= LWSeg;
            end else begin
              lst_q <= LPush;
            end
          end
        end
        LASeg: begin
          if (seg_hs) begin
            seg_ptr_q <= seg_ptr_q + 64'(d_lda);
            seg_idx_q <= seg_idx_q + 8'd1;
            if (seg_idx_q + 8'd1 == 8'(st_mlen_q)) begin
              seg_idx_q <= '0;
              if (!st_reuse_w_q) begin
                seg_ptr_q <= w_blk_q + 64'(k0_q);
                lst_q <= LWSeg;
              end else begin
                lst_q <= LPush;
              end
            end
          end
        end
        LWSeg: begin
          if (seg_hs) begin
            seg_ptr_q <= seg_ptr_q + 64'(d_ldw);
            seg_idx_q <= seg_idx_q + 8'd1;
            if (seg_idx_q + 8'd1 == 8'(st_nlen_q)) lst_q <= LPush;
          end
        end
        LPush: lst_q <= LNext;
        LNext: begin
          lst_q <= LPrep;
          if (k0_q + 17'(st_kc_q) < {1'b0, k16}) begin
            k0_q <= k0_q + 17'(KChunk);
          end else begin
            k0_q <= '0;
            if (n0_q + 17'(Cols) < {1'b0, n16}) begin
              n0_q <= n0_q + 17'(Cols);
              w_blk_q <= w_blk_q + ({32'd0, d_ldw} << LogCols);
            end else begin
              n0_q <= '0;
              w_blk_q <= d_w;
              if (m0_q + (gemv_q ? 17'd1 : 17'(Rows)) < {1'b0, m16}) begin
                m0_q <= m0_q + (gemv_q ? 17'd1 : 17'(Rows));
                a_blk_q <= a_blk_q + (gemv_q ? {32'd0, d_lda} : ({32'd0, d_lda} << LogRows));
                c_row_q <= c_row_q + (gemv_q ? {32'd0, d_ldc} : ({32'd0, d_ldc} << LogRows));
              end else begin
                lst_q <= LIdle;
              end
            end
          end
        end
        default: lst_q <= LIdle;
      endcase

      // Slot use counts: +1 when a step is queued, -1 when its compute ends.
      for (int s = 0; s < 2; s++) begin
        busy_a_q[s] <= busy_a_q[s] + 3'((sf_push && sa_q == s[0])) -
                       3'((finishing && c_sa_q == s[0]));
        busy_w_q[s] <= busy_w_q[s] + 3'((sf_push && sw_q == s[0])) -
                       3'((finishing && c_sw_q == s[0]));
      end

      // -- compute issue --
      if (c_start) begin
        c_act_q   <= 1'b1;
        c_sa_q    <= h_sa;
        c_sw_q    <= h_sw;
        c_first_q <= h_first;
        c_last_q  <= h_last;
        c_gemv_q  <= h_gemv;
        c_kc_q    <= h_kc;
        t_q       <= '0;
        tlast_q   <= h_gemv ? TW'((h_kc + KcW'(Rows - 1)) >> LogRows) - TW'(1) : TW'(h_kc) - TW'(1);
        c_c_q     <= h_c;
        c_mlen_q  <= h_mlen;
        c_nlen_q  <= h_nlen;
      end else if (finishing) begin
        c_act_q <= 1'b0;
      end else if (issue) begin
        t_q <= t_q + TW'(1);
      end
      if (finishing && c_last_q) begin
        out_res_q <= 1'b1;
        p_c_q     <= c_c_q;
        p_mlen_q  <= c_mlen_q;
        p_nlen_q  <= c_nlen_q;
        p_gemv_q  <= c_gemv_q;
      end

      p_v_q     <= issue;
      p_first_q <= c_first_q && (t_q == '0);
      p_last_q  <= c_last_q && finishing;
      p_gemv_q2 <= c_gemv_q;
      p_idx_q   <= tbyte[OffW-1:0];
      p_lanes_q <= (lanes_left >= (KcW+1)'(Rows)) ? LaneW'(Rows) : LaneW'(lanes_left);

      // -- writer --
      if (cap) begin
        wr_act_q  <= 1'b1;
        wr_row_q  <= '0;
        wr_addr_q <= p_c_q;
      end else if (wreq_hs) begin
        wr_row_q  <= wr_row_q + MLenW'(1);
        wr_addr_q <= wr_addr_q + 64'(d_ldc);
        if (wr_row_q + MLenW'(1) == wr_rows) begin
          wr_act_q  <= 1'b0;
          out_res_q <= 1'b0;
        end
      end
    end
  end

  assign status_o    = status_q;
  assign err_index_o = err_index_q;
  assign desc_done_o = desc_done_q;
  assign cyc_busy_o  = cyc_busy_q;
  assign cyc_stall_o = cyc_stall_q;
  assign bytes_rd_o  = bytes_rd_q;
  assign bytes_wr_o  = bytes_wr_q;
  assign macs_o      = macs_q;

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  // Parameters the datapath relies on.
  initial begin
    assert (DataBytes >= TSR_HW_DESC_BYTES && (DataBytes & (DataBytes - 1)) == 0)
      else $fatal(1, "DataBytes must be a power of two >= 64");
    assert ((Rows & (Rows - 1)) == 0 && (Cols & (Cols - 1)) == 0 && Rows <= DataBytes)
      else $fatal(1, "Rows and Cols must be powers of two, Rows <= DataBytes");
    assert (KChunk % DataBytes == 0 && KChunk >= DataBytes)
      else $fatal(1, "KChunk must be a multiple of DataBytes");
  end
  // No memory access outside the window while running.
  always_ff @(posedge clk_i) begin
    if (rst_ni && arvalid_o && arready_i) begin
      assert ({1'b0, araddr_o} + 65'(DataBytes) > {1'b0, base_q} &&
              {1'b0, araddr_o} < win_end_q)
        else $error("tsr_core: read burst at %h outside the window", araddr_o);
    end
    if (rst_ni && awvalid_o && awready_i) begin
      assert ({1'b0, awaddr_o} + 65'(DataBytes) > {1'b0, base_q} &&
              {1'b0, awaddr_o} < win_end_q)
        else $error("tsr_core: write burst at %h outside the window", awaddr_o);
    end
    if (rst_ni && c_start) begin
      assert (busy_a_q[h_sa] != 3'd0 && busy_w_q[h_sw] != 3'd0)
        else $error("tsr_core: step started on a free slot");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
