// tsr_kernel_tb - self-checking testbench of tsr_kernel for a second
// simulator (iverilog). It loads a device memory image and the kernel
// arguments written by `tsr_rtl_test --iverilog-case DIR`, runs the ring
// through the AXI4-Lite slave, serves the AXI4 master from a simple memory
// model, and compares the memory afterwards with the image the Verilator
// model produced (itself checked against the naive int8 reference).
// Then it runs the same descriptors again from the same image in queue mode
// (Q_CTRL, Q_TAIL): a ring of min(n, 4) slots, published two descriptors
// first and then as many as the slots hold, each slot refilled by the
// testbench once its descriptor has run; the memory must come out the same
// (the ring's words put back), the kernel must wait without counting busy
// cycles, and CYC_BUSY must equal the normal run's.
//
// Plusargs: +dir=DIR (mem.hex, expect.hex, args.hex), +words=N (bus words).
`timescale 1ns / 1ps
module tsr_kernel_tb;
`include "tsr_regs_pkg.svh"
  localparam int DataBytes = 64;
  localparam int DW        = DataBytes * 8;
  localparam int MaxWords  = 4096;
  localparam int Latency   = 5;

  logic clk_i = 1'b0;
  logic rst_ni = 1'b0;
  always #5 clk_i = ~clk_i;

  // AXI4-Lite
  logic        awvalid = 1'b0, wvalid = 1'b0, bready = 1'b0, arvalid = 1'b0, rready = 1'b0;
  logic [11:0] awaddr = '0, araddr = '0;
  logic [31:0] wdata = '0;
  logic        awready, wready, bvalid, arready, rvalid, irq, ap_done;
  logic [1:0]  bresp, rresp;
  logic [31:0] rdata;
  // AXI4
  logic          m_arvalid, m_rready, m_awvalid, m_wvalid, m_wlast, m_bready;
  logic [63:0]   m_araddr, m_awaddr;
  logic [7:0]    m_arlen, m_awlen;
  logic [2:0]    m_arsize, m_awsize;
  logic [1:0]    m_arburst, m_awburst;
  logic [DW-1:0] m_wdata;
  logic [DataBytes-1:0] m_wstrb;
  logic          m_arready, m_rvalid, m_rlast, m_awready, m_wready, m_bvalid;  // slave outputs
  logic [DW-1:0] m_rdata;
  logic [1:0]    m_rresp, m_bresp;

  tsr_kernel dut (
    .clk_i, .rst_ni,
    .s_axi_control_awvalid (awvalid), .s_axi_control_awready (awready),
    .s_axi_control_awaddr (awaddr), .s_axi_control_wvalid (wvalid),
    .s_axi_control_wready (wready), .s_axi_control_wdata (wdata),
    .s_axi_control_wstrb (4'hf), .s_axi_control_bvalid (bvalid),
    .s_axi_control_bready (bready), .s_axi_control_bresp (bresp),
    .s_axi_control_arvalid (arvalid), .s_axi_control_arready (arready),
    .s_axi_control_araddr (araddr), .s_axi_control_rvalid (rvalid),
    .s_axi_control_rready (rready), .s_axi_control_rdata (rdata),
    .s_axi_control_rresp (rresp), .interrupt_o (irq), .ap_done_o (ap_done),
    .m_axi_gmem_arvalid (m_arvalid), .m_axi_gmem_arready (m_arready),
    .m_axi_gmem_araddr (m_araddr), .m_axi_gmem_arlen (m_arlen),
    .m_axi_gmem_arsize (m_arsize), .m_axi_gmem_arburst (m_arburst),
    .m_axi_gmem_rvalid (m_rvalid), .m_axi_gmem_rready (m_rready),
    .m_axi_gmem_rdata (m_rdata), .m_axi_gmem_rresp (m_rresp), .m_axi_gmem_rlast (m_rlast),
    .m_axi_gmem_awvalid (m_awvalid), .m_axi_gmem_awready (m_awready),
    .m_axi_gmem_awaddr (m_awaddr), .m_axi_gmem_awlen (m_awlen),
    .m_axi_gmem_awsize (m_awsize), .m_axi_gmem_awburst (m_awburst),
    .m_axi_gmem_wvalid (m_wvalid), .m_axi_gmem_wready (m_wready),
    .m_axi_gmem_wdata (m_wdata), .m_axi_gmem_wstrb (m_wstrb), .m_axi_gmem_wlast (m_wlast),
    .m_axi_gmem_bvalid (m_bvalid), .m_axi_gmem_bready (m_bready), .m_axi_gmem_bresp (m_bresp)
  );

  // ---- memory model: in-order reads with a fixed latency, writes with strobes ----
  logic [DW-1:0] mem [MaxWords];
  logic [DW-1:0] expect_mem [MaxWords];
  logic [63:0]   args [4];
  logic [63:0]   base;
  int            words;

  logic [63:0] rq_addr [16];
  int          rq_len [16];
  logic [63:0] rq_time [16];
  int          rq_head = 0, rq_tail = 0, rq_beat = 0;
  logic [63:0] wq_addr [16];
  int          wq_len [16];
  int          wq_head = 0, wq_tail = 0, wq_beat = 0, b_pending = 0;
  logic [63:0] cycle = 0;
  int          errors = 0;

  // Slave outputs are registered: computed at each edge from the state after
  // that edge's handshakes.
  initial begin
    m_arready = 1'b0; m_awready = 1'b0; m_wready = 1'b0; m_rvalid = 1'b0;
    m_rdata = '0; m_rlast = 1'b0; m_bvalid = 1'b0;
  end
  assign m_rresp = 2'b00;
  assign m_bresp = 2'b00;

  always @(posedge clk_i) begin
    cycle <= cycle + 1;
    if (m_arvalid && m_arready) begin
      if (m_araddr[11:0] + (m_arlen + 1) * DataBytes > 4096) begin
        $display("tb: read burst crosses 4 KiB at %h", m_araddr);
        errors = errors + 1;
      end
      rq_addr[rq_tail % 16] = m_araddr;
      rq_len[rq_tail % 16] = m_arlen + 1;
      rq_time[rq_tail % 16] = cycle + Latency;
      rq_tail = rq_tail + 1;
    end
    if (m_rvalid && m_rready) begin
      if (rq_beat == rq_len[rq_head % 16] - 1) begin
        rq_beat = 0;
        rq_head = rq_head + 1;
      end else begin
        rq_beat = rq_beat + 1;
      end
    end
    if (m_awvalid && m_awready) begin
      wq_addr[wq_tail % 16] = m_awaddr;
      wq_len[wq_tail % 16] = m_awlen + 1;
      wq_tail = wq_tail + 1;
    end
    if (m_wvalid && m_wready) begin
      for (int i = 0; i < DataBytes; i++)
        if (m_wstrb[i])
          mem[(wq_addr[wq_head % 16] - base) / DataBytes + wq_beat][i*8 +: 8] = m_wdata[i*8 +: 8];
      if (wq_beat == wq_len[wq_head % 16] - 1) begin
        if (!m_wlast) begin
          $display("tb: WLAST missing");
          errors = errors + 1;
        end
        wq_beat = 0;
        wq_head = wq_head + 1;
        b_pending = b_pending + 1;
      end else begin
        wq_beat = wq_beat + 1;
      end
    end
    if (m_bvalid && m_bready) b_pending = b_pending - 1;
    m_arready <= (rq_tail - rq_head) < 16;
    m_awready <= (wq_tail - wq_head) < 16;
    m_wready  <= (wq_tail != wq_head) || (m_awvalid && m_awready);
    m_rvalid  <= (rq_tail != rq_head) && (cycle + 1 >= rq_time[rq_head % 16]);
    m_rdata   <= mem[(rq_addr[rq_head % 16] - base) / DataBytes + rq_beat];
    m_rlast   <= (rq_beat == rq_len[rq_head % 16] - 1);
    m_bvalid  <= b_pending > 0;
  end

  // ---- AXI4-Lite tasks ----
  task automatic reg_write(input logic [11:0] a, input logic [31:0] d);
    @(negedge clk_i);
    awaddr = a; wdata = d; awvalid = 1'b1; wvalid = 1'b1; bready = 1'b1;
    while (awvalid || wvalid) begin
      @(posedge clk_i);
      if (awready) awvalid <= 1'b0;
      if (wready) wvalid <= 1'b0;
      @(negedge clk_i);
    end
    while (!bvalid) @(negedge clk_i);
    @(posedge clk_i);
    @(negedge clk_i);
    bready = 1'b0;
  endtask

  task automatic reg_read(input logic [11:0] a, output logic [31:0] d);
    @(negedge clk_i);
    araddr = a; arvalid = 1'b1; rready = 1'b1;
    while (!arready) @(negedge clk_i);
    @(posedge clk_i);
    @(negedge clk_i);
    arvalid = 1'b0;
    while (!rvalid) @(negedge clk_i);
    d = rdata;
    @(posedge clk_i);
    @(negedge clk_i);
    rready = 1'b0;
  endtask

  // Runs until ap_done or fails after a timeout.
  task automatic wait_done;
    for (int t = 0; t < 2000000 && !ap_done; t++) @(posedge clk_i);
    if (!ap_done) begin
      $display("tb: FAIL timeout");
      $finish;
    end
  endtask

  // Compares the memory with the expected image.
  task automatic check_mem(input string what);
    for (int i = 0; i < words; i++) begin
      if (mem[i] !== expect_mem[i]) begin
        if (errors < 10) $display("tb: %s: memory word %0d (address %h) differs", what, i,
                                  base + i * 64);
        errors = errors + 1;
      end
    end
  endtask

  // Reads DESC_DONE until it is `want`; ap_done must stay low meanwhile.
  task automatic q_until(input logic [31:0] want);
    logic [31:0] got;
    got = '0;
    for (int t = 0; t < 100000 && got != want; t++) begin
      reg_read(TSR_STAT_DESC_DONE, got);
      if (ap_done) begin
        $display("tb: queue: done with %0d of %0d descriptors run", got, want);
        errors = errors + 1;
        t = 100000;
      end
    end
    if (got != want) begin
      $display("tb: queue: DESC_DONE %0d, want %0d", got, want);
      errors = errors + 1;
    end
  endtask

  string dir;
  logic [31:0] v, status, done_n, busy_n, busy_w0, busy_w1, busy_q;
  logic [DW-1:0] ring_w [8];
  int ring0, slots, n, pub, nb;
  initial begin
    if (!$value$plusargs("dir=%s", dir)) dir = ".";
    if (!$value$plusargs("words=%d", words)) words = MaxWords;
    $readmemh({dir, "/mem.hex"}, mem);
    $readmemh({dir, "/expect.hex"}, expect_mem);
    $readmemh({dir, "/args.hex"}, args);
    base = args[0];
    repeat (4) @(posedge clk_i);
    rst_ni = 1'b1;
    reg_write(TSR_ARG_MEM_BASE, args[0][31:0]); reg_write(TSR_ARG_MEM_BASE + 12'h4, args[0][63:32]);
    reg_write(TSR_ARG_MEM_SIZE, args[1][31:0]); reg_write(TSR_ARG_MEM_SIZE + 12'h4, args[1][63:32]);
    reg_write(TSR_ARG_RING, args[2][31:0]); reg_write(TSR_ARG_RING + 12'h4, args[2][63:32]);
    reg_write(TSR_ARG_N_DESC, args[3][31:0]);
    reg_write(TSR_REG_CTRL, 32'h1);
    wait_done();
    reg_read(TSR_REG_CTRL, v);
    reg_read(TSR_STAT_STATUS, status);
    reg_read(TSR_STAT_DESC_DONE, done_n);
    reg_read(TSR_STAT_CYC_BUSY, busy_n);
    if (status != 0 || done_n != args[3][31:0]) begin
      $display("tb: status %0d, %0d descriptors done of %0d", status, done_n, args[3][31:0]);
      errors = errors + 1;
    end
    check_mem("ring");
    reg_write(TSR_REG_CTRL, 32'h10);   // ap_continue

    // ---- the same descriptors in queue mode, from the same image ----
    $readmemh({dir, "/mem.hex"}, mem);
    n = int'(args[3][31:0]);
    slots = (n < 4) ? n : 4;
    ring0 = int'((args[2] - base) / DataBytes);
    for (int i = 0; i < n && i < 8; i++) ring_w[i] = mem[ring0 + i];
    if (n > 8) begin
      $display("tb: queue: %0d descriptors, at most 8 supported", n);
      errors = errors + 1;
    end
    reg_write(TSR_ARG_N_DESC, slots);
    reg_write(TSR_REG_Q_TAIL, 32'd0);
    reg_write(TSR_REG_Q_CTRL, TSR_HW_Q_CTRL_QUEUE);
    reg_write(TSR_REG_CTRL, 32'h1);
    repeat (8) @(posedge clk_i);       // the start is taken
    pub = 0;
    while (pub < n && n <= 8) begin
      // nothing pending: the kernel waits and CYC_BUSY stands still
      reg_read(TSR_STAT_CYC_BUSY, busy_w0);
      repeat (200) @(posedge clk_i);
      reg_read(TSR_STAT_CYC_BUSY, busy_w1);
      if (busy_w0 != busy_w1 || ap_done) begin
        $display("tb: queue: waiting with %0d run: CYC_BUSY %0d then %0d, ap_done %0d", pub,
                 busy_w0, busy_w1, ap_done);
        errors = errors + 1;
      end
      nb = (pub == 0) ? 2 : slots;
      if (nb > n - pub) nb = n - pub;
      for (int i = pub; i < pub + nb; i++) mem[ring0 + i % slots] = ring_w[i];
      pub = pub + nb;
      reg_write(TSR_REG_Q_TAIL, pub);
      q_until(pub);
    end
    reg_write(TSR_REG_Q_CTRL, TSR_HW_Q_CTRL_QUEUE | TSR_HW_Q_CTRL_CLOSE);
    wait_done();
    reg_read(TSR_REG_CTRL, v);
    reg_read(TSR_STAT_STATUS, status);
    reg_read(TSR_STAT_DESC_DONE, done_n);
    reg_read(TSR_STAT_CYC_BUSY, busy_q);
    if (status != 0 || done_n != args[3][31:0] || busy_q != busy_n) begin
      $display("tb: queue: status %0d, %0d descriptors done of %0d, CYC_BUSY %0d (one launch %0d)",
               status, done_n, args[3][31:0], busy_q, busy_n);
      errors = errors + 1;
    end
    for (int i = 0; i < slots; i++) mem[ring0 + i] = ring_w[i];
    check_mem("queue");
    if (errors == 0)
      $display("tb: PASSED (%0d cycles, %0d words compared; CYC_BUSY %0d, queue mode %0d)", cycle,
               words, busy_n, busy_q);
    else $display("tb: FAILED (%0d errors)", errors);
    $finish;
  end
endmodule
