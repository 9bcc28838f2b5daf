"""The cute_cpp backend: CUTLASS/CuTe C++ from the headers in the nvidia-cutlass wheel.

sm_90a programs are CUTLASS 3.x kernels assembled from the sm90 collective builders (TMA +
GMMA mainloop, the program's kernel schedule, epilogue schedule and tile scheduler);
sm_80 programs are the CUTLASS 2.x `device::Gemm` (mma.sync tensor ops, multistage cp.async,
serial split-K). `kernels` holds the IR → CUTLASS table, `legality` the refusals. The output
is one standalone .cu with the cuda family's extern "C" API, built into a "cuda_so".

Units: Program.warps counts 128-thread units. On sm_90a a unit is a consumer warpgroup
(cooperative: w2x1 splits the tile along M, w1x2 along N, which runs CUTLASS's kernel on the
transposed problem, see kernels.sm90_transposed; pingpong and none: w1x1). On sm_80 a unit
is 2 x 2 warps, so wWMxWN is a (2 WM) x (2 WN) warp grid and the warp tile is
(bm / 2 WM) x (bn / 2 WN).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .. import register
from ..base import Backend
from ...compiler.values import Artifact, BuildError, Source, Target
from . import cutlass, legality
from .context import SELFTEST_DEFAULT, make_context
from .kernels import RASTERS
from ..templating import fingerprint, render
from ...compiler import nvcc
from ...ir.arch import MmaFamily
from ...ir.program import Arch, DType, Problem, Program, Swizzle, lowered_name

TEMPLATES = Path(__file__).with_name("templates")
# CuTe's constexpr helpers are called from device code; the other flags match compile_cuda's.
EXTRA_FLAGS = ("--expt-relaxed-constexpr",)
COMMENT_FLAGS = ("-O3", "-std=c++17", "-DNDEBUG", *EXTRA_FLAGS)


@register
class CuteCpp(Backend):
    """CUTLASS C++ kernels: 3.x collective builders on sm_90a, 2.x device::Gemm on sm_80."""

    emits_standalone = True

    name = "cute_cpp"
    archs = frozenset({Arch.SM80, Arch.SM90A})
    instruction = "CUTLASS tensor-op MMA (64-row units)"
    mma_family = MmaFamily.WGMMA
    mma_shape = (64, 8, 16)  # a warpgroup's GMMA is 64 rows, n in steps of 8, k 16
    unit_threads = 128
    tile_extras = frozenset({192})  # sm_90a only (legality): TileShape takes any GMMA multiple
    # CUTLASS's warp-specialized consumers raise themselves to 232 registers (setmaxnreg):
    # 192 accumulators leave 40 for addresses, e.g. one ping-pong warpgroup on 192x128
    consumer_accum_regs = 192
    allowed = {
        "swizzle": frozenset({Swizzle.NONE}),  # CUTLASS picks its own swizzled smem layouts
        "raster": RASTERS,                     # swizzle sizes 1, 2, 4, 8
    }
    dtypes = frozenset(DType)  # cutlass::bfloat16_t in both families (f32 accumulator)

    def supports(self, program: Program, problem: Problem | None = None) -> str | None:
        return legality.check(program, problem)

    def smem_bytes(self, program: Program) -> int | None:
        """sm_90a: CUTLASS's own staging (the TMA epilogue stages 128x32 or 64x32 pieces of
        C, not the whole tile); sm_80: ir.graph's count."""
        return legality.sm90_smem_bytes(program) if program.arch == Arch.SM90A else None

    def lower(self, program: Program, problem: Problem) -> Source:
        return self._source(program, problem, SELFTEST_DEFAULT)

    def _source(self, program: Program, problem: Problem, selftest: tuple[int, int, int]) -> Source:
        flags = " ".join((*COMMENT_FLAGS, *nvcc.gencode(program.arch)))
        ctx = make_context(program, problem, cutlass.version(), flags, selftest)
        text = render(TEMPLATES, "gemm.cu.jinja", ctx)
        name = f"{lowered_name(program, problem)}.cu"
        return Source(program, problem, "cuda", {name: text}, name,
                      meta={"cutlass_version": ctx["cutlass_version"]})

    def unavailable(self) -> str | None:
        return cutlass.missing_reason()

    def build(self, source: Source, target: Target, out_dir: Path) -> Artifact:
        src = out_dir / source.entry
        src.write_text(source.text)
        missing = cutlass.missing_reason()
        if missing:
            raise BuildError(f"cute_cpp: {missing}", source_path=str(src))
        lib = out_dir / f"{source.program.name}.so"
        flags = [*nvcc.gencode(source.program.arch, target.device_sm),
                 *self.nvcc_flags(source.program)]
        nvcc.compile_cuda(src, lib, flags)
        return Artifact(key="", kind="cuda_so", path=lib, program_text=str(source.program),
                        layout=source.problem.layout, acc=source.problem.acc,
                        dtype=source.problem.dtype, meta={"symbol": "gemmforge_launch",
                              "workspace_symbol": "gemmforge_workspace_bytes"})

    def nvcc_flags(self, program: Program) -> list[str]:
        return [*EXTRA_FLAGS, *cutlass.include_flags()]

    def fingerprint(self) -> str:
        """Templates, plus the CUTLASS headers' version (not their location: the same
        headers installed elsewhere build the same artifact, so prebuilt caches travel)."""
        h = hashlib.sha256(fingerprint(str(TEMPLATES)).encode())
        h.update(f"\0cutlass {cutlass.version()}".encode())
        return h.hexdigest()

    def standalone(self, program: Program, problem: Problem) -> str:
        """The lowered file, its self-test's default shape `problem`'s."""
        return self._source(program, problem, (problem.m, problem.n, problem.k)).text
