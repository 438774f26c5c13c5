// The accelerator: fetch, load, compute and store modules, their command queues and
// dependency-token queues, the shared input / weight / output buffers, one AXI4
// master to memory (granted first come, first served) and AXI4-Lite control
// registers with VTA's register map.
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_top (
  input  logic                   clk,
  input  logic                   rst,
  // control: AXI4-Lite slave
  input  logic [15:0]            s_axil_awaddr,
  input  logic                   s_axil_awvalid,
  output logic                   s_axil_awready,
  input  logic [31:0]            s_axil_wdata,
  input  logic                   s_axil_wvalid,
  output logic                   s_axil_wready,
  output logic [1:0]             s_axil_bresp,
  output logic                   s_axil_bvalid,
  input  logic                   s_axil_bready,
  input  logic [15:0]            s_axil_araddr,
  input  logic                   s_axil_arvalid,
  output logic                   s_axil_arready,
  output logic [31:0]            s_axil_rdata,
  output logic [1:0]             s_axil_rresp,
  output logic                   s_axil_rvalid,
  input  logic                   s_axil_rready,
  // memory: AXI4 master (INCR bursts, full-width beats)
  output logic [31:0]            m_axi_araddr,
  output logic [7:0]             m_axi_arlen,
  output logic [2:0]             m_axi_arsize,
  output logic [1:0]             m_axi_arburst,
  output logic [3:0]             m_axi_arcache,
  output logic                   m_axi_arvalid,
  input  logic                   m_axi_arready,
  input  logic [BUS_BYTES*8-1:0] m_axi_rdata,
  input  logic [1:0]             m_axi_rresp,
  input  logic                   m_axi_rlast,
  input  logic                   m_axi_rvalid,
  output logic                   m_axi_rready,
  output logic [31:0]            m_axi_awaddr,
  output logic [7:0]             m_axi_awlen,
  output logic [2:0]             m_axi_awsize,
  output logic [1:0]             m_axi_awburst,
  output logic [3:0]             m_axi_awcache,
  output logic                   m_axi_awvalid,
  input  logic                   m_axi_awready,
  output logic [BUS_BYTES*8-1:0] m_axi_wdata,
  output logic [BUS_BYTES-1:0]   m_axi_wstrb,
  output logic                   m_axi_wlast,
  output logic                   m_axi_wvalid,
  input  logic                   m_axi_wready,
  input  logic [1:0]             m_axi_bresp,
  input  logic                   m_axi_bvalid,
  output logic                   m_axi_bready,
  // status for simulation harnesses (also readable through the registers)
  output logic                   finished,
  output logic                   error,
  output logic                   progress       // something moved: no progress for long is a hang
);
  localparam int IDX_W = 32;
  localparam int QW = IDX_W + 128;

  // ---------------------------------------------------------------- registers
  logic start, running;
  logic [31:0] insn_count, insn_addr, inp_base, wgt_base, uop_base, acc_base, out_base;
  logic [3:0] error_code;
  logic [IDX_W-1:0] error_index;
  vta_regs #(.IDX_W(IDX_W)) regs (
    .clk, .rst,
    .awaddr(s_axil_awaddr), .awvalid(s_axil_awvalid), .awready(s_axil_awready), .wdata(s_axil_wdata),
    .wvalid(s_axil_wvalid), .wready(s_axil_wready), .bresp(s_axil_bresp), .bvalid(s_axil_bvalid),
    .bready(s_axil_bready), .araddr(s_axil_araddr), .arvalid(s_axil_arvalid), .arready(s_axil_arready),
    .rdata(s_axil_rdata), .rresp(s_axil_rresp), .rvalid(s_axil_rvalid), .rready(s_axil_rready),
    .start, .insn_count, .insn_addr, .inp_base, .wgt_base, .uop_base, .acc_base, .out_base,
    .running, .idle(!(f_busy || l_busy || c_busy || s_busy)), .finished, .error, .error_code, .error_index);

  // ------------------------------------------------------------- the modules
  logic [3:0] req, gnt;
  logic [3:0] holder;
  vta_arbiter #(.N(4)) arbiter (.clk, .rst, .req, .gnt, .holder);

  // per-client read channels (fetch 0, load 1, compute 2)
  logic [2:0] c_arvalid, c_arready, c_rvalid, c_rready;
  logic [31:0] c_araddr [3];
  logic [7:0]  c_arlen [3];

  logic [2:0]    fq_valid, fq_ready;
  logic [QW-1:0] fq_data;
  logic f_err, l_err, c_err, s_err;
  logic [3:0] f_code, l_code, c_code, s_code;
  logic [IDX_W-1:0] f_idx, l_idx, c_idx, s_idx;
  logic f_busy, l_busy, c_busy, s_busy, f_progress, l_progress, c_progress, s_progress;
  logic halt;
  assign halt = error;

  vta_fetch #(.IDX_W(IDX_W)) fetch (
    .clk, .rst, .start, .insn_addr, .insn_count, .halt, .busy(f_busy), .progress(f_progress),
    .q_valid(fq_valid), .q_ready(fq_ready), .q_data(fq_data),
    .err(f_err), .err_code(f_code), .err_index(f_idx),
    .req(req[0]), .gnt(gnt[0]), .ar_valid(c_arvalid[0]), .ar_ready(c_arready[0]), .ar_addr(c_araddr[0]),
    .ar_len(c_arlen[0]), .r_valid(c_rvalid[0]), .r_ready(c_rready[0]), .r_data(m_axi_rdata),
    .r_last(m_axi_rlast));

  // command queues
  logic [2:0] cq_valid, cq_ready;
  logic [QW-1:0] cq_data [3];
  for (genvar k = 0; k < 3; k++) begin : g_cmd
    vta_fifo #(.WIDTH(QW), .DEPTH(CMD_QUEUE_DEPTH)) queue (
      .clk, .rst, .in_valid(fq_valid[k]), .in_ready(fq_ready[k]), .in_data(fq_data),
      .out_valid(cq_valid[k]), .out_ready(cq_ready[k]), .out_data(cq_data[k]));
  end

  // dependency-token queues
  logic l2c_push, l2c_pop, l2c_can_push, l2c_can_pop;
  logic c2l_push, c2l_pop, c2l_can_push, c2l_can_pop;
  logic c2s_push, c2s_pop, c2s_can_push, c2s_can_pop;
  logic s2c_push, s2c_pop, s2c_can_push, s2c_can_pop;
  vta_token_queue #(.DEPTH(TOKEN_QUEUE_DEPTH)) l2c (.clk, .rst, .push(l2c_push), .pop(l2c_pop),
    .can_push(l2c_can_push), .can_pop(l2c_can_pop));
  vta_token_queue #(.DEPTH(TOKEN_QUEUE_DEPTH)) c2l (.clk, .rst, .push(c2l_push), .pop(c2l_pop),
    .can_push(c2l_can_push), .can_pop(c2l_can_pop));
  vta_token_queue #(.DEPTH(TOKEN_QUEUE_DEPTH)) c2s (.clk, .rst, .push(c2s_push), .pop(c2s_pop),
    .can_push(c2s_can_push), .can_pop(c2s_can_pop));
  vta_token_queue #(.DEPTH(TOKEN_QUEUE_DEPTH)) s2c (.clk, .rst, .push(s2c_push), .pop(s2c_pop),
    .can_push(s2c_can_push), .can_pop(s2c_can_pop));

  // shared buffers
  logic inp_we, inp_re, wgt_we, wgt_re, out_we, out_re;
  logic [LOG_INP_DEPTH-1:0] inp_waddr, inp_raddr;
  logic [LOG_WGT_DEPTH-1:0] wgt_waddr, wgt_raddr;
  logic [LOG_ACC_DEPTH-1:0] out_waddr, out_raddr;
  logic [INP_ELEM_BYTES*8-1:0] inp_wdata, inp_rdata;
  logic [WGT_ELEM_BYTES*8-1:0] wgt_wdata, wgt_rdata;
  logic [OUT_ELEM_BYTES*8-1:0] out_wdata, out_rdata;
  vta_ram #(.WIDTH(INP_ELEM_BYTES*8), .DEPTH(INP_DEPTH)) inp_ram (.clk, .we(inp_we), .waddr(inp_waddr),
    .wdata(inp_wdata), .re(inp_re), .raddr(inp_raddr), .rdata(inp_rdata));
  vta_ram #(.WIDTH(WGT_ELEM_BYTES*8), .DEPTH(WGT_DEPTH)) wgt_ram (.clk, .we(wgt_we), .waddr(wgt_waddr),
    .wdata(wgt_wdata), .re(wgt_re), .raddr(wgt_raddr), .rdata(wgt_rdata));
  vta_ram #(.WIDTH(OUT_ELEM_BYTES*8), .DEPTH(ACC_DEPTH)) out_ram (.clk, .we(out_we), .waddr(out_waddr),
    .wdata(out_wdata), .re(out_re), .raddr(out_raddr), .rdata(out_rdata));

  vta_load #(.IDX_W(IDX_W)) load (
    .clk, .rst, .halt, .inp_base, .wgt_base,
    .q_valid(cq_valid[0]), .q_ready(cq_ready[0]), .q_data(cq_data[0]),
    .c2l_can_pop, .c2l_pop, .l2c_can_push, .l2c_push,
    .inp_we, .inp_waddr, .inp_wdata, .wgt_we, .wgt_waddr, .wgt_wdata,
    .busy(l_busy), .progress(l_progress), .err(l_err), .err_code(l_code), .err_index(l_idx),
    .req(req[1]), .gnt(gnt[1]), .ar_valid(c_arvalid[1]), .ar_ready(c_arready[1]), .ar_addr(c_araddr[1]),
    .ar_len(c_arlen[1]), .r_valid(c_rvalid[1]), .r_ready(c_rready[1]), .r_data(m_axi_rdata),
    .r_resp(m_axi_rresp), .r_last(m_axi_rlast));

  logic c_finished;
  vta_compute #(.IDX_W(IDX_W)) compute (
    .clk, .rst, .halt, .clear(start), .uop_base, .acc_base,
    .q_valid(cq_valid[1]), .q_ready(cq_ready[1]), .q_data(cq_data[1]),
    .l2c_can_pop, .l2c_pop, .s2c_can_pop, .s2c_pop, .c2l_can_push, .c2l_push, .c2s_can_push, .c2s_push,
    .inp_re, .inp_raddr, .inp_rdata, .wgt_re, .wgt_raddr, .wgt_rdata, .out_we, .out_waddr, .out_wdata,
    .finished(c_finished), .busy(c_busy), .progress(c_progress), .err(c_err), .err_code(c_code),
    .err_index(c_idx),
    .req(req[2]), .gnt(gnt[2]), .ar_valid(c_arvalid[2]), .ar_ready(c_arready[2]), .ar_addr(c_araddr[2]),
    .ar_len(c_arlen[2]), .r_valid(c_rvalid[2]), .r_ready(c_rready[2]), .r_data(m_axi_rdata),
    .r_resp(m_axi_rresp), .r_last(m_axi_rlast));

  logic s_awvalid, s_wvalid, s_bready;
  vta_store #(.IDX_W(IDX_W)) store (
    .clk, .rst, .halt, .out_base,
    .q_valid(cq_valid[2]), .q_ready(cq_ready[2]), .q_data(cq_data[2]),
    .c2s_can_pop, .c2s_pop, .s2c_can_push, .s2c_push, .out_re, .out_raddr, .out_rdata,
    .busy(s_busy), .progress(s_progress), .err(s_err), .err_code(s_code), .err_index(s_idx),
    .req(req[3]), .gnt(gnt[3]), .aw_valid(s_awvalid), .aw_ready(m_axi_awready && gnt[3]),
    .aw_addr(m_axi_awaddr), .aw_len(m_axi_awlen), .w_valid(s_wvalid), .w_ready(m_axi_wready && gnt[3]),
    .w_data(m_axi_wdata), .w_strb(m_axi_wstrb), .w_last(m_axi_wlast),
    .b_valid(m_axi_bvalid && gnt[3]), .b_resp(m_axi_bresp), .b_ready(s_bready));

  // --------------------------------------------------------- memory port mux
  always_comb begin
    m_axi_arvalid = 1'b0;
    m_axi_araddr = '0;
    m_axi_arlen = '0;
    m_axi_rready = 1'b0;
    for (int k = 0; k < 3; k++) begin
      c_arready[k] = gnt[k] && m_axi_arready;
      // Read data comes at least a cycle after its address, when its client heads the
      // arbiter's registered queue (it holds the port until its last beat), so the R
      // channel follows `holder`, registers only, not the grant behind the requests.
      c_rvalid[k] = holder[k] && m_axi_rvalid;
      if (holder[k]) m_axi_rready = c_rready[k];
      if (gnt[k]) begin
        m_axi_arvalid = c_arvalid[k];
        m_axi_araddr = c_araddr[k];
        m_axi_arlen = c_arlen[k];
      end
    end
  end
  assign m_axi_arsize  = 3'($clog2(BUS_BYTES));
  assign m_axi_arburst = 2'b01;
  assign m_axi_arcache = 4'b1111;
  assign m_axi_awsize  = 3'($clog2(BUS_BYTES));
  assign m_axi_awburst = 2'b01;
  assign m_axi_awcache = 4'b1111;
  assign m_axi_awvalid = s_awvalid && gnt[3];
  assign m_axi_wvalid  = s_wvalid && gnt[3];
  assign m_axi_bready  = s_bready && gnt[3];

  // ------------------------------------------------------ status and errors
  // The first error wins; if several arrive together, the earliest instruction (on equal
  // indices the later of fetch, load, compute, store).  The six index comparisons run side
  // by side rather than as a running minimum (three comparators in series: timing).
  logic             new_error;
  logic [3:0]       new_code;
  logic [IDX_W-1:0] new_index;
  logic [3:0]       e_err, e_win;
  logic [IDX_W-1:0] e_idx [4];
  logic [3:0]       e_code [4];
  assign e_err = {s_err, c_err, l_err, f_err};
  assign e_idx[0] = f_idx;
  assign e_idx[1] = l_idx;
  assign e_idx[2] = c_idx;
  assign e_idx[3] = s_idx;
  assign e_code[0] = f_code;
  assign e_code[1] = l_code;
  assign e_code[2] = c_code;
  assign e_code[3] = s_code;
  always_comb begin
    for (int k = 0; k < 4; k++) begin
      e_win[k] = e_err[k];
      for (int j = 0; j < 4; j++)
        if (j < k && e_err[j] && e_idx[k] > e_idx[j]) e_win[k] = 1'b0;
        else if (j > k && e_err[j] && e_idx[k] >= e_idx[j]) e_win[k] = 1'b0;
    end
    new_error = e_err != 0;
    new_code = '0;
    new_index = '1;
    for (int k = 0; k < 4; k++)
      if (e_win[k]) begin new_index = e_idx[k]; new_code = e_code[k]; end
  end
  always_ff @(posedge clk) begin
    if (rst) begin
      error <= 1'b0;
      error_code <= '0;
      error_index <= '0;
      running <= 1'b0;
    end else begin
      if (start) running <= 1'b1;
      else if (c_finished || error) running <= 1'b0;
      if (!error && new_error) begin
        error <= 1'b1;
        error_code <= new_code;
        error_index <= new_index;
      end
    end
  end
  assign finished = c_finished;
  assign progress = f_progress || l_progress || c_progress || s_progress;
endmodule
