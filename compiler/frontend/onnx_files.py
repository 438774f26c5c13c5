"""Reading an ONNX model file and its external data, safely.

`torch.onnx.export` writes `model.onnx` plus `model.onnx.data` by default: the initializers'
bytes live in a file the model names by a relative `location`.  onnx resolves that against the
current directory, so a model compiled from another folder either fails or embeds a file of
that folder.  Here every location is resolved in the model's own folder and must stay inside it
(no absolute paths, no `..`, no symbolic link leading out); offset and length are checked against
the data file's real size and the tensor's declared shape before exactly that many bytes are
read.  The bytes then move into the model (`raw_data`), so nothing later (onnx.checker,
numpy_helper, onnx.reference) ever looks at the file system.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator

import numpy as np
import onnx

from vtakit.errors import CompileError
from vtakit.compiler.frontend import limits
from vtakit.compiler.frontend.limits import Budget, check_tensor, human
from vtakit.compiler.frontend.onnx_types import onnx_dtype


def read_model_file(path) -> bytes:
    """The bytes of an ONNX file: a regular file no bigger than LIMITS.model_bytes, read with that bound
    (`/dev/zero`, a FIFO or a directory is refused rather than read until memory runs out)."""
    cap = limits.LIMITS.model_bytes
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise CompileError(f"cannot read ONNX file {path}: not a regular file")
        if st.st_size > cap:
            raise CompileError(f"ONNX file {path} is {human(st.st_size)}, over the {human(cap)} limit per model "
                               f"(raise it with --max-model-mb)")
        with open(path, "rb") as f:
            data = f.read(st.st_size + 1)  # read(n) allocates n bytes up front: the real size, not the cap
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise CompileError(f"cannot read ONNX file {path}: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > st.st_size:
        raise CompileError(f"ONNX file {path} grew while it was read")
    return data


def all_tensors(model) -> Iterator[tuple[object, str, str | None, str | None]]:
    """(TensorProto, what it is, node name, op) for every tensor a model holds: initializers, sparse
    initializers' parts and node attributes (subgraphs included)."""
    yield from _graph_tensors(model.graph)


def _graph_tensors(graph):
    A = onnx.AttributeProto
    for t in graph.initializer:
        yield t, f"initializer {t.name!r}", None, None
    for s in graph.sparse_initializer:
        yield s.values, f"sparse initializer {s.values.name!r} (values)", None, None
        yield s.indices, f"sparse initializer {s.values.name!r} (indices)", None, None
    for i, n in enumerate(graph.node):
        name = n.name or f"{n.op_type}_{i}"
        for a in n.attribute:
            if a.type == A.TENSOR:
                yield a.t, f"attribute {a.name!r}", name, n.op_type
            elif a.type == A.TENSORS:
                for t in a.tensors:
                    yield t, f"attribute {a.name!r}", name, n.op_type
            elif a.type == A.SPARSE_TENSOR:
                yield a.sparse_tensor.values, f"attribute {a.name!r}", name, n.op_type
                yield a.sparse_tensor.indices, f"attribute {a.name!r}", name, n.op_type
            elif a.type == A.GRAPH:
                yield from _graph_tensors(a.g)
            elif a.type == A.GRAPHS:
                for g in a.graphs:
                    yield from _graph_tensors(g)


def check_names(model) -> None:
    """Every name the import reads is text: protobuf hands string fields holding invalid UTF-8 over as
    bytes, which would fail far from the cause."""
    def bad(value) -> bool:
        return not isinstance(value, str)

    for imp in model.opset_import:
        if bad(imp.domain):
            raise CompileError(f"an opset import's domain {imp.domain!r} is not valid UTF-8")
    _check_graph_names(model.graph, bad)


def _check_graph_names(graph, bad) -> None:
    for what, items in (("initializer", graph.initializer), ("input", graph.input), ("output", graph.output),
                        ("value_info", graph.value_info)):
        for item in items:
            if bad(item.name):
                raise CompileError(f"{what} name {item.name!r} is not valid UTF-8")
    for i, n in enumerate(graph.node):
        fields = [n.op_type, n.domain, n.name, *n.input, *n.output, *(a.name for a in n.attribute)]
        if any(bad(f) for f in fields):
            raise CompileError(f"node #{i} has a name, op type, domain or tensor name that is not valid UTF-8: "
                               f"{next(f for f in fields if bad(f))!r}"[:300])
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _check_graph_names(a.g, bad)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _check_graph_names(g, bad)


