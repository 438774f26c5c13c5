// The memory port is granted first come, first served, for as long as the holder keeps
// its request up (a whole DMA instruction or fetch burst).  Requests raised in the same
// cycle queue in client order: fetch (0), load (1), compute (2), store (3).  There is no
// dead cycle between holders.
module vta_arbiter #(
  parameter int N = 4
) (
  input  logic         clk,
  input  logic         rst,
  input  logic [N-1:0] req,
  output logic [N-1:0] gnt
);
  localparam int IW = $clog2(N);
  logic [IW-1:0] order [N];   // client ids in arrival order; order[0] holds the port
  logic [IW:0]   count;
  logic [N-1:0]  queued;

  // next queue: the head's release first, then the new arrivals in client order
  logic [IW-1:0] next_order [N];
  logic [IW:0]   next_count;
  logic [N-1:0]  next_queued;
  always_comb begin
    next_count = count;
    next_queued = queued;
    for (int k = 0; k < N; k++) next_order[k] = order[k];
    if (count != 0 && !req[order[0]]) begin
      next_queued[order[0]] = 1'b0;
      for (int k = 0; k < N - 1; k++) next_order[k] = next_order[k + 1];
      next_count = next_count - 1'b1;
    end
    for (int c = 0; c < N; c++) begin
      if (req[c] && !next_queued[c]) begin
        next_order[next_count[IW-1:0]] = IW'(c);
        next_queued[c] = 1'b1;
        next_count = next_count + 1'b1;
      end
    end
  end

  // The holder is the head of that queue: the port passes to the next requester in the
  // cycle the holder lets go, and an idle port goes straight to the first requester.
  // The same head, read off the registered queue rather than the updated one, so the
  // grant is a few LUTs after `req` instead of the whole queue update (timing):
  // the holder while it keeps requesting, else the second in line, else the lowest
  // requesting client (the queue is empty or held only the holder that let go).
  logic [N-1:0] first_req;
  assign first_req = req & (~req + 1'b1);
  always_comb begin
    gnt = '0;
    if (count != 0 && req[order[0]]) gnt[order[0]] = 1'b1;
    else if (count > 1) gnt[order[1]] = 1'b1;
    else gnt = first_req;
  end

  always_ff @(posedge clk) begin
    if (rst) begin
      count <= '0;
      queued <= '0;
      for (int k = 0; k < N; k++) order[k] <= '0;
    end else begin
      for (int k = 0; k < N; k++) order[k] <= next_order[k];
      count <= next_count;
      queued <= next_queued;
    end
  end
endmodule
