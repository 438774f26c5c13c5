// Fetch: reads insn_count instructions at insn_addr in bursts (never across a
// BURST_BYTES boundary) into an instruction buffer one burst deep, checks what can be
// checked without running them, and dispatches each, tagged with its index, to the
// load, compute or store command queue.  A burst is asked for only when the buffer
// has room for all of it, so the read data never waits on a full command queue and
// the memory port is never held by a fetch that cannot go on (holding it would
// deadlock a module whose LOAD must run before its queue drains).  A malformed
// instruction stops everything with an error code and its index (vta_regs reports
// them).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_fetch #(
  parameter int IDX_W = 32
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   start,
  input  logic [31:0]            insn_addr,
  input  logic [31:0]            insn_count,
  input  logic                   halt,          // an error elsewhere: stop fetching
  output logic                   busy,
  output logic                   progress,      // a beat or an instruction moved this cycle
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
  localparam int BOUNDARY_INSNS = BURST_BYTES / 16;     // the most one burst carries
  localparam int BW = $clog2(BOUNDARY_INSNS) + 1;

  typedef enum logic [1:0] {S_IDLE, S_AR, S_R} state_t;
  state_t state;

  logic [31:0]    addr, remaining, burst;
  logic [IDX_W-1:0] index;                  // of the instruction at the buffer's head
  logic [PW-1:0]  part;
  logic [BW-1:0]  buffered;                 // instructions in the buffer or arriving
  logic [127:0]   partial;                  // the beats of an instruction so far

  // --- the instruction buffer
  logic         word_valid, head_valid, pop;
  logic [127:0] word, insn;
  always_comb begin
    word = partial;
    word[32'(part) * BUS_BITS +: BUS_BITS] = r_data;
  end
  assign word_valid = state == S_R && r_valid && 32'(part) == BEATS_PER_INSN - 1;
  /* verilator lint_off PINCONNECTEMPTY */
  vta_fifo #(.WIDTH(128), .DEPTH(BOUNDARY_INSNS)) buffer (
    .clk, .rst(rst || start), .in_valid(word_valid), .in_ready(), .in_data(word),
    .out_valid(head_valid), .out_ready(pop), .out_data(insn));
  /* verilator lint_on PINCONNECTEMPTY */

  // --- decode of the instruction at the head
  logic [2:0] opcode, mem_id, alu_op;
  logic [2:0] target;
  logic [3:0] bad;
  logic       seen_finish;                    // a FINISH has been dispatched in this run
  logic padded, x_empty;
  assign padded  = insn[MEM_Y_PAD_0_LO +: 4] != 0 || insn[MEM_Y_PAD_1_LO +: 4] != 0
                   || insn[MEM_X_PAD_0_LO +: 4] != 0 || insn[MEM_X_PAD_1_LO +: 4] != 0;
  assign x_empty = insn[MEM_X_SIZE_LO +: 16] == 0;
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
    // what VTA's hardware runs differently from what it asks for, unless the
    // configuration implements it (HwConfig's extension fields)
    else if (32'(opcode) == OP_LOAD && 32'(mem_id) == MEM_ACC_8BIT && ACC8_LOAD == 0) bad = 4'd2;
    else if (32'(opcode) == OP_LOAD && padded && (32'(mem_id) == MEM_UOP || x_empty
             || (32'(mem_id) == MEM_WGT && WGT_LOAD_PAD == 0))) bad = 4'd10;
    else if (32'(opcode) == OP_LOAD && 32'(mem_id) == MEM_UOP && !x_empty && insn[MEM_Y_SIZE_LO +: 16] != 1)
      bad = 4'd11;                                                          // LOAD.UOP copies one row
    else if (32'(opcode) == OP_ALU && insn[GEMM_RESET_LO] && ALU_RESET == 0) bad = 4'd12;
    if (seen_finish) bad = 4'd13;                                           // nothing runs after FINISH
  end

  assign q_data  = {index, insn};
  assign q_valid = (head_valid && bad == 0 && !halt) ? target : 3'b000;
  assign pop     = |(q_valid & q_ready);

  // A burst runs to the boundary or the end of the program.  Its length is registered
  // (burst_q) when the previous burst ends or the run starts, so the request path sees
  // a few bits, not 32-bit address arithmetic: every burst after the first starts on a
  // boundary, so its length is min(remaining, BOUNDARY_INSNS).
  logic [BW-1:0] burst_q;
  logic [31:0]   first_room, after_burst;
  assign first_room  = 32'(BOUNDARY_INSNS) - ((insn_addr & 32'(BURST_BYTES - 1)) >> 4);
  assign after_burst = remaining - burst;
  assign burst       = 32'(burst_q);

  // Ask for the port, and the next burst, only once the buffer can take all of it.
  // `fits` (buffered + burst_q <= BOUNDARY_INSNS) is a register, computed from the
  // values the two take next, and the burst an address handshake adds is counted in
  // `buffered` a cycle later (`fired`), so neither the request nor these counters sit
  // behind the port's grant: request -> grant -> ar_ready -> buffered -> fits -> request
  // would otherwise close in one cycle.  In S_R, `fits` is not read and is computed for
  // the burst that comes next (burst_d), so the first S_AR cycle reads the exact value.
  // A dispatch (`pop`, late: it follows the decode) only picks between sums made
  // without it.  burst_d, the burst after this one, is registered from remaining and
  // burst_q, which only change as S_AR is entered: S_R always reads it settled.
  logic fits, fired;
  logic [BW-1:0] burst_d;                    // what burst_q takes at a burst's end
  logic [BW-1:0] kept, kept_less;            // what `buffered` takes without / with a pop
  logic [BW:0]   next_need;                  // kept + the burst asked for next
  assign kept      = buffered + (fired ? BW'(burst) : '0);
  assign kept_less = kept - 1'b1;
  assign next_need = (BW+1)'(kept) + (BW+1)'(state == S_R ? burst_d : burst_q);
  assign busy     = state != S_IDLE || buffered != 0;
  assign req      = (state == S_AR && fits) || state == S_R;
  assign ar_valid = state == S_AR && fits && gnt;
  assign ar_addr  = addr;
  assign ar_len   = 8'(burst * BEATS_PER_INSN - 1);
  assign r_ready  = state == S_R;
  assign progress = pop || (r_valid && r_ready);

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      buffered <= '0;
      fits <= 1'b0;
      fired <= 1'b0;
      err <= 1'b0;
      err_code <= '0;
      err_index <= '0;
      seen_finish <= 1'b0;
    end else begin
      fired <= ar_valid && ar_ready;
      burst_d <= BW'(after_burst < 32'(BOUNDARY_INSNS) ? after_burst : 32'(BOUNDARY_INSNS));
      buffered <= pop ? kept_less : kept;
      fits <= next_need <= (BW+1)'(BOUNDARY_INSNS) || (pop && next_need == (BW+1)'(BOUNDARY_INSNS + 1));
      if (pop) index <= index + 1'b1;
      if (pop && 32'(opcode) == OP_FINISH) seen_finish <= 1'b1;
      if (head_valid && bad != 0 && !err) begin
        err <= 1'b1;
        err_code <= bad;
        err_index <= index;
      end
      case (state)
        S_IDLE: if (start) begin
          addr <= insn_addr;
          remaining <= insn_count;
          burst_q <= BW'(insn_count < first_room ? insn_count : first_room);
          index <= '0;
          seen_finish <= 1'b0;
          part <= '0;
          buffered <= '0;
          fits <= 1'b1;                          // the first burst never exceeds the buffer
          err <= 1'b0;
          if (insn_count != 0) state <= S_AR;
        end
        S_AR: if (halt) state <= S_IDLE; else if (ar_valid && ar_ready) state <= S_R;
        S_R: if (r_valid) begin
          partial[32'(part) * BUS_BITS +: BUS_BITS] <= r_data;
          part <= 32'(part) == BEATS_PER_INSN - 1 ? '0 : part + 1'b1;
          if (r_last) begin
            addr <= addr + (burst << 4);
            remaining <= after_burst;
            burst_q <= burst_d;
            state <= (remaining == burst || halt) ? S_IDLE : S_AR;
          end
        end
        default: state <= S_IDLE;
      endcase
    end
  end
endmodule
