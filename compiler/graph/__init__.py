"""vtakit.compiler.graph: the network compiler (ONNX -> quantized, partitioned graph -> module).

`onnx_frontend` imports a model into the graph IR (`ir`), `simplify` and `fold`
clean and fuse it, `quantize` turns it into power-of-two int8, `partition`
splits accelerator from host nodes, `lower` compiles accelerator tasks, `plan`
lays out DRAM, `module` stores and runs the result (`runner`), `report` shows
where the time went.  `build.compile_module` drives it all.
"""

from vtakit.compiler.graph.build import compile_module, optimize
from vtakit.compiler.graph.ir import Graph, Node, TensorInfo
from vtakit.compiler.graph.module import CompiledModule
from vtakit.compiler.graph.onnx_frontend import import_onnx
from vtakit.compiler.graph.partition import PartitionOptions

__all__ = ["compile_module", "optimize", "Graph", "Node", "TensorInfo", "CompiledModule", "import_onnx",
           "PartitionOptions"]
