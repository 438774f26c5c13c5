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
  logic [LB:0] room;
  assign room      = (LB+1)'(BURST_BYTES) - (LB+1)'(offset);
  assign row_end   = left <= 32'(room);
  assign bytes     = row_end ? (LB+1)'(left) : room;
  assign rest      = left - 32'(bytes);
  // the beat of the burst's last byte minus the beat of its first (offsets mod BURST_BYTES)
  assign last_beat = 8'((((LB+1)'(offset) + bytes - 1'b1) >> BUS_LOG2) - ((LB+1)'(offset) >> BUS_LOG2));
endmodule
