"""The compiler runtime: tensor layouts, linking, program images and devices.

Layouts (runtime.py): activations (N/b, C/block, H, W, b, block), weights
(O/bo, I/bi, KH, KW, bo, bi), bias (O/bo, b, bo) repeated over the batch rows.
`CompiledOp.link` adds each tensor's base (in elements of the instruction's
memory type) to every dram_base that addresses it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vtakit.ops as ops
import vtakit.sim as sim
from vtakit.compiler.backends.vta import reference
from vtakit.compiler.backends.vta.codegen import lower
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, pack_weight, place, program_image, read_output, resolve_device, run_compiled, unpack_activation
from vtakit.compiler.backends.vta.schedule import apply
from vtakit.compiler.backends.vta.te import eltwise_def, maxpool_def
from vtakit.compiler.backends.vta.templates import EltwiseKnobs, eltwise_schedule
from vtakit.errors import CompileError, DeviceError
from vtakit.isa import Finish, HwConfig, Load, MemId, Store, decode_program, encode_program
from vtakit.isa.asm import disasm
from vtakit.isa.image import ProgramImage

PRESETS = ["pynq", "1x8", "2x16", "1x32"]
MODELS = ["fsim", "sim"]


def _i8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


# ---------------------------------------------------------------- layouts
def test_pack_activation_hand_example():
    # x[0, c, 0, w] = 10 c + w + 1, three channels, block 2: the third channel block is half padding
    x = np.array([[[[1, 2]], [[11, 12]], [[21, 22]]]], dtype=np.int8)
    assert x.shape == (1, 3, 1, 2)
    p = pack_activation(x, 1, 2)
    assert p.shape == (1, 2, 1, 2, 1, 2)
    assert p.dtype == np.int8 and p.flags.c_contiguous
    assert p.ravel().tolist() == [1, 11, 2, 12, 21, 0, 22, 0]


def test_pack_activation_hand_example_batch():
    # two images, batch 2, block 2, one pixel: the element holds (image, channel) lanes row-major
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int8)[:, :, None, None]
    p = pack_activation(x, 2, 2)
    assert p.shape == (1, 2, 1, 1, 2, 2)
    assert p.ravel().tolist() == [1, 2, 4, 5, 3, 0, 6, 0]


@pytest.mark.parametrize("batch,block", [(1, 16), (1, 8), (2, 16), (2, 4), (4, 8)])
@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_pack_activation_definition_and_round_trip(batch, block, dtype):
    rng = np.random.default_rng(batch * 100 + block)
    for n, c, h, w in [(1, 1, 1, 1), (3, 5, 2, 3), (2, 37, 4, 1), (5, 16, 3, 3)]:
        x = rng.integers(-100, 100, (n, c, h, w)).astype(dtype)
        x[x == 0] = 1  # so padding zeros are told apart from data
        p = pack_activation(x, batch, block)
        nb, cb = -(-n // batch), -(-c // block)
        assert p.shape == (nb, cb, h, w, batch, block) and p.dtype == dtype
        for i in range(nb * batch):
            for j in range(cb * block):
                got = p[i // batch, j // block, :, :, i % batch, j % block]
                if i < n and j < c:
                    assert np.array_equal(got, x[i, j])
                else:
                    assert not got.any(), "padding must be zeros"
        assert np.count_nonzero(p) == x.size
        back = unpack_activation(p, n, c)
        assert back.dtype == dtype and back.flags.c_contiguous
        assert np.array_equal(back, x)


def test_pack_weight_hand_example():
    # O=3, I=1, 1x1 kernel, blocks (bo, bi) = (2, 2): element [ob, ib] is a bo x bi matrix
    wt = np.array([7, 8, 9], dtype=np.int8).reshape(3, 1, 1, 1)
    p = pack_weight(wt, 2, 2)
    assert p.shape == (2, 1, 1, 1, 2, 2)
    assert p.ravel().tolist() == [7, 0, 8, 0, 9, 0, 0, 0]


@pytest.mark.parametrize("bo,bi", [(16, 16), (8, 8), (32, 32), (4, 2)])
def test_pack_weight_definition(bo, bi):
    rng = np.random.default_rng(bo + bi)
    o, i, kh, kw = 21, 13, 3, 2
    wt = rng.integers(1, 127, (o, i, kh, kw)).astype(np.int8)
    p = pack_weight(wt, bo, bi)
    ob, ib = -(-o // bo), -(-i // bi)
    assert p.shape == (ob, ib, kh, kw, bo, bi) and p.flags.c_contiguous
    for oo in range(ob * bo):
        for ii in range(ib * bi):
            got = p[oo // bo, ii // bi, :, :, oo % bo, ii % bi]
            if oo < o and ii < i:
                assert np.array_equal(got, wt[oo, ii])
            else:
                assert not got.any()


@pytest.mark.parametrize("batch,bo", [(1, 16), (2, 16), (4, 8), (1, 32)])
def test_pack_bias_replicates_over_batch(batch, bo):
    bias = np.arange(1, 20, dtype=np.int32) * -1000
    p = pack_bias(bias, batch, bo)
    ob = -(-len(bias) // bo)
    assert p.shape == (ob, batch, bo) and p.dtype == np.int32 and p.flags.c_contiguous
    for r in range(batch):
        row = p[:, r, :].reshape(-1)
        assert np.array_equal(row[:len(bias)], bias)
        assert not row[len(bias):].any()


# ------------------------------------------------------------------ link
def _conv_op(cfg, bias=True, requant=True):
    return compile_conv2d(cfg, x_shape=(2, 20, 7, 6), w_shape=(24, 20, 3, 3), stride=1, padding=1, bias=bias,
                          shift=4 if requant else None, clip=(-128, 127) if requant else None)[0]


def _eltwise_op(cfg, kind):
    cfg = cfg.replace(acc8_load=True)  # int8 operators need LOAD.ACC8 (pynq, like VTA, has none)
    if kind == "max_pool2d":
        compute = maxpool_def(cfg, n=1, c=20, h=7, w=7, kernel=3, stride=2, pad=1)
        sched = eltwise_schedule(EltwiseKnobs(1, 1, 2), inputs=("data",), pool=True)
    else:
        compute = eltwise_def(cfg, kind, n=1, c=20, h=5, w=5, shift=2 if kind != "relu" else None,
                              clip=(-128, 127) if kind != "relu" else None)
        inputs = ("a", "b") if kind == "add" else ("a",)
        sched = eltwise_schedule(EltwiseKnobs(1, 2, 2), inputs=inputs)
    return lower(apply(compute, sched), cfg, kind)


def _op_for(preset, kind):
    cfg = HwConfig.preset(preset)
    if kind == "conv-int8":
        return _conv_op(cfg)
    if kind == "conv-int32":
        return _conv_op(cfg, bias=False, requant=False)
    return _eltwise_op(cfg, kind)


@pytest.mark.parametrize("kind", ["conv-int8", "conv-int32", "add", "requantize", "max_pool2d"])
@pytest.mark.parametrize("preset", ["pynq", "2x16", "1x8"])
def test_link_relocates_each_tensor_in_elements_of_its_memory_type(preset, kind):
    op = _op_for(preset, kind)
    cfg = op.cfg
    unlinked = decode_program(encode_program(op.insns, cfg), cfg)
    assert unlinked == list(op.insns)
    # every tensor (inputs, output, micro-ops) is addressed by some instruction
    assert set(op.relocs) == set(op.tensors)
    bases = {name: (i + 1) * 0x10000 + i * 4096 for i, name in enumerate(sorted(op.tensors))}
    linked = decode_program(op.link(bases), cfg)
    assert len(linked) == len(unlinked)
    owner = {int(i): t for t, idx in op.relocs.items() for i in idx}
    relocated_mems = {}
    for i, (old, new) in enumerate(zip(unlinked, linked)):
        if i in owner:
            t = owner[i]
            assert isinstance(old, (Load, Store))
            eb = cfg.elem_bytes(new.mem)
            assert bases[t] % eb == 0
            assert new.dram_base == old.dram_base + bases[t] // eb, (i, t)
            assert dataclasses.replace(new, dram_base=old.dram_base) == old   # nothing else changes
            relocated_mems.setdefault(t, set()).add(MemId(new.mem))
        else:
            assert new == old
            if isinstance(old, (Load, Store)):
                assert old.x_size == 0 or old.y_size == 0, f"instruction {i} moves data but is not relocated"
    # the instruction's memory type is the tensor's (the output leaves through STORE.OUT)
    for t, mems in relocated_mems.items():
        assert mems == {op.tensors[t].mem}, (t, mems)
    assert relocated_mems["uops"] == {MemId.UOP}
    assert isinstance(linked[-1], Finish)


def test_link_misaligned_base_raises():
    cfg = HwConfig.preset("pynq")
    op = _conv_op(cfg)
    good = {name: (i + 1) << 16 for i, name in enumerate(op.tensors)}
    op.link(good)
    for tensor in ("data", "weight", "bias", "out", "uops"):
        eb = cfg.elem_bytes(op.tensors[tensor].mem)
        bad = dict(good, **{tensor: good[tensor] + eb // 2})
        with pytest.raises(CompileError, match=f"tensor '{tensor}'.*not aligned"):
            op.link(bad)
    with pytest.raises(CompileError, match="beyond what dram_base addresses"):
        op.link(dict(good, data=(1 << 32) * cfg.elem_bytes(MemId.INP)))


def test_link_is_pure():
    cfg = HwConfig.preset("pynq")
    op = _conv_op(cfg)
    zero = {name: 0 for name in op.tensors}
    code = op.link(zero)
    assert code == encode_program(op.insns, cfg)
    op.link({name: 1 << 20 for name in op.tensors})
    assert op.link(zero) == code   # linking does not modify the compiled op


# --------------------------------------------------------- program images
def _conv_image(preset, seed=0, requant=True):
    cfg = HwConfig.preset(preset)
    rng = np.random.default_rng(seed)
    x, wt = _i8(rng, (3, 19, 9, 7)), _i8(rng, (21, 19, 3, 3))
    b = rng.integers(-3000, 3000, 21, dtype=np.int32)
    kw = dict(shift=6, clip=(-100, 100)) if requant else {}
    op, _ = compile_conv2d(cfg, x_shape=x.shape, w_shape=wt.shape, stride=2, padding=1, bias=True, **kw)
    inputs = {"data": pack_activation(x, cfg.batch, cfg.block_in),
              "weight": pack_weight(wt, cfg.block_out, cfg.block_in),
              "bias": pack_bias(b, cfg.batch, cfg.block_out)}
    image = program_image(op, inputs)
    expect = reference.conv2d(x, wt, 2, 1, b, kw.get("shift"), kw.get("clip"))
    return cfg, op, inputs, image, expect


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("preset", PRESETS)
def test_program_image_runs_and_reads_back(preset, model):
    cfg, op, inputs, image, expect = _conv_image(preset)
    assert image.config == cfg and image.name == op.name
    assert image.insn_count == len(op.insns) and image.insn_addr % 16 == 0
    assert set(image.regions) == {"data", "weight", "bias", "out"}
    # the input regions hold the packed inputs
    assert np.array_equal(image.read("data"), inputs["data"])
    assert np.array_equal(image.read("weight"), inputs["weight"])
    assert np.array_equal(image.read("bias"), inputs["bias"])
    assert image.regions["out"].shape == op.tensors["out"].shape + (cfg.batch, cfg.block_out)
    assert not image.read("out").any()
    stats, dram = sim.run_image(image, model=model)
    assert (stats.cycles is None) == (model == "fsim")
    y = unpack_activation(image.read("out", dram), *expect.shape[:2])
    assert y.dtype == expect.dtype and np.array_equal(y, expect)
    assert np.array_equal(read_output(op, dram, image.regions["out"].addr), image.read("out", dram))
    assert not image.read("out").any(), "run_image must not modify the image"


@pytest.mark.parametrize("model", MODELS)
def test_program_image_int32_output_planes(model):
    cfg, op, _, image, expect = _conv_image("pynq", seed=1, requant=False)
    assert op.tensors["out"].planes == 4
    assert image.regions["out"].shape == (4,) + op.tensors["out"].shape + (cfg.batch, cfg.block_out)
    _, dram = sim.run_image(image, model=model)
    y = unpack_activation(read_output(op, dram, image.regions["out"].addr), *expect.shape[:2])
    assert y.dtype == np.int32 and np.array_equal(y, expect)
    # plane p holds byte p of every int32 result
    planes = image.read("out", dram)
    packed = read_output(op, dram, image.regions["out"].addr)
    for p in range(4):
        assert np.array_equal(planes[p].view(np.uint8), ((packed.view(np.uint32) >> (8 * p)) & 0xFF).astype(np.uint8))


def test_program_image_save_load_disasm(tmp_path):
    cfg, op, _, image, expect = _conv_image("pynq", seed=2)
    path = tmp_path / "conv.npz"
    image.save(path)
    loaded = ProgramImage.load(path)
    assert loaded.config == image.config and loaded.name == image.name
    assert loaded.insn_addr == image.insn_addr and loaded.insn_count == image.insn_count
    assert np.array_equal(loaded.dram, image.dram)
    assert loaded.regions == image.regions
    for model in MODELS:
        _, dram = sim.run_image(loaded, model=model)
        y = unpack_activation(loaded.read("out", dram), *expect.shape[:2])
        assert np.array_equal(y, expect)
    text = disasm(loaded.insn_bytes(), cfg)
    lines = text.splitlines()
    assert len(lines) == 1 + loaded.insn_count
    assert "GEMM" in text and "LOAD.INP" in text and "STORE" in text and "FINISH" in text
    insns = loaded.instructions()
    assert len(insns) == len(op.insns)
    relocated = {int(i) for idx in op.relocs.values() for i in idx}
    assert all(a == b for i, (a, b) in enumerate(zip(insns, op.insns)) if i not in relocated)

    def uops_of(insn):
        return bytes(loaded.dram[insn.dram_base * 4:(insn.dram_base + insn.x_size) * 4])

    listing = disasm(loaded.instructions(), cfg, uop_source=uops_of)
    assert "uop[" in listing


def test_program_image_eltwise():
    cfg = HwConfig.preset("2x16")
    rng = np.random.default_rng(3)
    a, b = _i8(rng, (3, 20, 5, 5)), _i8(rng, (3, 20, 5, 5))
    op = _eltwise_op(cfg, "add")
    inputs = {k: pack_activation(v[:1], cfg.batch, cfg.block_out) for k, v in (("a", a), ("b", b))}
    image = program_image(op, inputs)
    assert image.regions["a"].dtype == "|i1"
    for model in MODELS:
        _, dram = sim.run_image(image, model=model)
        y = unpack_activation(image.read("out", dram), 1, 20)
        assert np.array_equal(y, reference.add(a[:1], b[:1], shift=2))


# -------------------------------------------------------- place, devices
def test_place_checks_inputs():
    cfg = HwConfig.preset("pynq")
    op = _conv_op(cfg)
    dev = sim.SimDevice(cfg, model="functional", dram_bytes=1 << 22)
    rng = np.random.default_rng(4)
    inputs = {"data": pack_activation(_i8(rng, (2, 20, 7, 6)), 1, 16),
              "weight": pack_weight(_i8(rng, (24, 20, 3, 3)), 16, 16),
              "bias": pack_bias(np.zeros(24, np.int32), 1, 16)}
    with pytest.raises(CompileError, match="no data for input tensor 'bias'"):
        place(op, dev.dram, dev.alloc, {k: v for k, v in inputs.items() if k != "bias"})
    with pytest.raises(CompileError, match="input 'data' has .* bytes, the layout needs"):
        place(op, dev.dram, dev.alloc, dict(inputs, data=inputs["data"][:, :, :3]))
    bases, insn_addr, count = place(op, dev.dram, dev.alloc, inputs)
    assert count == len(op.insns)
    assert all(a % 4096 == 0 for a in bases.values()) and insn_addr % 4096 == 0
    spans = sorted((a, a + max(op.tensors[t].nbytes(cfg), 1)) for t, a in bases.items())
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:])), "tensors overlap"


def test_resolve_device():
    cfg = HwConfig.preset("1x8")
    for name, model in (("fsim", "functional"), ("functional", "functional"), ("sim", "cycle"),
                        ("cycle", "cycle")):
        dev = resolve_device(name, cfg)
        assert isinstance(dev, sim.SimDevice) and dev.model == model and dev.config == cfg
    dev = sim.SimDevice(cfg, dram_bytes=1 << 20)
    assert resolve_device(dev, cfg) is dev
    with pytest.raises(DeviceError, match="configured as 1x8, the operator for pynq"):
        resolve_device(dev, HwConfig.preset("pynq"))
    with pytest.raises(DeviceError, match="unknown device 'gpu'"):
        resolve_device("gpu", cfg)
    with pytest.raises(DeviceError, match="is not a Device"):
        resolve_device(object(), cfg)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("preset", ["pynq", "1x8", "2x16"])
def test_run_compiled_on_a_reused_device(preset, model):
    cfg = HwConfig.preset(preset)
    dev = sim.SimDevice(cfg, model=model, dram_bytes=1 << 24)
    rng = np.random.default_rng(5)
    x1, w1 = _i8(rng, (2, 19, 9, 9)), _i8(rng, (21, 19, 3, 3))
    x2, w2 = _i8(rng, (1, 40, 6, 5)), _i8(rng, (8, 40, 1, 1))
    b2 = rng.integers(-500, 500, 8, dtype=np.int32)

    # compile_conv2d takes the clip literally (ops.conv2d adds the int8 saturation for a bare shift)
    op1, _ = compile_conv2d(cfg, x_shape=x1.shape, w_shape=w1.shape, padding=1, shift=7, clip=(-128, 127))
    out1, st1 = run_compiled(op1, dev, {"data": pack_activation(x1, cfg.batch, cfg.block_in),
                                        "weight": pack_weight(w1, cfg.block_out, cfg.block_in)})
    top1 = dev._top
    op2, _ = compile_conv2d(cfg, x_shape=x2.shape, w_shape=w2.shape, stride=2, bias=True)
    out2, st2 = run_compiled(op2, dev, {"data": pack_activation(x2, cfg.batch, cfg.block_in),
                                        "weight": pack_weight(w2, cfg.block_out, cfg.block_in),
                                        "bias": pack_bias(b2, cfg.batch, cfg.block_out)})
    assert dev._top > top1   # placed after the first program, not over it
    e1 = reference.conv2d(x1, w1, 1, 1, shift=7)
    e2 = reference.conv2d(x2, w2, 2, 0, b2)
    assert np.array_equal(unpack_activation(out1, 2, 21), e1)
    y2 = unpack_activation(out2, 1, 8)
    assert y2.dtype == np.int32 and np.array_equal(y2, e2)
    assert (st1.cycles is None) == (st2.cycles is None) == (model == "fsim")
    # the operator API on the same device, after both (on-chip state left over is harmless)
    y, _ = ops.conv2d(x1, w1, padding=1, shift=7, config=cfg, device=dev)
    assert np.array_equal(y, e1)
    y, _ = ops.conv2d(x2, w2, stride=2, bias=b2, config=cfg, device=dev)
    assert np.array_equal(y, e2)
    # pynq, like VTA's hardware, has no LOAD.ACC8: max pooling moves its tiles by an identity GEMM
    y, _ = ops.max_pool2d(x1, kernel=3, stride=2, padding=1, config=cfg, device=dev)
    assert np.array_equal(y, reference.max_pool2d(x1, 3, 2, 1))
