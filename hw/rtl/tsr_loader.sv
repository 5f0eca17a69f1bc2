// tsr_loader - walks the tiles of a GEMM descriptor and issues its reads.
//
// Tiles go m block (Rows rows of A, or one row in GEMV mode), n block (Cols
// rows of W), k chunk (KChunk bytes). For each step the loader waits for a
// free buffer slot per operand (Slots each, taken in turn: the next Slots-1
// steps load while the current one computes, so the memory latency of a
// step's first read is hidden behind the loads of the steps before), issues one read segment per A row and per W
// row into it, and queues a step record for the compute engine. A segment is
// skipped when the previous step left the same chunk in its slot: A across
// n blocks, W across m blocks, when K fits one chunk (and N one n block).
//
// GEMM_BSR: m blocks, tile rows (an n block of BSR_BN W rows each), k chunks
// holding a stored tile. The tile row's bitmap row sits in one of two walk
// entries; a step of a chunk loads its A rows (kept across the tile rows of
// an m block when K fits one chunk) and one segment per stored tile (the
// tile's BSR_BN rows into the W banks at the tile's k offset), and carries
// the chunk's bits to the compute engine. The first step of a tile row first
// reads the next tile row's bitmap row into the other entry. A tile row
// without a stored tile is a zero record for the writer instead of a step.
module tsr_loader #(
  parameter int Rows      = 16,    // array rows
  parameter int Cols      = 16,    // array columns
  parameter int DataBytes = 64,    // AXI data bus bytes
  parameter int KChunk    = 4096,  // k bytes per buffered chunk
  parameter int NumPorts  = 1,     // read ports, power of two <= Cols
  parameter int PortW     = (NumPorts > 1) ? $clog2(NumPorts) : 1,  // port index bits
  parameter int SegW      = 16,    // bits of a port's segment counter
  parameter int SlotAw    = $clog2(KChunk / DataBytes),  // word address bits of a slot
  parameter int Slots     = 3,                           // buffer slots per operand
  parameter int SlW       = $clog2(Slots),               // slot index bits
  parameter int KcW       = $clog2(KChunk) + 1,          // holds KChunk
  parameter int MLenW     = $clog2(Rows + 1),            // holds Rows
  parameter int NLenW     = $clog2(Cols + 1),            // holds Cols
  parameter int CT        = KChunk / 64                  // GEMM_BSR: tiles of a chunk at BK 64
) (
  input  logic              clk_i,         // clock
  input  logic              rst_ni,        // asynchronous reset, active low
  // the descriptor
  input  logic              start_i,       // pulse: walk this descriptor
  input  logic              gemv_i,        // with start_i: GEMV mode
  input  logic [15:0]       m_i,           // M
  input  logic [15:0]       n_i,           // N
  input  logic [15:0]       k_i,           // K
  input  logic [31:0]       lda_i,         // LDA
  input  logic [31:0]       ldw_i,         // LDW
  input  logic [31:0]       ldc_i,         // LDC
  input  logic [63:0]       a_addr_i,      // A_ADDR
  input  logic [63:0]       w_addr_i,      // W_ADDR
  input  logic [63:0]       c_addr_i,      // C_ADDR
  input  logic              striped_i,     // W striped over the NumPorts channels
  input  logic [31:0]       w_cstride_i,   // W_CSTRIDE
  input  logic              bsr_i,         // GEMM_BSR
  input  logic              bk128_i,       // GEMM_BSR: BK = 128
  input  logic [7:0]        rb_i,          // GEMM_BSR: bytes of a bitmap row
  input  logic [63:0]       tiles_i,       // GEMM_BSR: the first stored tile
  output logic              idle_o,        // every step issued
  // GEMM_BSR bitmap rows into the walk entries (masked to the k tiles)
  input  logic              bm_we_i,       // a word arrives
  input  logic              bm_entry_i,    // its entry
  input  logic              bm_word_i,     // its index in the row
  input  logic [511:0]      bm_data_i,     // the word
  // GEMM_BSR zero records: a tile row without a stored tile
  output logic              z_valid_o,     // a record is offered
  input  logic              z_ready_i,     // the writer takes it
  output logic [63:0]       z_c_o,         // its rows' address in C
  output logic [MLenW-1:0]  z_mlen_o,      // rows
  output logic [NLenW-1:0]  z_nlen_o,      // columns
  // read segments
  output logic              seg_valid_o,   // a segment is offered
  input  logic              seg_ready_i,   // the read master takes it
  output logic [63:0]       seg_addr_o,    // its first byte
  output logic [KcW-1:0]    seg_len_o,     // its bytes
  output logic [1:0]        seg_dest_o,    // DestA, DestW, DestWT or DestDesc (tsr_dest.svh)
  output logic [PortW-1:0]  seg_port_o,    // read port (the row's memory channel)
  output logic [7:0]        seg_bank_o,    // the bank (operand row in the block)
  output logic [SlW+SlotAw-1:0] seg_waddr_o, // first buffer word (slot, word 0)
  // step records
  output logic              push_o,        // a step record is ready
  input  logic              full_i,        // the step queue is full
  input  logic [NumPorts*SegW-1:0] segs_issued_i, // per port: segments issued so far
  output logic [SlW-1:0]    st_sa_o,       // A slot of the step
  output logic [SlW-1:0]    st_sw_o,       // W slot of the step
  output logic [KcW-1:0]    st_kc_o,       // k bytes of the step
  output logic              st_first_o,    // first k chunk of its tile
  output logic              st_last_o,     // last k chunk of its tile
  output logic              st_gemv_o,     // GEMV mode
  output logic [MLenW-1:0]  st_mlen_o,     // rows of the tile
  output logic [NLenW-1:0]  st_nlen_o,     // columns of the tile
  output logic [63:0]       st_c_o,        // address of the tile's C[0][0]
  output logic [NumPorts*SegW-1:0] st_target_o,   // per port: segments that must have arrived
  output logic              st_bsr_o,      // GEMM_BSR step
  output logic [CT-1:0]     st_cb_o,       // GEMM_BSR: the chunk's stored tiles
  // slot releases from the compute engine
  input  logic              release_i,     // a step's compute ends
  input  logic [SlW-1:0]    rel_sa_i,      // its A slot
  input  logic [SlW-1:0]    rel_sw_i       // its W slot
);
  localparam int LogRows = $clog2(Rows);
  localparam int LogCols = $clog2(Cols);
  localparam int LogPorts = $clog2(NumPorts);
  localparam int LogKc    = $clog2(KChunk);
  localparam int NCh      = 65536 / KChunk;          // k chunks of the longest K
  localparam int ChW      = $clog2(NCh + 1);
  localparam int XW       = $clog2(CT);
