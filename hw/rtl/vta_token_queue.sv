// A dependency-token queue between two neighbouring modules: a bounded counter.
module vta_token_queue #(
  parameter int DEPTH = 128
) (
  input  logic clk,
  input  logic rst,
  input  logic push,       // only when can_push
  input  logic pop,        // only when can_pop
  output logic can_push,
  output logic can_pop
);
  localparam int CW = $clog2(DEPTH + 1);
  logic [CW-1:0] count;
  assign can_pop  = count != 0;
  assign can_push = count < CW'(DEPTH);
  always_ff @(posedge clk) begin
    if (rst) count <= '0;
    else count <= count + CW'(push && can_push) - CW'(pop && can_pop);
  end
endmodule
