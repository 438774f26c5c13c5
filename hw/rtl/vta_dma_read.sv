// 2-D DMA from DRAM into an on-chip buffer, with zero padding (LOAD semantics of ISA.md).
//
// Holds the memory port for the whole transfer (a transfer of padding rows only does
// not ask for it).  Rows are split into bursts at
// BURST_BYTES boundaries; a burst is issued in the cycle after the previous one's
// last beat, so each costs the memory latency plus one cycle per beat.  Elements
// wider than a beat are assembled from consecutive beats; narrower ones leave a
// beat one per cycle (the buffer takes one element per cycle).  Padding elements
// are written as zeros, one per cycle.
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_dma_read #(
  parameter int ELEM_MAX_BYTES = 16,
  parameter int SRAM_AW = 11
) (
  input  logic                        clk,
  input  logic                        rst,
  // command: pulse `start` with every field valid
  input  logic                        start,
  input  logic [3:0]                  elem_log2,     // log2(element bytes)
  input  logic [31:0]                 dram_addr,     // byte address of the instruction's element 0
  input  logic [SRAM_AW-1:0]          sram_base,
  input  logic [15:0]                 y_size,
  input  logic [15:0]                 x_size,
  input  logic [15:0]                 x_stride,
  input  logic [3:0]                  y_pad_0,
  input  logic [3:0]                  y_pad_1,
  input  logic [3:0]                  x_pad_0,
  input  logic [3:0]                  x_pad_1,
  output logic                        busy,
  output logic                        done,          // one cycle, after the last element is written
  // buffer write port
  output logic                        wr_en,
  output logic [SRAM_AW-1:0]          wr_addr,
  output logic [ELEM_MAX_BYTES*8-1:0] wr_data,
  // memory port (held from grant to release)
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
  input  logic                        r_last,
  output logic                        bus_error      // a beat came back with an error response
);
  localparam int BUS_BITS = BUS_BYTES * 8;
  localparam int BUS_LOG2 = $clog2(BUS_BYTES);
  localparam int ELEM_BITS = ELEM_MAX_BYTES * 8;
  localparam int ASM_BITS = ELEM_BITS > BUS_BITS ? ELEM_BITS : BUS_BITS;  // assembly register
  localparam int BEATS_PER_ELEM_MAX = ELEM_MAX_BYTES > BUS_BYTES ? ELEM_MAX_BYTES / BUS_BYTES : 1;
  localparam int BIW = BEATS_PER_ELEM_MAX > 1 ? $clog2(BEATS_PER_ELEM_MAX) : 1;

  typedef enum logic [2:0] {S_IDLE, S_GRANT, S_PAD, S_AR, S_R, S_DONE} state_t;
  state_t state;

  // latched command
  logic [3:0]  e_log2;
  logic [15:0] n_cols_data;
  logic [3:0]  xp0, xp1;
  // What the next row (row + 1, or row 0 before the first) is, registered when a row
  // begins, so beginning one decides from two flags instead of 17-bit compares; the
  // flags come from down-counters (rows to the data's first row, to its end, to the
  // end) compared with constants.
  logic signed [17:0] to_data, to_data_end, to_end;   // from the next row
  logic        next_is_end, next_is_pad;
  logic [31:0] row_addr;                 // DRAM byte address of the next data row
  logic [SRAM_AW-1:0] sram_ptr;
  // padding run in progress; what follows it
  logic [16:0] pad_left;
  logic        pad_then_data;
  // burst state
  logic [31:0] cur_addr;                 // next byte to request
  logic [15:0] elems_left;               // elements of the current row still to write
  logic        first_beat, last_taken;
  // assembly of wide elements / splitting of narrow ones
  logic [ASM_BITS-1:0]  elem_buf;
  logic [BIW-1:0]       beat_idx;
  logic                 narrow;          // element narrower than a beat
  logic [BUS_BITS-1:0]  hold;
  logic                 hold_valid;
  logic [BUS_LOG2:0]    slot, slots_per_beat;

  // The current burst's geometry, registered when it starts (vta_burst): its last beat,
  // the row's bytes after it and whether it ends the row.  Three candidates: a row's
  // first burst at row_addr (after padding rows or at the start), at the row after the
  // current one (row_addr + stride, when a data row ends), and the burst after the current one.
  localparam int LB = $clog2(BURST_BYTES);
  logic [7:0]   b_last;
  logic [31:0]  b_rest;
  logic         b_row_end;
  logic [31:0]  row_bytes, stride_bytes;   // registered with the command
  logic [LB-1:0] step_offset;              // (row_addr + stride_bytes) mod BURST_BYTES, kept with row_addr
  logic [7:0]   here_last, step_last, cont_last;
  logic [31:0]  here_rest, step_rest, cont_rest;
  logic         here_end, step_end, cont_end;
  /* verilator lint_off PINCONNECTEMPTY */
  vta_burst here_burst (.offset(row_addr[LB-1:0]), .left(row_bytes), .bytes(), .last_beat(here_last),
                        .rest(here_rest), .row_end(here_end));
  vta_burst step_burst (.offset(step_offset), .left(row_bytes), .bytes(), .last_beat(step_last),
                        .rest(step_rest), .row_end(step_end));
  vta_burst cont_burst (.offset('0), .left(b_rest), .bytes(), .last_beat(cont_last), .rest(cont_rest),
                        .row_end(cont_end));
  /* verilator lint_on PINCONNECTEMPTY */

  assign busy     = state != S_IDLE;
  // a transfer of padding only (no data rows) never needs the port
  logic pad_only;
  assign req      = state != S_IDLE && state != S_DONE && !pad_only;
  assign done     = state == S_DONE;         // the last element is written at the end of this cycle
  assign ar_valid = state == S_AR;
  assign ar_addr  = {cur_addr[31:BUS_LOG2], {BUS_LOG2{1'b0}}};
  assign ar_len   = b_last;

  // narrow elements: the beat is free again once its last wanted element leaves
  logic hold_empties;
  assign hold_empties = hold_valid && (slot + 1'b1 == slots_per_beat || elems_left == 16'd1);
  assign r_ready = state == S_R && (!narrow || !hold_valid || hold_empties);

  logic [ASM_BITS-1:0] assembled;
  always_comb begin
    assembled = elem_buf;
    assembled[32'(beat_idx) * BUS_BITS +: BUS_BITS] = r_data;
  end

  always_ff @(posedge clk) begin
    if (rst || (state == S_IDLE && start)) bus_error <= 1'b0;
    else if (r_valid && r_ready && (r_resp == 2'b10 || r_resp == 2'b11)) bus_error <= 1'b1;  // SLVERR, DECERR
  end

  // Begin the next row; a data row fetches from row_addr, or from the row after it (`step`:
  // row_addr + stride, which end_data_row moves row_addr to in the same cycle).
  task automatic begin_row(input logic step);
    to_data <= to_data - 1'b1;
    to_data_end <= to_data_end - 1'b1;
    to_end <= to_end - 1'b1;
    next_is_end <= to_end == 18'sd1;
    next_is_pad <= to_data > 18'sd1 || to_data_end <= 18'sd1;
    if (next_is_end) begin
      state <= S_DONE;
    end else if (next_is_pad) begin
      pad_left <= 17'(xp0) + 17'(n_cols_data) + 17'(xp1);
      pad_then_data <= 1'b0;
      state <= S_PAD;
    end else begin
      cur_addr <= step ? row_addr + stride_bytes : row_addr;
      b_last <= step ? step_last : here_last;
      b_rest <= step ? step_rest : here_rest;
      b_row_end <= step ? step_end : here_end;
      elems_left <= n_cols_data;
      first_beat <= 1'b1;
      beat_idx <= '0;
      if (xp0 != 0) begin
        pad_left <= 17'(xp0);
        pad_then_data <= 1'b1;
        state <= S_PAD;
      end else begin
        state <= S_AR;
      end
    end
  endtask

  // The data of the current row is in: its right padding, or the next row.
  task automatic end_data_row();
    row_addr <= row_addr + stride_bytes;
    step_offset <= step_offset + stride_bytes[LB-1:0];
    hold_valid <= 1'b0;
    if (xp1 != 0) begin
      pad_left <= 17'(xp1);
      pad_then_data <= 1'b0;
      state <= S_PAD;
    end else begin
      begin_row(1'b1);
    end
  endtask

  // The current burst is over: the row's next burst starts at the next boundary.
  task automatic next_burst();
    cur_addr <= {cur_addr[31:LB] + 1'b1, {LB{1'b0}}};
    b_last <= cont_last;
    b_rest <= cont_rest;
    b_row_end <= cont_end;
    state <= S_AR;
  endtask

  always_ff @(posedge clk) begin
    wr_en <= 1'b0;
    if (rst) begin
      state <= S_IDLE;
      hold_valid <= 1'b0;
      last_taken <= 1'b0;
    end else begin
      case (state)
        S_IDLE: if (start) begin
          e_log2 <= elem_log2;
          n_cols_data <= x_size;
          row_bytes <= 32'(x_size) << elem_log2;
          stride_bytes <= 32'(x_stride) << elem_log2;
          xp0 <= x_pad_0;
          xp1 <= x_pad_1;
          to_data <= 18'(y_pad_0);
          to_data_end <= 18'(y_pad_0) + 18'(y_size);
          to_end <= 18'(y_pad_0) + 18'(y_size) + 18'(y_pad_1);
          next_is_end <= 17'(y_pad_0) + 17'(y_size) + 17'(y_pad_1) == 17'd0;
          next_is_pad <= y_pad_0 != 0 || y_size == 0;
          row_addr <= dram_addr;
          sram_ptr <= sram_base;
          narrow <= 32'(elem_log2) < 32'(BUS_LOG2);
          pad_only <= y_size == 0;
          slots_per_beat <= (BUS_LOG2+1)'(1) << (32'(BUS_LOG2) - 32'(elem_log2));
          state <= S_GRANT;
        end
        S_GRANT: begin
          step_offset <= row_addr[LB-1:0] + stride_bytes[LB-1:0];  // no row has ended yet
          if (gnt || pad_only) begin_row(1'b0);
        end
        S_PAD: begin  // one zero element per cycle
          wr_en <= 1'b1;
          wr_addr <= sram_ptr;
          wr_data <= '0;
          sram_ptr <= sram_ptr + 1'b1;
          pad_left <= pad_left - 1'b1;
          if (pad_left == 17'd1) begin
            if (pad_then_data) state <= S_AR;
            else begin_row(1'b0);
          end
        end
        S_AR: if (ar_ready) state <= S_R;
        S_R: begin
          if (!narrow) begin
            if (r_valid) begin
              elem_buf <= assembled;
              if (32'(beat_idx) == (32'd1 << (32'(e_log2) - 32'(BUS_LOG2))) - 32'd1) begin
                beat_idx <= '0;
                wr_en <= 1'b1;
                wr_addr <= sram_ptr;
                wr_data <= ELEM_BITS'(assembled);
                sram_ptr <= sram_ptr + 1'b1;
                elems_left <= elems_left - 1'b1;
              end else begin
                beat_idx <= beat_idx + 1'b1;
              end
              if (r_last) begin
                if (b_row_end) end_data_row();
                else next_burst();
              end
            end
          end else begin
            if (hold_valid) begin  // one narrow element per cycle out of the held beat
              wr_en <= 1'b1;
              wr_addr <= sram_ptr;
              wr_data <= ELEM_BITS'(hold >> (32'(slot) << (32'(e_log2) + 32'd3)));
              sram_ptr <= sram_ptr + 1'b1;
              elems_left <= elems_left - 1'b1;
              slot <= slot + 1'b1;
              if (hold_empties) hold_valid <= 1'b0;
            end
            if (r_valid && r_ready) begin
              hold <= r_data;
              hold_valid <= 1'b1;
              slot <= first_beat ? (BUS_LOG2+1)'((cur_addr & 32'(BUS_BYTES - 1)) >> e_log2) : '0;
              first_beat <= 1'b0;
              if (r_last) last_taken <= 1'b1;
            end
            // the burst is over once its last beat was taken and has emptied
            if (last_taken && (!hold_valid || hold_empties)) begin
              last_taken <= 1'b0;
              first_beat <= 1'b1;
              if (b_row_end) end_data_row();
              else next_burst();
            end
          end
        end
        S_DONE: state <= S_IDLE;
        default: state <= S_IDLE;
      endcase
    end
  end
endmodule
