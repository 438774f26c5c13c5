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
    logic signed [ACC_BITS-1:0]     x, z, r;
    logic signed [SHR_ARG_BITS-1:0] amount;
    logic [SHR_ARG_BITS-1:0]        left;
    assign x = a[l * ACC_BITS +: ACC_BITS];
    assign z = b[l * ACC_BITS +: ACC_BITS];
    assign amount = z[SHR_ARG_BITS-1:0];
    assign left = -amount;
    always_comb begin
      case (32'(op))
        ALU_MIN: r = x < z ? x : z;
        ALU_MAX: r = x > z ? x : z;
        ALU_ADD: r = x + z;
        ALU_SHR: r = amount >= 0 ? x >>> amount : x << left;
        ALU_MUL: r = HAS_MUL != 0 ? ACC_BITS'(x * z) : x;
        default: r = x;
      endcase
    end
    assign y[l * ACC_BITS +: ACC_BITS] = r;
  end
endmodule
