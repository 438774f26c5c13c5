"""Schedule features for the cost model: what a point implies, scaled so layers compare.

Every feature is relative to the task (tile counts in log2, buffer footprints as
a share of the buffer, port and compute cycles per peak-GEMM cycle), so a model
trained on earlier layers ranks a new layer's points sensibly: that is what
makes transfer between layers work.  The analytic terms come from
`compiler.heuristics.conv_terms`, the default heuristic's own arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

from vtakit.compiler.backends.vta.heuristics import ConvTerms
from vtakit.isa.arith import ceil_div
from vtakit.compiler.backends.vta.templates import ConvKnobs
from vtakit.scheduling.task import ConvTask

FEATURE_NAMES = (
    "log_tile_oc", "log_tile_oh", "log_tile_ow", "log_tile_ic", "order_sp", "vthread_oc", "vthreads",
    "hoist_weights", "log_tiles", "log_steps", "log_n_ic", "fill_oc", "fill_oh", "fill_ow", "fill_ic",
    "inp_share", "wgt_share", "acc_share", "uop_share", "log_uops_per_insn", "log_weight_loads",
    "port_per_peak", "compute_per_peak", "inp_port_per_peak", "wgt_port_per_peak", "store_port_per_peak",
    "overhead_per_peak", "estimate_per_peak", "bound_ratio", "kernel", "stride",
)


def conv_features(task: ConvTask, knobs: ConvKnobs, terms: ConvTerms) -> list[float]:
    """One point's feature vector, in FEATURE_NAMES order."""
    s, cfg, k = task.shape, task.cfg, knobs
    peak = task.peak_cycles
    n_oc, n_oh, n_ow, n_ic = (ceil_div(s.ocb, k.tile_oc), ceil_div(s.oh, k.tile_oh), ceil_div(s.ow, k.tile_ow),
                              ceil_div(s.icb, k.tile_ic))
    vt = k.vthreads
    uops_per_insn = k.tile_oh * k.tile_ow * terms.kernel_uops
    return [
        math.log2(k.tile_oc), math.log2(k.tile_oh), math.log2(k.tile_ow), math.log2(k.tile_ic),
        float(k.order == "sp"), float(vt > 1 and k.vthread_axis == "oc"), float(vt), float(k.hoist_weights),
        math.log2(terms.tiles), math.log2(terms.steps), math.log2(n_ic),
        s.ocb / (n_oc * k.tile_oc), s.oh / (n_oh * k.tile_oh), s.ow / (n_ow * k.tile_ow), s.icb / (n_ic * k.tile_ic),
        terms.inp_tile * vt / cfg.inp_depth, terms.wgt_tile / cfg.wgt_depth,
        (terms.acc_tile + k.tile_oc) * vt / cfg.acc_depth, terms.kernel_uops * 2 * vt / cfg.uop_depth,
        math.log2(uops_per_insn), math.log2(max(terms.weight_loads, 1)),
        terms.port / peak, terms.compute / peak, terms.steps * terms.inp_cycles / peak,
        terms.weight_loads * terms.wgt_cycles / peak, terms.tiles * terms.store_cycles / peak,
        terms.steps * 8 / peak, terms.cycles / peak, terms.port / max(terms.compute, 1.0),
        float(s.kh), float(s.stride),
    ]


def feature_matrix(task: ConvTask, knobs: list[ConvKnobs], terms: list[ConvTerms]) -> np.ndarray:
    return np.array([conv_features(task, k, t) for k, t in zip(knobs, terms)], dtype=np.float32)
