"""A GPU worker's operand memory, kept between requests (BenchSettings.reuse_operands)."""
from __future__ import annotations

POOL_BYTES = 4 << 30
"""Operand and output memory a worker keeps for recent problems (OperandPool)."""


class OperandPool:
    """A worker's operand and output tensors of its recent problems, by (m, n, k, layout,
    dtype),
    least recently used first out beyond `limit` bytes (the newest always stays).

    Why: where a buffer lands decides which L2 partition and DRAM channels serve it, so
    with fresh buffers per request two candidates of a problem were also timed on different
    memory. Timing every request for a problem on the same memory takes that out of the
    comparison (and the allocations out of each request). It was first suspected of the
    between-request spread of one program's time; measured, it is not what that spread
    comes from (benchmarks/NOTES.md)."""

    def __init__(self, limit: int = POOL_BYTES, device: str = "cuda"):
        self.limit, self.device, self.kept = limit, device, {}

    def take(self, problem) -> dict:
        """The problem's tensors (a, b_kn, b_nk, c, c_blas, and "ws" once a caller puts
        a workspace there), allocated on first use."""
        import torch
        from .gate import element_dtype
        key = (problem.m, problem.n, problem.k, str(problem.layout),
               str(getattr(problem, "dtype", "f16")))
        tensors = self.kept.pop(key, None)
        if tensors is None:
            m, n, k = problem.m, problem.n, problem.k
            like = {"dtype": element_dtype(problem), "device": self.device}  # fp16 or bf16
            tensors = {"a": torch.empty((m, k), **like), "b_kn": torch.empty((k, n), **like),
                       "b_nk": torch.empty((n, k), **like), "c": torch.empty((m, n), **like),
                       "c_blas": torch.empty((m, n), **like)}
        self.kept[key] = tensors  # (re)inserted last: the most recently used
        while len(self.kept) > 1 and self._bytes() > self.limit:
            self.kept.pop(next(iter(self.kept)))
        return tensors

    def _bytes(self) -> int:
        return sum(t.numel() * t.element_size() for ts in self.kept.values()
                   for t in ts.values())
