"""Hand-written programs that pin down the semantics of every instruction kind.

Each test builds a small, correctly synchronised program, computes the expected
result directly with numpy, and checks both simulator models and the reference
interpreter (tests/support/reference.py) against it (helpers: tests/support/semantics_helpers.py).
These run with vtakit's extensions on; VTA's own rules are in test_vta_semantics.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import vtakit.sim as sim
from tests.support.reference import reference_image
from tests.support.semantics_helpers import (
    INT32_MAX, INT32_MIN, MODELS, PRESETS, Prog, check, config, identity_wgt, rand_acc, rand_i8, shr32,
    to_int8, wrap32,
)
from vtakit.errors import SimError, VtaError
from vtakit.isa import Alu, AluOp, Gemm, HwConfig, Load, MemId, Store, Uop


# ====================================================================== LOAD
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_load_inp_padding_and_stride(model: str, preset: str) -> None:
    """LOAD INP with all four paddings and x_stride > x_size; neighbours stay intact."""
    cfg = config(preset)
    rng = np.random.default_rng(11)
    p = Prog(cfg)
    pre = rand_i8(rng, p.inp_shape(38))  # fills inp[4:42] first
    src = rand_i8(rng, p.inp_shape(13))
    p.load(MemId.INP, 4, pre)
    base = p.place(MemId.INP, src)
    # rows y=0..2 from DRAM elements base+1+4y, 2 wide; pads y 1/2, x 1/3 -> 6x6 block at inp[5]
    p.loads.append(Load(MemId.INP, 5, base + 1, 3, 2, 4, y_pad_0=1, y_pad_1=2, x_pad_0=1, x_pad_1=3))
    p.load(MemId.WGT, 0, identity_wgt(cfg))
    p.load_uops(0, [Uop(0, 4, 0)])
    loop = dict(iter_in=38, dst_factor_in=1, src_factor_in=1)
    p.compute += [Gemm(0, 1, reset=True, **loop), Gemm(0, 1, **loop)]  # acc[j] = inp[4 + j]
    p.store_out(0, 38, "out")

    data = src[1:13].reshape((3, 4) + src.shape[1:])[:, :2]
    block = np.pad(data, ((1, 2), (1, 3), (0, 0), (0, 0))).reshape(p.inp_shape(36))
    expected = np.concatenate([pre[:1], block, pre[-1:]]).astype(np.int8)
    check(p, model, {"out": expected})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_load_wgt_padding_and_stride(model: str, preset: str) -> None:
    """LOAD WGT with padding and a stride, read back through GEMM with one-hot inputs."""
    cfg = config(preset)
    bi = cfg.block_in
    rng = np.random.default_rng(12)
    p = Prog(cfg)
    # inp[k] row r is the one-hot vector e_{(k + r) % bi}, so inp[k] @ W.T picks columns of W
    onehot = np.zeros(p.inp_shape(bi), dtype=np.int64)
    for k in range(bi):
        for r in range(cfg.batch):
            onehot[k, r, (k + r) % bi] = 1
    pre = rand_i8(rng, p.wgt_shape(11))  # wgt[1:12]
    src = rand_i8(rng, p.wgt_shape(8))
    p.load(MemId.INP, 0, onehot)
    p.load(MemId.WGT, 1, pre)
    base = p.place(MemId.WGT, src)
    # rows from DRAM base+1+3y, 2 wide; y_pad_0 1, x_pad_1 1 -> 3x3 block at wgt[2]
    p.loads.append(Load(MemId.WGT, 2, base + 1, 2, 2, 3, y_pad_0=1, x_pad_1=1))
    p.load_uops(0, [Uop(0, 0, 1)])
    # acc[w*bi + k] = inp[k] @ wgt[1 + w].T
    loop = dict(iter_out=11, iter_in=bi, dst_factor_out=bi, dst_factor_in=1,
                src_factor_in=1, wgt_factor_out=1)
    p.compute += [Gemm(0, 1, reset=True, **loop), Gemm(0, 1, **loop)]
    p.store_out(0, 11 * bi, "out")

    data = src[1:7].reshape((2, 3) + src.shape[1:])[:, :2]
    block = np.pad(data, ((1, 0), (0, 1), (0, 0), (0, 0))).reshape(p.wgt_shape(9))
    wgt = np.concatenate([pre[:1], block, pre[-1:]])
    expected = np.einsum("krj,wcj->wkrc", onehot, wgt).reshape(p.acc_shape(11 * bi))
    check(p, model, {"out": expected.astype(np.int8)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_load_acc_store_truncates_to_int8(model: str, preset: str) -> None:
    """LOAD ACC of int32 values, then STORE keeps each lane's low 8 bits (two's complement)."""
    cfg = config(preset)
    rng = np.random.default_rng(13)
    p = Prog(cfg)
    pairs = [(300, 44), (-129, 127), (127, 127), (128, -128), (-128, -128), (255, -1), (256, 0),
             (-1, -1), (0, 0), (INT32_MAX, -1), (INT32_MIN, 0), (0x12345678, 0x78),
             (-0x12345678, -0x78), (0x7FFFFF80, -128), (-200, 56)]
    values = rand_acc(rng, p.acc_shape(5))
    expected = to_int8(values)
    for lane, (value, low8) in enumerate(pairs):
        values.reshape(-1)[lane] = value
        expected.reshape(-1)[lane] = low8
    p.load(MemId.ACC, 3, values)
    p.store_out(3, 5, "out")
    check(p, model, {"out": expected})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_load_acc_padding_and_stride(model: str, preset: str) -> None:
    """LOAD ACC with all paddings (zero entries) and a stride, observed in full 32 bits."""
    cfg = config(preset)
    rng = np.random.default_rng(14)
    p = Prog(cfg)
    pre = rand_acc(rng, p.acc_shape(28))  # acc[0:28]
    src = rand_acc(rng, p.acc_shape(10))
    p.load(MemId.ACC, 0, pre)
    base = p.place(MemId.ACC, src)
    # rows from DRAM base+5y (y < 2), 3 wide; pads y 2/1, x 1/1 -> 5x5 block at acc[2:27]
    p.compute.append(Load(MemId.ACC, 2, base, 2, 3, 5, y_pad_0=2, y_pad_1=1, x_pad_0=1, x_pad_1=1))
    p.dump32(0, 28, "acc")

    data = src.reshape((2, 5) + src.shape[1:])[:, :3]
    block = np.pad(data, ((2, 1), (1, 1), (0, 0), (0, 0))).reshape(p.acc_shape(25))
    expected = pre.copy()
    expected[2:27] = block
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_load_acc8_sign_extends(model: str, preset: str) -> None:
    """LOAD ACC_8BIT sign-extends each int8 lane into the 32-bit accumulator."""
    cfg = config(preset)
    rng = np.random.default_rng(15)
    p = Prog(cfg)
    pre = rand_acc(rng, p.acc_shape(10))  # acc[2:12], so padding zeros are visible
    src = rand_i8(rng, p.acc_shape(8))
    src.reshape(-1)[:6] = [-128, -1, 127, 0, -2, 1]
    p.load(MemId.ACC, 2, pre)
    base = p.place(MemId.ACC_8BIT, src)
    # rows from DRAM base+4y (y < 2), 3 wide, x_pad_0 1 -> 2x4 block at acc[3]
    p.compute.append(Load(MemId.ACC_8BIT, 3, base, 2, 3, 4, x_pad_0=1))
    p.dump32(2, 10, "acc")

    data = src.reshape((2, 4) + src.shape[1:])[:, :3]
    block = np.pad(data, ((0, 0), (1, 0), (0, 0), (0, 0))).reshape(p.acc_shape(8))
    expected = pre.copy()
    expected[1:9] = block
    assert list(expected[2].reshape(-1)[:6]) == [-128, -1, 127, 0, -2, 1]  # acc[4] = src[0]
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("insn, field", [
    (Load(MemId.UOP, 1, 0, 2, 2, 3), "y_size"),
    (Load(MemId.UOP, 1, 0, 1, 2, 3, y_pad_0=1), "y_pad_0"),
    (Load(MemId.UOP, 1, 0, 1, 2, 2, x_pad_1=1), "x_pad_1"),
    (Load(MemId.ACC, 0, 0, 4, 0, 1, y_pad_1=1, x_pad_0=1), "y_pad_1"),
])
def test_load_uop_2d_and_empty_padded_loads_rejected(model: str, preset: str, insn: Load, field: str) -> None:
    """VTA copies x_size micro-ops (no rows, no padding) and still writes the padding of a
    LOAD with x_size 0; every configuration rejects both rather than differ from it."""
    cfg = config(preset)
    p = Prog(cfg)
    p.load(MemId.ACC, 0, np.ones(p.acc_shape(1)))
    p.compute.append(insn)
    p.store_out(0, 1, "out")
    img = p.build()
    with pytest.raises(SimError) as info:
        sim.run_image(img, model=model)
    assert (info.value.insn_index, info.value.field) == (1, field)
    with pytest.raises(SimError):
        reference_image(img)


# ====================================================================== GEMM
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_gemm_loops_and_all_factors(model: str, preset: str) -> None:
    """GEMM with iter_out/iter_in, two micro-ops and all six factors nonzero."""
    cfg = config(preset)
    rng = np.random.default_rng(21)
    p = Prog(cfg)
    inp = rand_i8(rng, p.inp_shape(16))
    wgt = rand_i8(rng, p.wgt_shape(29))
    acc0 = rand_acc(rng, p.acc_shape(40), -10**8, 10**8)
    uops = [Uop(1, 2, 1), Uop(2, 0, 3)]
    f = dict(dst_factor_out=12, dst_factor_in=3, src_factor_out=5, src_factor_in=1,
             wgt_factor_out=2, wgt_factor_in=7)
    p.load(MemId.INP, 0, inp)
    p.load(MemId.WGT, 0, wgt)
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, uops)
    p.compute.append(Gemm(0, 2, iter_out=3, iter_in=4, **f))
    p.dump32(0, 40, "acc")

    expected = acc0.copy()
    for o in range(3):
        for i in range(4):
            for u in uops:
                dst = u.dst + o * f["dst_factor_out"] + i * f["dst_factor_in"]
                src = u.src + o * f["src_factor_out"] + i * f["src_factor_in"]
                w = u.wgt + o * f["wgt_factor_out"] + i * f["wgt_factor_in"]
                expected[dst] += inp[src] @ wgt[w].T
    stats, _ = check(p, model, {"acc": wrap32(expected).astype(np.int32)})
    assert stats.gemm_uops == 3 * 4 * 2


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_gemm_reset_zeroes_addressed_entries(model: str, preset: str) -> None:
    """GEMM reset=1 sets exactly the addressed accumulator entries to zero."""
    cfg = config(preset)
    rng = np.random.default_rng(22)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(16))
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(2, 1, 1)])
    p.compute.append(Gemm(0, 1, iter_out=2, iter_in=3, dst_factor_out=8, dst_factor_in=2,
                          src_factor_out=1, src_factor_in=1, wgt_factor_out=1, wgt_factor_in=1,
                          reset=True))
    p.dump32(0, 16, "acc")

    expected = acc0.copy()
    expected[[2, 4, 6, 10, 12, 14]] = 0
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_gemm_repeated_dst_accumulates(model: str, preset: str) -> None:
    """Two micro-ops (and a loop with dst factor 0) accumulating into one entry."""
    cfg = config(preset)
    rng = np.random.default_rng(23)
    p = Prog(cfg)
    inp = rand_i8(rng, p.inp_shape(6))
    wgt = rand_i8(rng, p.wgt_shape(6))
    acc0 = rand_acc(rng, p.acc_shape(8), -10**6, 10**6)
    p.load(MemId.INP, 0, inp)
    p.load(MemId.WGT, 0, wgt)
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(5, 0, 0), Uop(5, 1, 1)])
    p.compute.append(Gemm(0, 2, iter_in=3, src_factor_in=2, wgt_factor_in=2))
    p.dump32(0, 8, "acc")

    expected = acc0.copy()
    expected[5] += sum(inp[s] @ wgt[s].T for s in range(6))
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_gemm_int32_wraparound(model: str, preset: str) -> None:
    """Accumulation wraps at 32 bits in both directions."""
    cfg = config(preset)
    rng = np.random.default_rng(24)
    p = Prog(cfg)
    bi = cfg.block_in
    inp = np.full(p.inp_shape(1), 127)
    wgt = np.stack([np.full((cfg.block_out, bi), 127), np.full((cfg.block_out, bi), -128)])
    acc0 = np.stack([np.full(p.acc_shape(1)[1:], INT32_MAX - 100),
                     np.full(p.acc_shape(1)[1:], INT32_MIN + 100),
                     rand_acc(rng, p.acc_shape(1)[1:])])
    p.load(MemId.INP, 0, inp)
    p.load(MemId.WGT, 0, wgt)
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(0, 0, 0), Uop(1, 0, 1), Uop(2, 0, 0)])
    p.compute.append(Gemm(0, 3, iter_in=1000))
    p.dump32(0, 3, "acc")

    up, down = 1000 * bi * 127 * 127, 1000 * bi * 127 * -128
    expected = np.stack([wrap32(acc0[0] + up), wrap32(acc0[1] + down), wrap32(acc0[2] + up)])
    assert (expected[0] < 0).all() and (expected[1] > 0).all()  # both really wrapped
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_empty_loops_do_nothing(model: str, preset: str) -> None:
    """GEMM and ALU with iter_out 0, iter_in 0 or uop_end <= uop_bgn change nothing."""
    cfg = config(preset)
    rng = np.random.default_rng(25)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(8))
    p.load(MemId.INP, 0, rand_i8(rng, p.inp_shape(2)))
    p.load(MemId.WGT, 0, rand_i8(rng, p.wgt_shape(2)))
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(1, 1, 1), Uop(2, 0, 0), Uop(3, 1, 0)])
    p.compute += [
        Gemm(0, 3, iter_out=0),
        Gemm(0, 3, iter_in=0, reset=True),
        Gemm(2, 2, reset=True),
        Gemm(3, 1),
        Alu(AluOp.ADD, 0, 3, iter_out=0, use_imm=True, imm=5),
        Alu(AluOp.ADD, 0, 3, iter_in=0, reset=True),
        Alu(AluOp.MAX, 1, 1, use_imm=True, imm=7),
        Alu(AluOp.MIN, 2, 0, use_imm=True, imm=-7),
    ]
    p.dump32(0, 8, "acc")
    check(p, model, {"acc": acc0.astype(np.int32)})


# ======================================================================= ALU
def alu_expected(op: AluOp, a: np.ndarray, b) -> np.ndarray:
    """Lanewise int32 result of an ALU op whose operands do not depend on each other."""
    a = np.asarray(a, dtype=np.int64)
    b = np.broadcast_to(np.asarray(b, dtype=np.int64), a.shape)
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    if op == AluOp.ADD:
        return wrap32(a + b)
    if op == AluOp.MUL:
        return wrap32(a * b)
    return shr32(a, b)


def with_specials(rng: np.random.Generator, shape, specials) -> np.ndarray:
    """Random int32 values whose first lanes are `specials`."""
    values = rand_acc(rng, shape)
    values.reshape(-1)[:len(specials)] = specials
    return values


EDGE_VALUES = [INT32_MAX, INT32_MIN, -1, 0, 1, 0x40000000, -0x40000000, 12345, -12345]


@pytest.mark.parametrize("op, imm", [
    (AluOp.MIN, 5), (AluOp.MIN, -300), (AluOp.MAX, 7), (AluOp.MAX, -32768),
    (AluOp.ADD, 1234), (AluOp.ADD, -32768), (AluOp.ADD, 32767),
    (AluOp.SHR, 3), (AluOp.SHR, 31), (AluOp.SHR, -4), (AluOp.SHR, -32), (AluOp.SHR, 67),
], ids=lambda v: v.name if isinstance(v, AluOp) else str(v))
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_alu_immediate(model: str, preset: str, op: AluOp, imm: int) -> None:
    """Every ALU op with an immediate (negative ones too) over a two-level loop."""
    cfg = config(preset)
    rng = np.random.default_rng(31)
    p = Prog(cfg)
    acc0 = with_specials(rng, p.acc_shape(13), EDGE_VALUES)
    acc0[1].reshape(-1)[:len(EDGE_VALUES)] = EDGE_VALUES  # acc[1] is a dst
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(1, 0)])
    # dst = 1 + 6*o + 2*i -> 1, 3, 5, 7, 9, 11; the src factors do not matter with use_imm
    p.compute.append(Alu(op, 0, 1, iter_out=2, iter_in=3, dst_factor_out=6, dst_factor_in=2,
                         src_factor_out=1, src_factor_in=1, use_imm=True, imm=imm))
    p.dump32(0, 13, "acc")

    expected = acc0.copy()
    dsts = [1, 3, 5, 7, 9, 11]
    expected[dsts] = alu_expected(op, acc0[dsts], imm)
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("op", [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR], ids=lambda v: v.name)
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_alu_tensor(model: str, preset: str, op: AluOp) -> None:
    """Every ALU op with an accumulator operand, all factors nonzero, src and dst disjoint."""
    cfg = config(preset)
    rng = np.random.default_rng(32)
    p = Prog(cfg)
    acc0 = with_specials(rng, p.acc_shape(30), EDGE_VALUES)
    # operands: edge values, and SHR amounts 31, -32, 32 (= -32), -33 (= 31), 63 (= -1), 64 (= 0),
    # 67 (= 3)
    operands = EDGE_VALUES + [31, -32, 32, -33, 63, 64, 67]
    for s in [20, 21, 22, 23, 25, 26, 27, 28]:
        acc0[s].reshape(-1)[:len(operands)] = np.roll(operands, s)
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(0, 20)])
    # dst = 8*o + 2*i, src = 20 + 5*o + i
    p.compute.append(Alu(op, 0, 1, iter_out=2, iter_in=4, dst_factor_out=8, dst_factor_in=2,
                         src_factor_out=5, src_factor_in=1))
    p.dump32(0, 30, "acc")

    dsts = [0, 2, 4, 6, 8, 10, 12, 14]
    srcs = [20, 21, 22, 23, 25, 26, 27, 28]
    expected = acc0.copy()
    expected[dsts] = alu_expected(op, acc0[dsts], acc0[srcs])
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_shr_special_amounts(model: str, preset: str) -> None:
    """SHR by 31, by negative amounts (left shifts, wrapping) and by -32 (gives 0)."""
    cfg = config(preset)
    rng = np.random.default_rng(33)
    p = Prog(cfg)
    probe = [INT32_MIN, INT32_MAX, -1, 1, -5, 0x40000000, 0x12345678, 3]
    amounts = [31, -32, -1, -31, 0, -4, 30, 1]
    acc0 = np.stack([with_specials(rng, p.acc_shape(1)[1:], probe) for _ in amounts])
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(k) for k in range(len(amounts))])
    for k, amount in enumerate(amounts):
        p.compute.append(Alu(AluOp.SHR, k, k + 1, use_imm=True, imm=amount))
    p.dump32(0, len(amounts), "acc")

    expected = np.stack([shr32(acc0[k], amounts[k]) for k in range(len(amounts))])
    _, got = check(p, model, {"acc": expected.astype(np.int32)})
    lanes = got["acc"].reshape(len(amounts), -1)
    assert list(lanes[0, :3]) == [-1, 0, -1]  # SHR 31: sign of INT32_MIN, INT32_MAX, -1
    assert not lanes[1].any()  # SHR -32: shifted out completely
    assert lanes[2, 5] == INT32_MIN and lanes[2, 2] == -2  # SHR -1: 0x40000000 << 1 wraps
    assert lanes[3, 3] == INT32_MIN  # SHR -31: 1 << 31


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_alu_repeated_dst(model: str, preset: str) -> None:
    """Micro-ops writing the same dst see each other's results (ADD, MIN, SHR)."""
    cfg = config(preset)
    rng = np.random.default_rng(34)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(13))
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(3, 10), Uop(3, 11), Uop(3, 12),  # 0-2: ADD into acc[3]
                    Uop(5),  # 3: ADD imm, looped onto one entry
                    Uop(7), Uop(7), Uop(7),  # 4-6: SHR 2 three times
                    Uop(8), Uop(8),  # 7-8: SHR -3, two uops x iter_in 2
                    Uop(9, 10), Uop(9, 11)])  # 9-10: MIN into acc[9]
    p.compute += [
        Alu(AluOp.ADD, 0, 3),
        Alu(AluOp.ADD, 3, 4, iter_out=3, iter_in=4, src_factor_out=1, use_imm=True, imm=7),
        Alu(AluOp.SHR, 4, 7, use_imm=True, imm=2),
        Alu(AluOp.SHR, 7, 9, iter_in=2, use_imm=True, imm=-3),
        Alu(AluOp.MIN, 9, 11),
    ]
    p.dump32(0, 13, "acc")

    expected = acc0.copy()
    expected[3] = wrap32(acc0[3] + acc0[10] + acc0[11] + acc0[12])
    expected[5] = wrap32(acc0[5] + 12 * 7)
    expected[7] = acc0[7] >> 6
    expected[8] = wrap32(acc0[8] << 12)
    expected[9] = np.minimum(acc0[9], np.minimum(acc0[10], acc0[11]))
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_alu_reads_earlier_writes(model: str, preset: str) -> None:
    """A micro-op reading an entry written earlier in the same instruction sees the new value."""
    cfg = config(preset)
    rng = np.random.default_rng(35)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(33))
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(1, 0), Uop(2, 1), Uop(3, 2),  # 0-2: chain of uops
                    Uop(11, 10),  # 3: chain through the loop (prefix sum)
                    Uop(20, 20),  # 4: dst == src, twice
                    Uop(31, 30), Uop(30, 32)])  # 5-6: reads acc[30] before it is written
    p.compute += [
        Alu(AluOp.ADD, 0, 3),
        Alu(AluOp.ADD, 3, 4, iter_in=5, dst_factor_in=1, src_factor_in=1),
        Alu(AluOp.ADD, 4, 5, iter_in=2),
        Alu(AluOp.ADD, 5, 7),
    ]
    p.dump32(0, 33, "acc")

    expected = acc0.copy()
    expected[0:4] = wrap32(np.cumsum(acc0[0:4], axis=0))
    expected[10:16] = wrap32(np.cumsum(acc0[10:16], axis=0))
    expected[20] = wrap32(4 * acc0[20])
    expected[31] = wrap32(acc0[31] + acc0[30])
    expected[30] = wrap32(acc0[30] + acc0[32])
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_alu_reset(model: str, preset: str) -> None:
    """ALU reset=1 zeroes the addressed entries whatever the op and operand."""
    cfg = config(preset)
    rng = np.random.default_rng(36)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(16))
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(1, 15), Uop(8, 0)])
    p.compute += [
        Alu(AluOp.ADD, 0, 1, iter_in=3, dst_factor_in=2, use_imm=True, imm=5, reset=True),
        Alu(AluOp.MIN, 1, 2, iter_out=2, dst_factor_out=3, src_factor_out=1, reset=True),
        Alu(AluOp.SHR, 1, 2, use_imm=True, imm=-1, reset=True, iter_in=1),
    ]
    p.dump32(0, 16, "acc")

    expected = acc0.copy()
    expected[[1, 3, 5, 8, 11]] = 0
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("model", MODELS)
def test_alu_mul_on_1x8(model: str) -> None:
    """MUL (preset 1x8 has it): immediate, tensor, wrapping and repeated dst."""
    cfg = HwConfig.preset("1x8")
    assert cfg.alu_mul
    rng = np.random.default_rng(37)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(12), -100000, 100000)
    acc0[0].reshape(-1)[:5] = [70000, -70000, INT32_MAX, INT32_MIN, -1]
    acc0[8].reshape(-1)[:5] = [70000, 70000, 2, -1, INT32_MIN]
    p.load(MemId.ACC, 0, acc0)
    p.load_uops(0, [Uop(0, 8), Uop(1, 9),  # 0-1: tensor, iter_in 2 -> dst 0..3, src 8..11
                    Uop(4), Uop(5),  # 2-3: imm -3 and 30000
                    Uop(6, 6), Uop(6, 6)])  # 4-5: squared twice (x^4)
    p.compute += [
        Alu(AluOp.MUL, 0, 2, iter_in=2, dst_factor_in=2, src_factor_in=2),
        Alu(AluOp.MUL, 2, 3, use_imm=True, imm=-3),
        Alu(AluOp.MUL, 3, 4, use_imm=True, imm=30000),
        Alu(AluOp.MUL, 4, 6),
    ]
    p.dump32(0, 12, "acc")

    expected = acc0.copy()
    expected[[0, 1, 2, 3]] = wrap32(acc0[[0, 1, 2, 3]] * acc0[[8, 9, 10, 11]])
    expected[4] = wrap32(acc0[4] * -3)
    expected[5] = wrap32(acc0[5] * 30000)
    square = wrap32(acc0[6] * acc0[6])
    expected[6] = wrap32(square * square)
    assert list(expected[0, 0, :5]) == [wrap32(70000 * 70000), wrap32(-70000 * 70000), -2,
                                        INT32_MIN, INT32_MIN]
    check(p, model, {"acc": expected.astype(np.int32)})


