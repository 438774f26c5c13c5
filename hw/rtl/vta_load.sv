// Load module: LOAD of INP and WGT, in order, with its dependency tokens
// (pop_next / push_next against the compute module).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_load #(
  parameter int IDX_W = 32
) (
  input  logic                        clk,
  input  logic                        rst,
  input  logic                        halt,
  input  logic [31:0]                 inp_base,       // byte address added to INP transfers
  input  logic [31:0]                 wgt_base,
  // command queue
  input  logic                        q_valid,
  output logic                        q_ready,
  input  logic [IDX_W+127:0]          q_data,
  // tokens
  input  logic                        c2l_can_pop,
  output logic                        c2l_pop,
  input  logic                        l2c_can_push,
  output logic                        l2c_push,
  // buffers
  output logic                        inp_we,
  output logic [LOG_INP_DEPTH-1:0]    inp_waddr,
  output logic [INP_ELEM_BYTES*8-1:0] inp_wdata,
  output logic                        wgt_we,
  output logic [LOG_WGT_DEPTH-1:0]    wgt_waddr,
  output logic [WGT_ELEM_BYTES*8-1:0] wgt_wdata,
  // status
  output logic                        busy,
  output logic                        progress,       // an instruction or an element moved this cycle
  output logic                        err,
  output logic [3:0]                  err_code,
  output logic [IDX_W-1:0]            err_index,
  // memory port
  output logic                        req,
  input  logic                        gnt,
  output logic                        ar_valid,
  input  logic                        ar_ready,
  output logic [31:0]                 ar_addr,
  output logic [7:0]                  ar_len,
  input  logic                        r_valid,
  output logic                        r_ready,
  input  logic [BUS_BYTES*8-1:0]      r_data,
  input  logic [1:0]                  r_resp,
  input  logic                        r_last
);
  localparam int ELEM_MAX = INP_ELEM_BYTES > WGT_ELEM_BYTES ? INP_ELEM_BYTES : WGT_ELEM_BYTES;
  localparam int AW = LOG_INP_DEPTH > LOG_WGT_DEPTH ? LOG_INP_DEPTH : LOG_WGT_DEPTH;

  typedef enum logic [1:0] {S_IDLE, S_DMA, S_PUSH} state_t;
  state_t state;
  logic [IDX_W-1:0] idx;
  logic             push_next;        // of the instruction in flight

  // The queue head is decoded directly: an instruction is taken in the cycle its token is
  // there, its transfer starts in the same cycle.
  logic [127:0] head;
  logic [15:0]  y_size, x_size;
  logic [3:0]   yp0, yp1, xp0, xp1;
  logic [31:0]  total, depth;
  logic         head_wgt, take, fits;
  assign head = q_data[127:0];
  assign y_size = head[MEM_Y_SIZE_LO +: 16];
  assign x_size = head[MEM_X_SIZE_LO +: 16];
  assign yp0 = head[MEM_Y_PAD_0_LO +: 4];
  assign yp1 = head[MEM_Y_PAD_1_LO +: 4];
  assign xp0 = head[MEM_X_PAD_0_LO +: 4];
  assign xp1 = head[MEM_X_PAD_1_LO +: 4];
  assign head_wgt = 32'(head[MEM_MEM_ID_LO +: 3]) == MEM_WGT;
  assign total = (32'(yp0) + 32'(y_size) + 32'(yp1)) * (32'(xp0) + 32'(x_size) + 32'(xp1));
  assign depth = head_wgt ? 32'(WGT_DEPTH) : 32'(INP_DEPTH);
  assign fits  = 32'(head[MEM_SRAM_BASE_LO +: 16]) + total <= depth;

  logic dma_start, dma_busy, dma_done, dma_we, dma_err, is_wgt;
  logic [AW-1:0] dma_waddr;
  logic [ELEM_MAX*8-1:0] dma_wdata;
  logic [3:0] e_log2;
  assign e_log2 = head_wgt ? 4'($clog2(WGT_ELEM_BYTES)) : 4'($clog2(INP_ELEM_BYTES));

  vta_dma_read #(.ELEM_MAX_BYTES(ELEM_MAX), .SRAM_AW(AW)) dma (
    .clk, .rst, .start(dma_start), .elem_log2(e_log2),
    .dram_addr((head_wgt ? wgt_base : inp_base) + (head[MEM_DRAM_BASE_LO +: 32] << e_log2)),
    .sram_base(AW'(head[MEM_SRAM_BASE_LO +: 16])), .y_size, .x_size,
    .x_stride(head[MEM_X_STRIDE_LO +: 16]), .y_pad_0(yp0), .y_pad_1(yp1), .x_pad_0(xp0), .x_pad_1(xp1),
    .busy(dma_busy), .done(dma_done), .wr_en(dma_we), .wr_addr(dma_waddr), .wr_data(dma_wdata),
    .req, .gnt, .ar_valid, .ar_ready, .ar_addr, .ar_len, .r_valid, .r_ready, .r_data, .r_resp, .r_last,
    .bus_error(dma_err));

  assign inp_we    = dma_we && !is_wgt;
  assign inp_waddr = LOG_INP_DEPTH'(dma_waddr);
  assign inp_wdata = (INP_ELEM_BYTES*8)'(dma_wdata);
  assign wgt_we    = dma_we && is_wgt;
  assign wgt_waddr = LOG_WGT_DEPTH'(dma_waddr);
  assign wgt_wdata = (WGT_ELEM_BYTES*8)'(dma_wdata);

  // completion: at the take for an empty transfer, at the DMA's last write otherwise
  logic complete, want_push;
  assign q_ready   = state == S_IDLE && !halt && !err && (!head[MEM_POP_NEXT_LO] || c2l_can_pop);
  assign take      = q_valid && q_ready;
  assign c2l_pop   = take && head[MEM_POP_NEXT_LO];
  assign dma_start = take && x_size != 0 && fits;
  assign complete  = (take && x_size == 0) || (state == S_DMA && dma_done && !dma_err);
  assign want_push = state == S_IDLE ? head[MEM_PUSH_NEXT_LO] : push_next;
  assign l2c_push  = (complete || state == S_PUSH) && want_push && l2c_can_push;
  assign busy      = state != S_IDLE || dma_busy;
  assign progress  = take || dma_we;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      err <= 1'b0;
      err_code <= '0;
      err_index <= '0;
    end else begin
      if (take) begin
        idx <= q_data[IDX_W+127:128];
        push_next <= head[MEM_PUSH_NEXT_LO];
        is_wgt <= head_wgt;
        if (x_size != 0 && !fits) begin
          err <= 1'b1;
          err_code <= 4'd7;            // buffer address out of range
          err_index <= q_data[IDX_W+127:128];
        end else if (x_size != 0) begin
          state <= S_DMA;
        end
      end
      if (state == S_DMA && dma_done && dma_err) begin
        err <= 1'b1;
        err_code <= 4'd8;              // DRAM access error
        err_index <= idx;
        state <= S_IDLE;
      end
      if (complete) state <= (want_push && !l2c_can_push) ? S_PUSH : S_IDLE;
      if (state == S_PUSH && l2c_can_push) state <= S_IDLE;
    end
  end
endmodule
