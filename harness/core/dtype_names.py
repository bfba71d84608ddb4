"""The dtype names the command line takes, without torch: ``afdb --help`` never imports it."""

from __future__ import annotations

#: The names ``--dtype`` accepts (``harness.core.options.DTYPES`` maps them to torch dtypes).
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128")

#: How reports name ``Options.dtype=None``: every sample keeps its own dtypes.
SAMPLE_DTYPES = "samples"
