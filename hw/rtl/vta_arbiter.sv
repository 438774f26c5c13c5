// The memory port is granted first come, first served, for as long as the holder keeps
// its request up (a whole DMA instruction or fetch burst).  Requests raised in the same
// cycle queue in client order: fetch (0), load (1), compute (2), store (3).  There is no
// dead cycle between holders.
//
// The queue is kept as a set (`queued`) and an age matrix (`ahead[i][j]`: i queued before
// j) instead of an ordered list with a count: a client's place is the number of queued
// clients ahead of it, so the update is a few LUTs per bit, with no carry chain per
// client in series behind the requests (timing: the fetch's request ends the cycle).
// Each client is queued at most once, so this is the same queue as the list, bit for bit
// in what it grants.
module vta_arbiter #(
  parameter int N = 4
) (
  input  logic         clk,
  input  logic         rst,
  input  logic [N-1:0] req,
  output logic [N-1:0] gnt,
  output logic [N-1:0] holder   // the head of the registered queue: whoever issued the burst in flight
);
  logic [N-1:0] queued;
  logic [N-1:0] ahead [N];     // ahead[i][j]: i joined the queue before j (both queued)

  // head: queued with nobody ahead; second: queued with exactly one ahead.  Both are
  // read off registers only, so `req` meets them in the last few LUTs; "none" and
  // "exactly one" are kept as two flags, not a count (a count maps to a carry chain).
  logic [N-1:0] head, second;
  always_comb begin
    for (int j = 0; j < N; j++) begin
      logic any, many;
      any = 1'b0;
      many = 1'b0;
      for (int i = 0; i < N; i++)
        if (i != j && queued[i] && ahead[i][j]) begin
          many = many || any;
          any = 1'b1;
        end
      head[j] = queued[j] && !any;
      second[j] = queued[j] && any && !many;
    end
  end

  // The head leaves when it drops its request; a client joins when it requests and is
  // not queued (a leaving head does not request, so it cannot rejoin in that cycle).
  logic [N-1:0] leave, stay, join_;
  assign leave = head & ~req;
  assign stay  = queued & ~leave;
  assign join_ = req & ~queued;
  assign holder = head;

  // The holder is the head of the queue after this cycle's update: the holder while it
  // keeps requesting, else the second in line, else the lowest requesting client (the
  // queue is empty or held only the holder that let go).
  logic [N-1:0] first_req;
  always_comb begin
    logic lower;
    lower = 1'b0;
    for (int j = 0; j < N; j++) begin
      first_req[j] = req[j] && !lower;
      lower = lower || req[j];
    end
  end
  always_comb begin
    if ((head & req) != 0) gnt = head;
    else if (second != 0) gnt = second;
    else gnt = first_req;
  end

  // joiners go behind everyone who stays, and behind lower-numbered joiners
  always_ff @(posedge clk) begin
    if (rst) begin
      queued <= '0;
      for (int i = 0; i < N; i++) ahead[i] <= '0;
    end else begin
      queued <= stay | join_;
      for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
          if (join_[j]) ahead[i][j] <= stay[i] || (join_[i] && i < j);
          else if (join_[i]) ahead[i][j] <= 1'b0;
    end
  end
endmodule
