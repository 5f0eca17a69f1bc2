// tsr_fifo - small synchronous FIFO (first word fall-through).
module tsr_fifo #(
  parameter int Width = 8,                 // bits per entry
  parameter int Depth = 4,                 // entries (power of two)
  parameter int Aw    = $clog2(Depth)      // pointer bits
) (
  input  logic             clk_i,    // clock
  input  logic             rst_ni,   // asynchronous reset, active low
  input  logic             push_i,   // write wdata_i (ignored when full_o)
  input  logic [Width-1:0] wdata_i,  // entry to write
  input  logic             pop_i,    // drop the head entry (ignored when empty)
  output logic [Width-1:0] rdata_o,  // head entry
  output logic             empty_o,  // no entries
  output logic             full_o    // Depth entries
);
  logic [Width-1:0] mem_q [Depth];
  logic [Aw:0]      wptr_q, rptr_q;

  assign empty_o = (wptr_q == rptr_q);
  assign full_o  = (wptr_q[Aw-1:0] == rptr_q[Aw-1:0]) && (wptr_q[Aw] != rptr_q[Aw]);
  assign rdata_o = mem_q[rptr_q[Aw-1:0]];

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      wptr_q <= '0;
      rptr_q <= '0;
    end else begin
      if (push_i && !full_o) wptr_q <= wptr_q + 1'b1;
      if (pop_i && !empty_o) rptr_q <= rptr_q + 1'b1;
    end
  end

  always_ff @(posedge clk_i) begin
    if (push_i && !full_o) mem_q[wptr_q[Aw-1:0]] <= wdata_i;
  end

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  always_ff @(posedge clk_i) begin
    if (rst_ni) begin
      assert (!(push_i && full_o)) else $error("tsr_fifo: push while full");
      assert (!(pop_i && empty_o)) else $error("tsr_fifo: pop while empty");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
