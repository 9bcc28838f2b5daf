"""The cuda family: three instruction paths over one set of jinja2 templates.

Each path is a `Backend` whose kernel body lives in `templates/<path>.cuh.jinja`; the
pipeline, loader, raster, split-K and launcher templates are shared. The output is
one standalone .cu file exposing the extern "C" API of `templates/launcher.cuh.jinja`.
"""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from .. import register
from ..base import Backend
from ...compiler.values import Artifact, Source, Target
from .context import make_context
from ..templating import fingerprint, render
from ...compiler import nvcc
from ...ir.arch import MmaFamily
from ...ir.program import (
    DEFAULTS, Arch, DType, Problem, Program, Swizzle, lowered_name,
)

TEMPLATES = Path(__file__).with_name("templates")
SELFTEST_DEFAULT = (1000, 4096, 333)  # the self-test's shape when main() gets no arguments
BIAS_SYMBOL = "gemmforge_launch_bias"  # a fused-bias program's extra entry (launcher templates)

_ONLY_DEFAULT = {name: frozenset({getattr(DEFAULTS, name)})
                 for name in ("schedule", "cluster", "warp_spec", "epilogue")}


class CudaBackend(Backend):
    """Shared lowering and build for the cuda family; subclasses pick the kernel body."""

    emits_standalone = True

    path: ClassVar[str]
    archs = frozenset({Arch.SM80, Arch.SM90A})
    allowed = {**_ONLY_DEFAULT, "swizzle": frozenset({Swizzle.NONE, Swizzle.PAD})}

    def lower(self, program: Program, problem: Problem) -> Source:
        return self.source(program, problem, SELFTEST_DEFAULT)

    def source(self, program: Program, problem: Problem, selftest: tuple[int, int, int]) -> Source:
        """The lowered file; `selftest` is (m, n, k) its main() runs without arguments."""
        ctx = make_context(program, problem, self.path, self.unit_threads).as_dict()
        m, n, k = selftest
        ctx.update(gencode=" ".join(nvcc.gencode(program.arch)),
                   selftest_m=m, selftest_n=n, selftest_k=k)
        text = render(TEMPLATES, "gemm.cu.jinja", ctx)
        name = f"{lowered_name(program, problem)}.cu"
        return Source(program, problem, "cuda", {name: text}, name)

    def build(self, source: Source, target: Target, out_dir: Path) -> Artifact:
        src = out_dir / source.entry
        src.write_text(source.text)
        lib = out_dir / f"{source.program.name}.so"
        nvcc.compile_cuda(src, lib, nvcc.gencode(source.program.arch, target.device_sm))
        return Artifact(key="", kind="cuda_so", path=lib, program_text=str(source.program),
                        layout=source.problem.layout, acc=source.problem.acc,
                        dtype=source.problem.dtype,
                        meta={"symbol": "gemmforge_launch",
                              "workspace_symbol": "gemmforge_workspace_bytes",
                              **({"bias_symbol": BIAS_SYMBOL} if source.program.bias else {})})

    def fingerprint(self) -> str:
        return fingerprint(str(TEMPLATES))

    def standalone(self, program: Program, problem: Problem) -> str:
        """The lowered file, its self-test's default shape `problem`'s."""
        return self.source(program, problem, (problem.m, problem.n, problem.k)).text


@register
class CudaSimt(CudaBackend):
    """Plain CUDA FMA on the SIMT cores: the simple reference path."""

    name = "cuda_simt"
    path = "simt"
    instruction = "fma (SIMT)"
    mma_family = MmaFamily.SIMT
    mma_shape = (4, 8, 8)  # a warp is 4 x 8 threads; loads move 8 halves


@register
class CudaWmma(CudaBackend):
    """nvcuda::wmma 16x16x16 fragments from padded or plain shared memory."""

    name = "cuda_wmma"
    path = "wmma"
    instruction = "wmma m16n16k16"
    mma_family = MmaFamily.WMMA
    mma_shape = (16, 16, 16)


@register
class CudaMma(CudaBackend):
    """Inline-PTX mma.sync.m16n8k16 fed by ldmatrix from swizzled or padded shared memory."""

    name = "cuda_mma"
    path = "mma"
    instruction = "mma.sync.m16n8k16"
    mma_family = MmaFamily.MMA_SYNC
    mma_shape = (16, 16, 16)  # ldmatrix.x4 feeds B in pairs of n8 blocks
    allowed = {**_ONLY_DEFAULT, "swizzle": frozenset(Swizzle)}
    dtypes = frozenset(DType)  # mma.sync m16n8k16 .bf16 (f32 accumulator) as well as .f16
