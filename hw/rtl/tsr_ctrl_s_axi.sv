// tsr_ctrl_s_axi - AXI4-Lite control slave: the Xilinx ap_ctrl_hs /
// ap_ctrl_chain block (UG1399), kernel arguments and status registers at the
// offsets of hw/regmap.def.
//
// Kernel handshake (kst_q):
//   IDLE --ap_start--> RUN: arguments are copied for the core, ap_ready is
//        raised (the host may now write the next arguments and set ap_start
//        again: that start is queued), ap_start clears unless auto_restart.
//        Q_CTRL's queue bit is copied with the arguments.
//   RUN --core done--> HOLD: ap_done is raised (clear on read).
//   HOLD --ap_continue written (or auto_restart set)--> IDLE, where a queued
//        ap_start is accepted at once. Status registers stay valid until then.
// ISR bits are set by ap_done/ap_ready when enabled in IER and toggle when the
// host writes 1; interrupt_o = GIE & |ISR.
// Q_CTRL (queue bit, close bit; its other bits read 0) and Q_TAIL are plain
// registers the host may write at any time, also while the kernel runs; the
// core sees the close bit and Q_TAIL as they are (the doorbell).
// Unmapped offsets inside the 0x80 window read 0 and ignore writes; offsets
// beyond it or not 4-byte aligned get SLVERR.
module tsr_ctrl_s_axi #(
  parameter int Rows     = 16,  // array rows (HW_INFO)
  parameter int Cols     = 16,  // array columns (HW_INFO)
  parameter int NumPorts = 1    // read ports (HW_INFO)
) (
  input  logic        clk_i,           // clock
  input  logic        rst_ni,          // asynchronous reset, active low
  // AXI4-Lite slave
  input  logic        awvalid_i,       // AW valid
  output logic        awready_o,       // AW ready
  input  logic [11:0] awaddr_i,        // AW address
  input  logic        wvalid_i,        // W valid
  output logic        wready_o,        // W ready
  input  logic [31:0] wdata_i,         // W data
  input  logic [3:0]  wstrb_i,         // W byte strobes
  output logic        bvalid_o,        // B valid
  input  logic        bready_i,        // B ready
  output logic [1:0]  bresp_o,         // B response
  input  logic        arvalid_i,       // AR valid
  output logic        arready_o,       // AR ready
  input  logic [11:0] araddr_i,        // AR address
  output logic        rvalid_o,        // R valid
  input  logic        rready_i,        // R ready
  output logic [31:0] rdata_o,         // R data
  output logic [1:0]  rresp_o,         // R response
  output logic        interrupt_o,     // level interrupt
  output logic        ap_done_o,       // level of CTRL.ap_done (for the harness)
  // core
  output logic        core_start_o,    // pulse: run with the arguments below
  output logic [63:0] mem_base_o,      // argument copies taken at ap_start
  output logic [63:0] mem_size_o,      //
  output logic [63:0] ring_o,          //
  output logic [31:0] n_desc_o,        //
  output logic        queue_o,         // Q_CTRL queue bit, taken at ap_start
  output logic        q_close_o,       // Q_CTRL close bit, live
  output logic [31:0] q_tail_o,        // Q_TAIL, live
  input  logic        core_done_i,     // pulse: run finished
  input  logic [31:0] status_i,        // STATUS
  input  logic [31:0] err_index_i,     // ERR_INDEX
  input  logic [31:0] desc_done_i,     // DESC_DONE
  input  logic [63:0] cyc_busy_i,      // CYC_BUSY
  input  logic [63:0] cyc_stall_i,     // CYC_STALL
  input  logic [63:0] bytes_rd_i,      // BYTES_RD
  input  logic [63:0] bytes_wr_i,      // BYTES_WR
  input  logic [63:0] macs_i,          // MACS
  input  logic [31:0] hw_ops_i         // HW_OPS
);
`include "tsr_regs_pkg.svh"

  localparam logic [1:0] KIdle = 2'd0, KRun = 2'd1, KHold = 2'd2;

  logic [1:0]  kst_q;
  logic        ap_start_q, ap_done_q, ap_ready_q, auto_restart_q;
  logic        gie_q;
  logic [1:0]  ier_q, isr_q;
  logic [31:0] arg_q [10];   // argument words 0x10..0x34 (only the named ones written)
  logic [63:0] mem_base_q, mem_size_q, ring_q;
  logic [31:0] n_desc_q;
  logic [1:0]  q_ctrl_q;     // Q_CTRL bits 1:0
  logic [31:0] q_tail_q;     // Q_TAIL
  logic        queue_q;      // the queue bit of the run

  // ---- write channel: take AW and W in any order ----
  logic        aw_have_q, w_have_q;
  logic [11:0] aw_addr_q;
  logic [31:0] w_data_q;
  logic [3:0]  w_strb_q;
  logic        wr_fire;
  logic [31:0] wmask;

  assign awready_o = !aw_have_q;
  assign wready_o  = !w_have_q;
  assign wr_fire   = aw_have_q && w_have_q && !bvalid_o;
  assign wmask     = {{8{w_strb_q[3]}}, {8{w_strb_q[2]}}, {8{w_strb_q[1]}}, {8{w_strb_q[0]}}};

  logic addr_bad_w, addr_bad_r;
  assign addr_bad_w = (aw_addr_q >= 12'(TSR_HW_CTRL_BYTES)) || (aw_addr_q[1:0] != 2'b00);
  assign addr_bad_r = (araddr_i >= 12'(TSR_HW_CTRL_BYTES)) || (araddr_i[1:0] != 2'b00);

  // Argument words hw/regmap.def names (two for a 64-bit argument); the
  // words between them name nothing: they read 0 and ignore writes.
  function automatic logic arg_named(input logic [11:0] a);
    arg_named = a == TSR_ARG_MEM_BASE || a == TSR_ARG_MEM_SIZE || a == TSR_ARG_RING ||
                a == TSR_ARG_N_DESC ||
                (TSR_ARG_MEM_BASE_BITS > 32 && a == TSR_ARG_MEM_BASE + 12'h4) ||
                (TSR_ARG_MEM_SIZE_BITS > 32 && a == TSR_ARG_MEM_SIZE + 12'h4) ||
                (TSR_ARG_RING_BITS > 32 && a == TSR_ARG_RING + 12'h4) ||
                (TSR_ARG_N_DESC_BITS > 32 && a == TSR_ARG_N_DESC + 12'h4);
  endfunction

  logic wr_ctrl, wr_gie, wr_ier, wr_isr, wr_arg, wr_qctrl, wr_qtail;
  assign wr_ctrl = wr_fire && !addr_bad_w && aw_addr_q == TSR_REG_CTRL;
  assign wr_gie  = wr_fire && !addr_bad_w && aw_addr_q == TSR_REG_GIE;
  assign wr_ier  = wr_fire && !addr_bad_w && aw_addr_q == TSR_REG_IER;
  assign wr_isr  = wr_fire && !addr_bad_w && aw_addr_q == TSR_REG_ISR;
  assign wr_arg  = wr_fire && !addr_bad_w && arg_named(aw_addr_q);
  assign wr_qctrl = wr_fire && !addr_bad_w && aw_addr_q == TSR_REG_Q_CTRL;
  assign wr_qtail = wr_fire && !addr_bad_w && aw_addr_q == TSR_REG_Q_TAIL;

  logic start_w, continue_w;
  assign start_w    = wr_ctrl && w_strb_q[0] && w_data_q[0];
  assign continue_w = wr_ctrl && w_strb_q[0] && w_data_q[4];

  // ---- read channel ----
  logic ar_hs, rd_ctrl;
  assign arready_o = !rvalid_o;
  assign ar_hs     = arvalid_i && arready_o;
  assign rd_ctrl   = ar_hs && !addr_bad_r && araddr_i == TSR_REG_CTRL;

  // ---- kernel handshake ----
  logic accept, finish, ready_ev, done_ev;
  assign accept   = (kst_q == KIdle) && ap_start_q;
  assign finish   = (kst_q == KRun) && core_done_i;
  assign ready_ev = accept;
  assign done_ev  = finish;
  // The core starts one cycle after accept, when the argument copies are set.
  logic start_q;
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) start_q <= 1'b0;
    else start_q <= accept;
  end
  assign core_start_o = start_q;

  // ---- interrupt status: set by enabled events, toggled by the host ----
  logic [1:0] isr_n;
  always_comb begin
    isr_n = isr_q;
    if (wr_isr && w_strb_q[0]) isr_n = isr_n ^ w_data_q[1:0];
    if (done_ev && ier_q[0]) isr_n[0] = 1'b1;
    if (ready_ev && ier_q[1]) isr_n[1] = 1'b1;
  end


  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      kst_q          <= KIdle;
      ap_start_q     <= 1'b0;
      ap_done_q      <= 1'b0;
      ap_ready_q     <= 1'b0;
      auto_restart_q <= 1'b0;
      gie_q          <= 1'b0;
      ier_q          <= '0;
      isr_q          <= '0;
      mem_base_q     <= '0;
      mem_size_q     <= '0;
      ring_q         <= '0;
      n_desc_q       <= '0;
      q_ctrl_q       <= '0;
      q_tail_q       <= '0;
      queue_q        <= 1'b0;
      for (int i = 0; i < 10; i++) arg_q[i] <= '0;
    end else begin
      // ap_start: set by the host, cleared when taken (unless auto_restart).
      if (start_w) ap_start_q <= 1'b1;
      else if (accept && !auto_restart_q) ap_start_q <= 1'b0;
      if (wr_ctrl && w_strb_q[0]) auto_restart_q <= w_data_q[7];

      unique case (kst_q)
        KIdle: if (accept) kst_q <= KRun;
        KRun:  if (finish) kst_q <= auto_restart_q ? KIdle : KHold;
        KHold: if (continue_w || auto_restart_q) kst_q <= KIdle;
        default: kst_q <= KIdle;
      endcase

      if (accept) begin
        mem_base_q <= {arg_q[1], arg_q[0]};      // 0x10, 0x14
        mem_size_q <= {arg_q[4], arg_q[3]};      // 0x1C, 0x20
        ring_q     <= {arg_q[7], arg_q[6]};      // 0x28, 0x2C
        n_desc_q   <= arg_q[9];                  // 0x34
        queue_q    <= q_ctrl_q[0];
      end

      // Clear-on-read status bits; a new event wins over the read.
      if (done_ev) ap_done_q <= 1'b1;
      else if (rd_ctrl) ap_done_q <= 1'b0;
      if (ready_ev) ap_ready_q <= 1'b1;
      else if (rd_ctrl) ap_ready_q <= 1'b0;

      if (wr_gie) gie_q <= (w_data_q[0] & w_strb_q[0]);
      if (wr_ier && w_strb_q[0]) ier_q <= w_data_q[1:0];
      isr_q <= isr_n;

      if (wr_arg) begin
        arg_q[aw_addr_q[5:2] - 4'd4] <= (arg_q[aw_addr_q[5:2] - 4'd4] & ~wmask) |
                                         (w_data_q & wmask);
      end
      if (wr_qctrl && w_strb_q[0]) q_ctrl_q <= w_data_q[1:0];
      if (wr_qtail) q_tail_q <= (q_tail_q & ~wmask) | (w_data_q & wmask);
    end
  end

  // AXI-Lite channel registers.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      aw_have_q <= 1'b0;
      w_have_q  <= 1'b0;
      aw_addr_q <= '0;
      w_data_q  <= '0;
      w_strb_q  <= '0;
      bvalid_o  <= 1'b0;
      bresp_o   <= 2'b00;
      rvalid_o  <= 1'b0;
      rdata_o   <= '0;
      rresp_o   <= 2'b00;
    end else begin
      if (awvalid_i && awready_o) begin
        aw_have_q <= 1'b1;
        aw_addr_q <= awaddr_i;
      end
      if (wvalid_i && wready_o) begin
        w_have_q <= 1'b1;
        w_data_q <= wdata_i;
        w_strb_q <= wstrb_i;
      end
      if (wr_fire) begin
        aw_have_q <= 1'b0;
        w_have_q  <= 1'b0;
        bvalid_o  <= 1'b1;
        bresp_o   <= addr_bad_w ? 2'b10 : 2'b00;
      end else if (bvalid_o && bready_i) begin
        bvalid_o <= 1'b0;
      end
      if (ar_hs) begin
        rvalid_o <= 1'b1;
        rresp_o  <= addr_bad_r ? 2'b10 : 2'b00;
        rdata_o  <= addr_bad_r ? 32'd0 : rd_mux;
      end else if (rvalid_o && rready_i) begin
        rvalid_o <= 1'b0;
      end
    end
  end

  // Register read multiplexer.
  logic [31:0] hw_info;
  assign hw_info = {8'(NumPorts), 8'(TSR_HW_IF_VERSION), 8'(Cols), 8'(Rows)};

  logic [31:0] rd_mux;
  always_comb begin
    rd_mux = 32'd0;
    unique case (araddr_i)
      TSR_REG_CTRL: rd_mux = {24'd0, auto_restart_q, 2'b00, 1'b0, ap_ready_q,
                              (kst_q == KIdle), ap_done_q, ap_start_q};
      TSR_REG_GIE:  rd_mux = {31'd0, gie_q};
      TSR_REG_IER:  rd_mux = {30'd0, ier_q};
      TSR_REG_ISR:  rd_mux = {30'd0, isr_q};
      TSR_STAT_STATUS:            rd_mux = status_i;
      TSR_STAT_ERR_INDEX:         rd_mux = err_index_i;
      TSR_STAT_DESC_DONE:         rd_mux = desc_done_i;
      TSR_STAT_HW_INFO:           rd_mux = hw_info;
      TSR_STAT_CYC_BUSY:          rd_mux = cyc_busy_i[31:0];
      TSR_STAT_CYC_BUSY + 12'h4:  rd_mux = cyc_busy_i[63:32];
      TSR_STAT_CYC_STALL:         rd_mux = cyc_stall_i[31:0];
      TSR_STAT_CYC_STALL + 12'h4: rd_mux = cyc_stall_i[63:32];
      TSR_STAT_BYTES_RD:          rd_mux = bytes_rd_i[31:0];
      TSR_STAT_BYTES_RD + 12'h4:  rd_mux = bytes_rd_i[63:32];
      TSR_STAT_BYTES_WR:          rd_mux = bytes_wr_i[31:0];
      TSR_STAT_BYTES_WR + 12'h4:  rd_mux = bytes_wr_i[63:32];
      TSR_STAT_MACS:              rd_mux = macs_i[31:0];
      TSR_STAT_MACS + 12'h4:      rd_mux = macs_i[63:32];
      TSR_STAT_HW_OPS:            rd_mux = hw_ops_i;
      TSR_STAT_HW_FEAT:           rd_mux = 32'(TSR_HW_FEAT_QUEUE);
      TSR_REG_Q_CTRL:             rd_mux = {30'd0, q_ctrl_q};
      TSR_REG_Q_TAIL:             rd_mux = q_tail_q;
      default: begin
        if (arg_named(araddr_i)) rd_mux = arg_q[araddr_i[5:2] - 4'd4];
      end
    endcase
  end

  assign interrupt_o = gie_q && (isr_q != 2'b00);
  assign ap_done_o   = ap_done_q;
  assign mem_base_o  = mem_base_q;
  assign mem_size_o  = mem_size_q;
  assign ring_o      = ring_q;
  assign n_desc_o    = n_desc_q;
  assign queue_o     = queue_q;
  assign q_close_o   = q_ctrl_q[1];
  assign q_tail_o    = q_tail_q;
endmodule
