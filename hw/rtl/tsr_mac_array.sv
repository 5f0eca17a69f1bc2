// tsr_mac_array - Rows x Cols int8 multiply-accumulate array with int32
// accumulators and an output bank.
//
// Every cycle with v_i set, PE (r, j) adds a(r) * w(r, j) to its accumulator:
//   GEMM mode: a(r) = byte idx_i of A word r (row m0+r, reduction index k),
//              w(r, j) = byte idx_i of W word j: an outer product per k.
//   GEMV mode: a(r) = byte idx_i+r of A word 0 (the single row, lane r of a
//              Rows-wide slice of k), w(r, j) = byte idx_i+r of W word j; each
//              column is a Rows-lane dot product; lanes >= lanes_i add zero.
// first_i restarts the accumulators, last_i copies the results into the
// output bank (cap_o pulses) so the next tile can start at once. In GEMV mode
// colsum_o gives the column sums (the lanes' partial dot products added).
// The bank is an array of words (not one wide vector) so that simulators
// update it element by element.
// Pipeline: operand select (1) -> multiply (1) -> accumulate (1) -> bank (1).
module tsr_mac_array #(
  parameter int Rows      = 16,                 // array rows
  parameter int Cols      = 16,                 // array columns
  parameter int DataBytes = 64,                 // bytes per buffer word
  parameter int OffW      = $clog2(DataBytes),  // byte index bits
  parameter int LaneW     = $clog2(Rows + 1),   // lane count bits
  parameter int DW        = DataBytes * 8       // bits per buffer word
) (
  input  logic                     clk_i,      // clock
  input  logic                     rst_ni,     // asynchronous reset, active low
  input  logic                     v_i,        // operands valid this cycle
  input  logic                     first_i,    // first reduction step of a tile
  input  logic                     last_i,     // last reduction step of a tile
  input  logic                     gemv_i,     // GEMV lane mode
  input  logic [OffW-1:0]          idx_i,      // byte index in the words
  input  logic [LaneW-1:0]         lanes_i,    // valid lanes (GEMV)
  input  logic [Rows*DW-1:0]       a_words_i,  // one word per A bank
  input  logic [Cols*DW-1:0]       w_words_i,  // one word per W bank
  output logic                     cap_o,      // pulse: output bank loaded
  output logic                     gemv_o,     // mode of the tile in the bank
  input  logic [LaneW-1:0]         row_i,      // output bank row to read
  output logic [Cols*32-1:0]       row_o,      // that row, column j at j*32
  output logic [Cols*32-1:0]       colsum_o    // sum over r of the bank, per column
);
  logic [31:0] out_q [Rows*Cols];   // output bank, PE (r, j) at r*Cols+j

  // Control pipeline.
  logic       v_s_q, first_s_q, last_s_q, gemv_s_q;
  logic       v_m_q, first_m_q, last_m_q, gemv_m_q;
  logic       load_q, gemv_l_q;   // the bank takes the accumulators this cycle

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      {v_s_q, first_s_q, last_s_q, gemv_s_q} <= '0;
      {v_m_q, first_m_q, last_m_q, gemv_m_q} <= '0;
      load_q   <= 1'b0;
      gemv_l_q <= 1'b0;
      cap_o  <= 1'b0;
      gemv_o <= 1'b0;
    end else begin
      {v_s_q, first_s_q, last_s_q, gemv_s_q} <= {v_i, first_i, last_i, gemv_i};
      {v_m_q, first_m_q, last_m_q, gemv_m_q} <= {v_s_q, first_s_q, last_s_q, gemv_s_q};
      load_q   <= v_m_q && last_m_q;
      gemv_l_q <= gemv_m_q;
      cap_o <= load_q;
      if (load_q) gemv_o <= gemv_l_q;
    end
  end

  // GEMM operands: one byte per bank at idx_i, shared along a row / column.
  // GEMV operands: lane r reads byte r of the Rows-byte slice idx_i / Rows
  // (idx_i is a multiple of Rows there), so each PE needs a multiplexer of
  // only DataBytes / Rows inputs, written out with constant part selects so
  // that synthesis never builds a shifter over the word.
  localparam int LogRows = $clog2(Rows);
  localparam int Slices  = DataBytes / Rows;
  localparam int SliceW  = (Slices > 1) ? $clog2(Slices) : 1;
  /* verilator lint_off UNUSEDSIGNAL */
  logic [SliceW-1:0] slice;
  /* verilator lint_on UNUSEDSIGNAL */
  assign slice = SliceW'(idx_i >> LogRows);   // unused when Slices == 1

  // Byte selects work on one bank word at a time (constant part select
  // first), so synthesis builds small multiplexers, not shifters over all
  // banks.
  logic [DW-1:0]     a0_word;
  logic [Cols*8-1:0] w_col;      // GEMM byte of W bank j at j*8
  assign a0_word = a_words_i[0 +: DW];
  for (genvar j = 0; j < Cols; j++) begin : g_wcol
    logic [DW-1:0] w_word;
    assign w_word         = w_words_i[j*DW +: DW];
    assign w_col[j*8 +: 8] = w_word[{idx_i, 3'b000} +: 8];
  end

  for (genvar r = 0; r < Rows; r++) begin : g_row
    logic [7:0]      a_gemm, a_gemv;
    logic [DW-1:0]   a_word;
    logic            lane_ok;
    logic [7:0]      a_s_q;
    logic [Slices*8-1:0] a_lane;     // byte r of every slice of A word 0
    for (genvar q = 0; q < Slices; q++) begin : g_alane
      assign a_lane[q*8 +: 8] = a0_word[(q*Rows + r)*8 +: 8];
    end
    assign a_word   = a_words_i[r*DW +: DW];
    assign a_gemm   = a_word[{idx_i, 3'b000} +: 8];
    if (Slices > 1) begin : g_asel
      assign a_gemv = a_lane[{slice, 3'b000} +: 8];
    end else begin : g_aone
      assign a_gemv = a_lane;
    end
    assign lane_ok = LaneW'(r) < lanes_i;

    always_ff @(posedge clk_i) begin
      if (v_i) a_s_q <= !gemv_i ? a_gemm : (lane_ok ? a_gemv : 8'd0);
    end

    for (genvar j = 0; j < Cols; j++) begin : g_col
      logic [7:0]         w_s_q, w_gemv;
      logic [Slices*8-1:0] w_lane;   // byte r of every slice of W word j
      logic signed [15:0] prod_q;
      logic signed [31:0] acc_q, acc_d;

      for (genvar q = 0; q < Slices; q++) begin : g_wlane
        assign w_lane[q*8 +: 8] = w_words_i[j*DW + (q*Rows + r)*8 +: 8];
      end
      if (Slices > 1) begin : g_wsel
        assign w_gemv = w_lane[{slice, 3'b000} +: 8];
      end else begin : g_wone
        assign w_gemv = w_lane;
      end
      always_ff @(posedge clk_i) begin
        if (v_i) w_s_q <= gemv_i ? w_gemv : w_col[j*8 +: 8];
      end
      always_ff @(posedge clk_i) begin
        if (v_s_q) prod_q <= $signed(a_s_q) * $signed(w_s_q);
      end
      // The select sits in front of the adder (0 or the accumulator), and
      // the bank loads from the accumulator register a cycle after the last
      // step: the form that maps multiplier, adder and accumulator into one
      // DSP48E1 (its Z multiplexer and P register) instead of 64 LUTs.
      assign acc_d = (first_m_q ? 32'sd0 : acc_q) + 32'(prod_q);
      always_ff @(posedge clk_i) begin
        if (v_m_q) acc_q <= acc_d;
        if (load_q) out_q[r*Cols+j] <= acc_q;
      end
    end
  end

  // Row read and column sums for GEMV mode (the reduction across the lanes).
  always_comb begin
    for (int j = 0; j < Cols; j++) row_o[j*32 +: 32] = out_q[32'(row_i) * Cols + j];
  end
  always_comb begin
    colsum_o = '0;
    for (int j = 0; j < Cols; j++) begin
      for (int r = 0; r < Rows; r++) colsum_o[j*32 +: 32] = colsum_o[j*32 +: 32] + out_q[r*Cols+j];
    end
  end
endmodule
