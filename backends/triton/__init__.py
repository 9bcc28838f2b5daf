"""The triton backend: Triton kernels rendered from the IR, compiled ahead of time for
sm_80 (mma.sync) and sm_90a (wgmma, optionally TMA and programmatic dependent launch:
`pdl`), launched through `@loader("triton")`.

Importing this package registers the backend and its loader; triton itself is imported
only when a program is built or loaded.
"""
from . import runtime  # noqa: F401  (registers the "triton" loader)
from .backend import TritonBackend

__all__ = ["TritonBackend"]
