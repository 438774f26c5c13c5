// Simple dual-port RAM: one write port, one synchronous read port (block-RAM style).
// BYPASS=1 adds write-first behaviour: a read on the same clock edge as a write to the
// same address returns the new data.  The compute module relies on it so that a
// micro-op can read the accumulator entry the previous micro-op is writing (no
// hazard rule is left to the compiler).
module vta_ram #(
  parameter int WIDTH = 8,
  parameter int DEPTH = 16,
  parameter bit BYPASS = 1'b0,
  localparam int AW = $clog2(DEPTH)
) (
  input  logic             clk,
  input  logic             we,
  input  logic [AW-1:0]    waddr,
  input  logic [WIDTH-1:0] wdata,
  input  logic             re,
  input  logic [AW-1:0]    raddr,
  output logic [WIDTH-1:0] rdata
);
  logic [WIDTH-1:0] mem [DEPTH];
  logic [WIDTH-1:0] q;

  always_ff @(posedge clk) begin
    if (we) mem[waddr] <= wdata;
    if (re) q <= mem[raddr];
  end

  if (BYPASS) begin : g_bypass
    logic             hit;
    logic [WIDTH-1:0] hit_data;
    always_ff @(posedge clk) begin
      if (re) begin
        hit <= we && (waddr == raddr);
        hit_data <= wdata;
      end
    end
    assign rdata = hit ? hit_data : q;
  end else begin : g_plain
    assign rdata = q;
  end
endmodule
