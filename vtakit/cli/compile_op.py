"""`vtakit compile-op`: one operator compiled into a program image (and its listing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vtakit.cli._common import CONFIG_HELP, console, load_config, parse_ints
from vtakit.compiler.backends.vta import ops as cops
from vtakit.compiler.backends.vta.runtime import pack_activation, pack_bias, pack_weight, program_image
from vtakit.files import make_parent
from vtakit.isa.asm import disasm


def cmd_compile_op(args) -> int:
    cfg = load_config(args.config)
    rng = np.random.default_rng(args.seed)
    n, c, h, w = parse_ints(args.input, 4, "--input")
    o, kh, kw = parse_ints(args.kernel, 3, "--kernel")
    clip = tuple(parse_ints(args.clip, 2, "--clip")) if args.clip else None
    shift, clip = cops.requant_args(args.op, args.shift, clip)
    op, used = cops.compile_conv2d(cfg, x_shape=(n, c, h, w), w_shape=(o, c, kh, kw), stride=args.stride,
                                   padding=args.pad, bias=args.bias, shift=shift, clip=clip,
                                   vthreads=args.vthreads, name=args.op)
    inputs = {"data": pack_activation(rng.integers(-128, 128, (n, c, h, w), dtype=np.int8), cfg.batch,
                                      cfg.block_in),
              "weight": pack_weight(rng.integers(-128, 128, (o, c, kh, kw), dtype=np.int8), cfg.block_out,
                                    cfg.block_in)}
    if args.bias:
        inputs["bias"] = pack_bias(rng.integers(-4096, 4096, o, dtype=np.int32), cfg.batch, cfg.block_out)
    image = program_image(op, inputs)
    image.save(make_parent(args.output, "program image"))
    console.print(f"{args.op}: {len(op.insns)} instructions, {len(op.uop_table)} micro-op words, "
                  f"schedule {used.to_dict() if hasattr(used, 'to_dict') else used}")
    console.print(f"program image -> {args.output} (run it: vtakit sim {args.output})")
    if args.asm:
        def uops_of(insn):
            start = insn.dram_base * 4
            return image.dram[start:start + insn.x_size * 4].tobytes()

        make_parent(args.asm, "listing").write_text(disasm(image.insn_bytes(), cfg, uop_source=uops_of))
        console.print(f"listing -> {args.asm}")
    return 0


def register(sub) -> None:
    co = sub.add_parser("compile-op", help="compile an operator and dump its program image and listing")
    co.add_argument("op", choices=["conv2d"])
    co.add_argument("--input", required=True, help="N,C,H,W of the data")
    co.add_argument("--kernel", required=True, help="O,KH,KW of the weights")
    co.add_argument("--stride", type=int, default=1)
    co.add_argument("--pad", type=int, default=0)
    co.add_argument("--bias", action="store_true")
    co.add_argument("--shift", type=int)
    co.add_argument("--clip", help="lo,hi")
    co.add_argument("--vthreads", type=int)
    co.add_argument("--config", help=CONFIG_HELP)
    co.add_argument("--seed", type=int, default=0, help="seed of the random data placed in the image")
    co.add_argument("-o", "--output", default="op.npz", help="program image (.npz)")
    co.add_argument("--asm", help="also write the listing here")
    co.set_defaults(func=cmd_compile_op)
