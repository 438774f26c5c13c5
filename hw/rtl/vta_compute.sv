// Compute module: LOAD of UOP / ACC / ACC_8BIT, GEMM, ALU and FINISH, in order, with its
// dependency tokens (pop/push prev against load, next against store).
//
// GEMM and ALU micro-ops issue one per cycle into a pipeline (stage k is k cycles after
// the micro-op is read):
//   GEMM:       1 operand addresses, input / weight reads; 2 products (vta_gemm_core);
//               3 adder trees' first half, accumulator read; 4 second half, the read value
//               latched; 5 accumulate, write.
//   ALU, immediate: 1 accumulator read; 2 latched; 3 compute, write.
//   ALU, tensor:    1 source read; 2 latched, destination read; 3 latched; 4 compute, write.
// A micro-op with a tensor operand reads the accumulator twice through its one read port
// and issues every other cycle.  In-order semantics without a hazard rule: the
// accumulator RAM is write-first (a read on the edge of a write to its entry returns the
// new value) and a read value is latched through a forwarding mux that takes the result
// being written on the latching edge when the entries match; no earlier micro-op writes
// later than that, so every read sees every earlier micro-op's write.  An instruction
// completes GEMM_PIPELINE (ALU_PIPELINE; +1 with a tensor operand) cycles after its last
// micro-op issues, the cycle before its last write; the RTL's minimum is 4 (2), which
// gen.check_supported enforces and the cycle model charges.
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_compute #(
  parameter int IDX_W = 32
) (
  input  logic                        clk,
  input  logic                        rst,
  input  logic                        halt,
  input  logic                        clear,         // a new run starts: forget the last FINISH
  input  logic [31:0]                 uop_base,      // byte addresses added to UOP / ACC loads
  input  logic [31:0]                 acc_base,
  // command queue
  input  logic                        q_valid,
  output logic                        q_ready,
  input  logic [IDX_W+127:0]          q_data,
  // tokens
  input  logic                        l2c_can_pop,
  output logic                        l2c_pop,
  input  logic                        s2c_can_pop,
  output logic                        s2c_pop,
  input  logic                        c2l_can_push,
  output logic                        c2l_push,
  input  logic                        c2s_can_push,
  output logic                        c2s_push,
  // input / weight buffers (read)
  output logic                        inp_re,
  output logic [LOG_INP_DEPTH-1:0]    inp_raddr,
  input  logic [INP_ELEM_BYTES*8-1:0] inp_rdata,
  output logic                        wgt_re,
  output logic [LOG_WGT_DEPTH-1:0]    wgt_raddr,
  input  logic [WGT_ELEM_BYTES*8-1:0] wgt_rdata,
  // output buffer (write)
  output logic                        out_we,
  output logic [LOG_ACC_DEPTH-1:0]    out_waddr,
  output logic [OUT_ELEM_BYTES*8-1:0] out_wdata,
  // status
  output logic                        finished,      // a FINISH has executed
  output logic                        busy,
  output logic                        progress,      // an instruction, micro-op or element moved
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
  localparam int LANES = BATCH * BLOCK_OUT;
  localparam int ACC_W = ACC_ELEM_BYTES * 8;
  localparam int DMA_BYTES = ACC_ELEM_BYTES > ACC8_ELEM_BYTES ? ACC_ELEM_BYTES : ACC8_ELEM_BYTES;
  localparam int DMA_AW = LOG_ACC_DEPTH > LOG_UOP_DEPTH ? LOG_ACC_DEPTH : LOG_UOP_DEPTH;
  localparam int OFF_W = 32;               // loop offsets; wide enough to detect overflow

  typedef enum logic [2:0] {S_IDLE, S_DMA, S_EXEC, S_DRAIN, S_PUSH} state_t;
  state_t state;
  logic [IDX_W-1:0] idx;
  // The queue head is decoded directly: an instruction is taken in the cycle its tokens
  // are there and starts in that cycle.
  logic [127:0] head;
  logic [2:0]   opcode, mem_id, dma_mem;
  assign head   = q_data[127:0];
  assign opcode = head[MEM_OPCODE_LO +: 3];
  assign mem_id = head[MEM_MEM_ID_LO +: 3];

  // ---------------------------------------------------------------- buffers
  logic             uop_we, uop_re;
  logic [LOG_UOP_DEPTH-1:0] uop_waddr, uop_raddr;
  logic [31:0]      uop_wdata;
  // Small buffers leave the top bits of a micro-op word unused (ISA.md: fields from bit 0).
  /* verilator lint_off UNUSEDSIGNAL */
  logic [31:0]      uop_rdata;
  /* verilator lint_on UNUSEDSIGNAL */
  vta_ram #(.WIDTH(32), .DEPTH(UOP_DEPTH)) uop_ram (
    .clk, .we(uop_we), .waddr(uop_waddr), .wdata(uop_wdata), .re(uop_re), .raddr(uop_raddr),
    .rdata(uop_rdata));

  logic             acc_we, acc_re;
  logic [LOG_ACC_DEPTH-1:0] acc_waddr, acc_raddr;
  logic [ACC_W-1:0] acc_wdata, acc_rdata;
  vta_ram #(.WIDTH(ACC_W), .DEPTH(ACC_DEPTH), .BYPASS(1'b1)) acc_ram (
    .clk, .we(acc_we), .waddr(acc_waddr), .wdata(acc_wdata), .re(acc_re), .raddr(acc_raddr),
    .rdata(acc_rdata));

  function automatic logic [OUT_ELEM_BYTES*8-1:0] truncate(input logic [ACC_W-1:0] v);
    for (int l = 0; l < LANES; l++) truncate[l * OUT_BITS +: OUT_BITS] = v[l * ACC_BITS +: OUT_BITS];
  endfunction

  // ------------------------------------------------------------ DMA loads
  logic dma_start, dma_busy, dma_done, dma_we, dma_err;
  logic [DMA_AW-1:0] dma_waddr;
  logic [DMA_BYTES*8-1:0] dma_wdata;
  logic [3:0]  e_log2;
  logic [31:0] load_depth, total;
  always_comb begin
    case (32'(mem_id))
      MEM_UOP: begin e_log2 = 4'd2; load_depth = 32'(UOP_DEPTH); end
      MEM_ACC: begin e_log2 = 4'($clog2(ACC_ELEM_BYTES)); load_depth = 32'(ACC_DEPTH); end
      default: begin e_log2 = 4'($clog2(ACC8_ELEM_BYTES)); load_depth = 32'(ACC_DEPTH); end
    endcase
    total = (32'(head[MEM_Y_PAD_0_LO +: 4]) + 32'(head[MEM_Y_SIZE_LO +: 16]) + 32'(head[MEM_Y_PAD_1_LO +: 4]))
          * (32'(head[MEM_X_PAD_0_LO +: 4]) + 32'(head[MEM_X_SIZE_LO +: 16]) + 32'(head[MEM_X_PAD_1_LO +: 4]));
  end
  vta_dma_read #(.ELEM_MAX_BYTES(DMA_BYTES), .SRAM_AW(DMA_AW)) dma (
    .clk, .rst, .start(dma_start), .elem_log2(e_log2),
    .dram_addr((32'(mem_id) == MEM_UOP ? uop_base : acc_base) + (head[MEM_DRAM_BASE_LO +: 32] << e_log2)),
    .sram_base(DMA_AW'(head[MEM_SRAM_BASE_LO +: 16])), .y_size(head[MEM_Y_SIZE_LO +: 16]),
    .x_size(head[MEM_X_SIZE_LO +: 16]), .x_stride(head[MEM_X_STRIDE_LO +: 16]),
    .y_pad_0(head[MEM_Y_PAD_0_LO +: 4]), .y_pad_1(head[MEM_Y_PAD_1_LO +: 4]),
    .x_pad_0(head[MEM_X_PAD_0_LO +: 4]), .x_pad_1(head[MEM_X_PAD_1_LO +: 4]),
    .busy(dma_busy), .done(dma_done), .wr_en(dma_we), .wr_addr(dma_waddr), .wr_data(dma_wdata),
    .req, .gnt, .ar_valid, .ar_ready, .ar_addr, .ar_len, .r_valid, .r_ready, .r_data, .r_resp, .r_last,
    .bus_error(dma_err));

  logic [ACC_W-1:0] dma_acc;               // the loaded element as accumulator lanes
  always_comb begin
    if (32'(dma_mem) == MEM_ACC) begin
      dma_acc = ACC_W'(dma_wdata);
    end else begin                          // ACC_8BIT: one signed byte per lane
      for (int l = 0; l < LANES; l++)
        dma_acc[l * ACC_BITS +: ACC_BITS] = ACC_BITS'($signed(dma_wdata[l * 8 +: 8]));
    end
  end

  // ------------------------------------------------------- loop issue unit
  logic        is_alu, reset_op, tensor;
  logic [2:0]  alu_op;
  logic [ACC_W-1:0] imm_lanes;
  logic [LOG_UOP_DEPTH:0] u, u_bgn, u_end;
  logic [13:0] o, i, n_out, n_in;
  logic [OFF_W-1:0] dst_o, dst_i, src_o, src_i, wgt_o, wgt_i;       // running offsets
  logic [OFF_W-1:0] dfo, dfi, sfo, sfi, wfo, wfi;
  logic issue, last_issue;
  logic gap;                                   // tensor ALU micro-ops issue every other cycle
  logic head_empty_loop;
  assign head_empty_loop =
      head[GEMM_UOP_END_LO +: GEMM_UOP_END_W] <= (LOG_UOP_DEPTH+1)'(head[GEMM_UOP_BGN_LO +: GEMM_UOP_BGN_W])
      || head[GEMM_ITER_OUT_LO +: 14] == 0 || head[GEMM_ITER_IN_LO +: 14] == 0;
  assign issue = state == S_EXEC && !gap && !halt;
  assign last_issue = issue && u == u_end - 1'b1 && i == n_in - 1'b1 && o == n_out - 1'b1;

  // stage 1: micro-op fields plus loop offsets give the operand addresses
  logic s1;
  logic [OFF_W-1:0] s1_dst_off, s1_src_off, s1_wgt_off;
  logic [OFF_W-1:0] s1_dst, s1_src, s1_wgt;
  logic bad_index;

  always_comb begin
    s1_dst = OFF_W'(uop_rdata[UOP_DST_LO +: UOP_DST_W]) + s1_dst_off;
    s1_src = OFF_W'(uop_rdata[UOP_SRC_LO +: UOP_SRC_W]) + s1_src_off;
    s1_wgt = OFF_W'(uop_rdata[UOP_WGT_LO +: UOP_WGT_W]) + s1_wgt_off;
    bad_index = s1 && (s1_dst >= OFF_W'(ACC_DEPTH)
        || (!is_alu && (!reset_op || STORE_FROM_ACC == 0)    // VTA's reset GEMM reads its operands
            && (s1_src >= OFF_W'(INP_DEPTH) || s1_wgt >= OFF_W'(WGT_DEPTH)))
        || (tensor && s1_src >= OFF_W'(ACC_DEPTH)));
  end

  // stages 2-5: valid bits and destination entries; GEMM writes in stage 5, a tensor ALU
  // micro-op in stage 4, an immediate one in stage 3
  localparam int LAST_W = GEMM_PIPELINE > ALU_PIPELINE + 1 ? GEMM_PIPELINE : ALU_PIPELINE + 1;
  logic is_gemm, late;
  logic s2, s3, s4, s5;
  logic [LOG_ACC_DEPTH-1:0] s2_dst, s3_dst, s4_dst, s5_dst;
  logic [LAST_W-1:0] last_at;                  // bit k: the last micro-op issued k + 1 cycles ago
  logic loop_done;                             // the cycle before the last write
  assign is_gemm = !is_alu;
  assign late = is_gemm || tensor;
  always_comb begin
    if (!is_alu) loop_done = last_at[GEMM_PIPELINE - 1];
    else if (tensor) loop_done = last_at[ALU_PIPELINE];
    else loop_done = last_at[ALU_PIPELINE - 1];
  end

  assign uop_re    = issue;
  assign uop_raddr = LOG_UOP_DEPTH'(u);
  assign uop_we    = dma_we && 32'(dma_mem) == MEM_UOP;
  assign uop_waddr = LOG_UOP_DEPTH'(dma_waddr);
  assign uop_wdata = dma_wdata[31:0];

  assign inp_re    = s1 && !is_alu;
  assign inp_raddr = LOG_INP_DEPTH'(s1_src);
  assign wgt_re    = s1 && !is_alu;
  assign wgt_raddr = LOG_WGT_DEPTH'(s1_wgt);
  // accumulator reads, two stages before the write: the destination in stage 3 (GEMM), 2
  // (tensor ALU, after its source in stage 1) or 1 (immediate ALU); the value is latched a
  // cycle later in `rd_val`
  logic [LOG_ACC_DEPTH-1:0] rd_addr_q;         // the entry whose value acc_rdata holds now
  always_comb begin
    if (is_gemm) begin
      acc_re = s3;
      acc_raddr = s3_dst;
    end else if (tensor) begin
      acc_re = s1 || s2;
      acc_raddr = s1 ? LOG_ACC_DEPTH'(s1_src) : s2_dst;
    end else begin
      acc_re = s1;
      acc_raddr = LOG_ACC_DEPTH'(s1_dst);
    end
  end

  // the write stage and its value
  logic x;
  logic [LOG_ACC_DEPTH-1:0] x_dst;
  logic [ACC_W-1:0] rd_val, src_val, gemm_out, alu_out, exec_val, fwd;
  assign x     = is_gemm ? s5 : (tensor ? s4 : s3);
  assign x_dst = is_gemm ? s5_dst : (tensor ? s4_dst : s3_dst);
  vta_gemm_core gemm_core (.clk, .inp(inp_rdata), .wgt(wgt_rdata), .acc_in(rd_val), .acc_out(gemm_out));
  vta_alu_core alu_core (.op(alu_op), .a(rd_val), .b(src_val), .y(alu_out));
  assign exec_val = reset_op ? '0 : (is_alu ? alu_out : gemm_out);
  // forwarding: the value written on this edge, if the entry just read is the one written
  assign fwd = x && x_dst == rd_addr_q ? exec_val : acc_rdata;

  // writes: the pipeline's last stage, or the DMA
  logic dma_acc_we;
  assign dma_acc_we = dma_we && 32'(dma_mem) != MEM_UOP;
  assign acc_we    = x || dma_acc_we;
  assign acc_waddr = x ? x_dst : LOG_ACC_DEPTH'(dma_waddr);
  assign acc_wdata = x ? exec_val : dma_acc;
  // STORE_FROM_ACC: the output buffer mirrors every accumulator write (a STORE sees
  // acc[7:0]).  Otherwise VTA's rule: only GEMM and ALU write it, with the result before
  // any reset (a reset GEMM leaves acc + inp x wgt^T here and zero in the accumulator).
  assign out_we    = STORE_FROM_ACC != 0 ? acc_we : x;
  assign out_waddr = acc_waddr;
  assign out_wdata = STORE_FROM_ACC != 0 ? truncate(acc_wdata)
                     : truncate(is_alu ? (reset_op ? '0 : alu_out) : gemm_out);

  // --------------------------------------------------------------- control
  logic pops_ok, take, is_load, is_loop, load_fits, load_empty, complete;
  logic want_prev, want_next, pend_prev, pend_next, push_prev, push_next;
  assign pops_ok    = (!head[MEM_POP_PREV_LO] || l2c_can_pop) && (!head[MEM_POP_NEXT_LO] || s2c_can_pop);
  assign q_ready    = state == S_IDLE && !halt && !err && pops_ok;   // own error: stop at once
  assign take       = q_valid && q_ready;
  assign l2c_pop    = take && head[MEM_POP_PREV_LO];
  assign s2c_pop    = take && head[MEM_POP_NEXT_LO];
  assign is_load    = 32'(opcode) == OP_LOAD;
  assign is_loop    = 32'(opcode) == OP_GEMM || 32'(opcode) == OP_ALU;
  assign load_empty = head[MEM_X_SIZE_LO +: 16] == 0;
  assign load_fits  = 32'(head[MEM_SRAM_BASE_LO +: 16]) + total <= load_depth;
  assign dma_start  = take && is_load && !load_empty && load_fits;
  // an instruction completes when its last write is certain to land before anyone
  // (this module or a token holder) can read it
  assign complete   = (take && ((is_load && load_empty) || (is_loop && head_empty_loop)
                                || 32'(opcode) == OP_FINISH))
                      || (state == S_DMA && dma_done && !dma_err)
                      || (state == S_DRAIN && loop_done);
  assign want_prev  = state == S_IDLE ? head[MEM_PUSH_PREV_LO] : push_prev;
  assign want_next  = state == S_IDLE ? head[MEM_PUSH_NEXT_LO] : push_next;
  assign c2l_push   = ((complete && want_prev) || (state == S_PUSH && pend_prev)) && c2l_can_push;
  assign c2s_push   = ((complete && want_next) || (state == S_PUSH && pend_next)) && c2s_can_push;
  assign busy       = state != S_IDLE || dma_busy;
  assign progress   = take || issue || x || dma_we;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      s1 <= 1'b0;
      s2 <= 1'b0;
      s3 <= 1'b0;
      s4 <= 1'b0;
      s5 <= 1'b0;
      last_at <= '0;
      finished <= 1'b0;
      err <= 1'b0;
      err_code <= '0;
      err_index <= '0;
      gap <= 1'b0;
      pend_prev <= 1'b0;
      pend_next <= 1'b0;
    end else begin
      if (clear) finished <= 1'b0;
      // ---- pipeline registers
      s1 <= issue;
      if (issue) begin
        s1_dst_off <= dst_o + dst_i;
        s1_src_off <= src_o + src_i;
        s1_wgt_off <= wgt_o + wgt_i;
      end
      s2 <= s1;
      s3 <= s2;
      s4 <= s3 && late;                       // an immediate ALU micro-op leaves in stage 3
      s5 <= s4 && is_gemm;                    // a tensor one in stage 4
      s2_dst <= LOG_ACC_DEPTH'(s1_dst);
      s3_dst <= s2_dst;
      s4_dst <= s3_dst;
      s5_dst <= s4_dst;
      last_at <= take ? '0 : {last_at[LAST_W-2:0], last_issue};
      rd_addr_q <= acc_raddr;
      rd_val <= fwd;
      // the ALU's second operand: a tensor micro-op's source, a cycle behind, or the
      // immediate (chosen here, not in front of the ALU: timing)
      src_val <= tensor ? rd_val : imm_lanes;
      gap <= tensor && issue;
      if (bad_index && !err) begin
        err <= 1'b1;
        err_code <= 4'd9;                 // micro-op index out of range
        err_index <= idx;
      end

      // ---- loop counters
      if (issue) begin
        if (u != u_end - 1'b1) begin
          u <= u + 1'b1;
        end else begin
          u <= u_bgn;
          if (i != n_in - 1'b1) begin
            i <= i + 1'b1;
            dst_i <= dst_i + dfi; src_i <= src_i + sfi; wgt_i <= wgt_i + wfi;
          end else begin
            i <= '0;
            dst_i <= '0; src_i <= '0; wgt_i <= '0;
            o <= o + 1'b1;
            dst_o <= dst_o + dfo; src_o <= src_o + sfo; wgt_o <= wgt_o + wfo;
          end
        end
      end

      // ---- taking an instruction
      if (take) begin
        idx <= q_data[IDX_W+127:128];
        push_prev <= head[MEM_PUSH_PREV_LO];
        push_next <= head[MEM_PUSH_NEXT_LO];
        dma_mem <= mem_id;
        if (32'(opcode) == OP_FINISH) finished <= 1'b1;
        if (is_load && !load_empty) begin
          if (load_fits) state <= S_DMA;
          else begin
            err <= 1'b1;
            err_code <= 4'd7;             // buffer address out of range
            err_index <= q_data[IDX_W+127:128];
          end
        end
        if (is_loop) begin
          is_alu <= 32'(opcode) == OP_ALU;
          reset_op <= head[GEMM_RESET_LO];
          alu_op <= head[ALU_ALU_OPCODE_LO +: 3];
          tensor <= 32'(opcode) == OP_ALU && !head[ALU_USE_IMM_LO] && !head[GEMM_RESET_LO];
          for (int l = 0; l < LANES; l++)
            imm_lanes[l * ACC_BITS +: ACC_BITS] <= ACC_BITS'($signed(head[ALU_IMM_LO +: 16]));
          u_bgn <= (LOG_UOP_DEPTH+1)'(head[GEMM_UOP_BGN_LO +: GEMM_UOP_BGN_W]);
          u <= (LOG_UOP_DEPTH+1)'(head[GEMM_UOP_BGN_LO +: GEMM_UOP_BGN_W]);
          u_end <= head[GEMM_UOP_END_LO +: GEMM_UOP_END_W];
          n_out <= head[GEMM_ITER_OUT_LO +: 14];
          n_in <= head[GEMM_ITER_IN_LO +: 14];
          o <= '0;
          i <= '0;
          dst_o <= '0; dst_i <= '0; src_o <= '0; src_i <= '0; wgt_o <= '0; wgt_i <= '0;
          dfo <= OFF_W'(head[GEMM_DST_FACTOR_OUT_LO +: GEMM_DST_FACTOR_OUT_W]);
          dfi <= OFF_W'(head[GEMM_DST_FACTOR_IN_LO +: GEMM_DST_FACTOR_IN_W]);
          if (32'(opcode) == OP_ALU) begin
            sfo <= OFF_W'(head[ALU_SRC_FACTOR_OUT_LO +: ALU_SRC_FACTOR_OUT_W]);
            sfi <= OFF_W'(head[ALU_SRC_FACTOR_IN_LO +: ALU_SRC_FACTOR_IN_W]);
            wfo <= '0;
            wfi <= '0;
          end else begin
            sfo <= OFF_W'(head[GEMM_SRC_FACTOR_OUT_LO +: GEMM_SRC_FACTOR_OUT_W]);
            sfi <= OFF_W'(head[GEMM_SRC_FACTOR_IN_LO +: GEMM_SRC_FACTOR_IN_W]);
            wfo <= OFF_W'(head[GEMM_WGT_FACTOR_OUT_LO +: GEMM_WGT_FACTOR_OUT_W]);
            wfi <= OFF_W'(head[GEMM_WGT_FACTOR_IN_LO +: GEMM_WGT_FACTOR_IN_W]);
          end
          if (!head_empty_loop) state <= S_EXEC;
        end
      end
      if (state == S_DMA && dma_done && dma_err) begin
        err <= 1'b1;
        err_code <= 4'd8;                 // DRAM access error
        err_index <= idx;
        state <= S_IDLE;
      end
      if (state == S_EXEC && last_issue) state <= S_DRAIN;
      // ---- completion: push the tokens now, or wait in S_PUSH for room
      if (complete) begin
        pend_prev <= want_prev && !c2l_can_push;
        pend_next <= want_next && !c2s_can_push;
        state <= (want_prev && !c2l_can_push) || (want_next && !c2s_can_push) ? S_PUSH : S_IDLE;
      end
      if (state == S_PUSH) begin
        if (c2l_can_push) pend_prev <= 1'b0;
        if (c2s_can_push) pend_next <= 1'b0;
        if ((!pend_prev || c2l_can_push) && (!pend_next || c2s_can_push)) state <= S_IDLE;
      end
    end
  end
endmodule
