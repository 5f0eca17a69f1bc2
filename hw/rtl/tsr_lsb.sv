// tsr_lsb - the lowest set bit of a vector, one-hot and as an index (0 when
// no bit is set): the next stored tile or chunk of a GEMM_BSR walk.
//
// The index is an OR per index bit over the one-hot vector, all continuous
// assigns (no loop in a process, which iverilog would re-run).
module tsr_lsb #(
  parameter int W  = 16,                       // bits
  parameter int IW = (W > 1) ? $clog2(W) : 1   // index bits
) (
  input  logic [W-1:0]  v_i,       // the vector
  output logic [W-1:0]  onehot_o,  // its lowest set bit alone
  output logic [IW-1:0] idx_o      // that bit's index
);
  assign onehot_o = v_i & (~v_i + W'(1));
  for (genvar b = 0; b < IW; b++) begin : g_idx
    logic [W-1:0] sel;   // the bits whose index has bit b set
    for (genvar x = 0; x < W; x++) begin : g_sel
      assign sel[x] = ((x >> b) & 1) != 0;
    end
    assign idx_o[b] = |(onehot_o & sel);
  end
endmodule
