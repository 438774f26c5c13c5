"""The front end: an ONNX file (and its external data) read safely into the graph IR.

`onnx_files` reads the model and its data files from the model's folder, `limits`
caps what a model can make the compiler allocate, `onnx_types` checks ONNX's type
rules, and `onnx_import.import_onnx` normalises every node into the IR.
"""
