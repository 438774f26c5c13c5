// Fetch: reads insn_count instructions at insn_addr in bursts (never across a
// BURST_BYTES boundary), checks what can be checked without running them, and
// dispatches each, tagged with its index, to the load, compute or store command
// queue.  A full queue holds the read data back.  A malformed instruction stops
// everything with an error code and its index (vta_regs reports them).
module vta_fetch import vta_pkg::*; #(
  parameter int IDX_W = 32
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   start,
  input  logic [31:0]            insn_addr,
  input  logic [31:0]            insn_count,
  input  logic                   halt,          // an error elsewhere: stop fetching
  output logic                   busy,
  // dispatch: {index, instruction} to the three modules
  output logic [2:0]             q_valid,       // one-hot: load, compute, store
  input  logic [2:0]             q_ready,
  output logic [IDX_W+127:0]     q_data,
  // errors found here
  output logic                   err,
  output logic [3:0]             err_code,
  output logic [IDX_W-1:0]       err_index,
  // memory port
  output logic                   req,
  input  logic                   gnt,
  output logic                   ar_valid,
  input  logic                   ar_ready,
  output logic [31:0]            ar_addr,
  output logic [7:0]             ar_len,
  input  logic                   r_valid,
  output logic                   r_ready,
  input  logic [BUS_BYTES*8-1:0] r_data,
  input  logic                   r_last
);
  localparam int BUS_BITS = BUS_BYTES * 8;
  localparam int BEATS_PER_INSN = 16 / BUS_BYTES;
  localparam int PW = BEATS_PER_INSN > 1 ? $clog2(BEATS_PER_INSN) : 1;
  localparam int BOUNDARY_INSNS = BURST_BYTES / 16;

  typedef enum logic [1:0] {S_IDLE, S_AR, S_R, S_WAIT} state_t;
  state_t state;

  logic [31:0]    addr, remaining, burst;
  logic [IDX_W-1:0] index;
  logic [127:0]   insn;
  logic           insn_valid;
  logic [PW-1:0]  part;
  logic           beat_is_last_part;

  // --- decode of the instruction being dispatched
  logic [2:0] opcode, mem_id, alu_op;
  logic [2:0] target;
  logic [3:0] bad;
  always_comb begin
    opcode = insn[MEM_OPCODE_LO +: 3];
    mem_id = insn[MEM_MEM_ID_LO +: 3];
    alu_op = insn[ALU_ALU_OPCODE_LO +: 3];
    if (32'(opcode) == OP_STORE) target = 3'b100;
    else if (32'(opcode) == OP_LOAD && (32'(mem_id) == MEM_INP || 32'(mem_id) == MEM_WGT)) target = 3'b001;
    else target = 3'b010;
    bad = 4'd0;
    if (32'(opcode) > OP_ALU) bad = 4'd1;                                   // unknown opcode
    else if ((32'(opcode) == OP_LOAD || 32'(opcode) == OP_STORE) && 32'(mem_id) > MEM_ACC_8BIT)
      bad = 4'd2;                                                           // unknown memory type
    else if (32'(opcode) == OP_LOAD && 32'(mem_id) == MEM_OUT) bad = 4'd2;
    else if (32'(opcode) == OP_STORE && 32'(mem_id) != MEM_OUT) bad = 4'd2;
    else if (32'(opcode) == OP_STORE && (insn[MEM_Y_PAD_0_LO +: 4] != 0 || insn[MEM_Y_PAD_1_LO +: 4] != 0
             || insn[MEM_X_PAD_0_LO +: 4] != 0 || insn[MEM_X_PAD_1_LO +: 4] != 0)) bad = 4'd3;
    else if (target == 3'b001 && (insn[MEM_POP_PREV_LO] || insn[MEM_PUSH_PREV_LO])) bad = 4'd4;
    else if (target == 3'b100 && (insn[MEM_POP_NEXT_LO] || insn[MEM_PUSH_NEXT_LO])) bad = 4'd4;
    else if (32'(opcode) == OP_ALU && (32'(alu_op) > ALU_MUL || (32'(alu_op) == ALU_MUL && HAS_MUL == 0)))
      bad = 4'd5;                                                           // no such ALU operation
    else if ((32'(opcode) == OP_GEMM || 32'(opcode) == OP_ALU)
             && 32'(insn[GEMM_UOP_END_LO +: GEMM_UOP_END_W]) > UOP_DEPTH) bad = 4'd6;
  end

  assign q_data  = {index, insn};
  assign q_valid = (insn_valid && bad == 0 && !halt) ? target : 3'b000;
  logic dispatched;
  assign dispatched = |(q_valid & q_ready);

  // a burst runs to the boundary or the end of the program
  logic [31:0] room;
  assign room     = 32'(BOUNDARY_INSNS) - ((addr & 32'(BURST_BYTES - 1)) >> 4);
  assign burst    = remaining < room ? remaining : room;

  assign busy     = state != S_IDLE || insn_valid;
  assign req      = state == S_AR || state == S_R;
  assign ar_valid = state == S_AR && gnt;
  assign ar_addr  = addr;
  assign ar_len   = 8'(burst * BEATS_PER_INSN - 1);
  // take a beat when the assembled instruction has left (or will leave now)
  assign r_ready  = state == S_R && (!insn_valid || dispatched);
  assign beat_is_last_part = 32'(part) == BEATS_PER_INSN - 1;

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      insn_valid <= 1'b0;
      err <= 1'b0;
      err_code <= '0;
      err_index <= '0;
    end else begin
      if (dispatched) begin
        insn_valid <= 1'b0;
        index <= index + 1'b1;
      end
      if (insn_valid && bad != 0 && !err) begin
        err <= 1'b1;
        err_code <= bad;
        err_index <= index;
      end
      case (state)
        S_IDLE: if (start) begin
          addr <= insn_addr;
          remaining <= insn_count;
          index <= '0;
          part <= '0;
          err <= 1'b0;
          if (insn_count != 0) state <= S_AR;
        end
        S_AR: if (halt) state <= S_IDLE; else if (ar_valid && ar_ready) state <= S_R;
        S_R: if (r_valid && r_ready) begin
          insn[32'(part) * BUS_BITS +: BUS_BITS] <= r_data;
          if (beat_is_last_part) begin
            insn_valid <= 1'b1;
            part <= '0;
          end else begin
            part <= part + 1'b1;
          end
          if (r_last) begin
            addr <= addr + (burst << 4);
            remaining <= remaining - burst;
            state <= (remaining == burst || halt) ? S_IDLE : S_WAIT;
          end
        end
        // release the port; ask again once the burst's last instruction has left
        S_WAIT: if (!insn_valid || dispatched) state <= S_AR;
        default: state <= S_IDLE;
      endcase
    end
  end
endmodule
