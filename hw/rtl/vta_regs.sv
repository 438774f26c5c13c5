// Control registers, AXI4-Lite, VTA's register map (ISA.md): four 4 KiB blocks for
// fetch, load, compute and store.  vtakit adds read-only status to the fetch block:
// 0x20 error (bit 0 set, bits 7:4 code), 0x24 index of the failing instruction,
// 0x28/0x2c cycles since start (low/high).
module vta_regs #(
  parameter int IDX_W = 32
) (
  input  logic             clk,
  input  logic             rst,
  // AXI4-Lite slave
  input  logic [15:0]      awaddr,
  input  logic             awvalid,
  output logic             awready,
  input  logic [31:0]      wdata,
  input  logic             wvalid,
  output logic             wready,
  output logic [1:0]       bresp,
  output logic             bvalid,
  input  logic             bready,
  input  logic [15:0]      araddr,
  input  logic             arvalid,
  output logic             arready,
  output logic [31:0]      rdata,
  output logic [1:0]       rresp,
  output logic             rvalid,
  input  logic             rready,
  // to the design
  output logic             start,
  output logic [31:0]      insn_count,
  output logic [31:0]      insn_addr,
  output logic [31:0]      inp_base,
  output logic [31:0]      wgt_base,
  output logic [31:0]      uop_base,
  output logic [31:0]      acc_base,
  output logic [31:0]      out_base,
  input  logic             running,
  input  logic             idle,
  input  logic             finished,
  input  logic             error,
  input  logic [3:0]       error_code,
  input  logic [IDX_W-1:0] error_index
);
  logic [63:0] cycles;
  logic        do_write;
  assign awready  = !bvalid && awvalid && wvalid;
  assign wready   = awready;
  assign do_write = awready;
  assign bresp    = 2'b00;
  assign rresp    = 2'b00;
  assign arready  = !rvalid;

  always_ff @(posedge clk) begin
    start <= 1'b0;
    if (rst) begin
      bvalid <= 1'b0;
      rvalid <= 1'b0;
      insn_count <= '0;
      insn_addr <= '0;
      inp_base <= '0;
      wgt_base <= '0;
      uop_base <= '0;
      acc_base <= '0;
      out_base <= '0;
      cycles <= '0;
    end else begin
      if (running) cycles <= cycles + 1'b1;
      if (do_write) begin
        bvalid <= 1'b1;
        case (awaddr)
          16'h0000: if (wdata[0] && !running) begin start <= 1'b1; cycles <= '0; end
          16'h0010: insn_count <= wdata;
          16'h0018: insn_addr <= wdata;
          16'h1010: inp_base <= wdata;
          16'h1018: wgt_base <= wdata;
          16'h2020: uop_base <= wdata;
          16'h2028: acc_base <= wdata;
          16'h3010: out_base <= wdata;
          default: ;                       // control writes of the data modules (0x81) and others
        endcase
      end else if (bvalid && bready) begin
        bvalid <= 1'b0;
      end
      if (arvalid && arready) begin
        rvalid <= 1'b1;
        case (araddr)
          16'h0000: rdata <= {29'd0, idle, finished, running};
          16'h0010: rdata <= insn_count;
          16'h0018: rdata <= insn_addr;
          16'h0020: rdata <= {24'd0, error_code, 3'd0, error};
          16'h0024: rdata <= 32'(error_index);
          16'h0028: rdata <= cycles[31:0];
          16'h002c: rdata <= cycles[63:32];
          16'h1010: rdata <= inp_base;
          16'h1018: rdata <= wgt_base;
          16'h2018: rdata <= {31'd0, finished};
          16'h2020: rdata <= uop_base;
          16'h2028: rdata <= acc_base;
          16'h3010: rdata <= out_base;
          default:  rdata <= '0;
        endcase
      end else if (rvalid && rready) begin
        rvalid <= 1'b0;
      end
    end
  end
endmodule
