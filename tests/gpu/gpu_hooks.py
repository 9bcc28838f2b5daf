"""Fault injection on a real GPU: the real kernel runner (search.measure.bench.run_request) with a
real, correctly built kernel whose launches are tampered with, chosen by the request's m.

  m == SHORT_K_M: every launch passes k - SHORT_K. The kernel then reads only k - 8 steps
                  of K (and A with a row stride of k - 8): a real kernel computing the
                  wrong thing, staying inside its buffers. The gate must call it wrong.
  m == BOGUS_M:   every launch passes an unmapped address for A. The kernel faults
                  (illegal address), the CUDA context is poisoned, the worker must report
                  a runtime failure, exit, and be replaced.
Any other m runs untouched. A request's seed, when it is SEED_BASE + one of these codes,
picks its tampering instead of m: the requests of a group share m. run_group is
search.measure.bench.run_group with the same tampering, so groups run too. Loaded by file path:
"tests/gpu/gpu_hooks.py:run".
"""
from __future__ import annotations

from gemmforge.compiler.runtime import Kernel
from gemmforge.backends.pipeline import load as runtime_load
from gemmforge.search.measure import bench

setup = bench.setup      # the worker calls these exactly as it would call bench's own
healthy = bench.healthy

SHORT_K_M, BOGUS_M = 255, 257
SHORT_K = 8
BOGUS_ADDRESS = 0x7F0000000000  # 16-byte aligned, far above any allocation


class _Tampered(Kernel):
    """Delegates to a loaded kernel, changing k or the A pointer of every launch."""

    def __init__(self, inner: Kernel, short_k: int = 0, bogus_a: bool = False):
        super().__init__(inner.artifact)
        self.inner, self.short_k, self.bogus_a = inner, short_k, bogus_a

    def workspace_bytes(self, m, n, k):
        return self.inner.workspace_bytes(m, n, k)

    def launch(self, a_ptr, b_ptr, c_ptr, m, n, k, ws_ptr, ws_bytes, stream):
        a_ptr = BOGUS_ADDRESS if self.bogus_a else a_ptr
        self.inner.launch(a_ptr, b_ptr, c_ptr, m, n, k - self.short_k, ws_ptr, ws_bytes, stream)


SEED_BASE = 100_000  # seed SEED_BASE + code picks `code`, far above evaluate()'s seeds


def _code(request) -> int:
    code = request.seed - SEED_BASE
    return code if code in (SHORT_K_M, BOGUS_M) else request.m


def _tampered(kernel: Kernel, code: int) -> Kernel:
    if code == SHORT_K_M:
        return _Tampered(kernel, short_k=SHORT_K)
    if code == BOGUS_M:
        return _Tampered(kernel, bogus_a=True)
    return kernel


def run(request, artifact):
    """search.measure.bench.run_request, with the kernel tampered with as the request says."""
    return bench.run_request(request, artifact,
                             load=lambda art: _tampered(runtime_load(art), _code(request)))


def run_group(requests, artifacts, progress=None):
    """search.measure.bench.run_group, each kernel tampered with as its request says (bench loads
    the artifacts in the requests' order)."""
    codes = iter([_code(r) for r in requests])
    return bench.run_group(requests, artifacts, progress=progress,
                           load=lambda art: _tampered(runtime_load(art), next(codes)))
