"""A thin layer over llvmlite.ir so kernel generators read like loop nests.

Kernels are `void f(ptr noalias a, ptr noalias b, ..., i64 n, ...)`.  Index
arithmetic folds Python ints, loops are canonical (pre-header, header with one
phi, body, latch) so LLVM's vectoriser recognises them, and loop-carried values
live in entry-block allocas that SROA turns back into registers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from vtakit.compiler.backends.cpu.jit import module_header
from vtakit.compiler.backends.host.checks import Requant
from vtakit.errors import pc_side_missing

try:
    from llvmlite import ir
except ImportError as missing:  # a board's runtime: kernels come prebuilt (jit.py), nothing builds IR
    pc_side_missing(missing)
    HAS_IR = False
else:
    HAS_IR = True

if TYPE_CHECKING or HAS_IR:
    F32 = ir.FloatType()
    F64 = ir.DoubleType()
    I1 = ir.IntType(1)
    I8 = ir.IntType(8)
    I16 = ir.IntType(16)
    I32 = ir.IntType(32)
    I64 = ir.IntType(64)
    PTR = ir.PointerType()
    Index = int | ir.Value
    _ELEM_TYPES: dict[str, ir.Type] = {
        "float32": F32, "int8": I8, "int16": I16, "int32": I32, "int64": I64,
        "uint8": I8, "bool": I8, "float64": ir.DoubleType(), "float16": I16, "uint16": I16,
        "uint32": I32, "uint64": I64,
    }
else:  # the names exist for the kernel modules' imports; only IR generation (never reached here) reads them
    F32 = F64 = I1 = I8 = I16 = I32 = I64 = PTR = None
    Index = int
    _ELEM_TYPES = {}


def elem_type(dtype: np.dtype | str) -> ir.Type:
    """The LLVM type that holds one element of `dtype` (by width for pure copies)."""
    return _ELEM_TYPES[np.dtype(dtype).name]


def vec(ty: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(ty, lanes)


def _type_suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_type_suffix(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"no intrinsic suffix for {ty}")


class KernelBuilder:
    """One kernel function in one module, plus helpers to fill its body."""

    def __init__(self, name: str, pointers: Sequence[str], integers: Sequence[str] = ()):
        self.name = name
        self.module = ir.Module(name=name)
        self.module.triple, self.module.data_layout = module_header()
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(pointers) + [I64] * len(integers))
        self.function = ir.Function(self.module, fnty, name=name)
        self.function.attributes.add("nounwind")
        self.args: dict[str, ir.Value] = {}
        for arg, arg_name in zip(self.function.args, [*pointers, *integers]):
            arg.name = arg_name
            if arg.type == PTR:
                arg.add_attribute("noalias")
            self.args[arg_name] = arg
        self.argtypes = [ctypes.c_void_p] * len(pointers) + [ctypes.c_int64] * len(integers)
        self._entry = self.function.append_basic_block("entry")
        self.b = ir.IRBuilder(self._entry)
        self._counter = 0

    # -- finishing --------------------------------------------------------
    def finish(self) -> tuple[str, str, list]:
        """(IR text, function name, ctypes argtypes) as `jit.get_kernel` wants them."""
        self.b.ret_void()
        return str(self.module), self.name, self.argtypes

    def __getitem__(self, arg_name: str) -> ir.Value:
        return self.args[arg_name]

    def _label(self, stem: str) -> str:
        self._counter += 1
        return f"{stem}{self._counter}"

    # -- constants and index arithmetic ----------------------------------
    @staticmethod
    def i64(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def as_i64(self, value: Index) -> ir.Value:
        return self.i64(value) if isinstance(value, int) else value

    def idx(self, *terms: Index | tuple[Index, int]) -> ir.Value:
        """Sum of terms, each an int, an i64 value, or (value, coefficient); ints fold."""
        constant = 0
        total: ir.Value | None = None
        for term in terms:
            value, coefficient = term if isinstance(term, tuple) else (term, 1)
            if isinstance(value, int):
                constant += value * coefficient
                continue
            if coefficient == 0:
                continue
            if coefficient != 1:
                value = self.b.mul(value, self.i64(coefficient), flags=("nsw",))
            total = value if total is None else self.b.add(total, value, flags=("nsw",))
        if total is None:
            return self.i64(constant)
        return self.b.add(total, self.i64(constant), flags=("nsw",)) if constant else total

    # -- memory -------------------------------------------------------------
    def ptr(self, base: ir.Value, index: Index, elem: ir.Type) -> ir.Value:
        return self.b.gep(base, [self.as_i64(index)], inbounds=True, source_etype=elem)

    def load(self, base: ir.Value, index: Index, elem: ir.Type) -> ir.Value:
        return self.b.load(self.ptr(base, index, elem), typ=elem)

    def store(self, value: ir.Value, base: ir.Value, index: Index) -> None:
        self.b.store(value, self.ptr(base, index, value.type))

    def vload(self, base: ir.Value, index: Index, vty: ir.VectorType) -> ir.Value:
        """Unaligned vector load of `vty.count` consecutive elements."""
        return self.b.load(self.ptr(base, index, vty.element), typ=vty, align=byte_size(vty.element))

    def vstore(self, value: ir.Value, base: ir.Value, index: Index) -> None:
        vty = value.type
        self.b.store(value, self.ptr(base, index, vty.element), align=byte_size(vty.element))

    def masked_vload(self, base: ir.Value, index: Index, vty: ir.VectorType, mask: ir.Value) -> ir.Value:
        fn = self.intrinsic(f"llvm.masked.load.{_type_suffix(vty)}.p0", vty, [PTR, I32, vec(I1, vty.count), vty])
        align = ir.Constant(I32, byte_size(vty.element))
        return self.b.call(fn, [self.ptr(base, index, vty.element), align, mask, ir.Constant(vty, None)])

    def masked_vstore(self, value: ir.Value, base: ir.Value, index: Index, mask: ir.Value) -> None:
        """Store the lanes of `value` that `mask` selects.

        Elements narrower than 32 bits are stored one scalar per active lane, never
        through `llvm.masked.store`: LLVM's x86 back end folds a vector truncation
        into the masked store and, when a single lane is active, turns it into a
        scalar store of the *untruncated* element (AVX-512: `vmovd` of an i32 where
        one i8 belongs), writing three bytes past the lane.  Tails are short, so the
        scalar stores cost nothing measurable.
        """
        vty = value.type
        if _bits(vty.element) < 32:
            self._scalar_masked_store(value, base, index, mask)
            return
        fn = self.intrinsic(f"llvm.masked.store.{_type_suffix(vty)}.p0", ir.VoidType(),
                            [vty, PTR, I32, vec(I1, vty.count)])
        align = ir.Constant(I32, byte_size(vty.element))
        self.b.call(fn, [value, self.ptr(base, index, vty.element), align, mask])

    def _scalar_masked_store(self, value: ir.Value, base: ir.Value, index: Index, mask: ir.Value) -> None:
        if not isinstance(mask, ir.Constant) or not isinstance(mask.constant, list):
            raise TypeError("narrow masked stores need a constant lane mask (see KernelBuilder.lane_mask)")
        at = self.as_i64(index)
        for lane, on in enumerate(mask.constant):
            if getattr(on, "constant", on):
                element = self.b.extract_element(value, ir.Constant(I32, lane))
                self.store(element, base, self.idx(at, lane))

    def lane_mask(self, lanes: int, active: int) -> ir.Constant:
        """A constant mask with the first `active` lanes on."""
        return ir.Constant(vec(I1, lanes), [1 if lane < active else 0 for lane in range(lanes)])

    # -- variables (allocas in the entry block; SROA promotes them) --------
    def var(self, ty: ir.Type, init: ir.Value | None = None) -> ir.Value:
        with self.b.goto_block(self._entry):
            self.b.position_at_start(self._entry)
            slot = self.b.alloca(ty)
        if init is not None:
            self.b.store(init, slot)
        return slot

    def array(self, ty: ir.Type, count: int) -> ir.Value:
        """A fixed-size stack buffer of `count` elements (entry block)."""
        with self.b.goto_block(self._entry):
            self.b.position_at_start(self._entry)
            return self.b.alloca(ty, size=ir.Constant(I64, count))

    def get(self, slot: ir.Value) -> ir.Value:
        return self.b.load(slot, typ=slot.allocated_type)

    def set(self, slot: ir.Value, value: ir.Value) -> None:
        self.b.store(value, slot)

    # -- control flow --------------------------------------------------------
    @contextmanager
    def loop(self, stop: Index, start: Index = 0, step: int = 1, name: str = "i") -> Iterator[ir.Value]:
        """for (i = start; i < stop; i += step): a canonical counted loop."""
        header = self.function.append_basic_block(self._label(f"{name}.head"))
        body = self.function.append_basic_block(self._label(f"{name}.body"))
        done = self.function.append_basic_block(self._label(f"{name}.done"))
        preheader = self.b.block
        self.b.branch(header)
        self.b.position_at_end(header)
        counter = self.b.phi(I64, name=name)
        counter.add_incoming(self.as_i64(start), preheader)
        self.b.cbranch(self.b.icmp_signed("<", counter, self.as_i64(stop)), body, done)
        self.b.position_at_end(body)
        yield counter
        following = self.b.add(counter, self.i64(step), flags=("nsw",))
        counter.add_incoming(following, self.b.block)
        self.b.branch(header)
        self.b.position_at_end(done)

    @contextmanager
    def if_then(self, condition: ir.Value) -> Iterator[None]:
        with self.b.if_then(condition):
            yield

    # -- arithmetic helpers --------------------------------------------------
    def intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, list(args)), name=name)

    def splat(self, value: ir.Value | float, lanes: int, elem: ir.Type | None = None) -> ir.Value:
        """Broadcast a scalar to a vector (constants stay constants)."""
        if isinstance(value, (int, float)):
            return ir.Constant(vec(elem, lanes), [value] * lanes)
        if isinstance(value, ir.Constant):
            return ir.Constant(vec(value.type, lanes), [value.constant] * lanes)
        vty = vec(value.type, lanes)
        one = self.b.insert_element(ir.Constant(vty, None), value, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vty, None), ir.Constant(vec(I32, lanes), [0] * lanes))

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """a * b + c, fused (explicit vector code, where the vectoriser is not involved)."""
        fn = self.intrinsic(f"llvm.fma.{_type_suffix(a.type)}", a.type, [a.type] * 3)
        return self.b.call(fn, [a, b, c])

    def multiply_add(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """a * b + c for floats (contractable) or integers of one type."""
        if isinstance(_scalar(a.type), ir.FloatType):
            return self.b.fadd(self.b.fmul(a, b, flags=("contract",)), c, flags=("contract",))
        return self.b.add(self.b.mul(a, b), c)

    def reduce_add(self, value: ir.Value) -> ir.Value:
        """Horizontal sum of a vector (reassociating for floats)."""
        vty = value.type
        if isinstance(vty.element, ir.FloatType):
            fn = self.intrinsic(f"llvm.vector.reduce.fadd.{_type_suffix(vty)}", vty.element, [vty.element, vty])
            return self.b.call(fn, [ir.Constant(vty.element, 0.0), value], fastmath=("reassoc",))
        fn = self.intrinsic(f"llvm.vector.reduce.add.{_type_suffix(vty)}", vty.element, [vty])
        return self.b.call(fn, [value])

    def fmax(self, a: ir.Value, b: ir.Value) -> ir.Value:
        """max(a, b) that keeps `a` unless b is strictly greater (maps to maxps)."""
        return self.b.select(self.b.fcmp_ordered(">", b, a), b, a)

    def smax(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed(">", b, a), b, a)

    def smin(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", b, a), b, a)

    def clamp_int(self, value: ir.Value, lo: int, hi: int) -> ir.Value:
        ty = value.type
        if isinstance(ty, ir.VectorType):
            low, high = self.splat(lo, ty.count, ty.element), self.splat(hi, ty.count, ty.element)
        else:
            low, high = ir.Constant(ty, lo), ir.Constant(ty, hi)
        return self.smin(self.smax(value, low), high)

    def exp(self, x: ir.Value) -> ir.Value:
        """expf without a libm call, so loops around it vectorise (about 2 ulp).

        exp(x) = 2**n * exp(r), n = round(x / ln 2), r = x - n ln 2 (split in a
        hi/lo pair), exp(r) from a degree-6 polynomial on |r| <= ln2/2.  Inputs
        below -87.3 give 0 and above 88.7 give +inf.
        """
        b = self.b

        def c(value: float) -> ir.Constant:
            return ir.Constant(F32, value)

        clamped = b.select(b.fcmp_ordered(">", x, c(88.72)), c(88.72), x)
        clamped = b.select(b.fcmp_ordered("<", clamped, c(-87.33)), c(-87.33), clamped)
        n = self.round_half_even(b.fmul(clamped, c(1.4426950408889634)))
        r = b.fsub(clamped, b.fmul(n, c(0.693359375)))
        r = b.fsub(r, b.fmul(n, c(-2.12194440e-4)))
        poly = c(1.9875691500e-4)
        for coefficient in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            poly = b.fadd(b.fmul(poly, r), c(coefficient))
        poly = b.fadd(b.fmul(b.fmul(poly, r), r), b.fadd(r, c(1.0)))
        exponent = b.shl(b.add(b.fptosi(n, I32), ir.Constant(I32, 127)), ir.Constant(I32, 23))
        result = b.fmul(poly, b.bitcast(exponent, F32))
        result = b.select(b.fcmp_ordered("<", x, c(-87.33)), c(0.0), result)
        return b.select(b.fcmp_unordered(">", x, c(88.72)), b.fadd(x, c(float("inf"))), result)

    def round_half_even(self, x: ir.Value) -> ir.Value:
        """Round to nearest, ties to even (llvm.roundeven: one vroundps)."""
        fn = self.intrinsic(f"llvm.roundeven.{_type_suffix(x.type)}", x.type, [x.type])
        return self.b.call(fn, [x])


def byte_size(ty: ir.Type) -> int:
    """Size of a scalar type in bytes (the natural alignment of its loads)."""
    if isinstance(ty, ir.FloatType):
        return 4
    if isinstance(ty, ir.DoubleType):
        return 8
    return ty.width // 8


def _bits(ty: ir.Type) -> int:
    return byte_size(ty) * 8


def _scalar(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def pointer(array: np.ndarray) -> int:
    """The address of a C-contiguous array's data, for a kernel call."""
    return array.ctypes.data


