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
// output bank so the next tile can start at once; cap_o pulses when the bank
// can be read. In GEMV mode colsum_o gives the column sums (the lanes'
// partial dot products added): they are summed in SumSteps cycles after the
// bank is loaded, Rows / SumSteps rows a cycle through the row read's
// multiplexer, and cap_o pulses after the last of them. The writer reserves
// the bank from a tile's last step until it has drained it, so the bank does
// not change while it is summed.
// The bank is an array of words (not one wide vector) so that simulators
// update it element by element.
// Pipeline: operand select (1) -> multiply (1) -> accumulate (1) -> bank (1)
// -> GEMV column sums (SumSteps).
module tsr_mac_array #(
  parameter int Rows      = 16,                 // array rows
  parameter int Cols      = 16,                 // array columns
  parameter int DataBytes = 64,                 // bytes per buffer word
  parameter int OffW      = $clog2(DataBytes),  // byte index bits
  parameter int LaneW     = $clog2(Rows + 1),   // lane count bits
  parameter int DW        = DataBytes * 8,      // bits per buffer word
  // cycles of the GEMV column sums (a power of two, at most Rows)
  parameter int SumSteps  = (Rows < 16) ? Rows : 16
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
  output logic [Cols*32-1:0]       colsum_o    // sum over r of the bank, per column (GEMV,
                                               // valid from cap_o until the next load)
);
  logic [31:0] out_q [Rows*Cols];   // output bank, PE (r, j) at r*Cols+j

  // Control pipeline.
  logic       v_s_q, first_s_q, last_s_q, gemv_s_q;
  logic       v_m_q, first_m_q, last_m_q, gemv_m_q;
  logic       load_q, gemv_l_q;   // the bank takes the accumulators this cycle
  // GEMV column sums: step sum_q of SumSteps runs while sum_act_q
  localparam int LogSum = (SumSteps > 1) ? $clog2(SumSteps) : 1;
  localparam int SumRows = Rows / SumSteps;   // bank rows added per step
  logic              sum_act_q, sum_last;
  logic [LogSum-1:0] sum_q;

  assign sum_last = sum_act_q && (sum_q == LogSum'(SumSteps - 1));

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      {v_s_q, first_s_q, last_s_q, gemv_s_q} <= '0;
      {v_m_q, first_m_q, last_m_q, gemv_m_q} <= '0;
      load_q    <= 1'b0;
      gemv_l_q  <= 1'b0;
      cap_o     <= 1'b0;
      gemv_o    <= 1'b0;
      sum_act_q <= 1'b0;
      sum_q     <= '0;
    end else begin
      {v_s_q, first_s_q, last_s_q, gemv_s_q} <= {v_i, first_i, last_i, gemv_i};
      {v_m_q, first_m_q, last_m_q, gemv_m_q} <= {v_s_q, first_s_q, last_s_q, gemv_s_q};
      load_q   <= v_m_q && last_m_q;
      gemv_l_q <= gemv_m_q;
      cap_o <= (load_q && !gemv_l_q) || sum_last;
      if (load_q) gemv_o <= gemv_l_q;
      if (load_q && gemv_l_q) begin
        sum_act_q <= 1'b1;
        sum_q     <= '0;
      end else if (sum_last) begin
        sum_act_q <= 1'b0;
      end else if (sum_act_q) begin
        sum_q <= sum_q + LogSum'(1);
      end
    end
  end

  // GEMM operands: one byte per bank at idx_i, shared along a row / column.
  // GEMV operands: lane r reads byte r of the Rows-byte slice idx_i / Rows
  // (idx_i is a multiple of Rows there). Every variable select is written as
  // a tree of 2:1 multiplexers on constant part selects (index bit l picks
  // between neighbours at level l, in place, lowest bit first), which maps
  // onto LUT6/MUXF7/MUXF8 directly instead of a shifter over the word.
  localparam int LogRows = $clog2(Rows);
  localparam int Slices  = DataBytes / Rows;
  localparam int SliceW  = (Slices > 1) ? $clog2(Slices) : 1;
  /* verilator lint_off UNUSEDSIGNAL */
  logic [SliceW-1:0]  slice;
  /* verilator lint_on UNUSEDSIGNAL */
  logic [LogRows-1:0] lo;
  assign slice = SliceW'(idx_i >> LogRows);   // unused when Slices == 1
  assign lo    = idx_i[LogRows-1:0];

  // W bank j: the slice of the word (byte r goes to lane r in GEMV mode) and
  // byte lo of that slice, which is byte idx_i of the word (the GEMM operand
  // of column j).
  // Both are registered per column and the mode picks between them after
  // the registers, in front of each multiplier: one LUT per operand bit,
  // where a choice in front of the multiplier's input register is merged
  // with the last levels of the select trees and copied into every PE.
  logic [Cols*8-1:0] w_col_q;       // GEMM byte of W bank j at j*8, registered
  logic [Cols*Rows*8-1:0] w_slc_q;  // slice of W bank j at j*Rows*8, registered
  for (genvar j = 0; j < Cols; j++) begin : g_wcol
    logic [DW-1:0]     w_word;
    logic [Rows*8-1:0] w_slice, w_t;
    assign w_word = w_words_i[j*DW +: DW];
    if (Slices > 1) begin : g_wsel
      logic [DW-1:0] w_s;
      always_comb begin
        w_s = w_word;
        for (int l = 0; l < SliceW; l++) begin
          for (int q = 0; q < Slices / 2; q++) begin
            if (q < (Slices >> (l + 1))) begin
              w_s[q*Rows*8 +: Rows*8] = slice[l] ? w_s[(2*q+1)*Rows*8 +: Rows*8]
                                                 : w_s[2*q*Rows*8 +: Rows*8];
            end
          end
        end
      end
      assign w_slice = w_s[Rows*8-1:0];
    end else begin : g_wone
      assign w_slice = w_word;
    end
    always_comb begin
      w_t = w_slice;
      for (int l = 0; l < LogRows; l++) begin
        for (int b = 0; b < Rows / 2; b++) begin
          if (b < (Rows >> (l + 1))) begin
            w_t[b*8 +: 8] = lo[l] ? w_t[(2*b+1)*8 +: 8] : w_t[2*b*8 +: 8];
          end
        end
      end
    end
    always_ff @(posedge clk_i) begin
      if (v_i) begin
        w_col_q[j*8 +: 8]           <= w_t[7:0];
        w_slc_q[j*Rows*8 +: Rows*8] <= w_slice;
      end
    end
  end

  logic [DW-1:0] a0_word;
  assign a0_word = a_words_i[0 +: DW];

  for (genvar r = 0; r < Rows; r++) begin : g_row
    logic [7:0]      a_gemm, a_gemv;
    logic [DW-1:0]   a_t;
    logic            lane_ok;
    logic [7:0]      a_s_q;
    logic [Slices*8-1:0] a_lane;     // byte r of every slice of A word 0
    for (genvar q = 0; q < Slices; q++) begin : g_alane
      assign a_lane[q*8 +: 8] = a0_word[(q*Rows + r)*8 +: 8];
    end
    always_comb begin
      a_t = a_words_i[r*DW +: DW];
      for (int l = 0; l < OffW; l++) begin
        for (int b = 0; b < DataBytes / 2; b++) begin
          if (b < (DataBytes >> (l + 1))) begin
            a_t[b*8 +: 8] = idx_i[l] ? a_t[(2*b+1)*8 +: 8] : a_t[2*b*8 +: 8];
          end
        end
      end
    end
    assign a_gemm = a_t[7:0];
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
      logic [7:0]         w_s;
      logic signed [15:0] prod_q;
      logic signed [31:0] acc_q, acc_d;

      assign w_s = gemv_s_q ? w_slc_q[(j*Rows + r)*8 +: 8] : w_col_q[j*8 +: 8];
      always_ff @(posedge clk_i) begin
        if (v_s_q) prod_q <= $signed(a_s_q) * $signed(w_s);
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

  // Row read and column sums, per column. One multiplexer tree picks a
  // group of SumRows bank rows: the writer's row (row_i modulo Rows; it asks
  // only for rows below Rows) or, while the sums run, group sum_q. The row
  // read takes its row out of the group; the column sum adds the group's
  // rows (a tree of SumRows - 1 adders) to the sum of the groups before it.
  localparam int LogSR = (SumRows > 1) ? $clog2(SumRows) : 0;
  localparam int GrpW  = SumRows * 32;
  /* verilator lint_off UNUSEDSIGNAL */
  logic [LaneW-1:0]  gsel_full;
  /* verilator lint_on UNUSEDSIGNAL */
  logic [LogSum-1:0] gsel;
  assign gsel_full = sum_act_q ? LaneW'(LaneW'(sum_q) << LogSR) : row_i;
  assign gsel      = (SumSteps > 1) ? LogSum'(gsel_full >> LogSR) : '0;

  for (genvar j = 0; j < Cols; j++) begin : g_out
    logic [Rows*32-1:0] col, grp_t;
    logic [GrpW-1:0]    grp, add_t;
    logic [31:0]        rd, colsum_q;
    for (genvar r = 0; r < Rows; r++) begin : g_w
      assign col[r*32 +: 32] = out_q[r*Cols+j];
    end
    always_comb begin
      grp_t = col;
      for (int l = 0; l < LogSum; l++) begin
        for (int g = 0; g < SumSteps / 2; g++) begin
          if (g < (SumSteps >> (l + 1))) begin
            grp_t[g*GrpW +: GrpW] = gsel[l] ? grp_t[(2*g+1)*GrpW +: GrpW]
                                            : grp_t[2*g*GrpW +: GrpW];
          end
        end
      end
    end
    assign grp = grp_t[GrpW-1:0];
    if (SumRows > 1) begin : g_grp
      logic [GrpW-1:0] rd_t;
      always_comb begin
        rd_t  = grp;
        add_t = grp;
        for (int l = 0; l < LogSR; l++) begin
          for (int r = 0; r < SumRows / 2; r++) begin
            if (r < (SumRows >> (l + 1))) begin
              rd_t[r*32 +: 32]  = row_i[l] ? rd_t[(2*r+1)*32 +: 32] : rd_t[2*r*32 +: 32];
              add_t[r*32 +: 32] = add_t[2*r*32 +: 32] + add_t[(2*r+1)*32 +: 32];
            end
          end
        end
      end
      assign rd = rd_t[31:0];
    end else begin : g_one
      assign rd    = grp;
      assign add_t = grp;
    end
    always_ff @(posedge clk_i) begin
      if (sum_act_q) colsum_q <= (sum_q == '0 ? 32'd0 : colsum_q) + add_t[31:0];
    end
    assign row_o[j*32 +: 32]    = rd;
    assign colsum_o[j*32 +: 32] = colsum_q;
  end

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  always_ff @(posedge clk_i) begin
    if (rst_ni && load_q) begin
      assert (!sum_act_q) else $error("tsr_mac_array: the bank was loaded while it was summed");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
