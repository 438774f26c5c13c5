"""The Verilator-built RTL against the simulators: random synchronized programs give the
functional model's DRAM byte for byte, cycle counts stay near the cycle model's, bad
programs and hung designs end in clear errors, and builds are cached."""

import numpy as np
import pytest

import vtakit.sim as sim
from vtakit.errors import DeadlockError, DeviceTimeout, RtlError, SimError
from vtakit.hw.build import build, build_key, trace_format
from vtakit.hw.device import RtlDevice
from vtakit.isa import Alu, AluOp, Finish, Gemm, HwConfig, Load, MemId, Store, Uop, encode
from vtakit.isa.image import ProgramBuilder
from vtakit.sim.random_programs import random_program

from tests.support.reference import reference_image
from tests.support.small_programs import small_image

PYNQ = HwConfig.preset("pynq")
# 1x8 on a 128-bit bus: output elements narrower than a beat (byte-strobed stores).
NARROW_STORE = HwConfig.preset("1x8").replace(bus_bytes=16)
_1X8 = HwConfig.preset("1x8")
CONFIGS = {"pynq": PYNQ, "1x8": _1X8, "1x8-bus16": NARROW_STORE, "2x16": HwConfig.preset("2x16"),
           "1x32": HwConfig.preset("1x32"), "ultra96": HwConfig.preset("ultra96"),
           # shapes no preset has: elements narrower than a beat, 16-bit operands, a narrow
           # accumulator, 16-bit outputs, batch 4, a rectangular core
           "1x4": _1X8.replace(block_in=4, block_out=4, inp_buff_bytes=1 << 12, wgt_buff_bytes=1 << 13,
                               acc_buff_bytes=1 << 14),
           "i16w16": _1X8.replace(inp_bits=16, wgt_bits=16), "acc16": _1X8.replace(acc_bits=16),
           "out16": _1X8.replace(inp_bits=16, out_bits=16), "4x8x8": _1X8.replace(batch=4),
           "1x16x32": _1X8.replace(block_in=16, block_out=32, wgt_buff_bytes=1 << 17)}
QUICK = [("pynq", s) for s in range(10)] + [("1x8-bus16", s) for s in range(5)] + \
        [("2x16", s) for s in range(3)] + [("ultra96", s) for s in range(3)] + [("1x4", s) for s in range(3)]
# 290 programs across every configuration in the slow run
FULL = [(name, s) for name, n in (("pynq", 60), ("1x8", 30), ("1x8-bus16", 30), ("2x16", 30), ("1x32", 20),
                                  ("ultra96", 30), ("1x4", 20), ("i16w16", 15), ("acc16", 15), ("out16", 15),
                                  ("4x8x8", 15), ("1x16x32", 10)) for s in range(100, 100 + n)]


def _rtl_matches_functional(img):
    """Run `img` on the functional model and the RTL: DRAM as the reference says, byte for byte on both;
    returns (functional stats, RTL stats)."""
    expected = reference_image(img)
    fstats, fdram = sim.run_image(img, model="functional")
    rstats, rdram = sim.run_image(img, model="rtl")
    assert (fdram == expected).all()
    diff = np.flatnonzero(rdram != fdram)
    assert diff.size == 0, f"RTL differs from the functional model first at byte {diff[0]:#x}"
    return fstats, rstats


def _check_random(name: str, seed: int) -> None:
    img = random_program(CONFIGS[name], seed)
    fstats, rstats = _rtl_matches_functional(img)
    assert (rstats.gemm_uops, rstats.alu_uops, rstats.insns) == (fstats.gemm_uops, fstats.alu_uops, fstats.insns)
    cstats, _ = sim.run_image(img, model="cycle")
    # small random programs: every handoff counts, so the bound is looser than for layers
    assert abs(cstats.cycles - rstats.cycles) <= 0.12 * rstats.cycles + 8, (cstats.cycles, rstats.cycles)


