// tsr_ram_1r1w - simple dual-port RAM: one synchronous write port, one
// synchronous (registered) read port. Written in the shape that Yosys and
// FPGA tools infer as block RAM.
module tsr_ram_1r1w #(
  parameter int Width = 512,              // bits per word
  parameter int Depth = 128,              // words
  parameter int Aw    = $clog2(Depth)     // address bits
) (
  input  logic             clk_i,    // clock
  input  logic             we_i,     // write enable
  input  logic [Aw-1:0]    waddr_i,  // write address
  input  logic [Width-1:0] wdata_i,  // write data
  input  logic             re_i,     // read enable
  input  logic [Aw-1:0]    raddr_i,  // read address
  output logic [Width-1:0] rdata_o   // read data, one cycle after re_i
);
  logic [Width-1:0] mem_q [Depth];

  always_ff @(posedge clk_i) begin
    if (we_i) mem_q[waddr_i] <= wdata_i;
  end

  always_ff @(posedge clk_i) begin
    if (re_i) rdata_o <= mem_q[raddr_i];
  end
endmodule
