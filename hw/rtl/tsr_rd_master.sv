// tsr_rd_master - AXI4 read master that moves byte segments into the
// on-chip buffers.
//
// A segment is (address, length in bytes, destination word). The master
// splits it into INCR bursts of full bus words that never cross a 4 KiB page
// (and are at most MaxBurst beats), keeps up to MaxOutstanding bursts in
// flight, and realigns the returned beats so that buffer word i holds bytes
// [addr + i*DataBytes, addr + (i+1)*DataBytes) of the segment. Responses come
// back in order (one ID), so a FIFO of segment records tells where each beat
// goes. The R channel is only back-pressured for one cycle at the end of an
// unaligned segment whose last output word needs no further beat.
module tsr_rd_master #(
  parameter int DataBytes      = 64,                 // bus width in bytes
  parameter int MaxOutstanding = 16,                 // read bursts in flight
  parameter int MaxBurst       = 4096 / DataBytes,   // beats per burst (<= 256)
  parameter int BankW          = 8,                  // bank index bits
  parameter int WordAw         = 7,                  // buffer word address bits
  parameter int LenW           = 16,                 // segment length bits (bytes)
  parameter int DW             = DataBytes * 8       // bus width in bits
) (
  input  logic              clk_i,          // clock
  input  logic              rst_ni,         // asynchronous reset, active low
  // segment requests
  input  logic              seg_valid_i,    // a segment is offered
  output logic              seg_ready_o,    // the segment is taken
  input  logic [63:0]       seg_addr_i,     // device address of its first byte
  input  logic [LenW-1:0]   seg_len_i,      // bytes, >= 1
  input  logic [1:0]        seg_dest_i,     // destination buffer (opaque here)
  input  logic [BankW-1:0]  seg_bank_i,     // bank inside the destination
  input  logic [WordAw-1:0] seg_waddr_i,    // buffer word of the first output word
  // AXI4 read address channel
  output logic              arvalid_o,      // AR valid
  input  logic              arready_i,      // AR ready
  output logic [63:0]       araddr_o,       // burst address (bus-word aligned)
  output logic [7:0]        arlen_o,        // beats - 1
  output logic [2:0]        arsize_o,       // log2(DataBytes)
  output logic [1:0]        arburst_o,      // INCR
  // AXI4 read data channel
  input  logic              rvalid_i,       // R valid
  output logic              rready_o,       // R ready
  input  logic [DW-1:0]     rdata_i,        // R data
  input  logic [1:0]        rresp_i,        // R response
  input  logic              rlast_i,        // last beat of a burst
  // buffer write port
  output logic              buf_we_o,       // write one word
  output logic [1:0]        buf_dest_o,     // destination buffer
  output logic [BankW-1:0]  buf_bank_o,     // bank
  output logic [WordAw-1:0] buf_waddr_o,    // word address
  output logic [DW-1:0]     buf_wdata_o,    // realigned data
  // status
  output logic              seg_done_o,     // pulse: a segment is fully written
  output logic              err_o,          // pulse: SLVERR/DECERR on a beat
  output logic              idle_o          // nothing in flight
);
  localparam int OffW      = $clog2(DataBytes);
  localparam int PageBeats = 4096 / DataBytes;
  localparam int BeatW     = LenW - OffW + 2;   // beats per segment
  localparam int OutW      = $clog2(MaxOutstanding + 1);
  localparam int MetaW     = 2 + BankW + WordAw + OffW + 2 * BeatW;

  // ---- AR side: split the current segment into bursts ----
  logic              ar_busy_q;
  logic [63:0]       ar_addr_q;           // next burst address (aligned)
  logic [BeatW-1:0]  ar_left_q;           // beats still to request
  logic [OutW-1:0]   outst_q;             // bursts in flight
  logic              meta_full, meta_empty;
  logic [MetaW-1:0]  meta_wdata, meta_rdata;
  logic              meta_pop;

  logic [OffW-1:0]   seg_off;
  logic [BeatW-1:0]  seg_nin, seg_nout;
  assign seg_off  = seg_addr_i[OffW-1:0];
  assign seg_nin  = BeatW'((32'(seg_off) + 32'(seg_len_i) + DataBytes - 1) >> OffW);
  assign seg_nout = BeatW'((32'(seg_len_i) + DataBytes - 1) >> OffW);
  assign seg_ready_o = !ar_busy_q && !meta_full;
  assign meta_wdata  = {seg_dest_i, seg_bank_i, seg_waddr_i, seg_off, seg_nin, seg_nout};

  logic [BeatW-1:0] page_left, burst;
  logic [11:0]      page_off;
  assign page_off  = ar_addr_q[11:0];
  assign page_left = BeatW'(PageBeats - 32'(page_off[11:OffW]));
  always_comb begin
    burst = ar_left_q;
    if (page_left < burst) burst = page_left;
    if (BeatW'(MaxBurst) < burst) burst = BeatW'(MaxBurst);
  end

  assign arvalid_o = ar_busy_q && (outst_q < OutW'(MaxOutstanding));
  assign araddr_o  = ar_addr_q;
  assign arlen_o   = 8'(burst - 1'b1);
  assign arsize_o  = 3'(OffW);
  assign arburst_o = 2'b01;

  logic ar_hs, r_hs, seg_hs;
  assign ar_hs  = arvalid_o && arready_i;
  assign r_hs   = rvalid_i && rready_o;
  assign seg_hs = seg_valid_i && seg_ready_o;

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      ar_busy_q <= 1'b0;
      ar_addr_q <= '0;
      ar_left_q <= '0;
      outst_q   <= '0;
    end else begin
      if (seg_hs) begin
        ar_busy_q <= 1'b1;
        ar_addr_q <= {seg_addr_i[63:OffW], {OffW{1'b0}}};
        ar_left_q <= seg_nin;
      end else if (ar_hs) begin
        ar_addr_q <= ar_addr_q + {{(64 - BeatW - OffW){1'b0}}, burst, {OffW{1'b0}}};
        ar_left_q <= ar_left_q - burst;
        if (ar_left_q == burst) ar_busy_q <= 1'b0;
      end
      outst_q <= outst_q + OutW'(ar_hs) - OutW'(r_hs && rlast_i);
    end
  end

  tsr_fifo #(.Width(MetaW), .Depth(MaxOutstanding)) u_meta (
    .clk_i, .rst_ni,
    .push_i (seg_hs), .wdata_i (meta_wdata),
    .pop_i  (meta_pop), .rdata_o (meta_rdata),
    .empty_o (meta_empty), .full_o (meta_full)
  );

  // ---- R side: realign beats into buffer words ----
  logic [1:0]        h_dest;
  logic [BankW-1:0]  h_bank;
  logic [WordAw-1:0] h_waddr;
  logic [OffW-1:0]   h_off;
  logic [BeatW-1:0]  h_nin, h_nout;
  assign {h_dest, h_bank, h_waddr, h_off, h_nin, h_nout} = meta_rdata;

  logic [BeatW-1:0] bin_q;
  logic             flush_q;
  logic [DW-1:0]    prev_q;
  logic             last_beat;
  logic             aligned;     // an aligned segment's beat, written as it is
  logic [DW-1:0]    blend, shifted;

  assign rready_o  = !flush_q && !meta_empty;
  assign last_beat = (bin_q == h_nin - 1'b1);
  assign aligned   = !flush_q && r_hs && (h_off == '0);

  // The output word is bytes h_off .. h_off + DataBytes - 1 of {beat, prev}
  // ({0, prev} in the flush cycle; the beat itself for a beat of an aligned
  // segment). That is a rotation of one word: blend takes byte b from prev
  // where b >= h_off and from the beat (or 0) below it, and rotating blend
  // down by h_off bytes (2^l bytes at level l) puts byte h_off + b of
  // {beat, prev} at b. No shifter over both words.
  // (generate assigns, one word per level: iverilog does not settle an
  // in-place loop over the word in a process)
  /* verilator lint_off CMPCONST */
  for (genvar b = 0; b < DataBytes; b++) begin : g_blend
    assign blend[b*8 +: 8] = (!aligned && OffW'(b) >= h_off) ? prev_q[b*8 +: 8]
                           : (flush_q ? 8'd0 : rdata_i[b*8 +: 8]);
  end
  /* verilator lint_on CMPCONST */
  // level l at l*DW: rotated by h_off's bits below l
  logic [(OffW+1)*DW-1:0] rot /*verilator split_var*/;
  assign rot[0 +: DW] = blend;
  for (genvar l = 0; l < OffW; l++) begin : g_rot
    logic [DW-1:0] lv;
    assign lv = rot[l*DW +: DW];
    assign rot[(l+1)*DW +: DW] = h_off[l] ? {lv[0 +: (1 << l)*8], lv[DW-1:(1 << l)*8]} : lv;
  end
  assign shifted = rot[OffW*DW +: DW];

  always_comb begin
    buf_we_o    = 1'b0;
    buf_wdata_o = shifted;
    buf_waddr_o = h_waddr + WordAw'(bin_q) - WordAw'(1);
    seg_done_o  = 1'b0;
    meta_pop    = 1'b0;
    if (flush_q) begin
      buf_we_o    = 1'b1;
      buf_waddr_o = h_waddr + WordAw'(h_nout) - WordAw'(1);
      seg_done_o = 1'b1;
      meta_pop   = 1'b1;
    end else if (r_hs) begin
      if (h_off == '0) begin
        buf_we_o    = 1'b1;
        buf_waddr_o = h_waddr + WordAw'(bin_q);
        seg_done_o  = last_beat;
        meta_pop    = last_beat;
      end else begin
        buf_we_o   = (bin_q != '0);
        seg_done_o = last_beat && (h_nout != h_nin);
        meta_pop   = seg_done_o;
      end
    end
  end
  assign buf_dest_o = h_dest;
  assign buf_bank_o = h_bank;
  assign err_o      = r_hs && (rresp_i != 2'b00);
  assign idle_o     = meta_empty && !ar_busy_q && (outst_q == '0);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      bin_q   <= '0;
      flush_q <= 1'b0;
    end else if (flush_q) begin
      flush_q <= 1'b0;
    end else if (r_hs) begin
      bin_q <= last_beat ? '0 : bin_q + 1'b1;
      if (last_beat && h_off != '0 && h_nout == h_nin) flush_q <= 1'b1;
    end
  end

  always_ff @(posedge clk_i) begin
    if (r_hs) prev_q <= rdata_i;
  end

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  // Bursts stay inside one 4 KiB page and match the segment bookkeeping.
  always_ff @(posedge clk_i) begin
    if (rst_ni && ar_hs) begin
      assert (32'(page_off) + ((32'(arlen_o) + 1) << OffW) <= 4096)
        else $error("tsr_rd_master: burst at %h crosses a 4 KiB boundary", araddr_o);
    end
    if (rst_ni && r_hs) begin
      assert (!meta_empty) else $error("tsr_rd_master: read data without a segment");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
