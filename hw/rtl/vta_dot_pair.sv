// Two lanes of the GEMM core: the signed dot products of one input vector with two
// weight vectors (two output channels share every input, so they share multipliers).
//
// With 8-bit operands, each pair of products inp * wa and inp * wb comes out of one
// 25 x 18 multiplier, the DSP48's: ((wa << 16) + wb) * inp = (pa << 16) + pb, where pb
// is the low 16 bits read as signed and pa the bits above plus pb's borrow.  That puts
// the PYNQ's 256 MACs on 128 DSP48E1 slices (the xc7z020 has 220).  Wider operands use
// one multiplier per product.  Each lane's products are summed in a balanced adder tree.
// Every lane pair is this one module, which keeps its hierarchy so that synthesis maps
// it once (vtakit hw synth).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

(* keep_hierarchy *)
module vta_dot_pair (
  input  logic [BLOCK_IN*INP_BITS-1:0] inp,
  input  logic [BLOCK_IN*WGT_BITS-1:0] wgt_a,
  input  logic [BLOCK_IN*WGT_BITS-1:0] wgt_b,
  output logic [DOT_BITS-1:0]          sum_a,
  output logic [DOT_BITS-1:0]          sum_b
);
  localparam int PROD_BITS = INP_BITS + WGT_BITS;           // a signed product fits exactly
  localparam bit PACK = INP_BITS + PROD_BITS <= 25 && INP_BITS <= 18;

  logic signed [DOT_BITS-1:0] tree_a [2 * BLOCK_IN];           // heap order: node k sums 2k, 2k+1
  logic signed [DOT_BITS-1:0] tree_b [2 * BLOCK_IN];
  for (genvar i = 0; i < BLOCK_IN; i++) begin : g_mul
    logic signed [INP_BITS-1:0]  x;
    logic signed [WGT_BITS-1:0]  wa, wb;
    logic signed [PROD_BITS-1:0] pa, pb;
    assign x  = inp[i * INP_BITS +: INP_BITS];
    assign wa = wgt_a[i * WGT_BITS +: WGT_BITS];
    assign wb = wgt_b[i * WGT_BITS +: WGT_BITS];
    if (PACK) begin : g_packed
      logic signed [24:0] packed_w;
      logic signed [42:0] p;
      assign packed_w = (25'(wa) <<< PROD_BITS) + 25'(wb);
      assign p  = 43'(packed_w) * 43'(x);
      assign pb = p[PROD_BITS-1:0];
      assign pa = p[2*PROD_BITS-1:PROD_BITS] + PROD_BITS'(p[PROD_BITS-1]);
    end else begin : g_plain
      assign pa = PROD_BITS'(wa) * PROD_BITS'(x);
      assign pb = PROD_BITS'(wb) * PROD_BITS'(x);
    end
    assign tree_a[BLOCK_IN + i] = DOT_BITS'(pa);
    assign tree_b[BLOCK_IN + i] = DOT_BITS'(pb);
  end
  for (genvar k = BLOCK_IN - 1; k >= 1; k--) begin : g_add
    assign tree_a[k] = tree_a[2 * k] + tree_a[2 * k + 1];
    assign tree_b[k] = tree_b[2 * k] + tree_b[2 * k + 1];
  end
  assign sum_a = tree_a[1];
  assign sum_b = tree_b[1];
endmodule
