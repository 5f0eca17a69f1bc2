// tsr_core - runs a descriptor ring: the four engines, the buffers, the MAC
// array, the AXI masters and the performance counters.
//
// Dataflow (see hw/README.md), one module per engine:
//   tsr_desc_unit  fetches descriptor i of the ring, checks it (no memory
//                  access for a descriptor that fails), starts the loader and
//                  waits at a barrier (all its results written);
//   tsr_loader     walks the tiles, issues one read segment per operand row
//                  into a free buffer slot and queues a step record;
//   tsr_compute    starts a step as soon as its data has arrived, one
//                  reduction step per cycle, back to back;
//   tsr_writer     drains the output bank row by row through the write master
//                  while the array already works on the next tile.
module tsr_core #(
  parameter int Rows           = 16,    // array rows (m, or GEMV lanes)
  parameter int Cols           = 16,    // array columns (n)
  parameter int DataBytes      = 64,    // AXI data bus bytes
  parameter int KChunk         = 4096,  // k bytes per buffered chunk
  parameter int MaxOutstanding = 16,    // AXI bursts in flight per direction
  parameter int NumPorts       = 1,     // AXI4 read masters, one memory channel each
  parameter int DW             = DataBytes * 8, // AXI data bits
  parameter int XP             = (NumPorts > 1) ? NumPorts - 1 : 1  // lanes of the x ports
) (
  input  logic                 clk_i,         // clock
  input  logic                 rst_ni,        // asynchronous reset, active low
  input  logic                 start_i,       // pulse: run the ring
  input  logic [63:0]          mem_base_i,    // window base
  input  logic [63:0]          mem_size_i,    // window size
  input  logic [63:0]          ring_i,        // first descriptor
  input  logic [31:0]          n_desc_i,      // descriptors (queue mode: ring slots)
  input  logic                 queue_i,       // with start_i: queue mode
  input  logic                 q_close_i,     // queue mode: close (live)
  input  logic [31:0]          q_tail_i,      // queue mode: Q_TAIL (live)
  output logic                 done_o,        // pulse: run finished
  output logic [31:0]          status_o,      // TSR_HWERR_* of the run
  output logic [31:0]          err_index_o,   // failing descriptor
  output logic [31:0]          desc_done_o,   // descriptors completed
  output logic [63:0]          cyc_busy_o,    // cycles running, less the doorbell waits
  output logic [63:0]          cyc_stall_o,   // cycles the array waited for memory
  output logic [63:0]          bytes_rd_o,    // bytes read
  output logic [63:0]          bytes_wr_o,    // bytes written
  output logic [63:0]          macs_o,        // M*N*K of completed descriptors
  output logic [31:0]          hw_ops_o,      // HW_OPS: the opcodes this build runs
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
  input  logic [1:0]           bresp_i,       // B response
  // read masters 1 .. NumPorts-1 (lane i-1 is port i; unused when NumPorts = 1)
  output logic [XP-1:0]        xarvalid_o,    // AR valid
  input  logic [XP-1:0]        xarready_i,    // AR ready
  output logic [XP*64-1:0]     xaraddr_o,     // AR address
  output logic [XP*8-1:0]      xarlen_o,      // AR beats - 1
  output logic [XP*3-1:0]      xarsize_o,     // AR size
  output logic [XP*2-1:0]      xarburst_o,    // AR burst type
  input  logic [XP-1:0]        xrvalid_i,     // R valid
  output logic [XP-1:0]        xrready_o,     // R ready
  input  logic [XP*DW-1:0]     xrdata_i,      // R data
  input  logic [XP*2-1:0]      xrresp_i,      // R response
  input  logic [XP-1:0]        xrlast_i       // R last
);
`include "tsr_regs_pkg.svh"
`include "tsr_dest.svh"

  localparam int OffW      = $clog2(DataBytes);
  localparam int WordsSlot = KChunk / DataBytes;
  localparam int SlotAw    = $clog2(WordsSlot);
  localparam int Slots     = 4;                    // buffer slots per operand (tsr_loader)
  localparam int SlW       = $clog2(Slots);
  localparam int RamAw     = SlotAw + SlW;
  localparam int KcW       = $clog2(KChunk) + 1;    // holds KChunk
  localparam int LenW      = KcW;
  localparam int BankW     = 8;
  localparam int MLenW     = $clog2(Rows + 1);
  localparam int NLenW     = $clog2(Cols + 1);
  localparam int LaneW     = $clog2(Rows + 1);
  localparam int RowBytes  = 4 * Cols;
  localparam int NbW       = $clog2(RowBytes + 1);
  // GEMM_BSR: tiles of one or two bus words per row, a tile in one slot
  localparam int Bsr       = (DataBytes == 64 && Cols >= 16 && KChunk >= 2048) ? 1 : 0;
  localparam int CT        = KChunk / 64;           // tiles of a chunk at BK 64
  localparam int PortW     = (NumPorts > 1) ? $clog2(NumPorts) : 1;
  localparam int SegW      = 16;                   // per-port segment counters
  localparam int CntW      = NumPorts * SegW;

  // ---------------------------------------------------------------- wiring
  // descriptor unit
  logic        fetch_valid, exec, exec_gemv, running, executing, barrier_ok, q_wait;
  logic [63:0] fetch_addr, d_a, d_w, d_c, win_base;
  logic        striped, d_bsr, d_bk128;
  logic [31:0] d_cstride;
  logic [7:0]  d_rb, fetch_len, fetch_bank;
  logic [63:0] d_tiles;
  logic [511:0] bm_kmask;
  logic [64:0] win_end;
  logic [15:0] d_m, d_n, d_k;
  logic [31:0] d_lda, d_ldw, d_ldc;
  // read segments
  logic             seg_valid, seg_ready, seg_hs;
  logic [63:0]      seg_addr;
  logic [LenW-1:0]  seg_len;
  logic [1:0]       seg_dest;
  logic [BankW-1:0] seg_bank;
  logic [RamAw-1:0] seg_waddr;
  logic             l_valid, l_idle;
  logic [1:0]       l_dest;
  logic [PortW-1:0] l_port, seg_port;
  logic [63:0]      l_addr;
  logic [KcW-1:0]   l_len;
  logic [7:0]       l_bank;
  logic [RamAw-1:0] l_waddr;
  // read masters -> buffers (port 0 also takes the descriptors and A)
  logic [NumPorts-1:0]       pt_seg_valid, pt_seg_ready, pt_we, pt_done, pt_idle, pt_err;
  logic [NumPorts*2-1:0]     pt_dest;
  logic [NumPorts*BankW-1:0] pt_bank;
  logic [NumPorts*RamAw-1:0] pt_waddr;
  logic [NumPorts*DW-1:0]    pt_wdata;
  logic              buf_we, rd_idle, rd_err;
  logic [1:0]        buf_dest;
  logic [BankW-1:0]  buf_bank;
  logic [RamAw-1:0]  buf_waddr;
  logic [DW-1:0]     buf_wdata;
  // step queue
  localparam int StepW = SlW + SlW + KcW + 1 + 1 + 1 + MLenW + NLenW + 64 + CntW + 1 + CT;
  logic             sf_push, sf_pop, sf_empty, sf_full;
  logic [StepW-1:0] sf_wdata, sf_rdata;
  logic             s_bsr, h_bsr;
  logic [CT-1:0]    s_cb, h_cb;
  logic             z_valid, z_ready, wr_zidle;
  logic [63:0]      z_c;
  logic [MLenW-1:0] z_mlen;
  logic [NLenW-1:0] z_nlen;
  logic [SlW-1:0]   s_sa, s_sw;
  logic             s_first, s_last, s_gemv;
  logic [KcW-1:0]   s_kc;
  logic [MLenW-1:0] s_mlen;
  logic [NLenW-1:0] s_nlen;
  logic [63:0]      s_c;
  logic [CntW-1:0]  s_target;
  logic [SlW-1:0]   h_sa, h_sw;
  logic             h_first, h_last, h_gemv;
  logic [KcW-1:0]   h_kc;
  logic [MLenW-1:0] h_mlen;
  logic [NLenW-1:0] h_nlen;
  logic [63:0]      h_c;
  logic [CntW-1:0]  h_target;
  // compute
  logic             c_release, c_active, c_re, tile, tile_gemv;
  logic [SlW-1:0]   c_rel_sa, c_rel_sw;
  logic [RamAw-1:0] a_raddr, w_raddr;
  logic [63:0]      tile_c;
  logic [MLenW-1:0] tile_mlen;
  logic [NLenW-1:0] tile_nlen;
  logic             p_v, p_first, p_last, p_gemv;
  logic [OffW-1:0]  p_idx;
  logic [LaneW-1:0] p_lanes;
  // array and writer
  logic                  cap, out_gemv, out_busy;
  logic [Cols*32-1:0]    out_row, colsum;
  logic [LaneW-1:0]      wr_row;
  logic                  wreq_valid, wreq_ready, wreq_hs, wr_idle, wr_err;
  logic [63:0]           wreq_addr;
  logic [RowBytes*8-1:0] wreq_data;
  logic [NbW-1:0]        wreq_nbytes;
  // counters
  logic [CntW-1:0] segs_issued_q, segs_issued_d, segs_done_q, segs_done_d;
  logic [63:0] cyc_busy_q, cyc_busy_d, cyc_stall_q, cyc_stall_d;
  logic [63:0] bytes_rd_q, bytes_rd_d, bytes_wr_q, bytes_wr_d;
  logic        run_start;

  // ---------------------------------------------------------------- engines
  tsr_desc_unit #(.Cols(Cols), .DataBytes(DataBytes), .NumPorts(NumPorts), .Bsr(Bsr)) u_desc (
    .clk_i, .rst_ni,
    .start_i, .mem_base_i, .mem_size_i, .ring_i, .n_desc_i, .queue_i, .q_close_i, .q_tail_i,
    .fetch_valid_o (fetch_valid), .fetch_addr_o (fetch_addr), .fetch_len_o (fetch_len),
    .fetch_bank_o (fetch_bank), .fetch_ready_i (seg_ready),
    .desc_we_i (buf_we && buf_dest == DestDesc && buf_bank == BankDesc),
    .bm_we_i (buf_we && buf_dest == DestDesc && buf_bank == BankCount),
    .bm_word_i (buf_waddr[0]), .bm_kmask_o (bm_kmask), .desc_word_i (buf_wdata[511:0]),
    .reads_idle_i (segs_done_q == segs_issued_q), .axi_err_i (rd_err || wr_err),
    .exec_o (exec), .gemv_o (exec_gemv), .loader_idle_i (l_idle), .barrier_ok_i (barrier_ok),
    .running_o (running), .executing_o (executing), .q_wait_o (q_wait),
    .m_o (d_m), .n_o (d_n), .k_o (d_k), .lda_o (d_lda), .ldw_o (d_ldw), .ldc_o (d_ldc),
    .a_addr_o (d_a), .w_addr_o (d_w), .c_addr_o (d_c),
    .striped_o (striped), .w_cstride_o (d_cstride),
    .bsr_o (d_bsr), .bk128_o (d_bk128), .rb_o (d_rb), .tiles_o (d_tiles),
    .win_base_o (win_base), .win_end_o (win_end),
    .done_o, .status_o, .err_index_o, .desc_done_o, .macs_o
  );

  tsr_loader #(.Rows(Rows), .Cols(Cols), .DataBytes(DataBytes), .KChunk(KChunk),
               .NumPorts(NumPorts), .SegW(SegW), .Slots(Slots)) u_load (
    .clk_i, .rst_ni,
    .start_i (exec), .gemv_i (exec_gemv), .m_i (d_m), .n_i (d_n), .k_i (d_k),
    .lda_i (d_lda), .ldw_i (d_ldw), .ldc_i (d_ldc),
    .a_addr_i (d_a), .w_addr_i (d_w), .c_addr_i (d_c),
    .striped_i (striped), .w_cstride_i (d_cstride),
    .bsr_i (d_bsr), .bk128_i (d_bk128), .rb_i (d_rb), .tiles_i (d_tiles), .idle_o (l_idle),
    .bm_we_i (buf_we && buf_dest == DestDesc && buf_bank[7:1] == BankWalk[7:1]),
    .bm_entry_i (buf_bank[0]), .bm_word_i (buf_waddr[0]), .bm_data_i (buf_wdata[511:0] & bm_kmask),
    .z_valid_o (z_valid), .z_ready_i (z_ready), .z_c_o (z_c), .z_mlen_o (z_mlen),
    .z_nlen_o (z_nlen),
    .seg_valid_o (l_valid), .seg_ready_i (seg_ready), .seg_addr_o (l_addr),
    .seg_len_o (l_len), .seg_dest_o (l_dest), .seg_port_o (l_port), .seg_bank_o (l_bank), .seg_waddr_o (l_waddr),
    .push_o (sf_push), .full_i (sf_full), .segs_issued_i (segs_issued_q),
    .st_sa_o (s_sa), .st_sw_o (s_sw), .st_kc_o (s_kc), .st_first_o (s_first),
    .st_last_o (s_last), .st_gemv_o (s_gemv), .st_mlen_o (s_mlen), .st_nlen_o (s_nlen),
    .st_c_o (s_c), .st_target_o (s_target), .st_bsr_o (s_bsr), .st_cb_o (s_cb),
    .release_i (c_release), .rel_sa_i (c_rel_sa), .rel_sw_i (c_rel_sw)
  );

  // Step queue: one record per tile step whose loads have been issued.
  assign sf_wdata = {s_sa, s_sw, s_kc, s_first, s_last, s_gemv, s_mlen, s_nlen, s_c, s_target,
                     s_bsr, s_cb};
  assign {h_sa, h_sw, h_kc, h_first, h_last, h_gemv, h_mlen, h_nlen, h_c, h_target,
          h_bsr, h_cb} = sf_rdata;
  tsr_fifo #(.Width(StepW), .Depth(4)) u_steps (
    .clk_i, .rst_ni,
    .push_i (sf_push), .wdata_i (sf_wdata),
    .pop_i (sf_pop), .rdata_o (sf_rdata),
    .empty_o (sf_empty), .full_o (sf_full)
  );

  tsr_compute #(.Rows(Rows), .DataBytes(DataBytes), .KChunk(KChunk),
                .NumPorts(NumPorts), .SegW(SegW), .SlW(SlW), .NLenW(NLenW)) u_comp (
    .clk_i, .rst_ni,
    .valid_i (!sf_empty), .sa_i (h_sa), .sw_i (h_sw), .kc_i (h_kc), .first_i (h_first),
    .last_i (h_last), .gemv_i (h_gemv), .mlen_i (h_mlen), .nlen_i (h_nlen), .c_i (h_c),
    .target_i (h_target), .bsr_i (h_bsr), .cb_i (h_cb), .bk128_i (d_bk128),
    .segs_done_i (segs_done_q), .pop_o (sf_pop),
    .out_busy_i (out_busy), .tile_o (tile), .tile_c_o (tile_c), .tile_mlen_o (tile_mlen),
    .tile_nlen_o (tile_nlen), .tile_gemv_o (tile_gemv),
    .release_o (c_release), .rel_sa_o (c_rel_sa), .rel_sw_o (c_rel_sw),
    .active_o (c_active), .re_o (c_re), .a_raddr_o (a_raddr), .w_raddr_o (w_raddr),
    .v_o (p_v), .first_o (p_first), .last_o (p_last), .gemv_o (p_gemv), .idx_o (p_idx),
    .lanes_o (p_lanes)
  );

  tsr_writer #(.Rows(Rows), .Cols(Cols)) u_writer (
    .clk_i, .rst_ni, .ldc_i (d_ldc),
    .tile_i (tile), .tile_c_i (tile_c), .tile_mlen_i (tile_mlen), .tile_nlen_i (tile_nlen),
    .tile_gemv_i (tile_gemv), .busy_o (out_busy), .idle_o (wr_zidle),
    .z_valid_i (z_valid), .z_ready_o (z_ready), .z_c_i (z_c), .z_mlen_i (z_mlen),
    .z_nlen_i (z_nlen),
    .cap_i (cap), .bank_gemv_i (out_gemv), .row_o (wr_row), .row_i (out_row),
    .colsum_i (colsum),
    .req_valid_o (wreq_valid), .req_ready_i (wreq_ready), .req_addr_o (wreq_addr),
    .req_nbytes_o (wreq_nbytes), .req_data_o (wreq_data)
  );

  // Read segments come from the descriptor fetch or the loader (never both).
  always_comb begin
    seg_valid = l_valid;
    seg_addr  = l_addr;
    seg_len   = LenW'(l_len);
    seg_dest  = l_dest;
    seg_bank  = l_bank;
    seg_waddr = l_waddr;
    seg_port  = l_port;
    if (fetch_valid) begin
      seg_valid = 1'b1;
      seg_addr  = fetch_addr;
      seg_len   = LenW'(fetch_len);
      seg_dest  = DestDesc;
      seg_bank  = fetch_bank;
      seg_waddr = '0;
      seg_port  = '0;
    end
  end
  assign seg_ready = pt_seg_ready[seg_port];
  assign seg_hs    = seg_valid && seg_ready;
  for (genvar p = 0; p < NumPorts; p++) begin : g_segv
    assign pt_seg_valid[p] = seg_valid && (seg_port == PortW'(p));
  end

  // Port 0 writes the descriptor, the A banks and (unless W is striped) every
  // W bank; port p > 0 writes W banks j with j % NumPorts == p.
  assign buf_we    = pt_we[0];
  assign buf_dest  = pt_dest[1:0];
  assign buf_bank  = pt_bank[BankW-1:0];
  assign buf_waddr = pt_waddr[RamAw-1:0];
  assign buf_wdata = pt_wdata[DW-1:0];
  assign rd_idle   = &pt_idle;
  assign rd_err    = |pt_err;

  // ---------------------------------------------------------------- buffers
  logic [Rows*DW-1:0] a_words;
  logic [Cols*DW-1:0] w_words;

  for (genvar r = 0; r < Rows; r++) begin : g_abank
    tsr_ram_1r1w #(.Width(DW), .Depth(Slots * WordsSlot), .Aw(RamAw)) u_ram (
      .clk_i,
      .we_i    (buf_we && buf_dest == DestA && buf_bank == BankW'(r)),
      .waddr_i (buf_waddr),
      .wdata_i (buf_wdata),
      .re_i    (c_re),
      .raddr_i (a_raddr),
      .rdata_o (a_words[r*DW +: DW])
    );
  end
  // A GEMM_BSR tile's word i (the word address's low bits) goes to bank
  // i / (BK/64), at the tile's k word (the segment's bank field) + i % (BK/64).
  logic [SlotAw-1:0] wt_i;
  logic [4:0]        wt_bank;
  logic [RamAw-1:0]  wt_addr;
  assign wt_i    = buf_waddr[SlotAw-1:0];
  assign wt_bank = d_bk128 ? 5'(wt_i >> 1) : 5'(wt_i);
  assign wt_addr = {buf_waddr[RamAw-1:SlotAw], SlotAw'(buf_bank) + (d_bk128 ? SlotAw'(wt_i[0]) : '0)};
  for (genvar j = 0; j < Cols; j++) begin : g_wbank
    localparam int P = j % NumPorts;   // the port of this bank when striped
    logic              we, src, wt;
    logic [RamAw-1:0]  waddr;
    logic [DW-1:0]     wdata;
    if (P == 0) begin : g_p0
      assign src = 1'b0;
    end else begin : g_px
      assign src = striped;
    end
    if (Bsr != 0 && j < TSR_HW_BSR_BN) begin : g_wt
      assign wt = buf_we && buf_dest == DestWT && wt_bank == 5'(j);
    end else begin : g_nowt
      assign wt = 1'b0;
    end
    assign we    = src ? (pt_we[P] && pt_dest[P*2 +: 2] == DestW &&
                          pt_bank[P*BankW +: BankW] == BankW'(j))
                       : ((buf_we && buf_dest == DestW && buf_bank == BankW'(j)) || wt);
    assign waddr = src ? pt_waddr[P*RamAw +: RamAw] : (wt ? wt_addr : buf_waddr);
    assign wdata = src ? pt_wdata[P*DW +: DW] : buf_wdata;
    tsr_ram_1r1w #(.Width(DW), .Depth(Slots * WordsSlot), .Aw(RamAw)) u_ram (
      .clk_i,
      .we_i    (we),
      .waddr_i (waddr),
      .wdata_i (wdata),
      .re_i    (c_re),
      .raddr_i (w_raddr),
      .rdata_o (w_words[j*DW +: DW])
    );
  end

  tsr_mac_array #(.Rows(Rows), .Cols(Cols), .DataBytes(DataBytes)) u_array (
    .clk_i, .rst_ni,
    .v_i (p_v), .first_i (p_first), .last_i (p_last), .gemv_i (p_gemv),
    .idx_i (p_idx), .lanes_i (p_lanes),
    .a_words_i (a_words), .w_words_i (w_words),
    .cap_o (cap), .gemv_o (out_gemv), .row_i (wr_row), .row_o (out_row),
    .colsum_o (colsum)
  );

  // ---------------------------------------------------------------- masters
  assign wreq_hs = wreq_valid && wreq_ready;

  tsr_wr_master #(.DataBytes(DataBytes), .RowBytes(RowBytes),
                  .MaxOutstanding(MaxOutstanding)) u_wr (
    .clk_i, .rst_ni,
    .req_valid_i (wreq_valid), .req_ready_o (wreq_ready), .req_addr_i (wreq_addr),
    .req_nbytes_i (wreq_nbytes), .req_data_i (wreq_data),
    .awvalid_o, .awready_i, .awaddr_o, .awlen_o, .awsize_o, .awburst_o,
    .wvalid_o, .wready_i, .wdata_o, .wstrb_o, .wlast_o,
    .bvalid_i, .bready_o, .bresp_i,
    .idle_o (wr_idle), .err_o (wr_err)
  );

  for (genvar p = 0; p < NumPorts; p++) begin : g_rd
    logic              arvalid, arready, rvalid, rready, rlast;
    logic [63:0]       araddr;
    logic [7:0]        arlen;
    logic [2:0]        arsize;
    logic [1:0]        arburst, rresp;
    logic [DW-1:0]     rdata;
    if (p == 0) begin : g_main
      assign arvalid_o = arvalid;
      assign arready   = arready_i;
      assign araddr_o  = araddr;
      assign arlen_o   = arlen;
      assign arsize_o  = arsize;
      assign arburst_o = arburst;
      assign rvalid    = rvalid_i;
      assign rready_o  = rready;
      assign rdata     = rdata_i;
      assign rresp     = rresp_i;
      assign rlast     = rlast_i;
    end else begin : g_x
      assign xarvalid_o[p-1]          = arvalid;
      assign arready                  = xarready_i[p-1];
      assign xaraddr_o[(p-1)*64 +: 64] = araddr;
      assign xarlen_o[(p-1)*8 +: 8]    = arlen;
      assign xarsize_o[(p-1)*3 +: 3]   = arsize;
      assign xarburst_o[(p-1)*2 +: 2]  = arburst;
      assign rvalid                   = xrvalid_i[p-1];
      assign xrready_o[p-1]           = rready;
      assign rdata                    = xrdata_i[(p-1)*DW +: DW];
      assign rresp                    = xrresp_i[(p-1)*2 +: 2];
      assign rlast                    = xrlast_i[p-1];
    end
    tsr_rd_master #(.DataBytes(DataBytes), .MaxOutstanding(MaxOutstanding),
                    .BankW(BankW), .WordAw(RamAw), .LenW(LenW)) u_rd (
      .clk_i, .rst_ni,
      .seg_valid_i (pt_seg_valid[p]), .seg_ready_o (pt_seg_ready[p]), .seg_addr_i (seg_addr),
      .seg_len_i (seg_len), .seg_dest_i (seg_dest), .seg_bank_i (seg_bank),
      .seg_waddr_i (seg_waddr),
      .arvalid_o (arvalid), .arready_i (arready), .araddr_o (araddr), .arlen_o (arlen),
      .arsize_o (arsize), .arburst_o (arburst),
      .rvalid_i (rvalid), .rready_o (rready), .rdata_i (rdata), .rresp_i (rresp),
      .rlast_i (rlast),
      .buf_we_o (pt_we[p]), .buf_dest_o (pt_dest[p*2 +: 2]), .buf_bank_o (pt_bank[p*BankW +: BankW]),
      .buf_waddr_o (pt_waddr[p*RamAw +: RamAw]), .buf_wdata_o (pt_wdata[p*DW +: DW]),
      .seg_done_o (pt_done[p]), .err_o (pt_err[p]), .idle_o (pt_idle[p])
    );
  end
  if (NumPorts == 1) begin : g_no_x
    assign xarvalid_o = '0;
    assign xaraddr_o  = '0;
    assign xarlen_o   = '0;
    assign xarsize_o  = '0;
    assign xarburst_o = '0;
    assign xrready_o  = '0;
    logic unused_x;
    assign unused_x = ^{xarready_i, xrvalid_i, xrdata_i, xrresp_i, xrlast_i};
  end

  // ---------------------------------------------------------------- counters
  assign barrier_ok = l_idle && sf_empty && !c_active && wr_zidle &&
                      wr_idle && rd_idle && (segs_done_q == segs_issued_q);
  assign run_start  = !running && start_i;

  always_comb begin
    for (int p = 0; p < NumPorts; p++) begin
      segs_issued_d[p*SegW +: SegW] = segs_issued_q[p*SegW +: SegW] + SegW'(pt_seg_valid[p] && pt_seg_ready[p]);
      segs_done_d[p*SegW +: SegW]   = segs_done_q[p*SegW +: SegW] + SegW'(pt_done[p]);
    end
    // a queue waiting for its doorbell is not busy
    cyc_busy_d    = (running && !q_wait) ? cyc_busy_q + 64'd1 : cyc_busy_q;
    cyc_stall_d   = cyc_stall_q;
    if (running && executing && !c_active && (!l_idle || !sf_empty)) begin
      cyc_stall_d = cyc_stall_q + 64'd1;
    end
    bytes_rd_d = seg_hs ? bytes_rd_q + 64'(seg_len) : bytes_rd_q;
    bytes_wr_d = wreq_hs ? bytes_wr_q + 64'(wreq_nbytes) : bytes_wr_q;
    if (run_start) begin
      cyc_busy_d = 64'd1;
      cyc_stall_d = '0;
      bytes_rd_d = '0;
      bytes_wr_d = '0;
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      segs_issued_q <= '0; segs_done_q <= '0;
      cyc_busy_q <= '0; cyc_stall_q <= '0; bytes_rd_q <= '0; bytes_wr_q <= '0;
    end else begin
      segs_issued_q <= segs_issued_d; segs_done_q <= segs_done_d;
      cyc_busy_q <= cyc_busy_d; cyc_stall_q <= cyc_stall_d;
      bytes_rd_q <= bytes_rd_d; bytes_wr_q <= bytes_wr_d;
    end
  end

  assign hw_ops_o    = (32'd1 << TSR_OP_NOP) | (32'd1 << TSR_OP_GEMM_I8_I32) |
                       ((Bsr != 0) ? (32'd1 << TSR_OP_GEMM_BSR_I8_I32) : 32'd0);
  assign cyc_busy_o  = cyc_busy_q;
  assign cyc_stall_o = cyc_stall_q;
  assign bytes_rd_o  = bytes_rd_q;
  assign bytes_wr_o  = bytes_wr_q;

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  // Parameters the datapath relies on.
  initial begin
    assert (DataBytes >= TSR_HW_DESC_BYTES && (DataBytes & (DataBytes - 1)) == 0)
      else $fatal(1, "DataBytes must be a power of two >= 64");
    assert ((Rows & (Rows - 1)) == 0 && (Cols & (Cols - 1)) == 0 && Rows <= DataBytes)
      else $fatal(1, "Rows and Cols must be powers of two, Rows <= DataBytes");
    assert (NumPorts >= 1 && (NumPorts & (NumPorts - 1)) == 0 && NumPorts <= Cols)
      else $fatal(1, "NumPorts must be a power of two, 1 .. Cols");
    assert (KChunk % DataBytes == 0 && KChunk >= DataBytes)
      else $fatal(1, "KChunk must be a multiple of DataBytes");
  end
  // No memory access outside the window while running.
  always_ff @(posedge clk_i) begin
    if (rst_ni && arvalid_o && arready_i) begin
      assert ({1'b0, araddr_o} + 65'(DataBytes) > {1'b0, win_base} &&
              {1'b0, araddr_o} < win_end)
        else $error("tsr_core: read burst at %h outside the window", araddr_o);
    end
    if (rst_ni && awvalid_o && awready_i) begin
      assert ({1'b0, awaddr_o} + 65'(DataBytes) > {1'b0, win_base} &&
              {1'b0, awaddr_o} < win_end)
        else $error("tsr_core: write burst at %h outside the window", awaddr_o);
    end
    if (rst_ni) begin
      assert (!(fetch_valid && l_valid)) else $error("tsr_core: fetch during a load");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
