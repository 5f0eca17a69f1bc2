// tsr_dest.svh - where a read segment's words go (the read master carries
// the code opaquely; tsr_core decodes it). Included inside module bodies.
//
//   DestDesc  bank 0: the descriptor word (tsr_desc_unit);
//             bank 1: a GEMM_BSR bitmap row for the count (tsr_desc_unit);
//             bank 2 + e: a bitmap row into the walk's entry e (tsr_loader);
//             the word address is the word's index in the row.
//   DestA     A bank `bank`, from the segment's word address on.
//   DestW     W bank `bank`, from the segment's word address on.
//   DestWT    a GEMM_BSR tile: word i goes to W bank i / (BK/64) at the
//             slot word `bank` + i % (BK/64) (the word address carries the
//             slot bit and i).
/* verilator lint_off UNUSEDPARAM */
localparam logic [1:0] DestDesc = 2'd0, DestA = 2'd1, DestW = 2'd2, DestWT = 2'd3;
localparam logic [7:0] BankDesc = 8'd0, BankCount = 8'd1, BankWalk = 8'd2;
/* verilator lint_on UNUSEDPARAM */
