// The tensor ALU: lanewise op(a, b) over batch x block_out accumulator lanes, wrapping
// at ACC_BITS.  SHR shifts by the low SHR_ARG_BITS bits of b read as signed: right
// (arithmetic) when positive, left when negative (a left shift by ACC_BITS gives 0).
// MUL exists only when the configuration has it (HAS_MUL).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_alu_core (
  input  logic [2:0]                          op,
  input  logic [BATCH*BLOCK_OUT*ACC_BITS-1:0] a,
  input  logic [BATCH*BLOCK_OUT*ACC_BITS-1:0] b,
  output logic [BATCH*BLOCK_OUT*ACC_BITS-1:0] y
);
  localparam int LANES = BATCH * BLOCK_OUT;

  for (genvar l = 0; l < LANES; l++) begin : g_lane
    // SHR as one arithmetic right shift: x with OFF zeros below it, shifted right by
    // amount + OFF, keeps x >>> amount for amount >= 0 and x << -amount below zero in its
    // low ACC_BITS.  amount + OFF is amount with its sign bit flipped, so no adder (and no
    // direction mux) sits in front of the shifter (timing).
    localparam int OFF = 1 << (SHR_ARG_BITS - 1);
    logic signed [ACC_BITS-1:0]     x, z, r;
    logic signed [ACC_BITS+OFF-1:0] widened;
    /* verilator lint_off UNUSEDSIGNAL */
    logic signed [ACC_BITS+OFF-1:0] shifted;   // only its low ACC_BITS are the result
    /* verilator lint_on UNUSEDSIGNAL */
    logic [SHR_ARG_BITS-1:0]        biased;
    assign x = a[l * ACC_BITS +: ACC_BITS];
    assign z = b[l * ACC_BITS +: ACC_BITS];
    assign biased = {~z[SHR_ARG_BITS-1], z[SHR_ARG_BITS-2:0]};
    assign widened = {x, OFF'(0)};
    assign shifted = widened >>> biased;
    always_comb begin
      case (32'(op))
        ALU_MIN: r = x < z ? x : z;
        ALU_MAX: r = x > z ? x : z;
        ALU_ADD: r = x + z;
        ALU_SHR: r = shifted[ACC_BITS-1:0];
        ALU_MUL: r = HAS_MUL != 0 ? ACC_BITS'(x * z) : x;
        default: r = x;
      endcase
    end
    assign y[l * ACC_BITS +: ACC_BITS] = r;
  end
endmodule
