// The geometry of one DMA burst: the bytes of a row it moves and its last beat's index.
// A burst runs to the end of the row or to the next BURST_BYTES boundary, whichever comes
// first.  The DMAs register these figures when a row or a burst starts (from the values
// they are about to load), so their request, beat-count and state logic reads a few
// registered bits instead of this arithmetic on their address registers (timing).
// Every burst after a row's first starts on a boundary (offset 0).  Its hierarchy is kept so
// that synthesis does not share one copy of the arithmetic between a DMA's candidate bursts
// behind the mux that picks one (that put the DMA's control decision in front of it).
// Yosys reads no import in a module header, so the package is imported at file scope.
/* verilator lint_off IMPORTSTAR */
import vta_pkg::*;
/* verilator lint_on IMPORTSTAR */

(* keep_hierarchy *)
module vta_burst (
  input  logic [$clog2(BURST_BYTES)-1:0] offset,     // the start address mod BURST_BYTES
  input  logic [31:0]                    left,       // bytes of the row from there on (>= 1)
  output logic [$clog2(BURST_BYTES):0]   bytes,      // bytes this burst moves
  output logic [7:0]                     last_beat,  // beats - 1 (AXI's len)
  output logic [31:0]                    rest,       // bytes of the row after this burst
  output logic                           row_end     // this burst ends the row
);
  localparam int LB = $clog2(BURST_BYTES);
  localparam int BUS_LOG2 = $clog2(BUS_BYTES);
  // Each figure is computed for both outcomes side by side with the compare, and the
  // compare only picks one at the end (timing: no arithmetic behind the row_end decision).
  logic [LB:0] room;
  logic [LB:0] to_row_end;                 // the row's last byte, from the beat the burst starts in
  logic [LB-BUS_LOG2-1:0] to_boundary;     // beats after the first one up to the boundary
  assign room       = (LB+1)'(BURST_BYTES) - (LB+1)'(offset);
  assign row_end    = left <= 32'(room);
  assign bytes      = row_end ? (LB+1)'(left) : room;
  assign rest       = row_end ? 32'd0 : left - 32'(room);
  // beats - 1: the beat of the burst's last byte minus the beat of its first.  Ending the
  // row: (offset mod a beat + left - 1) / beat; at the boundary: the beats after offset's.
  assign to_row_end = (LB+1)'(offset[BUS_LOG2-1:0]) + (LB+1)'(left) - 1'b1;
  assign to_boundary = ~offset[LB-1:BUS_LOG2];
  assign last_beat  = row_end ? 8'(to_row_end >> BUS_LOG2) : 8'(to_boundary);
endmodule
