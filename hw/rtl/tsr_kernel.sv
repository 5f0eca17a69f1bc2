// tsr_kernel - top level of the tessera matmul kernel.
//
// An XRT-style kernel: AXI4-Lite control slave (ap_ctrl_hs/ap_ctrl_chain,
// arguments, status and performance registers of hw/regmap.def) and AXI4
// masters into device memory: m_axi_gmem (reads and writes, memory channel 0)
// and NumPorts-1 read-only masters m_axi_gmemx (lane i-1 = port i on memory
// channel i) that stream the rows of a striped W. One start runs a ring of descriptors; each GEMM
// descriptor computes C[m][n] = sum_k A[m][k] * W[n][k] (int8 -> int32).
// In queue mode (Q_CTRL) one start keeps running over a ring of slots the
// host refills, descriptor by descriptor as the host raises Q_TAIL.
module tsr_kernel #(
  parameter int Rows           = 16,    // MAC array rows
  parameter int Cols           = 16,    // MAC array columns
  parameter int DataBytes      = 64,    // AXI4 data bus width in bytes
  parameter int KChunk         = 4096,  // reduction bytes buffered per row
  parameter int MaxOutstanding = 16,    // AXI4 bursts in flight per direction
  parameter int NumPorts       = 1,     // AXI4 read masters (memory channels), 1 .. Cols
  parameter int DW             = DataBytes * 8, // AXI4 data bus width in bits
  parameter int XP             = (NumPorts > 1) ? NumPorts - 1 : 1  // m_axi_gmemx lanes
) (
  input  logic                 clk_i,                  // clock
  input  logic                 rst_ni,                 // asynchronous reset, active low
  // AXI4-Lite control slave
  input  logic                 s_axi_control_awvalid,  // AW valid
  output logic                 s_axi_control_awready,  // AW ready
  input  logic [11:0]          s_axi_control_awaddr,   // AW address
  input  logic                 s_axi_control_wvalid,   // W valid
  output logic                 s_axi_control_wready,   // W ready
  input  logic [31:0]          s_axi_control_wdata,    // W data
  input  logic [3:0]           s_axi_control_wstrb,    // W strobes
  output logic                 s_axi_control_bvalid,   // B valid
  input  logic                 s_axi_control_bready,   // B ready
  output logic [1:0]           s_axi_control_bresp,    // B response
  input  logic                 s_axi_control_arvalid,  // AR valid
  output logic                 s_axi_control_arready,  // AR ready
  input  logic [11:0]          s_axi_control_araddr,   // AR address
  output logic                 s_axi_control_rvalid,   // R valid
  input  logic                 s_axi_control_rready,   // R ready
  output logic [31:0]          s_axi_control_rdata,    // R data
  output logic [1:0]           s_axi_control_rresp,    // R response
  output logic                 interrupt_o,            // level interrupt
  output logic                 ap_done_o,              // CTRL.ap_done level (simulation aid)
  // AXI4 master into device memory (one ID)
  output logic                 m_axi_gmem_arvalid,     // AR valid
  input  logic                 m_axi_gmem_arready,     // AR ready
  output logic [63:0]          m_axi_gmem_araddr,      // AR address
  output logic [7:0]           m_axi_gmem_arlen,       // AR beats - 1
  output logic [2:0]           m_axi_gmem_arsize,      // AR beat size
  output logic [1:0]           m_axi_gmem_arburst,     // AR burst type (INCR)
  input  logic                 m_axi_gmem_rvalid,      // R valid
  output logic                 m_axi_gmem_rready,      // R ready
  input  logic [DW-1:0]        m_axi_gmem_rdata,       // R data
  input  logic [1:0]           m_axi_gmem_rresp,       // R response
  input  logic                 m_axi_gmem_rlast,       // R last
  output logic                 m_axi_gmem_awvalid,     // AW valid
  input  logic                 m_axi_gmem_awready,     // AW ready
  output logic [63:0]          m_axi_gmem_awaddr,      // AW address
  output logic [7:0]           m_axi_gmem_awlen,       // AW beats - 1
  output logic [2:0]           m_axi_gmem_awsize,      // AW beat size
  output logic [1:0]           m_axi_gmem_awburst,     // AW burst type (INCR)
  output logic                 m_axi_gmem_wvalid,      // W valid
  input  logic                 m_axi_gmem_wready,      // W ready
  output logic [DW-1:0]        m_axi_gmem_wdata,       // W data
  output logic [DataBytes-1:0] m_axi_gmem_wstrb,       // W strobes
  output logic                 m_axi_gmem_wlast,       // W last
  input  logic                 m_axi_gmem_bvalid,      // B valid
  output logic                 m_axi_gmem_bready,      // B ready
  input  logic [1:0]           m_axi_gmem_bresp,       // B response
  // read masters 1 .. NumPorts-1, lane i-1 = port i (tied off when NumPorts = 1)
  output logic [XP-1:0]        m_axi_gmemx_arvalid,    // AR valid
  input  logic [XP-1:0]        m_axi_gmemx_arready,    // AR ready
  output logic [XP*64-1:0]     m_axi_gmemx_araddr,     // AR address
  output logic [XP*8-1:0]      m_axi_gmemx_arlen,      // AR beats - 1
  output logic [XP*3-1:0]      m_axi_gmemx_arsize,     // AR beat size
  output logic [XP*2-1:0]      m_axi_gmemx_arburst,    // AR burst type (INCR)
  input  logic [XP-1:0]        m_axi_gmemx_rvalid,     // R valid
  output logic [XP-1:0]        m_axi_gmemx_rready,     // R ready
  input  logic [XP*DW-1:0]     m_axi_gmemx_rdata,      // R data
  input  logic [XP*2-1:0]      m_axi_gmemx_rresp,      // R response
  input  logic [XP-1:0]        m_axi_gmemx_rlast       // R last
);
  logic        core_start, core_done, queue, q_close;
  logic [31:0] q_tail;
  logic [63:0] mem_base, mem_size, ring;
  logic [31:0] n_desc, status, err_index, desc_done;
  logic [63:0] cyc_busy, cyc_stall, bytes_rd, bytes_wr, macs;
  logic [31:0] hw_ops;

  tsr_ctrl_s_axi #(.Rows(Rows), .Cols(Cols), .NumPorts(NumPorts)) u_ctrl (
    .clk_i, .rst_ni,
    .awvalid_i (s_axi_control_awvalid), .awready_o (s_axi_control_awready),
    .awaddr_i  (s_axi_control_awaddr),
    .wvalid_i  (s_axi_control_wvalid),  .wready_o  (s_axi_control_wready),
    .wdata_i   (s_axi_control_wdata),   .wstrb_i   (s_axi_control_wstrb),
    .bvalid_o  (s_axi_control_bvalid),  .bready_i  (s_axi_control_bready),
    .bresp_o   (s_axi_control_bresp),
    .arvalid_i (s_axi_control_arvalid), .arready_o (s_axi_control_arready),
    .araddr_i  (s_axi_control_araddr),
    .rvalid_o  (s_axi_control_rvalid),  .rready_i  (s_axi_control_rready),
    .rdata_o   (s_axi_control_rdata),   .rresp_o   (s_axi_control_rresp),
    .interrupt_o, .ap_done_o,
    .core_start_o (core_start), .mem_base_o (mem_base), .mem_size_o (mem_size),
    .ring_o (ring), .n_desc_o (n_desc), .queue_o (queue), .q_close_o (q_close),
    .q_tail_o (q_tail), .core_done_i (core_done),
    .status_i (status), .err_index_i (err_index), .desc_done_i (desc_done),
    .cyc_busy_i (cyc_busy), .cyc_stall_i (cyc_stall), .bytes_rd_i (bytes_rd),
    .bytes_wr_i (bytes_wr), .macs_i (macs), .hw_ops_i (hw_ops)
  );

  tsr_core #(.Rows(Rows), .Cols(Cols), .DataBytes(DataBytes), .KChunk(KChunk),
             .MaxOutstanding(MaxOutstanding), .NumPorts(NumPorts)) u_core (
    .clk_i, .rst_ni,
    .start_i (core_start), .mem_base_i (mem_base), .mem_size_i (mem_size),
    .ring_i (ring), .n_desc_i (n_desc), .queue_i (queue), .q_close_i (q_close),
    .q_tail_i (q_tail), .done_o (core_done),
    .status_o (status), .err_index_o (err_index), .desc_done_o (desc_done),
    .cyc_busy_o (cyc_busy), .cyc_stall_o (cyc_stall), .bytes_rd_o (bytes_rd),
    .bytes_wr_o (bytes_wr), .macs_o (macs), .hw_ops_o (hw_ops),
    .arvalid_o (m_axi_gmem_arvalid), .arready_i (m_axi_gmem_arready),
    .araddr_o (m_axi_gmem_araddr), .arlen_o (m_axi_gmem_arlen),
    .arsize_o (m_axi_gmem_arsize), .arburst_o (m_axi_gmem_arburst),
    .rvalid_i (m_axi_gmem_rvalid), .rready_o (m_axi_gmem_rready),
    .rdata_i (m_axi_gmem_rdata), .rresp_i (m_axi_gmem_rresp), .rlast_i (m_axi_gmem_rlast),
    .awvalid_o (m_axi_gmem_awvalid), .awready_i (m_axi_gmem_awready),
    .awaddr_o (m_axi_gmem_awaddr), .awlen_o (m_axi_gmem_awlen),
    .awsize_o (m_axi_gmem_awsize), .awburst_o (m_axi_gmem_awburst),
    .wvalid_o (m_axi_gmem_wvalid), .wready_i (m_axi_gmem_wready),
    .wdata_o (m_axi_gmem_wdata), .wstrb_o (m_axi_gmem_wstrb), .wlast_o (m_axi_gmem_wlast),
    .bvalid_i (m_axi_gmem_bvalid), .bready_o (m_axi_gmem_bready), .bresp_i (m_axi_gmem_bresp),
    .xarvalid_o (m_axi_gmemx_arvalid), .xarready_i (m_axi_gmemx_arready),
    .xaraddr_o (m_axi_gmemx_araddr), .xarlen_o (m_axi_gmemx_arlen),
    .xarsize_o (m_axi_gmemx_arsize), .xarburst_o (m_axi_gmemx_arburst),
    .xrvalid_i (m_axi_gmemx_rvalid), .xrready_o (m_axi_gmemx_rready),
    .xrdata_i (m_axi_gmemx_rdata), .xrresp_i (m_axi_gmemx_rresp), .xrlast_i (m_axi_gmemx_rlast)
  );
endmodule
