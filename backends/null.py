"""The null backend: the whole compile and load path with no toolchain and no GPU.

Like tinygrad's null device, it lets pipeline, cache, runtime and host-path tests run on
any machine. `lower` writes the program and problem as JSON; `build` copies that file
into the artifact folder (no compiler); its loader gives a `HostKernel`, whose `launch`
reads fp16 operands from host (CPU) addresses and writes C = A @ B, accumulated in fp32,
through the same `Kernel.__call__` path the GPU kernels use (`device_flag = "is_cpu"`).

It is not registered on import, so searches, policies and the schema never see it:

    from gemmforge.backends import registry
    from gemmforge.backends.null import NullBackend
    registry.add(NullBackend())          # tests: the `null_backend` fixture
    kernel = pipeline.load(pipeline.compile(parse("null sm_80 ..."), Problem(64, 64, 64)))

Constraints: the fields cuda_mma accepts (no clusters, warp specialization or TMA);
layouts nn and nt, accumulators f32 and f16 (computed in fp32 either way).
"""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

from .base import Backend
from ..compiler.runtime import Kernel, loader
from ..compiler.values import Artifact, Source, Target
from ..ir.arch import MmaFamily
from ..ir.program import DEFAULTS, Arch, Problem, Program, Reduction

_ONLY_DEFAULT = {name: frozenset({getattr(DEFAULTS, name)})
                 for name in ("schedule", "cluster", "warp_spec", "epilogue")}
ACC_BYTES = 4  # a workspace split-K slice holds fp32 partial sums


class NullBackend(Backend):
    """Programs become JSON files; kernels compute on the host."""

    name = "null"
    archs = frozenset({Arch.SM80, Arch.SM90A})
    instruction = "a host reference GEMM"
    mma_family = MmaFamily.MMA_SYNC
    mma_shape = (16, 8, 16)
    allowed = _ONLY_DEFAULT

    def lower(self, program: Program, problem: Problem) -> Source:
        text = json.dumps({"program": str(program), "layout": problem.layout.value,
                           "acc": problem.acc.value}, sort_keys=True) + "\n"
        return Source(program, problem, "null", {f"{program.name}.json": text},
                      f"{program.name}.json")

    def build(self, source: Source, target: Target, out_dir: Path) -> Artifact:
        path = out_dir / source.entry
        path.write_text(source.text)
        return Artifact(key="", kind="null", path=path, program_text=str(source.program),
                        layout=source.problem.layout, acc=source.problem.acc,
                        meta={"target": target.tag})


class HostKernel(Kernel):
    """C = A @ B on host memory: operands are fp16 arrays at the given addresses."""

    device_flag = "is_cpu"

    def __init__(self, artifact: Artifact):
        super().__init__(artifact)
        from ..ir.text import parse
        self.program = parse(artifact.program_text)

    def workspace_bytes(self, m: int, n: int, k: int) -> int:
        """A split-K workspace program's partial sums (the host computes without them)."""
        sk = self.program.split_k
        return sk.slices * m * n * ACC_BYTES if sk.slices > 1 and \
            sk.reduction == Reduction.WORKSPACE else 0

    def launch(self, a_ptr, b_ptr, c_ptr, m, n, k, workspace_ptr, workspace_bytes, stream):
        import numpy as np
        a = _halves(a_ptr, m * k).reshape(m, k).astype(np.float32)
        b = _halves(b_ptr, k * n).reshape((k, n) if self._nn else (n, k)).astype(np.float32)
        c = _halves(c_ptr, m * n).reshape(m, n)
        c[:] = (a @ (b if self._nn else b.T)).astype(np.float16)

    def _stream(self, index: int | None) -> int:
        return 0  # the host has no streams


def _halves(address: int, count: int):
    """The `count` fp16 values at host `address`, as a writable numpy array."""
    import numpy as np
    buffer = (ctypes.c_uint16 * count).from_address(address)
    return np.ctypeslib.as_array(buffer).view(np.float16)


@loader("null")
def _load_host_kernel(artifact: Artifact) -> Kernel:
    return HostKernel(artifact)


__all__ = ["HostKernel", "NullBackend"]