@pytest.mark.parametrize("model", MODELS)
def test_alu_mul_rejected_without_alu_mul(model: str) -> None:
    """pynq has no MUL: the simulators (and the reference) refuse it."""
    cfg = HwConfig.preset("pynq")
    assert not cfg.alu_mul
    p = Prog(cfg)
    p.load(MemId.ACC, 0, np.ones(p.acc_shape(1)))
    p.load_uops(0, [Uop(0)])
    p.compute.append(Alu(AluOp.MUL, 0, 1, use_imm=True, imm=3))
    p.store_out(0, 1, "out")
    img = p.build()
    with pytest.raises(VtaError):
        sim.run_image(img, model=model)
    with pytest.raises(VtaError):
        reference_image(img)


# ===================================================================== STORE
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_store_strided(model: str, preset: str) -> None:
    """STORE with x_stride > x_size leaves the gaps between rows untouched."""
    cfg = config(preset)
    rng = np.random.default_rng(41)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(11))
    sentinel = rand_i8(rng, p.acc_shape(16))
    p.load(MemId.ACC, 0, acc0)
    base = p.place(MemId.OUT, sentinel, name="out")
    # 3 rows of 2 from acc[4:10] to DRAM elements base+1+5y
    p.stores.append(Store(MemId.OUT, 4, base + 1, 3, 2, 5))

    expected = sentinel.astype(np.int8)
    expected[1:16].reshape((3, 5) + expected.shape[1:])[:, :2] = \
        to_int8(acc0[4:10]).reshape((3, 2) + acc0.shape[1:])
    check(p, model, {"out": expected})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_store_overlapping_rows_later_wins(model: str, preset: str) -> None:
    """STORE with x_stride < x_size: rows overlap in DRAM and the later row wins."""
    cfg = config(preset)
    rng = np.random.default_rng(42)
    p = Prog(cfg)
    acc0 = rand_acc(rng, p.acc_shape(12))
    sentinel = rand_i8(rng, p.acc_shape(10))
    p.load(MemId.ACC, 0, acc0)
    base = p.place(MemId.OUT, sentinel, name="out")
    # 3 rows of 4 from acc[0:12] to DRAM elements base+2y .. base+2y+3
    p.stores.append(Store(MemId.OUT, 0, base, 3, 4, 2))

    expected = sentinel.astype(np.int8)
    for y in range(3):
        expected[2 * y:2 * y + 4] = to_int8(acc0[4 * y:4 * y + 4])
    check(p, model, {"out": expected})


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", MODELS)
def test_zero_x_size_is_a_noop(model: str, preset: str) -> None:
    """LOAD (INP, UOP, ACC) and STORE with x_size 0 change nothing but carry tokens."""
    cfg = config(preset)
    rng = np.random.default_rng(43)
    p = Prog(cfg)
    inp = rand_i8(rng, p.inp_shape(2))
    acc0 = rand_acc(rng, p.acc_shape(8))
    sentinel = rand_i8(rng, p.acc_shape(6))
    p.load(MemId.WGT, 0, identity_wgt(cfg))
    p.load(MemId.INP, 0, inp)
    src = p.place(MemId.INP, rand_i8(rng, p.inp_shape(4)))
    # the last load-module instruction: a no-op that carries the load->compute token
    p.loads.append(Load(MemId.INP, 0, src, 2, 0, 2))
    p.load(MemId.ACC, 0, acc0)
    p.compute.append(Load(MemId.ACC, 0, p.place(MemId.ACC, rand_acc(rng, p.acc_shape(4))), 4, 0, 1))
    p.load_uops(0, [Uop(8, 0, 0)])
    p.compute.append(Load(MemId.UOP, 0, p.b.place_uops([Uop(1, 1, 1)] * 4), 2, 0, 2))
    loop = dict(iter_in=2, dst_factor_in=1, src_factor_in=1)
    p.compute += [Gemm(0, 1, reset=True, **loop), Gemm(0, 1, **loop)]  # acc[8 + j] = inp[j]
    p.dump32(0, 10, "acc")
    out = p.place(MemId.OUT, sentinel, name="out")
    # the last STORE: a no-op that carries the store->compute token to FINISH
    p.stores.append(Store(MemId.OUT, 0, out, 3, 0, 2))

    expected = np.concatenate([acc0, inp]).astype(np.int32)
    check(p, model, {"acc": expected, "out": sentinel.astype(np.int8)})
