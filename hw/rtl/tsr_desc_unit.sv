// tsr_desc_unit - the run sequencer: ring check, descriptor fetch, the
// descriptor checks, and the barrier between descriptors.
//
// One start walks the ring: descriptor i is fetched (one 64-byte segment
// through the read master), checked in three cycles (products, sums,
// compares; no operand access for a descriptor that fails), handed to the
// loader (exec_o), and followed by a barrier (every result written, nothing
// in flight) before descriptor i+1. The first failure stops the run with
// STATUS and ERR_INDEX; MACS and DESC_DONE count completed descriptors.
module tsr_desc_unit #(
  parameter int Cols      = 16,  // array columns (GEMV choice)
  parameter int DataBytes = 64,  // AXI data bus bytes
  parameter int NumPorts  = 1    // read ports (memory channels), power of two
) (
  input  logic         clk_i,          // clock
  input  logic         rst_ni,         // asynchronous reset, active low
  input  logic         start_i,        // pulse: run the ring
  input  logic [63:0]  mem_base_i,     // window base
  input  logic [63:0]  mem_size_i,     // window size
  input  logic [63:0]  ring_i,         // first descriptor
  input  logic [31:0]  n_desc_i,       // descriptors
  // descriptor fetch through the read master
  output logic         fetch_valid_o,  // a descriptor segment is offered
  output logic [63:0]  fetch_addr_o,   // its address
  input  logic         fetch_ready_i,  // the read master takes it
  input  logic         desc_we_i,      // a descriptor word arrives
  input  logic [511:0] desc_word_i,    // that word
  input  logic         reads_idle_i,   // every issued segment has arrived
  input  logic         axi_err_i,      // pulse: an error response on either master
  // the engines
  output logic         exec_o,         // pulse: the loader starts this descriptor
  output logic         gemv_o,         // with exec_o: GEMV mode
  input  logic         loader_idle_i,  // the loader has issued every step
  input  logic         barrier_ok_i,   // nothing pending anywhere
  output logic         running_o,      // between start and done
  output logic         executing_o,    // a GEMM descriptor is under way
  // the current descriptor (valid from exec_o to the barrier)
  output logic [15:0]  m_o,            // M
  output logic [15:0]  n_o,            // N
  output logic [15:0]  k_o,            // K
  output logic [31:0]  lda_o,          // LDA
  output logic [31:0]  ldw_o,          // LDW
  output logic [31:0]  ldc_o,          // LDC
  output logic [63:0]  a_addr_o,       // A_ADDR
  output logic [63:0]  w_addr_o,       // W_ADDR
  output logic [63:0]  c_addr_o,       // C_ADDR
  output logic         striped_o,      // W striped over the NumPorts channels
  output logic [31:0]  w_cstride_o,    // W_CSTRIDE
  output logic [63:0]  win_base_o,     // window of the run (assertions)
  output logic [64:0]  win_end_o,      // window end, 65 bits
  // results of the run
  output logic         done_o,         // pulse: run finished
  output logic [31:0]  status_o,       // TSR_HWERR_* of the run
  output logic [31:0]  err_index_o,    // failing descriptor
  output logic [31:0]  desc_done_o,    // descriptors completed
  output logic [63:0]  macs_o          // M*N*K of completed descriptors
);
`include "tsr_regs_pkg.svh"

  typedef enum logic [3:0] {
    RIdle, RRing, RFetch, RFWait, RChk1, RChk2, RChk3, RExec, RBar, RFin
  } run_e;

  run_e        st_q, st_d;
  logic [63:0] base_q, base_d, ring_q, ring_d, dptr_q, dptr_d;
  logic [31:0] ndesc_q, ndesc_d, di_q, di_d;
  logic [31:0] status_q, status_d, err_index_q, err_index_d, desc_done_q, desc_done_d;
  logic [63:0] macs_q, macs_d;
  logic        axi_err_q, axi_err_d, done_q, done_d;
  logic [64:0] win_end_q, win_end_d;
  logic [511:0] dword_q;

  // Descriptor fields.
  logic [31:0] d_op, d_flags, d_m, d_n, d_k, d_lda, d_ldw, d_ldc;
  logic [63:0] d_a, d_w, d_c;
  logic [31:0] d_nch, d_cstride;
  assign d_op    = dword_q[TSR_DESC_OPCODE*8 +: 32];
  assign d_flags = dword_q[TSR_DESC_FLAGS*8 +: 32];
  assign d_m     = dword_q[TSR_DESC_M*8 +: 32];
  assign d_n     = dword_q[TSR_DESC_N*8 +: 32];
  assign d_k     = dword_q[TSR_DESC_K*8 +: 32];
  assign d_lda   = dword_q[TSR_DESC_LDA*8 +: 32];
  assign d_ldw   = dword_q[TSR_DESC_LDW*8 +: 32];
  assign d_ldc   = dword_q[TSR_DESC_LDC*8 +: 32];
  assign d_a     = dword_q[TSR_DESC_A_ADDR*8 +: 64];
  assign d_w     = dword_q[TSR_DESC_W_ADDR*8 +: 64];
  assign d_c     = dword_q[TSR_DESC_C_ADDR*8 +: 64];
  assign d_nch     = dword_q[TSR_DESC_W_NCH*8 +: 32];
  assign d_cstride = dword_q[TSR_DESC_W_CSTRIDE*8 +: 32];

  // W striped over the channels: row n at W + (n % P)*W_CSTRIDE + (n / P)*LDW.
  localparam int LogPorts = $clog2(NumPorts);
  logic striped, nch_bad;
  assign striped = (d_nch > 32'd1);
  assign nch_bad = striped ? (d_nch != 32'(NumPorts)) : (d_cstride != 32'd0);

  logic [15:0] m16, n16, k16;
  assign m16 = d_m[15:0];
  assign n16 = d_n[15:0];
  assign k16 = d_k[15:0];

  // Check pipeline: products (RChk1), extents (RChk2), compares (RChk3).
  logic [47:0] pa_q, pa_d, pw_q, pw_d, pc_q, pc_d, mnk_q, mnk_d, pch_q, pch_d;
  logic [15:0] wrows;                     // rows of W in the fullest channel, - 1
  assign wrows = striped ? 16'(16'(n16 - 16'd1) >> LogPorts) : 16'(n16 - 16'd1);
  logic [31:0] mn_q, mn_d;
  logic [64:0] a_end_q, a_end_d, w_end_q, w_end_d, c_end_q, c_end_d;
  logic [31:0] chk_err;
  logic        is_nop;

  always_comb begin
    chk_err = TSR_HWERR_OK;
    if ((d_op != TSR_OP_NOP && d_op != TSR_OP_GEMM_I8_I32) || d_flags != 32'd0) begin
      chk_err = TSR_HWERR_BAD_OPCODE;
    end else if (d_op == TSR_OP_GEMM_I8_I32) begin
      if (d_m == 32'd0 || d_n == 32'd0 || d_k == 32'd0 || d_m > TSR_HW_MAX_DIM ||
          d_n > TSR_HW_MAX_DIM || d_k > TSR_HW_MAX_DIM) begin
        chk_err = TSR_HWERR_BAD_DIMS;
      end else if (d_lda < d_k || d_ldw < d_k || {2'b00, d_ldc} < {d_n, 2'b00} ||
                   d_ldc[1:0] != 2'b00 || d_c[1:0] != 2'b00 || nch_bad) begin
        chk_err = TSR_HWERR_BAD_STRIDE;
      end else if ({1'b0, d_a} < {1'b0, base_q} || a_end_q > win_end_q ||
                   {1'b0, d_w} < {1'b0, base_q} || w_end_q > win_end_q ||
                   {1'b0, d_c} < {1'b0, base_q} || c_end_q > win_end_q) begin
        chk_err = TSR_HWERR_ADDR_RANGE;
      end
    end
  end
  assign is_nop = (d_op == TSR_OP_NOP);

  // Ring check.
  logic [64:0] ring_end;
  logic        ring_bad;
  assign ring_end = {1'b0, ring_q} + {27'd0, ndesc_q, 6'd0};
  assign ring_bad = (ring_q[5:0] != 6'd0) || ({1'b0, ring_q} < {1'b0, base_q}) ||
                    (ring_end > win_end_q);

  always_comb begin
    st_d = st_q;
    base_d = base_q; ring_d = ring_q; dptr_d = dptr_q; ndesc_d = ndesc_q; di_d = di_q;
    status_d = status_q; err_index_d = err_index_q; desc_done_d = desc_done_q;
    macs_d = macs_q; win_end_d = win_end_q;
    axi_err_d = axi_err_q || ((st_q != RIdle) && axi_err_i);
    done_d = 1'b0;
    pa_d = pa_q; pw_d = pw_q; pc_d = pc_q; mn_d = mn_q; mnk_d = mnk_q; pch_d = pch_q;
    a_end_d = a_end_q; w_end_d = w_end_q; c_end_d = c_end_q;
    exec_o = 1'b0;
    unique case (st_q)
      RIdle: begin
        if (start_i) begin
          base_d = mem_base_i; ring_d = ring_i; ndesc_d = n_desc_i;
          di_d = '0; dptr_d = ring_i;
          status_d = TSR_HWERR_OK; err_index_d = '0; desc_done_d = '0; macs_d = '0;
          axi_err_d = 1'b0;
          win_end_d = {1'b0, mem_base_i} + {1'b0, mem_size_i};
          st_d = RRing;
        end
      end
      RRing: begin
        if (ndesc_q == 32'd0) begin
          st_d = RFin;
        end else if (ring_bad) begin
          status_d = TSR_HWERR_RING_RANGE;
          st_d = RFin;
        end else begin
          st_d = RFetch;
        end
      end
      RFetch: if (fetch_ready_i) st_d = RFWait;
      RFWait: begin
        if (reads_idle_i) begin
          if (axi_err_q) begin
            status_d = TSR_HWERR_AXI_ERROR;
            err_index_d = di_q;
            st_d = RFin;
          end else begin
            st_d = RChk1;
          end
        end
      end
      RChk1: begin
        pa_d = 48'(16'(m16 - 16'd1)) * 48'(d_lda);
        pw_d = 48'(wrows) * 48'(d_ldw);
        // (P - 1) * W_CSTRIDE: only a striped W has a channel offset
        pch_d = striped ? (48'(d_cstride) << LogPorts) - 48'(d_cstride) : 48'd0;
        pc_d = 48'(16'(m16 - 16'd1)) * 48'(d_ldc);
        mn_d = 32'(m16) * 32'(n16);
        st_d = RChk2;
      end
      RChk2: begin
        a_end_d = {1'b0, d_a} + 65'(pa_q) + 65'(k16);
        w_end_d = {1'b0, d_w} + 65'(pw_q) + 65'(pch_q) + 65'(k16);
        c_end_d = {1'b0, d_c} + 65'(pc_q) + 65'({n16, 2'b00});
        mnk_d   = 48'(mn_q) * 48'(k16);
        st_d = RChk3;
      end
      RChk3: begin
        if (chk_err != TSR_HWERR_OK) begin
          status_d = chk_err;
          err_index_d = di_q;
          st_d = RFin;
        end else if (is_nop) begin
          st_d = RBar;
        end else begin
          exec_o = 1'b1;
          st_d = RExec;
        end
      end
      RExec: if (loader_idle_i) st_d = RBar;
      RBar: begin
        if (barrier_ok_i) begin
          if (axi_err_q) begin
            status_d = TSR_HWERR_AXI_ERROR;
            err_index_d = di_q;
            st_d = RFin;
          end else begin
            desc_done_d = desc_done_q + 32'd1;
            if (!is_nop) macs_d = macs_q + 64'(mnk_q);
            di_d = di_q + 32'd1;
            dptr_d = dptr_q + 64'(TSR_HW_DESC_BYTES);
            if (di_q + 32'd1 == ndesc_q) st_d = RFin;
            else st_d = RFetch;
          end
        end
      end
      RFin: begin
        done_d = 1'b1;
        st_d = RIdle;
      end
      default: st_d = RIdle;
    endcase
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      st_q <= RIdle;
      base_q <= '0; ring_q <= '0; dptr_q <= '0; ndesc_q <= '0; di_q <= '0;
      status_q <= '0; err_index_q <= '0; desc_done_q <= '0; macs_q <= '0;
      axi_err_q <= 1'b0; done_q <= 1'b0; win_end_q <= '0;
    end else begin
      st_q <= st_d;
      base_q <= base_d; ring_q <= ring_d; dptr_q <= dptr_d; ndesc_q <= ndesc_d; di_q <= di_d;
      status_q <= status_d; err_index_q <= err_index_d; desc_done_q <= desc_done_d;
      macs_q <= macs_d;
      axi_err_q <= axi_err_d; done_q <= done_d; win_end_q <= win_end_d;
    end
  end

  always_ff @(posedge clk_i or negedge rst_ni) begin
    if (!rst_ni) begin
      pa_q <= '0; pw_q <= '0; pc_q <= '0; mn_q <= '0; mnk_q <= '0; pch_q <= '0;
      a_end_q <= '0; w_end_q <= '0; c_end_q <= '0;
    end else begin
      pa_q <= pa_d; pw_q <= pw_d; pc_q <= pc_d; mn_q <= mn_d; mnk_q <= mnk_d; pch_q <= pch_d;
      a_end_q <= a_end_d; w_end_q <= w_end_d; c_end_q <= c_end_d;
    end
  end

  // The descriptor word (no reset: written before it is read).
  always_ff @(posedge clk_i) begin
    if (desc_we_i) dword_q <= desc_word_i;
  end

  // Small M: stream W through the lanes (GEMV) rather than waste array rows;
  // it wins while M*Cols < DataBytes.
  assign gemv_o        = (32'(m16) * Cols < DataBytes);
  assign fetch_valid_o = (st_q == RFetch);
  assign fetch_addr_o  = dptr_q;
  assign running_o     = (st_q != RIdle);
  assign executing_o   = (st_q == RExec || st_q == RBar);
  assign m_o = m16;
  assign n_o = n16;
  assign k_o = k16;
  assign lda_o = d_lda;
  assign ldw_o = d_ldw;
  assign ldc_o = d_ldc;
  assign a_addr_o = d_a;
  assign w_addr_o = d_w;
  assign c_addr_o = d_c;
  assign striped_o   = striped && (NumPorts > 1);
  assign w_cstride_o = d_cstride;
  assign win_base_o  = base_q;
  assign win_end_o   = win_end_q;
  assign done_o      = done_q;
  assign status_o    = status_q;
  assign err_index_o = err_index_q;
  assign desc_done_o = desc_done_q;
  assign macs_o      = macs_q;
endmodule
