"""The driver on the simulated board: pynq's Overlay / allocate / MMIO against the RTL, random
programs and ResNet-18 layers byte for byte against the functional model, timeouts and design
errors with the registers in the message, and a board that keeps working afterwards."""

import numpy as np
import pynq
import pytest

import vtakit.sim as sim
from vtakit import ops
from vtakit.compiler.backends.vta.ops import compile_conv2d
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, pack_weight, program_image
from vtakit.compiler.backends.vta.layers import RESNET18
from vtakit.errors import DeviceTimeout, SimError
from vtakit.fpga.driver import PynqDevice
from vtakit.fpga.regmap import VTA_HLS, VTAKIT
from vtakit.fpga.selftest import run_image
from vtakit.fpga.simboard import CMA_BASE, SimBoard, sim_overlay_dir, simulated_pynq, write_sim_overlay
from vtakit.isa import Finish, Gemm, HwConfig, Load, MemId, Uop
from vtakit.sim.random_programs import random_program

from tests.support.reference import reference_image
from tests.support.small_programs import small_image

PYNQ = HwConfig.preset("pynq")
ULTRA96 = HwConfig.preset("ultra96")
LAYERS = {layer.name: layer for layer in RESNET18}


@pytest.fixture(scope="module")
def device():
    return simulated_pynq(PYNQ)


def _sequence_matches(dev: PynqDevice, seeds) -> None:
    """Each program's DRAM equals a functional model's that ran the same sequence (on-chip state
    carries over on both, as on the board)."""
    cfg = dev.config
    reference = sim.SimDevice(cfg, model="functional", dram_bytes=dev.dram.size)
    for seed in seeds:
        img = random_program(cfg, seed)
        n = img.dram.size
        reference.dram[:n] = img.dram
        reference.run(img.insn_addr, img.insn_count)
        stats = run_image(dev, img)
        diff = np.flatnonzero(np.asarray(dev.dram[:n]) != reference.dram[:n])
        assert diff.size == 0, f"seed {seed}: first differing byte {diff[0]:#x}"
        assert stats.model == "pynq" and stats.insns == img.insn_count


def test_pynq_api_runs_against_the_rtl(device):
    board = device.pynq_device
    assert isinstance(board, pynq.Device) and device.register_map.flavour == VTAKIT
    assert "vta_0" in device.overlay.ip_dict and device.overlay.is_loaded()
    assert device.pl_clock_mhz == pytest.approx(PYNQ.clock_mhz)
    buf = pynq.allocate((1000,), dtype=np.int32, target=board)
    assert isinstance(buf, pynq.buffer.PynqBuffer) and buf.physical_address >= CMA_BASE
    mmio = pynq.MMIO(device.register_map.base("fetch"), 0x1000, device=board)
    assert mmio.read(0x0) & 0x4                                  # idle
    mmio.write(0x10, 1234)
    assert mmio.read(0x10) == 1234                               # an AXI-Lite round trip through the RTL
    del buf


def test_first_program_matches_the_reference_interpreter():
    dev = simulated_pynq(PYNQ)                                   # fresh on-chip state
    img = random_program(PYNQ, 0)
    stats = run_image(dev, img)
    assert np.array_equal(np.asarray(dev.dram[:img.dram.size]), reference_image(img))
    rtl, _ = sim.run_image(img, model="rtl")
    assert abs(stats.cycles - rtl.cycles) <= 8                   # the same RTL, started through registers


def test_random_programs_match_functional(device):
    _sequence_matches(device, range(12))


@pytest.mark.parametrize("cfg, board, flavour", [(PYNQ, "pynq-z2", VTA_HLS), (ULTRA96, "ultra96-v2", VTAKIT)],
                         ids=["pynq-z2-vta-hls", "ultra96-v2"])
def test_other_boards_and_vta_register_map(cfg, board, flavour):
    dev = simulated_pynq(cfg, board, flavour=flavour)
    assert dev.register_map.flavour == flavour
    assert dev.register_map.base("compute") == dev.board.register_base + 0x2000
    _sequence_matches(dev, range(100, 104))
    stats = run_image(dev, small_image([Finish()], cfg))
    assert (stats.cycles is None) == (flavour == VTA_HLS)        # VTA's HLS IPs have no cycle counter


@pytest.mark.slow
@pytest.mark.parametrize("cfg, board, flavour", [(PYNQ, "pynq-z1", VTAKIT), (PYNQ, "pynq-z1", VTA_HLS),
                                                 (ULTRA96, "ultra96-v2", VTAKIT), (ULTRA96, "ultra96-v2", VTA_HLS)])
