// The GEMM core: one micro-op's batch x block_in x block_out multiply-accumulate, in
// four pipeline stages (timing): products, the adder trees' two halves (each registered,
// vta_dot_pair), then the accumulate.  acc_out[b][o] = acc_in[b][o] + sum_i inp[b][i] *
// wgt[o][i], signed, wrapping at ACC_BITS, where inp and wgt are the operands three clock
// edges before acc_in (the compute module reads the accumulator entry meanwhile).
// Elements are packed little-endian, row-major: inp (b, i), wgt (o, i), acc (b, o).
// Output channels go in pairs through vta_dot_pair (an odd last one pairs with zeros).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_gemm_core (
  input  logic                                 clk,
  input  logic [BATCH*BLOCK_IN*INP_BITS-1:0]   inp,
  input  logic [BLOCK_OUT*BLOCK_IN*WGT_BITS-1:0] wgt,
  input  logic [BATCH*BLOCK_OUT*ACC_BITS-1:0]  acc_in,
  output logic [BATCH*BLOCK_OUT*ACC_BITS-1:0]  acc_out
);
  localparam int ROW = BLOCK_IN * WGT_BITS;       // one output channel's weights
  localparam int PAIRS = (BLOCK_OUT + 1) / 2;
  // the weights with a zero row appended, so that an odd last channel has a partner
  logic [2*PAIRS*ROW-1:0] wgt_rows;
  assign wgt_rows = (2*PAIRS*ROW)'(wgt);

  for (genvar b = 0; b < BATCH; b++) begin : g_batch
    // with an odd BLOCK_OUT the zero partner's sum is unused
    /* verilator lint_off UNUSEDSIGNAL */
    logic [2*PAIRS*DOT_BITS-1:0] sums;
    /* verilator lint_on UNUSEDSIGNAL */
    for (genvar k = 0; k < PAIRS; k++) begin : g_pair
      vta_dot_pair dot (.clk, .inp(inp[b * BLOCK_IN * INP_BITS +: BLOCK_IN * INP_BITS]),
                        .wgt_a(wgt_rows[2 * k * ROW +: ROW]), .wgt_b(wgt_rows[(2 * k + 1) * ROW +: ROW]),
                        .sum_a(sums[2 * k * DOT_BITS +: DOT_BITS]), .sum_b(sums[(2 * k + 1) * DOT_BITS +: DOT_BITS]));
    end
    for (genvar o = 0; o < BLOCK_OUT; o++) begin : g_out
      assign acc_out[(b * BLOCK_OUT + o) * ACC_BITS +: ACC_BITS] = acc_in[(b * BLOCK_OUT + o) * ACC_BITS +: ACC_BITS]
          + ACC_BITS'($signed(sums[o * DOT_BITS +: DOT_BITS]));
    end
  end
endmodule