`include "tsr_dest.svh"

  typedef enum logic [3:0] {
    LIdle, LPrep, LASeg, LWSeg, LPush, LNext, LBChunk, LBBm, LBWSeg, LBZero
  } load_e;

  load_e            st_q, st_d;
  logic             gemv_q, gemv_d;
  logic [16:0]      m0_q, m0_d, n0_q, n0_d, k0_q, k0_d;        // tile origin
  logic [63:0]      a_blk_q, a_blk_d, w_blk_q, w_blk_d;        // A + m0*LDA, W + n0*LDW
  logic [63:0]      c_row_q, c_row_d;                          // C + m0*LDC
  logic [63:0]      seg_ptr_q, seg_ptr_d;
  logic [63:0]      grp_ptr_q, grp_ptr_d;                      // W: channel 0's row of the group
  logic [7:0]       seg_idx_q, seg_idx_d;
  logic [SlW-1:0]   sa_q, sa_d, sw_q, sw_d;                    // slots of the step
  logic [MLenW-1:0] mlen_q, mlen_d;
  logic [NLenW-1:0] nlen_q, nlen_d;
  logic [KcW-1:0]   kc_q, kc_d;
  logic             reuse_w_q, reuse_w_d;
  logic [2:0]       busy_a_q [Slots];
  logic [2:0]       busy_w_q [Slots];
  // GEMM_BSR walk
  logic             bsr_q, bsr_d;
  logic [1023:0]    bm0_q, bm1_q;                              // walk entries
  logic [2*NCh-1:0] nz0_q, nz1_q;                              // their groups holding a bit
  logic [NCh-1:0]   nzw;                                       // the word arriving's
  logic [1:0]       bmv_q;                                     // entry holds its row
  logic             e_q, e_d;                                  // entry of the tile row
  logic             pf_q, pf_d;                                // next row requested
  logic             ah_q, ah_d;                                // A chunk held (K fits)
  logic             la_q, la_d, lw_q, lw_d;                    // the step loads A / W
  logic             zr_q, zr_d;                                // a zero tile row
  logic             bfirst_q, bfirst_d, blast_q, blast_d;      // first / last step of the row
  logic [ChW-1:0]   c_q, c_d;                                  // next chunk to look at
  logic [CT-1:0]    cb_q, cb_d, wm_q, wm_d;                    // chunk bits, tiles to load
  logic [31:0]      rank_q, rank_d;                            // stored tiles before the next
  logic [63:0]      nbm_q, nbm_d;                              // bitmap row of tile row + 1

  // Parameters of the next step (from the loop state).
  logic [16:0]      m_rem, n_rem, k_rem;
  logic [MLenW-1:0] m_len;
  logic [NLenW-1:0] n_len;
  logic [KcW-1:0]   kc_len;
  logic             reuse_a, reuse_w, prep_ok, seg_hs;
  logic [SlW-1:0]   sa_n, sw_n, na, nw;   // the slots after sa_q / sw_q; the step's
  assign sa_n    = (sa_q == SlW'(Slots - 1)) ? '0 : sa_q + SlW'(1);
  assign sw_n    = (sw_q == SlW'(Slots - 1)) ? '0 : sw_q + SlW'(1);
  assign m_rem   = {1'b0, m_i} - m0_q;
  assign n_rem   = {1'b0, n_i} - n0_q;
  assign k_rem   = {1'b0, k_i} - k0_q;
  assign m_len   = gemv_q ? MLenW'(1) : ((m_rem >= 17'(Rows)) ? MLenW'(Rows) : MLenW'(m_rem));
  assign n_len   = (n_rem >= 17'(Cols)) ? NLenW'(Cols) : NLenW'(n_rem);
  assign kc_len  = (k_rem >= 17'(KChunk)) ? KcW'(KChunk) : KcW'(k_rem);
  assign reuse_a = (k_i <= 16'(KChunk)) && (n0_q != 17'd0);
  assign reuse_w = (k_i <= 16'(KChunk)) && (n_i <= 16'(Cols)) && (m0_q != 17'd0);
  assign na      = reuse_a ? sa_q : sa_n;
  assign nw      = reuse_w ? sw_q : sw_n;
  assign prep_ok = !full_i && (reuse_a || busy_a_q[na] == 3'd0) &&
                   (reuse_w || busy_w_q[nw] == 3'd0);
  assign seg_hs  = seg_valid_o && seg_ready_i;

  // The next m block (Rows rows of A and C, one in GEMV mode).
  logic [16:0] m0_next;
  logic [63:0] a_blk_next, c_row_next;
  logic        mb_more, mb_adv;   // mb_adv: LNext ends an m block
  assign m0_next    = m0_q + (gemv_q ? 17'd1 : 17'(Rows));
  assign mb_more    = m0_next < {1'b0, m_i};
  assign a_blk_next = a_blk_q + (gemv_q ? {32'd0, lda_i} : ({32'd0, lda_i} << LogRows));
  assign c_row_next = c_row_q + (gemv_q ? {32'd0, ldc_i} : ({32'd0, ldc_i} << LogRows));

  // GEMM_BSR: the tile row's chunks holding a stored tile, the next one from
  // c_q, its bits, whether it is the row's last; the next tile to load.
  logic [NCh-1:0]   ne, cand;
  logic [ChW-1:0]   cn;
  logic [CT-1:0]    cb, wbit;
  logic [XW-1:0]    wx;
  logic             blast, bnext, bla, blw, bprep_ok;
  logic [SlW-1:0]   bna, bnw;
  logic [16:0]      bk0, bk_rem;
  logic [KcW-1:0]   bkc;
  logic [NLenW-1:0] bn_len;
  // A chunk holds a stored tile: from a flag per CT/2 bits of each entry,
  // set as the words are written (chunk c is group c at BK 128, groups 2c
  // and 2c+1 at BK 64).
  localparam int LogNCh = $clog2(NCh);
  logic [2*NCh-1:0] nz;
  assign nz = e_q ? nz1_q : nz0_q;
  for (genvar c = 0; c < NCh; c++) begin : g_chunk
    assign ne[c] = bk128_i ? nz[c] : (nz[2*c] || nz[2*c+1]);
  end
  assign cand = ne & ~((NCh'(1) << c_q) - NCh'(1));
  logic [NCh-1:0]    cand1;             // the next chunk, one-hot
  logic [LogNCh-1:0] cidx;
  tsr_lsb #(.W(NCh), .IW(LogNCh)) u_chunk (.v_i (cand), .onehot_o (cand1), .idx_o (cidx));
  assign cn = ChW'(cidx);
  // A chunk's bits: CT bits of the entry at BK 64, half of them at BK 128
  // (chunk c is the upper or lower half of the BK 64 chunk c/2), one select
  // over both entries' chunks.
  logic [CT-1:0]     ch [2*NCh];
  logic [CT-1:0]     chs;
  logic [LogNCh-1:0] c64;   // the BK 64 chunk
  for (genvar c = 0; c < NCh; c++) begin : g_ch
    assign ch[c]       = bm0_q[c*CT +: CT];
    assign ch[NCh + c] = bm1_q[c*CT +: CT];
  end
  assign c64 = bk128_i ? (cidx >> 1) : cidx;
  assign chs = ch[{e_q, c64}];
  logic [CT/2-1:0]   chh;
  assign chh = cidx[0] ? chs[CT-1:CT/2] : chs[CT/2-1:0];
  assign cb  = bk128_i ? {{(CT/2){1'b0}}, chh} : chs;
  tsr_lsb #(.W(CT), .IW(XW)) u_tile (.v_i (wm_q), .onehot_o (wbit), .idx_o (wx));
  assign blast    = (cand & ~cand1) == '0;   // no chunk after cn
  assign bnext    = (n0_q + 17'd16 < {1'b0, n_i}) || mb_more;
  assign bk0      = 17'({cn, {LogKc{1'b0}}});
  assign bk_rem   = {1'b0, k_i} - bk0;
  assign bkc      = (bk_rem >= 17'(KChunk)) ? KcW'(KChunk) : KcW'(bk_rem);
  assign bn_len   = (n_rem >= 17'd16) ? NLenW'(16) : NLenW'(n_rem);
  // A is kept while K fits one chunk, W while N fits one tile row too
  assign bla      = !((k_i <= 16'(KChunk)) && ah_q);
  assign blw      = !((k_i <= 16'(KChunk)) && (n_i <= 16'd16) && (m0_q != 17'd0));
  assign bna      = bla ? sa_n : sa_q;
  assign bnw      = blw ? sw_n : sw_q;
  assign bprep_ok = !full_i && (!bla || busy_a_q[bna] == 3'd0) && (!blw || busy_w_q[bnw] == 3'd0);

  always_comb begin
    st_d = st_q;
    gemv_d = gemv_q;
    m0_d = m0_q; n0_d = n0_q; k0_d = k0_q;
    a_blk_d = a_blk_q; w_blk_d = w_blk_q; c_row_d = c_row_q;
    seg_ptr_d = seg_ptr_q; seg_idx_d = seg_idx_q; grp_ptr_d = grp_ptr_q;
    sa_d = sa_q; sw_d = sw_q;
    mlen_d = mlen_q; nlen_d = nlen_q; kc_d = kc_q; reuse_w_d = reuse_w_q;
    bsr_d = bsr_q; e_d = e_q; pf_d = pf_q; ah_d = ah_q; la_d = la_q; lw_d = lw_q; zr_d = zr_q;
    bfirst_d = bfirst_q; blast_d = blast_q; c_d = c_q; cb_d = cb_q; wm_d = wm_q;
    rank_d = rank_q; nbm_d = nbm_q;
    mb_adv = 1'b0;
    unique case (st_q)
      LIdle: begin
        if (start_i) begin
          gemv_d = gemv_i;
          m0_d = '0; n0_d = '0; k0_d = '0;
          a_blk_d = a_addr_i; w_blk_d = w_addr_i; c_row_d = c_addr_i;
          bsr_d = bsr_i;
          e_d = 1'b0; pf_d = 1'b0; ah_d = 1'b0; c_d = '0; bfirst_d = 1'b1; rank_d = '0;
          nbm_d = w_addr_i + 64'(ldw_i);
          if (bsr_i) st_d = LBChunk;
          else st_d = LPrep;
        end
      end
      // GEMM_BSR: the next chunk of the tile row holding a stored tile
      LBChunk: begin
        if (bmv_q[e_q]) begin
          if (ne == '0) begin
            zr_d = 1'b1;
            blast_d = 1'b1;
            mlen_d = m_len;
            nlen_d = bn_len;
            if (bnext && !pf_q) st_d = LBBm;
            else st_d = LBZero;
          end else if (bprep_ok) begin
            zr_d = 1'b0;
            sa_d = bna;
            sw_d = bnw;
            la_d = bla;
            lw_d = blw;
            c_d = cn;
            k0_d = bk0;
            kc_d = bkc;
            mlen_d = m_len;
            nlen_d = bn_len;
            cb_d = cb;
            wm_d = cb;
            blast_d = blast;
            seg_idx_d = '0;
            seg_ptr_d = a_blk_q + 64'(bk0);
            if (bnext && !pf_q) st_d = LBBm;
            else if (bla) st_d = LASeg;
            else if (blw) st_d = LBWSeg;
            else st_d = LPush;
          end
        end
      end
      LBBm: begin
        if (seg_hs) begin
          pf_d = 1'b1;
          if (zr_q) st_d = LBZero;
          else if (la_q) st_d = LASeg;
          else if (lw_q) st_d = LBWSeg;
          else st_d = LPush;
        end
      end
      LBWSeg: begin
        if (seg_hs) begin
          wm_d = wm_q & ~wbit;
          rank_d = rank_q + 32'd1;
          if ((wm_q & ~wbit) == '0) st_d = LPush;
        end
      end
      LBZero: if (z_ready_i) st_d = LNext;
      LPrep: begin
        if (prep_ok) begin
          sa_d = na;
          sw_d = nw;
          mlen_d = m_len;
          nlen_d = n_len;
          kc_d = kc_len;
          reuse_w_d = reuse_w;
          seg_idx_d = '0;
          if (!reuse_a) begin
            seg_ptr_d = a_blk_q + 64'(k0_q);
            st_d = LASeg;
          end else if (!reuse_w) begin
            seg_ptr_d = w_blk_q + 64'(k0_q);
            grp_ptr_d = w_blk_q + 64'(k0_q);
            st_d = LWSeg;
          end else begin
            st_d = LPush;
          end
        end
      end
      LASeg: begin
        if (seg_hs) begin
          seg_ptr_d = seg_ptr_q + 64'(lda_i);
          seg_idx_d = seg_idx_q + 8'd1;
          if (seg_idx_q + 8'd1 == 8'(mlen_q)) begin
            seg_idx_d = '0;
            if (bsr_q) begin
              ah_d = 1'b1;
              if (lw_q) st_d = LBWSeg;
              else st_d = LPush;
            end else if (!reuse_w_q) begin
              seg_ptr_d = w_blk_q + 64'(k0_q);
              grp_ptr_d = w_blk_q + 64'(k0_q);
              st_d = LWSeg;
            end else begin
              st_d = LPush;
            end
          end
        end
      end
      LWSeg: begin
        if (seg_hs) begin
          // Striped: the next row lies in the next channel, or starts the
          // next group of NumPorts rows in channel 0.
          if (!striped_i) begin
            seg_ptr_d = seg_ptr_q + 64'(ldw_i);
          end else if (32'(seg_idx_q) % NumPorts == NumPorts - 1) begin
            seg_ptr_d = grp_ptr_q + 64'(ldw_i);
            grp_ptr_d = grp_ptr_q + 64'(ldw_i);
          end else begin
            seg_ptr_d = seg_ptr_q + 64'(w_cstride_i);
          end
          seg_idx_d = seg_idx_q + 8'd1;
          if (seg_idx_q + 8'd1 == 8'(nlen_q)) st_d = LPush;
        end
      end
      LPush: st_d = LNext;
      LNext: begin
        st_d = LPrep;
        if (bsr_q) begin
          bfirst_d = 1'b0;
          st_d = LBChunk;
          if (!blast_q) begin
            c_d = c_q + ChW'(1);
          end else begin
            // the next tile row, its bitmap row in the other entry
            e_d = !e_q; pf_d = 1'b0; c_d = '0; bfirst_d = 1'b1;
            if (n0_q + 17'd16 < {1'b0, n_i}) begin
              n0_d = n0_q + 17'd16;
              nbm_d = nbm_q + 64'(ldw_i);
            end else begin
              n0_d = '0;
              nbm_d = w_addr_i + 64'(ldw_i);
              rank_d = '0; ah_d = 1'b0;
              mb_adv = 1'b1;
            end
          end
        end else if (k0_q + 17'(kc_q) < {1'b0, k_i}) begin
          k0_d = k0_q + 17'(KChunk);
        end else begin
          k0_d = '0;
          if (n0_q + 17'(Cols) < {1'b0, n_i}) begin
            n0_d = n0_q + 17'(Cols);
            w_blk_d = w_blk_q + ({32'd0, ldw_i} << (striped_i ? LogCols - LogPorts : LogCols));
          end else begin
            n0_d = '0;
            w_blk_d = w_addr_i;
            mb_adv = 1'b1;
          end
        end
      end
      default: st_d = LIdle;
    endcase
    // the last n block (tile row) of an m block: the next m block, or done
    if (mb_adv) begin
      if (mb_more) begin
        m0_d = m0_next;
        a_blk_d = a_blk_next;
        c_row_d = c_row_next;
      end else begin
        st_d = LIdle;
      end
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      st_q <= LIdle;
      gemv_q <= 1'b0;
      m0_q <= '0; n0_q <= '0; k0_q <= '0;
      a_blk_q <= '0; w_blk_q <= '0; c_row_q <= '0;
      seg_ptr_q <= '0; seg_idx_q <= '0; grp_ptr_q <= '0;
      sa_q <= '0; sw_q <= '0;
      mlen_q <= '0; nlen_q <= '0; kc_q <= '0; reuse_w_q <= 1'b0;
      bsr_q <= 1'b0; e_q <= 1'b0; pf_q <= 1'b0; ah_q <= 1'b0; la_q <= 1'b0; lw_q <= 1'b0;
      zr_q <= 1'b0; bfirst_q <= 1'b0; blast_q <= 1'b0; c_q <= '0; cb_q <= '0; wm_q <= '0;
      rank_q <= '0; nbm_q <= '0;
    end else begin
      bsr_q <= bsr_d; e_q <= e_d; pf_q <= pf_d; ah_q <= ah_d; la_q <= la_d; lw_q <= lw_d;
      zr_q <= zr_d; bfirst_q <= bfirst_d; blast_q <= blast_d; c_q <= c_d; cb_q <= cb_d;
      wm_q <= wm_d; rank_q <= rank_d; nbm_q <= nbm_d;
      st_q <= st_d;
      gemv_q <= gemv_d;
      m0_q <= m0_d; n0_q <= n0_d; k0_q <= k0_d;
      a_blk_q <= a_blk_d; w_blk_q <= w_blk_d; c_row_q <= c_row_d;
      seg_ptr_q <= seg_ptr_d; seg_idx_q <= seg_idx_d; grp_ptr_q <= grp_ptr_d;
      sa_q <= sa_d; sw_q <= sw_d;
      mlen_q <= mlen_d; nlen_q <= nlen_d; kc_q <= kc_d; reuse_w_q <= reuse_w_d;
    end
  end

  // Walk entries: a bitmap row's words as they arrive; an entry is valid
  // from its row's last word until a new row is requested into it.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      bmv_q <= '0;
    end else begin
      if (st_q == LBBm && seg_hs) bmv_q[!e_q] <= 1'b0;
      if (bm_we_i && bm_word_i == (rb_i > 8'd64)) bmv_q[bm_entry_i] <= 1'b1;
    end
  end
  for (genvar g = 0; g < NCh; g++) begin : g_nzw
    assign nzw[g] = |bm_data_i[g*(CT/2) +: CT/2];
  end
  always_ff @(posedge clk_i) begin
    if (bm_we_i) begin
      // word 0 comes first and clears word 1 (a one-word row has no bits there)
      unique case ({bm_entry_i, bm_word_i})
        2'b00: begin
          bm0_q <= {512'd0, bm_data_i};
          nz0_q <= {NCh'(0), nzw};
        end
        2'b01: begin
          bm0_q[1023:512] <= bm_data_i;
          nz0_q[2*NCh-1:NCh] <= nzw;
        end
        2'b10: begin
          bm1_q <= {512'd0, bm_data_i};
          nz1_q <= {NCh'(0), nzw};
        end
        default: begin
          bm1_q[1023:512] <= bm_data_i;
          nz1_q[2*NCh-1:NCh] <= nzw;
        end
      endcase
    end
  end

  // Slot use counts: +1 when a step is queued, -1 when its compute ends.
  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      for (int s = 0; s < Slots; s++) begin
        busy_a_q[s] <= '0;
        busy_w_q[s] <= '0;
      end
    end else begin
      for (int s = 0; s < Slots; s++) begin
        busy_a_q[s] <= busy_a_q[s] + 3'((push_o && sa_q == SlW'(s))) -
                       3'((release_i && rel_sa_i == SlW'(s)));
        busy_w_q[s] <= busy_w_q[s] + 3'((push_o && sw_q == SlW'(s))) -
                       3'((release_i && rel_sw_i == SlW'(s)));
      end
    end
  end

  assign idle_o      = (st_q == LIdle);
  assign seg_valid_o = (st_q == LASeg) || (st_q == LWSeg) || (st_q == LBBm) || (st_q == LBWSeg);
  // (conditional assigns rather than defaults overridden in a block:
  // iverilog wakes the readers on the intermediate values)
  logic in_bm, in_wt;
  assign in_bm = (st_q == LBBm);
  assign in_wt = (st_q == LBWSeg);
  assign seg_addr_o  = in_bm ? ((n0_q + 17'd16 < {1'b0, n_i}) ? nbm_q : w_addr_i) :
                       in_wt ? tiles_i + (bk128_i ? {21'd0, rank_q, 11'd0} : {22'd0, rank_q, 10'd0}) :
                       seg_ptr_q;
  // a tile: BSR_BN rows of BK bytes, word i into W bank i / (BK/64)
  assign seg_len_o   = in_bm ? KcW'(rb_i) : in_wt ? (bk128_i ? KcW'(2048) : KcW'(1024)) : kc_q;
  assign seg_dest_o  = in_bm ? DestDesc : in_wt ? DestWT : (st_q == LWSeg) ? DestW : DestA;
  assign seg_bank_o  = in_bm ? BankWalk + 8'(!e_q) :
                       in_wt ? (bk128_i ? 8'({wx, 1'b0}) : 8'(wx)) : seg_idx_q;
  assign seg_waddr_o = in_bm ? '0 : {(st_q == LWSeg || in_wt) ? sw_q : sa_q, {SlotAw{1'b0}}};
  // W bank j is fed by port j % NumPorts when W is striped, else by port 0.
  assign seg_port_o  = (st_q == LWSeg && striped_i) ? PortW'(32'(seg_idx_q) % NumPorts) : '0;
  assign push_o      = (st_q == LPush);
  assign st_sa_o     = sa_q;
  assign st_sw_o     = sw_q;
  assign st_kc_o     = kc_q;
  assign st_first_o  = bsr_q ? bfirst_q : (k0_q == 17'd0);
  assign st_last_o   = bsr_q ? blast_q : (k0_q + 17'(kc_q) == {1'b0, k_i});
  assign st_gemv_o   = gemv_q;
  assign st_mlen_o   = mlen_q;
  assign st_nlen_o   = nlen_q;
  assign st_c_o      = c_row_q + {45'd0, n0_q, 2'b00};
  assign st_target_o = segs_issued_i;
  assign st_bsr_o    = bsr_q;
  assign st_cb_o     = cb_q;
  assign z_valid_o   = (st_q == LBZero);
  assign z_c_o       = c_row_q + {45'd0, n0_q, 2'b00};
  assign z_mlen_o    = mlen_q;
  assign z_nlen_o    = nlen_q;

`ifndef SYNTHESIS
  // Checkers sample the reset synchronously.
  /* verilator lint_off SYNCASYNCNET */
  always_ff @(posedge clk_i) begin
    if (rst_ni && release_i) begin
      assert (busy_a_q[rel_sa_i] != 3'd0 && busy_w_q[rel_sw_i] != 3'd0)
        else $error("tsr_loader: a step released a free slot");
    end
  end
  /* verilator lint_on SYNCASYNCNET */
`endif
endmodule
