"""Random instructions, every field drawn from its encodable range: the material of the encoding
round-trip tests, the assembler and fuzz tests and benchmarks/isa_speed.py."""

from __future__ import annotations

import numpy as np

from vtakit.isa.config import HwConfig
from vtakit.isa.insn import Alu, Finish, Gemm, Insn, Load, Store
from vtakit.isa.opcodes import AluOp, MemId


def random_instructions(cfg: HwConfig, n: int, seed: int = 0) -> list[Insn]:
    """Instructions with every field drawn uniformly from its encodable range."""
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, 5, n)
    flags = rng.integers(0, 2, (n, 4)).astype(bool).tolist()
    vals = rng.integers(0, 1 << 62, (n, 12)).tolist()
    out: list[Insn] = []
    for k, f, v in zip(kinds.tolist(), flags, vals):
        deps = dict(pop_prev=f[0], pop_next=f[1], push_prev=f[2], push_next=f[3])
        if k in (0, 1):
            cls = Load if k == 0 else Store
            out.append(cls(MemId(v[0] % 6), v[1] % (1 << 16), v[2] % (1 << 32), v[3] % (1 << 16),
                           v[4] % (1 << 16), v[5] % (1 << 16), v[6] % 16, v[7] % 16, v[8] % 16,
                           v[9] % 16, **deps))
        elif k in (2, 3):
            loop = dict(uop_bgn=v[0] % cfg.uop_depth, uop_end=v[1] % (cfg.uop_depth * 2),
                        iter_out=v[2] % (1 << 14), iter_in=v[3] % (1 << 14),
                        dst_factor_out=v[4] % cfg.acc_depth, dst_factor_in=v[5] % cfg.acc_depth,
                        reset=bool(v[11] % 2), **deps)
            if k == 2:
                out.append(Gemm(src_factor_out=v[6] % cfg.inp_depth, src_factor_in=v[7] % cfg.inp_depth,
                                wgt_factor_out=v[8] % cfg.wgt_depth, wgt_factor_in=v[9] % cfg.wgt_depth,
                                **loop))
            else:
                out.append(Alu(AluOp(v[10] % 5), src_factor_out=v[6] % cfg.acc_depth,
                               src_factor_in=v[7] % cfg.acc_depth, use_imm=bool(v[8] % 2),
                               imm=v[9] % (1 << 16) - (1 << 15), **loop))
        else:
            out.append(Finish(**deps))
    return out

