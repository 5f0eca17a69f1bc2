// tsr_compute - issues the reduction steps of queued tile steps to the array.
//
// A step starts as soon as its segments have arrived and the previous step
// is issuing its last reduction step, so steps run back to back: one k per
// cycle in GEMM mode, Rows k's per cycle in GEMV mode. The buffers are read
// with the step's slots; the operand-select controls are registered so they
// line up with the RAM outputs. The last reduction step of a tile copies the
// accumulators into the output bank: it waits (hold) while the writer still
// drains the previous tile; every other step runs regardless.
//
// A GEMM_BSR step covers only the chunk's stored tiles: the k positions of
// one tile, then (without a bubble) those of the next set bit of the
// chunk's bits, the tile's last k tile stopping at the chunk's end.
module tsr_compute #(
  parameter int Rows      = 16,    // array rows
  parameter int DataBytes = 64,    // bytes per buffer word
  parameter int KChunk    = 4096,  // k bytes per buffered chunk
  parameter int NumPorts  = 1,     // read ports
  parameter int SegW      = 16,    // bits of a port's segment counter
  parameter int SlotAw    = $clog2(KChunk / DataBytes),  // word address bits of a slot
  parameter int SlW       = 2,                           // slot index bits (tsr_loader)
  parameter int KcW       = $clog2(KChunk) + 1,          // holds KChunk
  parameter int MLenW     = $clog2(Rows + 1),            // tile rows bits
  parameter int NLenW     = 5,                           // tile columns bits
  parameter int LaneW     = $clog2(Rows + 1),            // lane count bits
  parameter int OffW      = $clog2(DataBytes),           // byte index bits
  parameter int CT        = KChunk / 64                  // GEMM_BSR: tiles of a chunk at BK 64
) (
  input  logic              clk_i,        // clock
  input  logic              rst_ni,       // asynchronous reset, active low
  // the head of the step queue
  input  logic              valid_i,      // a step record is queued
  input  logic [SlW-1:0]    sa_i,         // its A slot
  input  logic [SlW-1:0]    sw_i,         // its W slot
  input  logic [KcW-1:0]    kc_i,         // its k bytes
  input  logic              first_i,      // first k chunk of its tile
  input  logic              last_i,       // last k chunk of its tile
  input  logic              gemv_i,       // GEMV mode
  input  logic [MLenW-1:0]  mlen_i,       // tile rows
  input  logic [NLenW-1:0]  nlen_i,       // tile columns
  input  logic [63:0]       c_i,          // tile address in C
  input  logic [NumPorts*SegW-1:0] target_i,    // per port: segments that must have arrived
  input  logic              bsr_i,        // a GEMM_BSR step
  input  logic [CT-1:0]     cb_i,         // GEMM_BSR: the chunk's stored tiles
  input  logic              bk128_i,      // GEMM_BSR: BK = 128 (for the whole descriptor)
  input  logic [NumPorts*SegW-1:0] segs_done_i, // per port: segments arrived so far
  output logic              pop_o,        // the step starts: drop the record
  // output bank
  input  logic              out_busy_i,   // the writer still drains the bank
  output logic              tile_o,       // pulse: a tile's last step is issued
  output logic [63:0]       tile_c_o,     // with tile_o: its address in C
  output logic [MLenW-1:0]  tile_mlen_o,  // its rows
  output logic [NLenW-1:0]  tile_nlen_o,  // its columns
  output logic              tile_gemv_o,  // its mode
  // slots
  output logic              release_o,    // the step's last reduction step issues
  output logic [SlW-1:0]    rel_sa_o,     // its A slot
  output logic [SlW-1:0]    rel_sw_o,     // its W slot
  output logic              active_o,     // a step is issuing
  // buffers and array
  output logic              re_o,         // read the buffers this cycle
  output logic [SlW+SlotAw-1:0] a_raddr_o, // A word address (all banks)
  output logic [SlW+SlotAw-1:0] w_raddr_o, // W word address (all banks)
  output logic              v_o,          // array: operands valid
  output logic              first_o,      // array: first reduction step
  output logic              last_o,       // array: last reduction step
  output logic              gemv_o,       // array: GEMV mode
  output logic [OffW-1:0]   idx_o,        // array: byte index in the words
  output logic [LaneW-1:0]  lanes_o       // array: valid lanes (GEMV)
);
  localparam int LogRows = $clog2(Rows);
  localparam int TW      = KcW;   // reduction step counter

  logic             act_q, act_d, first_q, first_d;
  logic [SlW-1:0]   sa_q, sa_d, sw_q, sw_d;
  logic             last_q, last_d, gemv_q, gemv_d;
  logic [KcW-1:0]   kc_q, kc_d;
  logic [TW-1:0]    t_q, t_d, tlast_q, tlast_d;
  logic [63:0]      c_q, c_d;
  logic [MLenW-1:0] mlen_q, mlen_d;
  logic [NLenW-1:0] nlen_q, nlen_d;
  logic             arrived, hold, issue, finishing, start, at_end;
  localparam int XW = $clog2(CT);

  // GEMM_BSR: the current tile x_q, its step tk_q of tklast_q, its end byte;
  // mask_q the chunk's tiles still to come.
  logic             bsr_q, bsr_d;
  logic [CT-1:0]    mask_q, mask_d;
  logic [XW-1:0]    x_q, x_d;
  logic [TW-1:0]    tk_q, tk_d, tklast_q, tklast_d;
  logic [KcW-1:0]   tend_q, tend_d;
  // first set bit of a chunk's bits, and that tile's extent in a chunk of kc bytes
  logic [CT-1:0]    nmask;
  logic [XW-1:0]    nx;
  logic [KcW-1:0]   nstart, nend, nlen, chunk_kc;
  logic [TW-1:0]    nlast;
  logic             nbk128, ngemv;
  assign nmask    = start ? cb_i : mask_q;
  assign chunk_kc = start ? kc_i : kc_q;
  assign nbk128   = bk128_i;
  assign ngemv    = start ? gemv_i : gemv_q;
  logic [CT-1:0] nlow;                   // the next stored tile, one-hot
  tsr_lsb #(.W(CT), .IW(XW)) u_next (.v_i (nmask), .onehot_o (nlow), .idx_o (nx));
  assign nstart = nbk128 ? KcW'({nx, 7'd0}) : KcW'({nx, 6'd0});
  assign nend   = (nstart + (nbk128 ? KcW'(128) : KcW'(64)) < chunk_kc) ?
                  nstart + (nbk128 ? KcW'(128) : KcW'(64)) : chunk_kc;
  assign nlen   = nend - nstart;
  assign nlast  = ngemv ? TW'((nlen + KcW'(Rows - 1)) >> LogRows) - TW'(1) : TW'(nlen) - TW'(1);

  // Every port has delivered the step's segments (ports finish out of order,
  // so each is compared on its own; the counters wrap).
  logic [NumPorts-1:0] port_ok;
  for (genvar p = 0; p < NumPorts; p++) begin : g_arrived
    logic [SegW-1:0] diff;
    assign diff       = segs_done_i[p*SegW +: SegW] - target_i[p*SegW +: SegW];
    assign port_ok[p] = !diff[SegW-1];
  end
  assign arrived   = &port_ok;
  assign at_end    = bsr_q ? (tk_q == tklast_q && mask_q == '0) : (t_q == tlast_q);
  assign hold      = act_q && last_q && at_end && out_busy_i;
  assign issue     = act_q && !hold;
  assign finishing = issue && at_end;
  assign start     = valid_i && arrived && (!act_q || finishing);

  logic [TW-1:0]  tbyte;                 // byte position of step t in the chunk
  logic [KcW:0]   lanes_left;
  logic [TW-1:0]  tpos;                  // step within the tile (the chunk if dense)
  logic [TW-1:0]  tbase;                 // the tile's first byte
  assign tpos       = bsr_q ? tk_q : t_q;
  assign tbase      = bsr_q ? (bk128_i ? TW'({x_q, 7'd0}) : TW'({x_q, 6'd0})) : '0;
  assign tbyte      = tbase + (gemv_q ? TW'({tpos, {LogRows{1'b0}}}) : tpos);
  assign lanes_left = {1'b0, bsr_q ? tend_q : kc_q} - {1'b0, tbyte};

  always_comb begin
    act_d = act_q; sa_d = sa_q; sw_d = sw_q; first_d = first_q; last_d = last_q;
    gemv_d = gemv_q; kc_d = kc_q; t_d = t_q; tlast_d = tlast_q;
    c_d = c_q; mlen_d = mlen_q; nlen_d = nlen_q;
    bsr_d = bsr_q; mask_d = mask_q; x_d = x_q; tk_d = tk_q; tklast_d = tklast_q; tend_d = tend_q;
    if (start) begin
      bsr_d    = bsr_i;
      x_d      = nx;
      mask_d   = cb_i & ~nlow;
      tk_d     = '0;
      tklast_d = nlast;
      tend_d   = nend;
      act_d   = 1'b1;
      sa_d    = sa_i;
      sw_d    = sw_i;
      first_d = first_i;
      last_d  = last_i;
      gemv_d  = gemv_i;
      kc_d    = kc_i;
      t_d     = '0;
      tlast_d = gemv_i ? TW'((kc_i + KcW'(Rows - 1)) >> LogRows) - TW'(1) : TW'(kc_i) - TW'(1);
      c_d     = c_i;
      mlen_d  = mlen_i;
      nlen_d  = nlen_i;
    end else if (finishing) begin
      act_d = 1'b0;
    end else if (issue) begin
      t_d = t_q + TW'(1);
      if (bsr_q) begin
        if (tk_q == tklast_q) begin
          // the next stored tile of the chunk
          x_d      = nx;
          mask_d   = mask_q & ~nlow;
          tk_d     = '0;
          tklast_d = nlast;
          tend_d   = nend;
        end else begin
          tk_d = tk_q + TW'(1);
        end
      end
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      act_q <= 1'b0; sa_q <= '0; sw_q <= '0; first_q <= 1'b0; last_q <= 1'b0;
      gemv_q <= 1'b0; kc_q <= '0; t_q <= '0; tlast_q <= '0;
      c_q <= '0; mlen_q <= '0; nlen_q <= '0;
      bsr_q <= 1'b0; mask_q <= '0; x_q <= '0; tk_q <= '0; tklast_q <= '0; tend_q <= '0;
    end else begin
      bsr_q <= bsr_d; mask_q <= mask_d; x_q <= x_d; tk_q <= tk_d; tklast_q <= tklast_d;
      tend_q <= tend_d;
      act_q <= act_d; sa_q <= sa_d; sw_q <= sw_d; first_q <= first_d; last_q <= last_d;
      gemv_q <= gemv_d; kc_q <= kc_d; t_q <= t_d; tlast_q <= tlast_d;
      c_q <= c_d; mlen_q <= mlen_d; nlen_q <= nlen_d;
    end
  end

  // Operand-select controls, aligned with the RAM outputs.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      v_o <= 1'b0; first_o <= 1'b0; last_o <= 1'b0; gemv_o <= 1'b0;
      idx_o <= '0; lanes_o <= '0;
    end else begin
      v_o     <= issue;
      first_o <= first_q && (t_q == '0);
      last_o  <= last_q && finishing;
      gemv_o  <= gemv_q;
      idx_o   <= tbyte[OffW-1:0];
      lanes_o <= (lanes_left >= (KcW+1)'(Rows)) ? LaneW'(Rows) : LaneW'(lanes_left);
    end
  end

  assign pop_o       = start;
  assign tile_o      = finishing && last_q;
  assign tile_c_o    = c_q;
  assign tile_mlen_o = mlen_q;
  assign tile_nlen_o = nlen_q;
  assign tile_gemv_o = gemv_q;
  assign release_o   = finishing;
  assign rel_sa_o    = sa_q;
  assign rel_sw_o    = sw_q;
  assign active_o    = act_q;
  assign re_o        = issue;
  assign a_raddr_o   = {sa_q, tbyte[OffW +: SlotAw]};
  assign w_raddr_o   = {sw_q, tbyte[OffW +: SlotAw]};
endmodule