def test_random_programs_match_functional_full(cfg, board, flavour):
    _sequence_matches(simulated_pynq(cfg, board, flavour=flavour), range(200, 240))


@pytest.mark.parametrize("name", ["C10", "C11"])
def test_resnet_layer_byte_for_byte(device, name):
    layer = LAYERS[name]
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (1, layer.c_in, layer.hw, layer.hw), dtype=np.int8)
    w = rng.integers(-128, 128, (layer.c_out, layer.c_in, layer.kernel, layer.kernel), dtype=np.int8)
    b = rng.integers(-4096, 4096, layer.c_out, dtype=np.int32)
    op, _ = compile_conv2d(PYNQ, x_shape=x.shape, w_shape=w.shape, stride=layer.stride, padding=layer.pad,
                           bias=True, shift=8, clip=(0, 127), name=name)
    img = program_image(op, {"data": pack_activation(x, PYNQ.batch, PYNQ.block_in),
                             "weight": pack_weight(w, PYNQ.block_out, PYNQ.block_in),
                             "bias": pack_bias(b, PYNQ.batch, PYNQ.block_out)})
    fstats, fdram = sim.run_image(img, model="functional")
    stats = run_image(device, img)
    assert np.array_equal(np.asarray(device.dram[:img.dram.size]), fdram)
    assert stats.gemm_uops == fstats.gemm_uops and stats.cycles > 0


def test_operator_api_on_the_board(device):
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (1, 32, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (48, 32, 3, 3), dtype=np.int8)
    device.reset_alloc()
    y, rep = ops.conv2d(x, w, padding=1, shift=7, clip=(-128, 127), device=device)
    expect, _ = ops.conv2d(x, w, padding=1, shift=7, clip=(-128, 127), device="fsim")
    assert np.array_equal(y, expect) and rep.stats.model == "pynq"


def test_flush_and_invalidate_move_the_data():
    """The PL reads DDR, the CPU its cached view: without the driver's flush, nothing would arrive."""
    dev = simulated_pynq(PYNQ)
    board = dev.pynq_device
    addr = dev.alloc(4096)
    dev.dram[addr:addr + 4] = [1, 2, 3, 4]
    phys = dev.physical_base + addr
    assert not board.ddr[phys:phys + 4].any()                    # still only in the CPU's view
    dev.dram[addr:addr + 4096].flush()
    assert list(board.ddr[phys:phys + 4]) == [1, 2, 3, 4]
    run_image(dev, small_image([Finish()]))
    assert board.counters["flush_bytes"] > 0 and board.counters["invalidate_bytes"] > 0


def test_never_finishing_program_times_out_with_registers():
    dev = simulated_pynq(PYNQ, hang_cycles=2_000)
    no_finish = small_image([Gemm(0, 1, iter_in=4, dst_factor_in=1)], uops=[Uop(0, 0, 0)])
    with pytest.raises(DeviceTimeout) as e:
        run_image(dev, no_finish, timeout_s=0.3)
    text = str(e.value)
    assert "did not finish in 0.3 s" in text and "fetch.CONTROL=" in text and "compute.DONE=0x0" in text
    assert "without reaching FINISH" in text and "\n" not in text
    deadlock = small_image([Gemm(0, 0, pop_prev=True), Finish()])
    with pytest.raises(DeviceTimeout, match="deadlock"):
        run_image(dev, deadlock, timeout_s=0.3)
    downloads = dev.pynq_device.counters["downloads"]
    assert run_image(dev, small_image([Finish()])).cycles > 0    # reprogrammed, working again
    assert dev.pynq_device.counters["downloads"] == downloads + 1


def test_design_error_names_the_instruction():
    dev = simulated_pynq(PYNQ, prevalidate=False)
    with pytest.raises(SimError) as e:
        run_image(dev, small_image([Load(MemId.INP, 2040, 0, 2, 5, 5), Finish()]))
    assert (e.value.insn_index, e.value.field) == (0, "sram_base") and "accelerator halted" in str(e.value)
    assert run_image(dev, small_image([Finish()])).cycles > 0


def test_overlay_loaded_by_hand_and_passed_in(tmp_path):
    """The path a board user takes: pynq.Overlay first, then the driver on it."""
    bit = write_sim_overlay(tmp_path, "pynq-z1", PYNQ)
    board = SimBoard("pynq-z1")
    overlay = pynq.Overlay(str(bit), device=board)
    dev = PynqDevice(PYNQ, overlay, device=board)
    assert run_image(dev, small_image([Finish()])).cycles > 0
    assert sim_overlay_dir(PYNQ) != sim_overlay_dir(ULTRA96)
