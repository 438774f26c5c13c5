// 2-D strided DMA from the output buffer to DRAM (STORE semantics of ISA.md).
//
// Element (y, x) comes from buffer entry sram_base + y * x_size + x (so entries are
// read in order, one per cycle, always one ahead) and goes to DRAM element
// dram_base + y * x_stride + x.  Rows are split into bursts at BURST_BYTES
// boundaries; each burst waits for its write response before the next starts, so a
// burst costs the memory latency plus one cycle per beat.  Elements narrower than a
// beat are gathered into one beat with byte strobes.
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

module vta_dma_write #(
  parameter int ELEM_BYTES = 16,
  parameter int SRAM_AW = 11
) (
  input  logic                   clk,
  input  logic                   rst,
  input  logic                   start,
  input  logic [31:0]            dram_addr,    // byte address of the instruction's element 0
  input  logic [SRAM_AW-1:0]     sram_base,
  input  logic [15:0]            y_size,
  input  logic [15:0]            x_size,
  input  logic [15:0]            x_stride,
  output logic                   busy,
  output logic                   done,
  // buffer read port (synchronous: data the cycle after rd_en)
  output logic                   rd_en,
  output logic [SRAM_AW-1:0]     rd_addr,
  input  logic [ELEM_BYTES*8-1:0] rd_data,
  // memory port
  output logic                   req,
  input  logic                   gnt,
  output logic                   aw_valid,
  input  logic                   aw_ready,
  output logic [31:0]            aw_addr,
  output logic [7:0]             aw_len,
  output logic                   w_valid,
  input  logic                   w_ready,
  output logic [BUS_BYTES*8-1:0] w_data,
  output logic [BUS_BYTES-1:0]   w_strb,
  output logic                   w_last,
  input  logic                   b_valid,
  input  logic [1:0]             b_resp,
  output logic                   b_ready,
  output logic                   bus_error
);
  localparam int BUS_BITS = BUS_BYTES * 8;
  localparam int BUS_LOG2 = $clog2(BUS_BYTES);
  localparam int E_LOG2 = $clog2(ELEM_BYTES);
  localparam bit NARROW = ELEM_BYTES < BUS_BYTES;
  localparam int BEATS_PER_ELEM = NARROW ? 1 : ELEM_BYTES / BUS_BYTES;
  localparam int PIW = BEATS_PER_ELEM > 1 ? $clog2(BEATS_PER_ELEM) : 1;
  localparam int SLOTS = NARROW ? BUS_BYTES / ELEM_BYTES : 1;
  localparam int SW = $clog2(SLOTS) + 1;

  typedef enum logic [2:0] {S_IDLE, S_GRANT, S_AW, S_W, S_B, S_DONE} state_t;
  state_t state;

  localparam int LB = $clog2(BURST_BYTES);
  logic [15:0] rows_left, n_cols, stride;
  logic [31:0] row_addr;
  // cur_addr's bits below a beat only place the narrow gather's first element; wide
  // elements start on a beat
  /* verilator lint_off UNUSEDSIGNAL */
  logic [31:0] cur_addr;
  /* verilator lint_on UNUSEDSIGNAL */
  logic [SRAM_AW-1:0] next_rd;          // entry the read port fetches next
  logic [7:0]  w_sent;                   // beats of the current burst sent
  logic        fetch;                    // consume the element in rd_data this cycle
  logic        w_fire;

  // The current burst's geometry, registered when it starts (vta_burst): its bytes, last
  // beat, the row's bytes after it and whether it ends the row.
  // (b_bytes only sizes the narrow gather; wide elements leave it unread)
  /* verilator lint_off UNUSEDSIGNAL */
  logic [LB:0]  b_bytes;
  /* verilator lint_on UNUSEDSIGNAL */
  logic [7:0]   b_last;
  logic [31:0]  b_rest;
  logic         b_row_end;
  // the geometry of a row's first burst (at row_addr) and of the burst after the current one
  logic [LB:0]  row_bytes, cont_bytes;
  logic [7:0]   row_last, cont_last;
  logic [31:0]  row_rest, cont_rest;
  logic         row_row_end, cont_row_end;
  vta_burst row_burst (.offset(row_addr[LB-1:0]), .left(32'(n_cols) << E_LOG2), .bytes(row_bytes),
                       .last_beat(row_last), .rest(row_rest), .row_end(row_row_end));
  vta_burst cont_burst (.offset('0), .left(b_rest), .bytes(cont_bytes), .last_beat(cont_last),
                        .rest(cont_rest), .row_end(cont_row_end));

  assign busy     = state != S_IDLE;
  assign req      = state != S_IDLE && state != S_DONE;
  assign done     = state == S_DONE;
  assign aw_valid = state == S_AW;
  assign aw_addr  = {cur_addr[31:BUS_LOG2], {BUS_LOG2{1'b0}}};
  assign aw_len   = b_last;
  assign b_ready  = state == S_B;
  assign w_last   = w_sent == b_last;
  assign w_fire   = w_valid && w_ready;
  assign rd_en    = fetch;
  assign rd_addr  = next_rd;

  if (!NARROW) begin : g_wide
    // Each element is BEATS_PER_ELEM beats, sent straight from the read register; the
    // beats may go out with the address.
    logic [PIW-1:0] part;
    assign w_valid = (state == S_AW || state == S_W) && w_sent <= b_last;
    assign w_data  = rd_data[32'(part) * BUS_BITS +: BUS_BITS];
    assign w_strb  = '1;
    assign fetch   = (state == S_GRANT && gnt) || (w_fire && 32'(part) == BEATS_PER_ELEM - 1);
    always_ff @(posedge clk) begin
      if (state == S_IDLE) part <= '0;
      else if (w_fire) part <= 32'(part) == BEATS_PER_ELEM - 1 ? '0 : part + 1'b1;
    end
  end else begin : g_narrow
    // Gather the beat's elements one per cycle, then send it; the next beat gathers
    // while this one goes out.
    logic [BUS_BITS-1:0]  gather_data, out_data;
    logic [BUS_BYTES-1:0] gather_strb, out_strb;
    logic [SW-1:0]        slot;
    logic                 out_valid, started;
    logic [15:0]          elems_left;      // of the current burst still to gather
    logic [8:0]           gather_beats;    // beats of the burst still to gather (up to 256)
    logic                 gathering, beat_full;
    assign gathering = (state == S_AW || state == S_W) && started && gather_beats != 0;
    assign beat_full = gathering && (32'(slot) == SLOTS - 1 || elems_left == 16'd1);
    assign fetch     = (state == S_GRANT && gnt) || gathering;
    assign w_valid   = out_valid;
    assign w_data    = out_data;
    assign w_strb    = out_strb;
    always_ff @(posedge clk) begin
      if (rst || state == S_IDLE || state == S_GRANT || state == S_B) begin  // a burst starts in S_AW
        out_valid <= 1'b0;
        started <= 1'b0;
      end else begin
        if (w_fire) out_valid <= 1'b0;
        if (!started) begin  // first cycle of a burst: where its first element sits in a beat
          started <= 1'b1;
          slot <= SW'((cur_addr & 32'(BUS_BYTES - 1)) >> E_LOG2);
          gather_strb <= '0;
          gather_beats <= 9'(b_last) + 1'b1;
          elems_left <= 16'(b_bytes >> E_LOG2);
        end else if (gathering) begin
          gather_data[32'(slot) * ELEM_BYTES * 8 +: ELEM_BYTES * 8] <= rd_data;
          gather_strb[32'(slot) * ELEM_BYTES +: ELEM_BYTES] <= '1;
          elems_left <= elems_left - 1'b1;
          slot <= slot + 1'b1;
          if (beat_full) begin
            out_data <= gather_data;
            out_data[32'(slot) * ELEM_BYTES * 8 +: ELEM_BYTES * 8] <= rd_data;
            out_strb <= gather_strb | (BUS_BYTES'({ELEM_BYTES{1'b1}}) << (32'(slot) * ELEM_BYTES));
            out_valid <= 1'b1;
            gather_strb <= '0;
            slot <= '0;
            gather_beats <= gather_beats - 1'b1;
          end
        end
      end
    end
  end

  always_ff @(posedge clk) begin
    if (rst || (state == S_IDLE && start)) bus_error <= 1'b0;
    else if (b_valid && b_ready && (b_resp == 2'b10 || b_resp == 2'b11)) bus_error <= 1'b1;  // SLVERR, DECERR
  end

  // Next row (or done): one burst per row unless it crosses a boundary.
  task automatic begin_row(input logic [15:0] left);
    if (left == 0) begin
      state <= S_DONE;
    end else begin
      cur_addr <= row_addr;
      b_bytes <= row_bytes; b_last <= row_last; b_rest <= row_rest; b_row_end <= row_row_end;
      row_addr <= row_addr + (32'(stride) << E_LOG2);
      rows_left <= left - 1'b1;
      w_sent <= '0;
      state <= S_AW;
    end
  endtask

  always_ff @(posedge clk) begin
    if (fetch) next_rd <= next_rd + 1'b1;
    if (w_fire) w_sent <= w_sent + 1'b1;
    if (rst) begin
      state <= S_IDLE;
    end else begin
      case (state)
        S_IDLE: if (start) begin
          rows_left <= y_size;
          n_cols <= x_size;
          stride <= x_stride;
          row_addr <= dram_addr;
          next_rd <= sram_base;
          state <= (y_size == 0 || x_size == 0) ? S_DONE : S_GRANT;
        end
        S_GRANT: if (gnt) begin_row(rows_left);
        S_AW: if (aw_ready) state <= (w_fire && w_last) ? S_B : S_W;
        S_W: if (w_fire && w_last) state <= S_B;
        S_B: if (b_valid) begin
          if (b_row_end) begin
            begin_row(rows_left);
          end else begin  // the row goes on from the next boundary
            cur_addr <= {cur_addr[31:LB] + 1'b1, {LB{1'b0}}};
            b_bytes <= cont_bytes; b_last <= cont_last; b_rest <= cont_rest; b_row_end <= cont_row_end;
            w_sent <= '0;
            state <= S_AW;
          end
        end
        S_DONE: state <= S_IDLE;
        default: state <= S_IDLE;
      endcase
    end
  end
endmodule
