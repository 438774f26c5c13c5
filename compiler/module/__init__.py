"""The compiled module: what `vtakit compile` writes and `vtakit run` executes.

`compiled.CompiledModule` is the artifact, `container` its `.vtamod` file (a zip of
arrays and a manifest, read with caps and hashes), `check` validates a module read
from a file, `dram_plan` lays out its DRAM arena, `runner` runs it on a device and
the host kernels, `report` shows where the time went.
"""
