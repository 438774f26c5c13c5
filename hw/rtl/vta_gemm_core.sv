// The GEMM core: one micro-op's batch x block_in x block_out multiply-accumulate.
// acc_out[b][o] = acc_in[b][o] + sum_i inp[b][i] * wgt[o][i], signed, wrapping at ACC_BITS.
// Elements are packed little-endian, row-major: inp (b, i), wgt (o, i), acc (b, o).
module vta_gemm_core import vta_pkg::*; (
  input  logic [BATCH*BLOCK_IN*INP_BITS-1:0]   inp,
  input  logic [BLOCK_OUT*BLOCK_IN*WGT_BITS-1:0] wgt,
  input  logic [BATCH*BLOCK_OUT*ACC_BITS-1:0]  acc_in,
  output logic [BATCH*BLOCK_OUT*ACC_BITS-1:0]  acc_out
);
  localparam int PROD_BITS = INP_BITS + WGT_BITS;
  localparam int SUM_BITS = PROD_BITS + $clog2(BLOCK_IN);

  for (genvar b = 0; b < BATCH; b++) begin : g_batch
    for (genvar o = 0; o < BLOCK_OUT; o++) begin : g_out
      logic signed [SUM_BITS-1:0] sum;
      always_comb begin
        sum = '0;
        for (int i = 0; i < BLOCK_IN; i++) begin
          sum = sum + SUM_BITS'($signed(inp[(b * BLOCK_IN + i) * INP_BITS +: INP_BITS])
                               * $signed(wgt[(o * BLOCK_IN + i) * WGT_BITS +: WGT_BITS]));
        end
      end
      assign acc_out[(b * BLOCK_OUT + o) * ACC_BITS +: ACC_BITS] =
          acc_in[(b * BLOCK_OUT + o) * ACC_BITS +: ACC_BITS] + ACC_BITS'(sum);
    end
  end
endmodule
