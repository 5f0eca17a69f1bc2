// tsr_wr_master - AXI4 write master for rows of the output tile.
//
// A request is one row segment of C: a 4-byte aligned address, a byte count
// (a multiple of 4) and the data (the descriptor checks refuse a C_ADDR or
// LDC that is not 4-byte aligned, so the row is placed in 4-byte words).
// The master shifts it onto bus words with byte strobes (the row may start
// at any 4-byte word of a bus word), splits it at 4 KiB boundaries into at
// most two INCR bursts, and counts write responses so that the sequencer can
// wait for all writes to land.
module tsr_wr_master #(
  parameter int DataBytes      = 64,               // bus width in bytes
  parameter int RowBytes       = 64,               // largest request in bytes
  parameter int MaxOutstanding = 16,               // write bursts awaiting B
  parameter int NbW            = $clog2(RowBytes + 1), // request length bits
  parameter int DW             = DataBytes * 8     // bus width in bits
) (
  input  logic                  clk_i,        // clock
  input  logic                  rst_ni,       // asynchronous reset, active low
  input  logic                  req_valid_i,  // a row is offered
  output logic                  req_ready_o,  // the row is taken
  input  logic [63:0]           req_addr_i,   // device address of the first byte
  input  logic [NbW-1:0]        req_nbytes_i, // bytes to write, 1..RowBytes
  input  logic [RowBytes*8-1:0] req_data_i,   // bytes, first byte in bits 7:0
  output logic                  awvalid_o,    // AW valid
  input  logic                  awready_i,    // AW ready
  output logic [63:0]           awaddr_o,     // burst address (aligned)
  output logic [7:0]            awlen_o,      // beats - 1
  output logic [2:0]            awsize_o,     // log2(DataBytes)
  output logic [1:0]            awburst_o,    // INCR
  output logic                  wvalid_o,     // W valid
  input  logic                  wready_i,     // W ready
  output logic [DW-1:0]         wdata_o,      // W data
  output logic [DataBytes-1:0]  wstrb_o,      // W byte strobes
  output logic                  wlast_o,      // last beat of a burst
  input  logic                  bvalid_i,     // B valid
  output logic                  bready_o,     // B ready
  input  logic [1:0]            bresp_i,      // B response
  output logic                  idle_o,       // no row in progress, no B pending
  output logic                  err_o         // pulse: SLVERR/DECERR response
);
  localparam int OffW      = $clog2(DataBytes);
  localparam int PageBeats = 4096 / DataBytes;
  localparam int ShBeats   = (RowBytes + DataBytes - 1) / DataBytes + 1;
  localparam int BW        = $clog2(ShBeats + 1);
  localparam int OutW      = $clog2(MaxOutstanding + 1);
  localparam int NChunks   = ShBeats - 1;      // bus words of a request, padded
  localparam int RowPW     = NChunks * DW;
  localparam int Gran      = 4;                // bytes: rows of C are 4-byte aligned
  localparam int LogGran   = 2;
  localparam int WOffW     = OffW - LogGran;   // offset in 4-byte words
  localparam int NbWW      = NbW - LogGran;    // request length in 4-byte words

  logic              busy_q;
  logic [63:0]       base_q;
  logic [RowPW-1:0]  rot_q;               // each bus word of the row, rotated
  logic [WOffW-1:0]  woff_q;              // the row's offset in the bus word, 4-byte words
  logic [ShBeats*DataBytes-1:0] strb_q;
  logic [BW-1:0]     nbeats_q, b1_q, wcnt_q;
  logic [1:0]        nbursts_q, awcnt_q;
  logic [OutW-1:0]   outst_q;

  // Request decode.
  logic [OffW-1:0]   off;
  logic [WOffW-1:0]  woff;
  logic [NbWW-1:0]   nwords;
  logic [ShBeats*DataBytes/Gran-1:0] wstrb_sh;   // strobes per 4-byte word
  logic [BW-1:0]     nbeats, b1, page_left;
  logic [RowPW-1:0]  rowp, rot, lv;
  logic [DW-1:0]     wdata;
  logic [ShBeats*DataBytes-1:0] strb_sh;
  assign off       = req_addr_i[OffW-1:0];
  assign nbeats    = BW'((32'(off) + 32'(req_nbytes_i) + DataBytes - 1) >> OffW);
  assign page_left = BW'(PageBeats - 32'(req_addr_i[11:OffW]) >= 32'(ShBeats)
                         ? ShBeats : PageBeats - 32'(req_addr_i[11:OffW]));
  assign b1        = (page_left < nbeats) ? page_left : nbeats;
  assign woff      = off[OffW-1:LogGran];
  assign nwords    = req_nbytes_i[NbW-1:LogGran];
  assign wstrb_sh  = ~({(ShBeats * DataBytes / Gran){1'b1}} << nwords) << woff;
  for (genvar w = 0; w < ShBeats * DataBytes / Gran; w++) begin : g_strb
    assign strb_sh[w*Gran +: Gran] = {Gran{wstrb_sh[w]}};
  end

  // The row shifted up by off bytes, beat k byte b, is byte b - off of bus
  // word k of the row for b >= off and byte b - off + DataBytes of word k-1
  // below: both are byte b of the word rotated up by off bytes. So each word
  // is rotated (2^l bytes at level l, from 4 bytes up: the offset is a
  // multiple of 4) and held, and beat k takes byte b from word k or k-1
  // (nothing past either end).
  assign rowp = RowPW'(req_data_i);
  always_comb begin
    rot = rowp;
    for (int l = LogGran; l < OffW; l++) begin
      lv = rot;
      for (int c = 0; c < NChunks; c++) begin
        for (int b = 0; b < DataBytes; b++) begin
          if (woff[l-LogGran]) begin
            rot[(c*DataBytes + b)*8 +: 8] =
              lv[(c*DataBytes + (b + DataBytes - (1 << l)) % DataBytes)*8 +: 8];
          end
        end
      end
    end
  end
  always_comb begin
    wdata = '0;
    for (int b = 0; b < DataBytes; b++) begin
      for (int c = 0; c < NChunks; c++) begin
        if (WOffW'(b / Gran) >= woff_q ? (32'(wcnt_q) == c) : (32'(wcnt_q) == c + 1)) begin
          wdata[b*8 +: 8] = rot_q[(c*DataBytes + b)*8 +: 8];
        end
      end
    end
  end

  logic req_hs, aw_hs, w_hs, b_hs, aw_done_n, w_done_n;
  assign req_ready_o = !busy_q;
  assign req_hs      = req_valid_i && req_ready_o;
  assign awvalid_o   = busy_q && (awcnt_q != nbursts_q) && (outst_q < OutW'(MaxOutstanding));
  assign awaddr_o    = (awcnt_q == 2'd0) ? base_q
                     : base_q + {{(64 - BW - OffW){1'b0}}, b1_q, {OffW{1'b0}}};
  assign awlen_o     = (awcnt_q == 2'd0) ? 8'(BW'(b1_q - 1'b1)) : 8'(BW'(nbeats_q - b1_q - 1'b1));
  assign awsize_o    = 3'(OffW);
  assign awburst_o   = 2'b01;
  assign wvalid_o    = busy_q && (wcnt_q != nbeats_q);
  assign wdata_o     = wdata;
  assign wstrb_o     = strb_q[wcnt_q * DataBytes +: DataBytes];
  assign wlast_o     = (wcnt_q == b1_q - 1'b1) || (wcnt_q == nbeats_q - 1'b1);
  assign bready_o    = 1'b1;
  assign aw_hs       = awvalid_o && awready_i;
  assign w_hs        = wvalid_o && wready_i;
  assign b_hs        = bvalid_i && bready_o;
  assign aw_done_n   = (awcnt_q + 2'(aw_hs)) == nbursts_q;
  assign w_done_n    = (wcnt_q + BW'(w_hs)) == nbeats_q;
  assign idle_o      = !busy_q && (outst_q == '0);
  assign err_o       = b_hs && (bresp_i != 2'b00);

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      busy_q    <= 1'b0;
      nbeats_q  <= '0;
      b1_q      <= '0;
      wcnt_q    <= '0;
      nbursts_q <= '0;
      awcnt_q   <= '0;
      outst_q   <= '0;
    end else begin
      if (req_hs) begin
        busy_q    <= 1'b1;
        nbeats_q  <= nbeats;
        b1_q      <= b1;
        nbursts_q <= (nbeats > b1) ? 2'd2 : 2'd1;
        wcnt_q    <= '0;
        awcnt_q   <= '0;
      end else if (busy_q) begin
        if (aw_hs) awcnt_q <= awcnt_q + 1'b1;
        if (w_hs) wcnt_q <= wcnt_q + 1'b1;
        if (aw_done_n && w_done_n) busy_q <= 1'b0;
      end
      outst_q <= outst_q + OutW'(aw_hs) - OutW'(b_hs);
    end
  end

  always_ff @(posedge clk_i) begin
    if (req_hs) begin
      base_q <= {req_addr_i[63:OffW], {OffW{1'b0}}};
      rot_q  <= rot;
      woff_q <= woff;
      strb_q <= strb_sh;
    end
  end

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  always_ff @(posedge clk_i) begin
    if (rst_ni && aw_hs) begin
      assert (32'(awaddr_o[11:0]) + ((32'(awlen_o) + 1) << OffW) <= 4096)
        else $error("tsr_wr_master: burst at %h crosses a 4 KiB boundary", awaddr_o);
    end
    if (rst_ni && req_hs) begin
      assert (req_nbytes_i != '0 && 32'(req_nbytes_i) <= RowBytes)
        else $error("tsr_wr_master: bad request length %0d", req_nbytes_i);
      assert (req_addr_i[LogGran-1:0] == '0 && req_nbytes_i[LogGran-1:0] == '0)
        else $error("tsr_wr_master: row at %h of %0d bytes not in 4-byte words",
                    req_addr_i, req_nbytes_i);
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
