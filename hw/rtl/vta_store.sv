// Store module: STORE of OUT, in order, with its dependency tokens (pop/push prev
// against the compute module).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_store #(
  parameter int IDX_W = 32
) (
  input  logic                        clk,
  input  logic                        rst,
  input  logic                        halt,
  input  logic [31:0]                 out_base,       // byte address added to STORE transfers
  // command queue
  input  logic                        q_valid,
  output logic                        q_ready,
  input  logic [IDX_W+127:0]          q_data,
  // tokens
  input  logic                        c2s_can_pop,
  output logic                        c2s_pop,
  input  logic                        s2c_can_push,
  output logic                        s2c_push,
  // output buffer (read)
  output logic                        out_re,
  output logic [LOG_ACC_DEPTH-1:0]    out_raddr,
  input  logic [OUT_ELEM_BYTES*8-1:0] out_rdata,
  // status
  output logic                        busy,
  output logic                        progress,       // an instruction or an element moved this cycle
  output logic                        err,
  output logic [3:0]                  err_code,
  output logic [IDX_W-1:0]            err_index,
  // memory port
  output logic                        req,
  input  logic                        gnt,
  output logic                        aw_valid,
  input  logic                        aw_ready,
  output logic [31:0]                 aw_addr,
  output logic [7:0]                  aw_len,
  output logic                        w_valid,
  input  logic                        w_ready,
  output logic [BUS_BYTES*8-1:0]      w_data,
  output logic [BUS_BYTES-1:0]        w_strb,
  output logic                        w_last,
  input  logic                        b_valid,
  input  logic [1:0]                  b_resp,
  output logic                        b_ready
);
  typedef enum logic [1:0] {S_IDLE, S_DMA, S_PUSH} state_t;
  state_t state;
  logic [IDX_W-1:0] idx;
  logic             push_prev;        // of the instruction in flight

  // The queue head is decoded directly (see vta_load).
  logic [127:0] head;
  logic [15:0]  y_size, x_size;
  logic [31:0]  total;
  logic         take, fits, empty;
  assign head   = q_data[127:0];
  assign y_size = head[MEM_Y_SIZE_LO +: 16];
  assign x_size = head[MEM_X_SIZE_LO +: 16];
  assign total  = 32'(y_size) * 32'(x_size);
  assign fits   = 32'(head[MEM_SRAM_BASE_LO +: 16]) + total <= 32'(ACC_DEPTH);
  assign empty  = x_size == 0 || y_size == 0;

  logic dma_start, dma_busy, dma_done, dma_err;
  vta_dma_write #(.ELEM_BYTES(OUT_ELEM_BYTES), .SRAM_AW(LOG_ACC_DEPTH)) dma (
    .clk, .rst, .start(dma_start),
    .dram_addr(out_base + (head[MEM_DRAM_BASE_LO +: 32] << $clog2(OUT_ELEM_BYTES))),
    .sram_base(LOG_ACC_DEPTH'(head[MEM_SRAM_BASE_LO +: 16])), .y_size, .x_size,
    .x_stride(head[MEM_X_STRIDE_LO +: 16]), .busy(dma_busy), .done(dma_done),
    .rd_en(out_re), .rd_addr(out_raddr), .rd_data(out_rdata),
    .req, .gnt, .aw_valid, .aw_ready, .aw_addr, .aw_len, .w_valid, .w_ready, .w_data, .w_strb, .w_last,
    .b_valid, .b_resp, .b_ready, .bus_error(dma_err));

  logic complete, want_push;
  assign q_ready   = state == S_IDLE && !halt && !err && (!head[MEM_POP_PREV_LO] || c2s_can_pop);
  assign take      = q_valid && q_ready;
  assign c2s_pop   = take && head[MEM_POP_PREV_LO];
  assign dma_start = take && !empty && fits;
  assign complete  = (take && empty) || (state == S_DMA && dma_done && !dma_err);
  assign want_push = state == S_IDLE ? head[MEM_PUSH_PREV_LO] : push_prev;
  assign s2c_push  = (complete || state == S_PUSH) && want_push && s2c_can_push;
  assign busy      = state != S_IDLE || dma_busy;
  assign progress  = take || out_re || (w_valid && w_ready);

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      err <= 1'b0;
      err_code <= '0;
      err_index <= '0;
    end else begin
      if (take) begin
        idx <= q_data[IDX_W+127:128];
        push_prev <= head[MEM_PUSH_PREV_LO];
        if (!empty && !fits) begin
          err <= 1'b1;
          err_code <= 4'd7;            // buffer address out of range
          err_index <= q_data[IDX_W+127:128];
        end else if (!empty) begin
          state <= S_DMA;
        end
      end
      if (state == S_DMA && dma_done && dma_err) begin
        err <= 1'b1;
        err_code <= 4'd8;              // DRAM access error
        err_index <= idx;
        state <= S_IDLE;
      end
      if (complete) state <= (want_push && !s2c_can_push) ? S_PUSH : S_IDLE;
      if (state == S_PUSH && s2c_can_push) state <= S_IDLE;
    end
  end
endmodule
