"""vtakit.compiler: from operators to VTA instruction streams.

`te` declares what an operator computes, `schedule` how to tile, place and
parallelise it (as data), `loopnest` is the IR a schedule yields, `passes`
lower it (capacity, DMA, tensorize, micro-ops, tokens), `codegen` drives them
and `runtime` runs the result on any Device.
"""
