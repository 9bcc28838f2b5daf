"""torch.cuda simulated on CPU, for search.measure.bench's CPU tier (tests/test_bench_protocol.py,
tests/test_bench_group.py).

Tensors made "on cuda" live on the CPU, CUDA graphs record launches and replay them, and
events read a fake GPU clock that advances by a planted time per GEMM (candidate, cuBLAS NN,
cuBLAS TN, L2 flush). Import `simulate` into a test module to use it as a fixture.
"""
from __future__ import annotations

import contextlib
import types

import pytest
import torch

from gemmforge.search.measure import bench, gate, timing

SIMT = "cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct"
NN_US, TN_US, FLUSH_US = 7.0, 6.0, 40.0


class SimulatedCuda:
    """The torch.cuda surface search.measure.bench touches, on CPU, with a fake clock in us."""

    def __init__(self, candidate_us: float, kernel_fn):
        self.clock, self.capturing, self.launches = 0.0, None, 0
        self.candidate_us, self.kernel_fn = candidate_us, kernel_fn
        sim = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = sim.clock

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.t - self.t) / 1e3

        class Graph:
            def replay(self):
                for fn in self.recorded:
                    fn()

        @contextlib.contextmanager
        def graph(g, stream=None):
            g.recorded, self.capturing = [], g
            yield
            self.capturing = None

        self.Event, self.CUDAGraph, self.graph = Event, Graph, graph
        self.synchronize = lambda: None
        self.Stream = lambda: types.SimpleNamespace(cuda_stream=0)
        self.current_stream = lambda *a: types.SimpleNamespace(cuda_stream=0)
        self.stream = lambda s: contextlib.nullcontext()
        self.current_device = lambda: 0
        self.get_device_properties = lambda d: types.SimpleNamespace(L2_cache_size=1 << 16)
        self.get_device_name = lambda *a: "NVIDIA H200 (simulated)"

    def gemm(self, cost_us: float, fn, counts: bool = False):
        """Run `fn` now (advancing the clock), or record it when a graph is capturing."""
        def run():
            self.clock += cost_us
            self.launches += counts
            return fn()
        if self.capturing is not None:
            self.capturing.recorded.append(run)
            return None
        return run()


class FakeKernel:
    """compiler.runtime.Kernel's surface, computing with the simulation's kernel_fn in
    `us` per launch (default: the simulation's candidate_us)."""

    def __init__(self, sim: SimulatedCuda, layout: str, us: float | None = None, fn=None):
        self.sim, self.layout = sim, layout
        self.us = sim.candidate_us if us is None else us
        self.fn = fn or sim.kernel_fn
        self.launches = 0

    def count(self, a, b, out):
        self.launches += 1
        return self.fn(a, b, out)

    def workspace_bytes(self, m, n, k):
        return 0

    def __call__(self, a, b):
        out = torch.empty((a.shape[0], b.shape[1] if self.layout == "nn" else b.shape[0]),
                          dtype=torch.float16)
        self.sim.gemm(self.us, lambda: self.count(a, b, out), True)
        return out


@pytest.fixture
def simulate(monkeypatch):
    """`simulate(candidate_us, kernel_fn=None, layout="nn")` installs the simulation for one
    test and returns it: candidates take `candidate_us` per launch and compute with
    `kernel_fn` (default: the exact reference); cuBLAS NN, TN and flushes take NN_US, TN_US
    and FLUSH_US."""
    def install(candidate_us: float, kernel_fn=None, layout: str = "nn") -> SimulatedCuda:
        kernel_fn = kernel_fn or (lambda a, b, out: out.copy_(
            gate.reference(a, b, layout).half()))
        sim = SimulatedCuda(candidate_us, kernel_fn)
        for name in ("empty", "zeros", "full", "randn", "randint", "ones", "Generator"):
            real = getattr(torch, name)
            monkeypatch.setattr(torch, name, lambda *a, _real=real, **k: _real(
                *a, **{**k, "device": "cpu"} if k.get("device") == "cuda" else k))
        real_matmul, real_zero = torch.matmul, torch.Tensor.zero_
        monkeypatch.setattr(torch, "matmul", lambda a, b, **k: sim.gemm(
            NN_US if b.is_contiguous() else TN_US, lambda: real_matmul(a, b, **k)))
        monkeypatch.setattr(torch.Tensor, "zero_",
                            lambda t: sim.gemm(FLUSH_US, lambda: real_zero(t)))
        monkeypatch.setattr(bench._Buffers, "launch_into", lambda self, k, a, b, out: sim.gemm(
            k.us, lambda: k.count(a, b, out), True))
        monkeypatch.setattr(torch, "cuda", sim)
        return sim
    return install


def cold_graph(req) -> int:
    """Launches in one cold graph of `req` in the simulation (L2 of 64 KiB, graphs of 3
    launches): whole passes through the rotated operand copies."""
    p = req.problem()
    sets = timing.rotation_sets(2 * (p.m * p.k + p.k * p.n + p.m * p.n), 1 << 16,
                                req.settings.l2_flush_factor)
    return sets * -(-3 // sets)