def declared_bytes(tensor) -> int | None:
    """The bytes a tensor's shape and element type need (4-bit types packed two a byte); None for
    types without a fixed size (strings, undefined)."""
    n = 1
    for d in tensor.dims:
        n *= int(d)
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, TypeError, ValueError):
        return None
    if tensor.data_type in _PACKED_4BIT:
        return (n + 1) // 2
    return n * dtype.itemsize


def _packed_4bit() -> frozenset[int]:
    T = onnx.TensorProto
    return frozenset(getattr(T, k) for k in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2") if hasattr(T, k))


_PACKED_4BIT = _packed_4bit()


def _known_dtype(tensor) -> str | None:
    return onnx_dtype(tensor.data_type)


def _dtype_name(tensor) -> str:
    return _known_dtype(tensor) or f"element type {tensor.data_type}"


def check_and_load(model, folder: Path | None) -> None:
    """Check every tensor's declared size against the limits and move external data into the model:
    resolved in `folder` (the model file's folder; None when the model came as bytes or a ModelProto,
    which then may hold no external data)."""
    check_names(model)
    budget = Budget(model.ByteSize())
    for tensor, what, node, op in all_tensors(model):
        if any(int(d) < 0 for d in tensor.dims):
            raise CompileError(f"{what} has a negative dimension {tuple(tensor.dims)}", node=node, op=op)
        if _known_dtype(tensor) is None:
            raise CompileError(f"{what} has an unknown element type {tensor.data_type}", node=node, op=op)
        check_tensor(what, tuple(tensor.dims), _dtype_name(tensor), node=node, op=op)
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        data = _read_external(tensor, what, folder, node, op, budget)
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _read_external(tensor, what: str, folder: Path | None, node, op, budget: Budget) -> bytes:
    def fail(message: str):
        return CompileError(f"{what}: {message}", node=node, op=op)

    if any(not isinstance(e.key, str) or not isinstance(e.value, str) for e in tensor.external_data):
        raise fail("external data entries that are not valid UTF-8")
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    if folder is None:
        raise fail(f"its data is in an external file ({location!r}) and the model came without its folder: "
                   f"compile the model's path, or load it with onnx.load(path) first")
    if not location:
        raise fail("external data without a location")
    if "\0" in location:
        raise fail(f"external data location {location!r} holds a NUL byte")
    if PurePosixPath(location).is_absolute() or PureWindowsPath(location).is_absolute() \
            or PureWindowsPath(location).drive:
        raise fail(f"external data location {location!r} is an absolute path; it must be relative to the "
                   f"model's folder")
    if ".." in PureWindowsPath(location).parts:  # splits on both separators
        raise fail(f"external data location {location!r} leaves the model's folder ('..')")
    base = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, path]) != base:
        raise fail(f"external data location {location!r} resolves outside the model's folder (a symbolic link)")
    try:
        offset = int(entries.get("offset", 0))
        length = int(entries["length"]) if "length" in entries else None
    except ValueError:
        raise fail(f"external data offset/length are not integers ({entries.get('offset')!r}, "
                   f"{entries.get('length')!r})") from None
    if offset < 0 or (length is not None and length < 0):
        raise fail(f"external data offset {offset} / length {length} is negative")
    need = declared_bytes(tensor)
    if need is None:
        raise fail(f"external data of {_dtype_name(tensor)} is not supported")
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise fail(f"external data file {location!r} is not a regular file")
        size = st.st_size
        if offset > size:
            raise fail(f"external data offset {offset:,} lies beyond the end of {location!r} ({size:,} bytes)")
        if length is None:
            length = size - offset
        if length != need:
            raise fail(f"external data length {length:,} bytes does not match its shape {tuple(tensor.dims)} of "
                       f"{_dtype_name(tensor)} ({need:,} bytes)")
        if offset + length > size:
            raise fail(f"external data [{offset:,}, {offset + length:,}) lies beyond the end of {location!r} "
                       f"({size:,} bytes)")
        budget.take(length, what, node=node, op=op)
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as e:
        raise fail(f"cannot read external data file {location!r}: {e.strerror or e}") from None
    if len(data) != length:
        raise fail(f"external data file {location!r} ended early ({len(data):,} of {length:,} bytes)")
    return data