# -- epilogues the CPU and GPU kernels share ---------------------------------
def requantise(kb: KernelBuilder, acc: ir.Value, requant: Requant) -> ir.Value:
    """int32 (scalar or vector) -> int8: arithmetic shift right, clip, truncate."""
    ty = acc.type
    lanes = ty.count if isinstance(ty, ir.VectorType) else 0
    if requant.shift:
        amount = kb.splat(requant.shift, lanes, I32) if lanes else ir.Constant(I32, requant.shift)
        acc = kb.b.ashr(acc, amount)
    clipped = kb.clamp_int(acc, requant.low, requant.high)
    return kb.b.trunc(clipped, ir.VectorType(I8, lanes) if lanes else I8)


def round_half_up_div(kb: KernelBuilder, total: ir.Value, twice_count: ir.Value) -> ir.Value:
    """floor((2 total + c) / (2 c)) as int32, given total (i32) and 2c (double)."""
    b = kb.b
    numerator = b.fadd(b.fmul(b.sitofp(total, F64), ir.Constant(F64, 2.0)), b.fmul(twice_count, ir.Constant(F64, 0.5)))
    floor = kb.intrinsic("llvm.floor.f64", F64, [F64])
    return b.fptosi(b.call(floor, [b.fdiv(numerator, twice_count)]), I32)
