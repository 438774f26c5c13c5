// Two lanes of the GEMM core: the signed dot products of one input vector with two
// weight vectors (two output channels share every input, so they share multipliers).
//
// With 8-bit operands, each pair of products inp * wa and inp * wb comes out of one
// 25 x 18 multiplier, the DSP48's: ((wa << 16) + wb) * inp = (pa << 16) + pb, where pb
// is the low 16 bits read as signed and pa the bits above plus pb's borrow.  That puts
// the PYNQ's 256 MACs on 128 DSP48E1 slices (the xc7z020 has 220).  Wider operands use
// one multiplier per product.  Each lane's products are summed in a balanced adder tree.
// Three pipeline stages (timing): the products are registered (in the DSP), the tree's
// middle level (after half its levels) and the two sums too, so the sums come out three
// clock edges after their operands go in.
// Every lane pair is this one module, which keeps its hierarchy so that synthesis maps
// it once (vtakit hw synth).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

(* keep_hierarchy *)
module vta_dot_pair (
  input  logic                         clk,
  input  logic [BLOCK_IN*INP_BITS-1:0] inp,
  input  logic [BLOCK_IN*WGT_BITS-1:0] wgt_a,
  input  logic [BLOCK_IN*WGT_BITS-1:0] wgt_b,
  output logic [DOT_BITS-1:0]          sum_a,
  output logic [DOT_BITS-1:0]          sum_b
);
  localparam int PROD_BITS = INP_BITS + WGT_BITS;           // a signed product fits exactly
  localparam bit PACK = INP_BITS + PROD_BITS <= 25 && INP_BITS <= 18;

  localparam int LEVELS = $clog2(BLOCK_IN);
  localparam int MID = BLOCK_IN >> ((LEVELS + 1) / 2);          // tree nodes registered halfway

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
      logic [2*PROD_BITS-1:0] p_q;                             // stage 1: the packed product
      assign packed_w = (25'(wa) <<< PROD_BITS) + 25'(wb);
      always_ff @(posedge clk) p_q <= (2*PROD_BITS)'(43'(packed_w) * 43'(x));
      assign pb = p_q[PROD_BITS-1:0];
      assign pa = p_q[2*PROD_BITS-1:PROD_BITS] + PROD_BITS'(p_q[PROD_BITS-1]);
    end else begin : g_plain
      logic signed [PROD_BITS-1:0] pa_q, pb_q;                 // stage 1: the products
      always_ff @(posedge clk) begin
        pa_q <= PROD_BITS'(wa) * PROD_BITS'(x);
        pb_q <= PROD_BITS'(wb) * PROD_BITS'(x);
      end
      assign pa = pa_q;
      assign pb = pb_q;
    end
    assign tree_a[BLOCK_IN + i] = DOT_BITS'(pa);
    assign tree_b[BLOCK_IN + i] = DOT_BITS'(pb);
  end
  // the first half of the tree: nodes MID .. BLOCK_IN - 1 (nodes below MID are not used)
  for (genvar k = BLOCK_IN - 1; k >= MID; k--) begin : g_add
    assign tree_a[k] = tree_a[2 * k] + tree_a[2 * k + 1];
    assign tree_b[k] = tree_b[2 * k] + tree_b[2 * k + 1];
  end
  // stage 2: nodes MID .. 2 MID - 1 registered; the second half sums them (same heap order)
  logic signed [DOT_BITS-1:0] mid_a [2 * MID];
  logic signed [DOT_BITS-1:0] mid_b [2 * MID];
  for (genvar k = MID; k < 2 * MID; k++) begin : g_mid
    logic signed [DOT_BITS-1:0] qa, qb;
    always_ff @(posedge clk) begin
      qa <= tree_a[k];
      qb <= tree_b[k];
    end
    assign mid_a[k] = qa;
    assign mid_b[k] = qb;
  end
  for (genvar k = MID - 1; k >= 1; k--) begin : g_add2
    assign mid_a[k] = mid_a[2 * k] + mid_a[2 * k + 1];
    assign mid_b[k] = mid_b[2 * k] + mid_b[2 * k + 1];
  end
  always_ff @(posedge clk) begin                                // stage 3: the sums
    sum_a <= mid_a[1];
    sum_b <= mid_b[1];
  end
endmodule
