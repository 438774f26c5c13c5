"""cocotb testbenches (cocotb 2.x Python runner, Verilator): GEMM core, tensor ALU, token
queue, memory-port arbiter, the read DMA (LOAD with padding) and the write DMA (STORE), each with random
stimulus checked against a Python model.  Builds are cached by sources and parameters."""

import hashlib
import json
from pathlib import Path

import cocotb
import pytest
from cocotb_tools.runner import get_results, get_runner

from vtakit.hw.build import cache_root
from vtakit.hw.gen import RTL_DIR, package_text
from vtakit.isa import HwConfig, MemId

TB_DIR = Path(__file__).parent


def _run(cfg: HwConfig, toplevel: str, module: str, parameters: dict, testcase: str | None = None,
         env: dict | None = None) -> None:
    files = {"vta_pkg.sv": package_text(cfg)}
    with_parts = {"vta_gemm_core": ["vta_dot_pair.sv", "vta_gemm_core.sv"],
                  "vta_dma_read": ["vta_burst.sv", "vta_dma_read.sv"],
                  "vta_dma_write": ["vta_burst.sv", "vta_dma_write.sv"]}
    for name in with_parts.get(toplevel, [f"{toplevel}.sv"]):
        files[name] = (RTL_DIR / name).read_text()
    # The generated Makefile names this venv's cocotb files: a build from another checkout is not reusable.
    where = str(Path(cocotb.__file__).resolve())
    key = hashlib.sha256(json.dumps([files, parameters, toplevel, where], sort_keys=True).encode()).hexdigest()[:16]
    build_dir = cache_root() / "cocotb" / f"{toplevel}-{cfg.label}-{key}"
    src_dir = build_dir / "src"
    src_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (src_dir / name).write_text(text)
    cfg_json = build_dir / "config.json"
    cfg.to_json(cfg_json)
    runner = get_runner("verilator")
    runner.build(sources=[src_dir / n for n in files], hdl_toplevel=toplevel, parameters=parameters,
                 build_dir=build_dir, build_args=["-Wall", "-Wno-fatal"], timescale=("1ns", "1ps"))
    results = runner.test(test_module=module, hdl_toplevel=toplevel, build_dir=build_dir, test_dir=TB_DIR,
                          testcase=testcase, results_xml=str(build_dir / f"results-{testcase or 'all'}.xml"),
                          extra_env={"VTAKIT_CONFIG_JSON": str(cfg_json), "VTAKIT_SEED": "7",
                                     # cocotb rewrites the asserts of every module imported by default, onnx's
                                     # too, whose operator registry then meets pytest's '@py_builtins' global
                                     "COCOTB_REWRITE_ASSERTION_FILES": "tb_*.py", **(env or {})})
    total, failed = get_results(results)
    assert total > 0 and failed == 0, f"{module}: {failed} of {total} cocotb tests failed (see {build_dir})"


@pytest.mark.parametrize("preset", ["pynq", "2x16"])
def test_gemm_core(preset):
    _run(HwConfig.preset(preset), "vta_gemm_core", "tb_gemm_core", {})


@pytest.mark.parametrize("preset", ["pynq", "1x8"])
def test_alu_core(preset):
    _run(HwConfig.preset(preset), "vta_alu_core", "tb_alu_core", {})


@pytest.mark.parametrize("clients", [4, 3])
def test_arbiter(clients):
    _run(HwConfig.preset("pynq"), "vta_arbiter", "tb_arbiter", {"N": clients})


def test_token_queue():
    _run(HwConfig.preset("pynq"), "vta_token_queue", "tb_token_queue", {"DEPTH": 8},
         env={"VTAKIT_TOKEN_DEPTH": "8"})


@pytest.mark.parametrize("preset", ["pynq", "ultra96"])
def test_load_with_padding(preset):
    cfg = HwConfig.preset(preset)
    widest = max(cfg.elem_bytes(m) for m in MemId)
    _run(cfg, "vta_dma_read", "tb_dma", {"ELEM_MAX_BYTES": widest, "SRAM_AW": 12}, "load_with_padding",
         env={"VTAKIT_ELEM_MAX": str(widest)})


@pytest.mark.parametrize("preset", ["pynq", "1x8"])
def test_store(preset):
    cfg = HwConfig.preset(preset)
    if preset == "1x8":  # narrow output elements on a wide bus: byte strobes
        cfg = cfg.replace(bus_bytes=16)
    _run(cfg, "vta_dma_write", "tb_dma", {"ELEM_BYTES": cfg.elem_bytes(MemId.OUT), "SRAM_AW": 11},
         "store_strided")
