"""The cute_dsl backend: CuTe DSL kernels for sm_80 (mma.sync) and sm_90a (TMA + wgmma),
exported ahead of time into "cuda_so" artifacts. Importing this package registers the
backend; the DSL itself is imported only by the build's worker process (aot.py)."""
from .backend import CuteDslBackend

__all__ = ["CuteDslBackend"]
