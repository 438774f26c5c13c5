// The memory port is granted first come, first served, for as long as the holder keeps
// its request up (a whole DMA instruction or fetch burst).  Requests raised in the same
// cycle queue in client order: fetch (0), load (1), compute (2), store (3).
module vta_arbiter #(
  parameter int N = 4
) (
  input  logic         clk,
  input  logic         rst,
  input  logic [N-1:0] req,
  output logic [N-1:0] gnt,
  output logic         busy
);
  localparam int IW = $clog2(N);
  logic [IW-1:0] order [N];   // client ids in arrival order; order[0] holds the port
  logic [IW:0]   count;
  logic [N-1:0]  queued;

  // The holder is the oldest request; an idle port goes straight to the first requester
  // (in client order), which the queue then records as its head.
  always_comb begin
    gnt = '0;
    if (count != 0) begin
      if (req[order[0]]) gnt[order[0]] = 1'b1;
    end else begin
      for (int c = N - 1; c >= 0; c--) if (req[c]) gnt = N'(1) << c;
    end
  end
  assign busy = count != 0;

  always_ff @(posedge clk) begin
    if (rst) begin
      count <= '0;
      queued <= '0;
      for (int k = 0; k < N; k++) order[k] <= '0;
    end else begin
      // `next` reflects the release of the head, then the new arrivals in client order.
      automatic logic [IW-1:0] next [N];
      automatic logic [IW:0]   n = count;
      automatic logic [N-1:0]  q = queued;
      for (int k = 0; k < N; k++) next[k] = order[k];
      if (count != 0 && !req[order[0]]) begin
        q[order[0]] = 1'b0;
        for (int k = 0; k < N - 1; k++) next[k] = next[k + 1];
        n = n - 1'b1;
      end
      for (int c = 0; c < N; c++) begin
        if (req[c] && !q[c]) begin
          next[n[IW-1:0]] = IW'(c);
          q[c] = 1'b1;
          n = n + 1'b1;
        end
      end
      for (int k = 0; k < N; k++) order[k] <= next[k];
      count <= n;
      queued <= q;
    end
  end
endmodule
