"""Task order: the host's nodes in as few segments as the graph allows.

Every switch between the accelerator and the host is a synchronisation (the accelerator idles while the
host works) and moves activations across the border.  A graph's node order interleaves the two wherever
the exporter listed the nodes so (a detector's heads, a SiLU beside each conv); `group_segments` reorders
the nodes, still dependencies first, so that consecutive nodes keep their place as long as the graph
allows: the host's nodes then run in as few segments as the dependencies permit.
"""

from __future__ import annotations

import heapq

from vtakit.compiler.ir import Graph

HOST, ACCELERATOR = 0, 1


def group_segments(g: Graph, place: dict[str, str]) -> None:
    """Reorder `g.nodes` in place: Kahn's algorithm that keeps taking the ready nodes of the side it is on
    (accelerator or host, in their original order) and switches side only when that side has none ready."""
    nodes = list(g.nodes)
    producer = {t: i for i, n in enumerate(nodes) for t in n.outputs if t}
    waiting = [0] * len(nodes)
    readers: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for j in {producer[t] for t in n.inputs if t in producer}:
            waiting[i] += 1
            readers[j].append(i)
    side = [ACCELERATOR if place.get(n.name) == "vta" else HOST for n in nodes]
    ready: tuple[list[int], list[int]] = ([], [])
    for i in range(len(nodes)):
        if waiting[i] == 0:
            heapq.heappush(ready[side[i]], i)
    order: list[int] = []
    current = side[0] if nodes else HOST
    while ready[HOST] or ready[ACCELERATOR]:
        if not ready[current]:
            current = 1 - current
        i = heapq.heappop(ready[current])
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready[side[r]], r)
    g.nodes = [nodes[i] for i in order]


def count_segments(g: Graph, place: dict[str, str]) -> int:
    """How many runs of consecutive host nodes the order has."""
    runs, previous = 0, "vta"
    for n in g.nodes:
        here = place.get(n.name, "host")
        runs += here != "vta" and previous == "vta"
        previous = here
    return runs
