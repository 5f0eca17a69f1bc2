// tsr_writer - drains the output bank into C, one row per write request.
//
// The compute engine hands over a tile when it issues the tile's last step
// (tile_i): from then the bank is reserved (busy_o) until its last row has
// been handed to the write master, so the array can already work on the next
// tile's reduction meanwhile. The rows are requested once the array has
// copied its accumulators into the bank (cap_i); in GEMV mode the one row is
// the column sums.
//
// Zero records (a GEMM_BSR tile row without a stored tile) are written
// without the bank: rows of zeros, whenever no bank row is being offered.
module tsr_writer #(
  parameter int Rows  = 16,                 // array rows
  parameter int Cols  = 16,                 // array columns
  parameter int MLenW = $clog2(Rows + 1),   // tile rows bits
  parameter int NLenW = $clog2(Cols + 1),   // tile columns bits
  parameter int LaneW = $clog2(Rows + 1),   // bank row index bits
  parameter int NbW   = $clog2(4 * Cols + 1)  // row bytes bits
) (
  input  logic               clk_i,         // clock
  input  logic               rst_ni,        // asynchronous reset, active low
  input  logic [31:0]        ldc_i,         // LDC of the descriptor
  // the tile
  input  logic               tile_i,        // pulse: a tile is handed over
  input  logic [63:0]        tile_c_i,      // its address in C
  input  logic [MLenW-1:0]   tile_mlen_i,   // its rows
  input  logic [NLenW-1:0]   tile_nlen_i,   // its columns
  input  logic               tile_gemv_i,   // its mode
  output logic               busy_o,        // the bank holds a tile not yet drained
  output logic               idle_o,        // nothing reserved, no zero rows left
  // zero records
  input  logic               z_valid_i,     // a zero record is offered
  output logic               z_ready_o,     // it is taken
  input  logic [63:0]        z_c_i,         // its rows' address in C
  input  logic [MLenW-1:0]   z_mlen_i,      // its rows
  input  logic [NLenW-1:0]   z_nlen_i,      // its columns
  // the array's output bank
  input  logic               cap_i,         // pulse: the bank has been loaded
  input  logic               bank_gemv_i,   // the bank holds a GEMV tile
  output logic [LaneW-1:0]   row_o,         // bank row to read
  input  logic [Cols*32-1:0] row_i,         // that row
  input  logic [Cols*32-1:0] colsum_i,      // column sums (GEMV)
  // write requests
  output logic               req_valid_o,   // a row is offered
  input  logic               req_ready_i,   // the write master takes it
  output logic [63:0]        req_addr_o,    // its address
  output logic [NbW-1:0]     req_nbytes_o,  // its bytes (4 per column)
  output logic [Cols*32-1:0] req_data_o     // its data
);
  logic             res_q, res_d;          // bank reserved
  logic [63:0]      p_c_q, p_c_d;          // the reserved tile
  logic [MLenW-1:0] p_mlen_q, p_mlen_d;
  logic [NLenW-1:0] p_nlen_q, p_nlen_d;
  logic             p_gemv_q, p_gemv_d;
  logic             act_q, act_d;          // rows being written
  logic [MLenW-1:0] row_q, row_d;
  logic [63:0]      addr_q, addr_d;
  logic [MLenW-1:0] rows;
  logic             hs;
  logic             zact_q, zact_d;        // zero rows being written
  logic [MLenW-1:0] zrow_q, zrow_d, zrows_q, zrows_d;
  logic [NLenW-1:0] znlen_q, znlen_d;
  logic [63:0]      zaddr_q, zaddr_d;
  logic             zhs;

  assign rows = p_gemv_q ? MLenW'(1) : p_mlen_q;
  assign hs   = act_q && req_ready_i;
  assign zhs  = !act_q && zact_q && req_ready_i;

  always_comb begin
    res_d = res_q; p_c_d = p_c_q; p_mlen_d = p_mlen_q; p_nlen_d = p_nlen_q;
    p_gemv_d = p_gemv_q;
    act_d = act_q; row_d = row_q; addr_d = addr_q;
    zact_d = zact_q; zrow_d = zrow_q; zrows_d = zrows_q; znlen_d = znlen_q; zaddr_d = zaddr_q;
    if (z_valid_i && !zact_q) begin
      zact_d  = 1'b1;
      zrow_d  = '0;
      zrows_d = z_mlen_i;
      znlen_d = z_nlen_i;
      zaddr_d = z_c_i;
    end else if (zhs) begin
      zrow_d  = zrow_q + MLenW'(1);
      zaddr_d = zaddr_q + 64'(ldc_i);
      if (zrow_q + MLenW'(1) == zrows_q) zact_d = 1'b0;
    end
    if (tile_i) begin
      res_d    = 1'b1;
      p_c_d    = tile_c_i;
      p_mlen_d = tile_mlen_i;
      p_nlen_d = tile_nlen_i;
      p_gemv_d = tile_gemv_i;
    end
    if (cap_i) begin
      act_d  = 1'b1;
      row_d  = '0;
      addr_d = p_c_q;
    end else if (hs) begin
      row_d  = row_q + MLenW'(1);
      addr_d = addr_q + 64'(ldc_i);
      if (row_q + MLenW'(1) == rows) begin
        act_d = 1'b0;
        res_d = 1'b0;
      end
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      res_q <= 1'b0; p_c_q <= '0; p_mlen_q <= '0; p_nlen_q <= '0; p_gemv_q <= 1'b0;
      act_q <= 1'b0; row_q <= '0; addr_q <= '0;
      zact_q <= 1'b0; zrow_q <= '0; zrows_q <= '0; znlen_q <= '0; zaddr_q <= '0;
    end else begin
      zact_q <= zact_d; zrow_q <= zrow_d; zrows_q <= zrows_d; znlen_q <= znlen_d;
      zaddr_q <= zaddr_d;
      res_q <= res_d; p_c_q <= p_c_d; p_mlen_q <= p_mlen_d; p_nlen_q <= p_nlen_d;
      p_gemv_q <= p_gemv_d;
      act_q <= act_d; row_q <= row_d; addr_q <= addr_d;
    end
  end

  assign busy_o       = res_q;
  assign idle_o       = !res_q && !zact_q;
  assign z_ready_o    = !zact_q;
  assign row_o        = LaneW'(row_q);
  assign req_valid_o  = act_q || zact_q;
  assign req_addr_o   = act_q ? addr_q : zaddr_q;
  assign req_nbytes_o = NbW'({act_q ? p_nlen_q : znlen_q, 2'b00});
  assign req_data_o   = !act_q ? '0 : (bank_gemv_i ? colsum_i : row_i);

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  always_ff @(posedge clk_i) begin
    if (rst_ni && tile_i) begin
      assert (!res_q) else $error("tsr_writer: a tile handed over while the bank is reserved");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
