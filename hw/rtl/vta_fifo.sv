// First-word-fall-through FIFO on a block RAM: the RAM's output register is the head.
// Holds exactly DEPTH entries (the configuration's command-queue depth).
module vta_fifo #(
  parameter int WIDTH = 8,
  parameter int DEPTH = 16
) (
  input  logic             clk,
  input  logic             rst,
  input  logic             in_valid,
  output logic             in_ready,
  input  logic [WIDTH-1:0] in_data,
  output logic             out_valid,
  input  logic             out_ready,
  output logic [WIDTH-1:0] out_data
);
  localparam int AW = $clog2(DEPTH);
  logic [AW-1:0] wr_ptr, rd_ptr;
  logic [AW:0]   stored;       // entries in the RAM, not counting the head
  logic          head_valid;
  logic          push, pop, fetch;

  assign in_ready  = ({1'b0, stored} + {{AW{1'b0}}, head_valid}) < (AW+2)'(DEPTH);
  assign push      = in_valid && in_ready;
  assign pop       = head_valid && out_ready;
  assign fetch     = stored != 0 && (!head_valid || pop);
  assign out_valid = head_valid;

  vta_ram #(.WIDTH(WIDTH), .DEPTH(DEPTH)) ram (
    .clk, .we(push), .waddr(wr_ptr), .wdata(in_data), .re(fetch), .raddr(rd_ptr), .rdata(out_data));

  always_ff @(posedge clk) begin
    if (rst) begin
      wr_ptr <= '0;
      rd_ptr <= '0;
      stored <= '0;
      head_valid <= 1'b0;
    end else begin
      if (push) wr_ptr <= wr_ptr + 1'b1;
      if (fetch) rd_ptr <= rd_ptr + 1'b1;
      stored <= stored + (AW+1)'(push) - (AW+1)'(fetch);
      if (fetch) head_valid <= 1'b1;
      else if (pop) head_valid <= 1'b0;
    end
  end
endmodule