@pytest.mark.parametrize("name, seed", QUICK, ids=[f"{n}-{s}" for n, s in QUICK])
def test_random_programs_match_functional(name, seed):
    _check_random(name, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name, seed", FULL, ids=[f"{n}-{s}" for n, s in FULL])
def test_random_programs_match_functional_full(name, seed):
    _check_random(name, seed)


def _image(insns, cfg=PYNQ, uops=None):
    return small_image(insns, cfg, uops)


def _micro_programs():
    """Single-purpose programs: the cycle model must land within two cycles of the RTL."""
    one = [Uop(0, 0, 0)]
    return {
        "finish": _image([Finish()]),
        "gemm 8 uops": _image([Gemm(0, 1, iter_in=8, dst_factor_in=1), Finish()], uops=one),
        "gemm reset": _image([Gemm(0, 1, iter_in=4, dst_factor_in=1, reset=True), Finish()], uops=one),
        "alu imm": _image([Alu(AluOp.ADD, 0, 1, iter_in=4, dst_factor_in=1, src_factor_in=1, use_imm=True,
                               imm=1), Finish()], uops=one),
        "alu tensor": _image([Alu(AluOp.MAX, 0, 1, iter_in=4, dst_factor_in=1, src_factor_in=1), Finish()],
                             uops=[Uop(0, 8, 0)]),
        "acc load padded": _image([Load(MemId.ACC, 0, 0, 2, 3, 3, 1, 1, 1, 1), Finish()]),
        "inp load -> compute": _image([Load(MemId.INP, 0, 0, 2, 8, 16, push_next=True),
                                       Gemm(0, 0, pop_prev=True), Finish()]),
        "compute -> store": _image([Gemm(0, 0, push_next=True),
                                    Store(MemId.OUT, 0, 0, 4, 8, 8, pop_prev=True, push_prev=True),
                                    Gemm(0, 0, pop_next=True), Finish()]),
    }


@pytest.mark.parametrize("name", list(_micro_programs()))
def test_micro_program_cycles_match_cycle_model(name):
    img = _micro_programs()[name]
    cycle, _ = sim.run_image(img, model="cycle")
    rtl, _ = sim.run_image(img, model="rtl")
    assert abs(cycle.cycles - rtl.cycles) <= 2, (cycle.cycles, rtl.cycles)


# Bad instructions the design itself must catch (prevalidate=False skips the Python checks):
# (instructions, micro-ops, index of the bad one, error field the RTL reports)
BAD = [
    ([Load(MemId.INP, 2040, 0, 2, 5, 5), Finish()], None, 0, "sram_base"),
    ([Load(MemId.ACC, 2047, 0, 1, 2, 2), Finish()], None, 0, "sram_base"),
    ([Store(MemId.OUT, 2047, 0, 1, 2, 2), Finish()], None, 0, "sram_base"),
    ([Gemm(0, 2, iter_out=3, dst_factor_out=1000), Finish()], [Uop(10, 0, 0), Uop(48, 0, 0)], 1, "uop"),
    ([Alu(AluOp.ADD, 0, 1, iter_in=2, src_factor_in=2000), Finish()], [Uop(0, 100, 0)], 1, "uop"),
    ([Gemm(0, 8193), Finish()], None, 0, "uop_end"),
    ([Store(MemId.OUT, 0, 0, 1, 1, 1, y_pad_0=1), Finish()], None, 0, "y_pad_0"),
    ([Store(MemId.INP, 0, 0, 1, 1, 1), Finish()], None, 0, "mem_id"),
    ([Load(MemId.OUT, 0, 0, 1, 1, 1), Finish()], None, 0, "mem_id"),
    ([Load(MemId.INP, 0, 0, 1, 1, 1, pop_prev=True), Finish()], None, 0, "pop_prev"),
    ([Alu(AluOp.MUL, 0, 1, use_imm=True, imm=3), Finish()], None, 0, "alu_opcode"),
    # what VTA's hardware runs differently: pynq's design refuses it like the simulators
    ([Load(MemId.ACC_8BIT, 0, 0, 1, 1, 1), Finish()], None, 0, "mem_id"),
    ([Load(MemId.WGT, 0, 0, 1, 1, 1, x_pad_0=1), Finish()], None, 0, "x_pad_0"),
    ([Load(MemId.ACC, 0, 0, 1, 0, 1, y_pad_0=1), Finish()], None, 0, "x_pad_0"),
    ([Load(MemId.UOP, 0, 0, 2, 1, 1), Finish()], None, 0, "y_size"),
    ([Alu(AluOp.ADD, 0, 1, use_imm=True, imm=3, reset=True), Finish()], None, 0, "reset"),
    ([Finish(), Gemm(0, 0)], None, 1, "opcode"),
]


@pytest.mark.parametrize("insns, uops, index, field", BAD, ids=[f"{b[3]}-{i}" for i, b in enumerate(BAD)])
def test_design_flags_bad_instructions(insns, uops, index, field):
    img = _image(insns, uops=uops)
    dev = RtlDevice(PYNQ, dram=img.dram.copy(), prevalidate=False)
    with pytest.raises(SimError) as e:
        dev.run(img.insn_addr, img.insn_count)
    assert (e.value.insn_index, e.value.field) == (index, field), str(e.value)
    assert str(e.value).startswith(f"instruction {index}")
    # the design is usable again after the error
    good = _image([Finish()])
    dev.dram[:good.dram.size] = good.dram
    assert dev.run(good.insn_addr, good.insn_count).cycles > 0


def test_unknown_opcode_and_dram_overrun():
    b = ProgramBuilder(PYNQ)
    b.emit(Finish())
    img = b.build()
    word = bytearray(encode(Finish(), PYNQ))
    word[0] = (word[0] & ~0x7) | 0x7                      # opcode 7 does not exist
    dram = img.dram.copy()
    dram[img.insn_addr:img.insn_addr + 16] = np.frombuffer(bytes(word), np.uint8)
    with pytest.raises(SimError, match="opcode") as e:
        RtlDevice(PYNQ, dram=dram, prevalidate=False).run(img.insn_addr, 1)
    assert e.value.insn_index == 0
    far = _image([Load(MemId.WGT, 0, 1 << 20, 1, 1, 1, push_next=True), Finish(pop_prev=True)])
    with pytest.raises(SimError) as e:
        RtlDevice(PYNQ, dram=far.dram.copy(), prevalidate=False).run(far.insn_addr, far.insn_count)
    assert e.value.field == "dram_base"


# LOADs and STOREs no token orders before FINISH: the program can finish while they move.
OVERRUNS = [([Load(MemId.WGT, 0, 1 << 20, 1, 1, 1), Finish()], 0),
            ([Store(MemId.OUT, 0, 1 << 24, 2, 1, 1), Finish()], 0),
            ([Load(MemId.INP, 0, 0, 1, 1, 1), Load(MemId.WGT, 0, 15, 1, 2, 2), Finish()], 1)]


@pytest.mark.parametrize("prevalidate", [True, False])
@pytest.mark.parametrize("insns, index", OVERRUNS, ids=["load", "store", "load-straddles-end"])
def test_dram_overrun_names_the_instruction(insns, index, prevalidate):
    img = _image(insns)
    with pytest.raises(SimError) as fsim:
        sim.run_image(img, model="functional")
    dev = RtlDevice(PYNQ, dram=img.dram.copy(), prevalidate=prevalidate)
    with pytest.raises(SimError) as e:
        dev.run(img.insn_addr, img.insn_count)
    assert (e.value.insn_index, e.value.field) == (fsim.value.insn_index, fsim.value.field) == (index, "dram_base")
    good = _image([Finish()])
    dev.dram[:good.dram.size] = good.dram
    assert dev.run(good.insn_addr, good.insn_count).cycles > 0


def test_dram_overrun_index_from_address():
    from vtakit.hw.device import dram_overrun_index
    from vtakit.sim.decoded import decode_for_sim

    img = _image([Load(MemId.INP, 0, 0, 1, 1, 1), Load(MemId.WGT, 0, 15, 1, 2, 2),
                  Store(MemId.OUT, 0, 1 << 20, 1, 1, 1), Finish()])
    prog = decode_for_sim(PYNQ, img.dram, img.insn_addr, img.insn_count)
    size = img.dram.size
    assert dram_overrun_index(prog, size, size) == 1                 # the WGT load reaches it
    assert dram_overrun_index(prog, (1 << 20) * 16, size) == 2       # the store's first byte
    assert dram_overrun_index(prog, 1 << 40, size) == 1              # no cover: the first overrun


def test_prevalidation_reports_before_running():
    img = _image([Load(MemId.INP, 2040, 0, 2, 5, 5), Finish()])
    with pytest.raises(SimError) as e:
        sim.run_image(img, model="rtl")
    assert (e.value.insn_index, e.value.field) == (0, "sram_base")


def test_deadlock_and_timeout_are_bounded():
    # compute waits for a token the load module never sends
    img = _image([Gemm(0, 0, pop_prev=True), Finish()])
    dev = RtlDevice(PYNQ, dram=img.dram.copy(), hang_cycles=5_000)
    with pytest.raises(DeadlockError):
        dev.run(img.insn_addr, img.insn_count)
    # a long, correct program stopped by the cycle budget
    busy = _image([Gemm(0, 1, iter_out=1000, iter_in=1000), Finish()], uops=[Uop(0, 0, 0)])
    dev = RtlDevice(PYNQ, dram=busy.dram.copy(), max_cycles=100_000)
    with pytest.raises(DeviceTimeout):
        dev.run(busy.insn_addr, busy.insn_count)


def test_state_persists_across_runs():
    """Like the board: a second run sees the buffers the first one filled."""
    cfg = PYNQ
    b = ProgramBuilder(cfg)
    acc = np.arange(16, dtype=np.int32).reshape(1, 1, 16)
    acc_addr = b.place_elems(MemId.ACC, acc, name="acc")
    out = b.reserve_elems(MemId.OUT, 1, name="out")
    uop = b.place_uops([Uop(0)])
    # pynq's STORE reads the output buffer, which an ALU op (not the LOAD) fills
    b.emit(Load(MemId.ACC, 0, acc_addr, 1, 1, 1), Load(MemId.UOP, 0, uop, 1, 1, 1),
           Alu(AluOp.ADD, 0, 1, use_imm=True, imm=0), Finish())
    first = b.build()
    dram = np.zeros(1 << 20, np.uint8)
    dram[:first.dram.size] = first.dram
    dev = RtlDevice(cfg, dram=dram)
    dev.run(first.insn_addr, first.insn_count)
    b2 = ProgramBuilder(cfg)
    b2.emit(Gemm(0, 0, push_next=True), Store(MemId.OUT, 0, out, 1, 1, 1, pop_prev=True, push_prev=True),
            Finish(pop_next=True))
    second, addr = b2.build(), 1 << 19
    dev.dram[addr:addr + second.insn_count * 16] = np.frombuffer(second.insn_bytes(), np.uint8)
    dev.run(addr, second.insn_count)
    got = dev.dram[out * 16:out * 16 + 16].view(np.int8)
    assert (got == np.arange(16)).all()


def test_build_cache_and_trace(tmp_path):
    lib = build(PYNQ)
    assert build(PYNQ) == lib                                   # cached: same path, no rebuild
    assert build_key(PYNQ, None) != build_key(HwConfig.preset("1x8"), None)
    assert build_key(PYNQ, None) != build_key(PYNQ, "vcd")
    assert trace_format("w.vcd") == "vcd" and trace_format("w.fst") == "fst" and trace_format(None) is None
    with pytest.raises(RtlError, match="trace format"):
        build(PYNQ, trace="wlf")


@pytest.mark.slow
def test_vcd_trace_is_written(tmp_path):
    img = _image([Gemm(0, 1, iter_in=4, dst_factor_in=1), Finish()], uops=[Uop(0, 0, 0)])
    path = tmp_path / "wave.vcd"
    stats, _ = sim.run_image(img, model="rtl", trace=path)
    text = path.read_text()
    assert "$enddefinitions" in text and "vta_top" in text and stats.trace_path == str(path)


def test_unsupported_bus_width_is_refused():
    with pytest.raises(RtlError, match="bus"):
        build(PYNQ.replace(bus_bytes=32, mem_burst_beats=64))


def test_pipeline_drains_shorter_than_the_rtls_are_refused():
    with pytest.raises(RtlError, match="gemm_pipeline=3"):
        build(PYNQ.replace(gemm_pipeline=3))
    with pytest.raises(RtlError, match="alu_pipeline=1"):
        build(PYNQ.replace(alu_pipeline=1))


def test_longer_pipeline_drains_are_honoured():
    """HwConfig's drains are the one figure the cycle model and the RTL share: longer ones build,
    and both models charge them (the RTL holds the instruction until then)."""
    cfg = PYNQ.replace(gemm_pipeline=7, alu_pipeline=5)
    one = [Uop(0, 0, 0)]
    for insns, uops in (([Gemm(0, 1, iter_in=8, dst_factor_in=1), Gemm(0, 1), Finish()], one),
                        ([Alu(AluOp.ADD, 0, 1, iter_in=4, use_imm=True, imm=1), Finish()], one),
                        ([Alu(AluOp.MAX, 0, 1, iter_in=4, dst_factor_in=1), Finish()], [Uop(0, 8, 0)])):
        img = _image(insns, cfg, uops)
        base = _image(insns, PYNQ, uops)
        cycle, _ = sim.run_image(img, model="cycle")
        rtl, rdram = sim.run_image(img, model="rtl")
        _, fdram = sim.run_image(img, model="functional")
        assert (rdram == fdram).all()
        assert abs(cycle.cycles - rtl.cycles) <= 2, (cycle.cycles, rtl.cycles)
        # 7 - 4 and 5 - 2: three cycles more per GEMM or ALU instruction than the default drains
        longer = 3 * sum(isinstance(i, (Gemm, Alu)) for i in insns)
        assert rtl.cycles - sim.run_image(base, model="rtl")[0].cycles == longer


def test_full_command_queue_does_not_hold_the_memory_port():
    """A LOAD.UOP waits for the port while the compute queue fills behind it: fetch must not
    keep the port for instructions it cannot deliver (that deadlocked an earlier design)."""
    cfg = PYNQ.replace(cmd_queue_depth=4)
    b = ProgramBuilder(cfg)
    addr = b.place_uops([Uop(0, 0, 0)])
    b.emit(Load(MemId.UOP, 0, addr, 1, 1, 1), *[Gemm(0, 1, iter_in=2, dst_factor_in=1) for _ in range(40)],
           Finish())
    img = b.build()
    stats, dram = sim.run_image(img, model="rtl", timeout_s=60)
    cycle, _ = sim.run_image(img, model="cycle")
    assert (dram == sim.run_image(img, model="functional")[1]).all()
    assert abs(stats.cycles - cycle.cycles) <= 0.05 * stats.cycles


def _same_entry_chains(cfg: HwConfig, seed: int):
    """Back-to-back micro-ops on one accumulator entry through the GEMM and ALU pipelines: each
    must see the write of the one before (forwarding), of the one two before (the RAM's write-first
    read) and of the last micro-op of the instruction before."""
    rng = np.random.default_rng(seed)
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    pb = ProgramBuilder(cfg)
    inp = pb.place_elems(MemId.INP, rng.integers(-128, 128, (4, b, bi), dtype=np.int8))
    wgt = pb.place_elems(MemId.WGT, rng.integers(-128, 128, (4, bo, bi), dtype=np.int8))
    acc = pb.place_elems(MemId.ACC, rng.integers(-(1 << 20), 1 << 20, (4, b, bo), dtype=np.int32))
    out = pb.reserve_elems(MemId.OUT, 4)
    gemm = [Uop(0, k, k) for k in range(4)] + [Uop(d, 3 - k % 4, k % 4) for k, d in enumerate((0, 1, 0, 1, 1, 0))]
    alu = [Uop(0, 0), Uop(1, 0), Uop(0, 1), Uop(2, 2), Uop(2, 0), Uop(0, 2)]
    uops = pb.place_uops(gemm + alu)
    g, a = len(gemm), len(gemm) + len(alu)
    pb.emit(Load(MemId.INP, 0, inp, 1, 4, 4, push_next=True),
            Load(MemId.WGT, 0, wgt, 1, 4, 4, push_next=True),
            Load(MemId.UOP, 0, uops, 1, a, a), Load(MemId.ACC, 0, acc, 1, 4, 4),
            Gemm(0, 4, iter_out=2, iter_in=3, pop_prev=True),                   # 24 x entry 0
            Gemm(4, g, iter_in=2, pop_prev=True),                               # 0 1 0 1 1 0, twice
            Alu(AluOp.ADD, g, g + 1, iter_in=5, use_imm=True, imm=-3),         # 5 x entry 0
            Alu(AluOp.SHR, g, g + 1, iter_in=2, use_imm=True, imm=1),
            Alu(AluOp.ADD, g + 1, g + 3, iter_in=3),                            # acc1 += acc0; acc0 += acc1
            Alu(AluOp.MAX, g + 3, a, iter_out=2),                               # acc2 = max(acc2, acc2) ...
            Gemm(4, g, push_next=True),
            Store(MemId.OUT, 0, out, 1, 4, 4, pop_prev=True, push_prev=True),
            Finish(pop_next=True))
    return pb.build()


@pytest.mark.parametrize("name", ["pynq", "1x8-bus16"])
def test_back_to_back_micro_ops_on_one_entry(name):
    img = _same_entry_chains(CONFIGS[name], 11)
    _, rstats = _rtl_matches_functional(img)
    cstats, _ = sim.run_image(img, model="cycle")
    assert abs(cstats.cycles - rstats.cycles) <= 4, (cstats.cycles, rstats.cycles)
