"""SimDevice (the Device protocol), traces and the synthetic convolution workloads."""

import json

import numpy as np
import pytest

import vtakit.sim as sim
from vtakit.errors import SimError
from vtakit.isa import Finish, HwConfig, Load, MemId, Store
from vtakit.isa.encoding import encode_program
from vtakit.sim.workloads import ConvTile, conv_tiles_expected, conv_tiles_program

PYNQ = HwConfig.preset("pynq")


def _put(dev, data: np.ndarray, align=64) -> int:
    addr = dev.alloc(data.nbytes, align)
    dev.dram[addr:addr + data.nbytes] = data.view(np.uint8).reshape(-1)
    return addr


@pytest.mark.parametrize("model", ["fsim", "sim"])
def test_device_state_persists_across_runs(model):
    # STORE reads the accumulator itself here, so what LOAD.ACC left is visible to it
    cfg = PYNQ.replace(store_from_acc=True)
    dev = sim.SimDevice(cfg, model=model, dram_bytes=1 << 20)
    assert isinstance(dev, sim.Device)
    acc = np.arange(4 * 16, dtype=np.int32).reshape(4, 1, 16) - 20
    acc_addr = _put(dev, acc) // 64
    out_addr = dev.alloc(4 * 16, 64)
    first = encode_program([Load(MemId.ACC, 8, acc_addr, 1, 4, 4), Finish()], cfg)
    # a compute no-op (x_size 0) hands the store a token; no data is loaded
    second = encode_program([Load(MemId.UOP, 0, 0, 0, 0, 0, push_next=True),
                             Store(MemId.OUT, 8, out_addr // 16, 1, 4, 4, pop_prev=True, push_prev=True),
                             Finish(pop_next=True)], PYNQ)
    stats1 = dev.run(_put(dev, np.frombuffer(first, np.uint8)), 2)
    stats2 = dev.run(_put(dev, np.frombuffer(second, np.uint8)), 3)
    # the second program stores what the first one loaded: the accumulator persisted
    got = dev.dram[out_addr:out_addr + 64].view(np.int8).reshape(4, 1, 16)
    assert (got == acc.astype(np.int8)).all()
    assert stats1.model == stats2.model == sim.model_name(model)
    assert (stats2.cycles is None) == (model == "fsim")
    assert dev.machine.tokens == [0, 0, 0, 0]


def test_alloc_alignment_and_exhaustion():
    dev = sim.SimDevice(PYNQ, dram_bytes=1 << 16)
    a = dev.alloc(10)
    b = dev.alloc(10)
    c = dev.alloc(1, align=16)
    assert a == 0 and b == 4096 and c == 4112
    with pytest.raises(SimError, match="out of device memory"):
        dev.alloc(1 << 16)


def test_trace_has_a_lane_per_module(tmp_path):
    img = conv_tiles_program(PYNQ, ConvTile(rows=4, cols=4, cin_blocks=2, cout_blocks=1), tiles=3)
    path = tmp_path / "t.json"
    stats, _ = sim.run_image(img, model="cycle", trace=path)
    assert stats.trace_path == str(path)
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"fetch", "load", "compute", "store", "memory port"} <= lanes
    spans = [e for e in events if e["ph"] == "X"]
    by_lane = {}
    for e in spans:
        by_lane.setdefault(e["tid"], []).append(e)
    assert all(by_lane.get(t) for t in range(5))
    assert max(e["args"]["end"] for e in spans) == stats.cycles
    gemms = [e for e in spans if e["name"] == "GEMM"]
    assert len(gemms) == 2 * 3  # reset + accumulate per tile
    # a functional trace records execution order
    sim.run_image(img, model="functional", trace=tmp_path / "f.json")
    assert json.loads((tmp_path / "f.json").read_text())["otherData"]["time_unit"] == "steps"


@pytest.mark.parametrize("name", ["pynq", "1x8", "2x16", "1x32"])
@pytest.mark.parametrize("model", ["functional", "cycle"])
def test_conv_workload_matches_numpy(name, model):
    cfg = HwConfig.preset(name)
    tile = ConvTile(rows=5, cols=6, cin_blocks=2, cout_blocks=2, kernel=3)
    img = conv_tiles_program(cfg, tile, tiles=3, seed=4)
    stats, dram = sim.run_image(img, model=model)
    assert (img.read("output", dram) == conv_tiles_expected(img, tile)).all()
    assert stats.gemm_uops == 3 * tile.gemm_uops
    assert stats.bytes_written["OUT"] == img.regions["output"].nbytes


def test_cycle_stats_add_up():
    img = conv_tiles_program(PYNQ, ConvTile(rows=7, cols=7, cin_blocks=2, cout_blocks=2), tiles=4)
    stats, _ = sim.run_image(img, model="cycle")
    for name, m in stats.modules.items():
        assert m.busy + m.stall_token + m.stall_memory + m.stall_queue + m.idle == stats.cycles, name
    assert 0 < stats.utilization < 1
    assert stats.gops == pytest.approx(2 * stats.macs / stats.seconds / 1e9)
    assert stats.to_dict()["cycles"] == stats.cycles
