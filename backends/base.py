"""The Backend contract: what a code generator declares and does.

A backend is a class with capabilities as class attributes (data, not code paths),
`supports()` for any legality rule the data can't express (returns a reason, never
raises), `lower()` from (Program, Problem) to a `Source`, and `build()` from a
`Source` to an `Artifact` on disk. A backend never times and never picks programs.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from ..compiler.values import Artifact, Source, Target
from ..ir.arch import MmaFamily
from ..ir.program import Accum, Arch, DType, Layout, Problem, Program, Reduction


class Backend(ABC):
    """One code generator. Subclasses set the class attributes and implement lower/build.

    Capabilities:
      name         -- the Program.backend value this class serves
      archs        -- archs it emits code for
      instruction  -- the matrix instruction it is built on (named in verify errors)
      mma_shape    -- (m, n, k) one warp (or warpgroup) instruction covers; tiles divide by it
      mma_family   -- the instruction family (ir.arch.MmaFamily) it runs on its newest arch
                      (ir.arch.mma_family_on: wgmma falls back to mma.sync where absent)
      unit_threads -- threads per entry of Program.warps (32 warps, 128 warpgroups)
      allowed      -- Program field -> the values this backend accepts, where restricted;
                      a field listed with a single value is one the backend ignores.
                      Fields added after the backends (l2_hint, swap_ab, pdl) are opt-in: only
                      their default is legal unless `allowed` lists more
      layouts, accumulators -- problem kinds it can compute
      dtypes       -- operand (and output) dtypes it computes: f16 unless it lists bf16
      tile_extras  -- tile.bm / tile.bn values beyond powers of two it accepts (of
                      ir.program.TILE_EXTRAS: multiples of 8 up to 256)
      max_stages   -- the deepest pipeline it builds (the IR allows ir.program.MAX_STAGES;
                      shared memory is checked apart)
      reductions   -- split_k.reduction values it lowers (inkernel and cluster are opt-in)
      consumer_accum_regs -- accumulator registers per thread a warp-specialized
                      consumer may hold (None: ir.arch.ACCUM_REG_BUDGET, as for all others)
      fusions      -- the ir.program.FUSION_FIELDS (epilogue operations: bias) it lowers;
                      a program that sets any other is refused by verify
      emits_standalone -- `standalone()` writes a self-contained .cu file (`gemmforge emit`
                      serves a shape with the best program of such a backend)
    """

    name: ClassVar[str]
    archs: ClassVar[frozenset[Arch]]
    instruction: ClassVar[str]
    mma_shape: ClassVar[tuple[int, int, int]]
    mma_family: ClassVar[MmaFamily]
    unit_threads: ClassVar[int] = 32
    allowed: ClassVar[dict[str, frozenset]] = {}
    layouts: ClassVar[frozenset[Layout]] = frozenset(Layout)
    accumulators: ClassVar[frozenset[Accum]] = frozenset(Accum)
    dtypes: ClassVar[frozenset[DType]] = frozenset({DType.F16})
    tile_extras: ClassVar[frozenset[int]] = frozenset()
    max_stages: ClassVar[int] = 8
    reductions: ClassVar[frozenset[Reduction]] = frozenset({Reduction.WORKSPACE,
                                                             Reduction.ATOMIC})
    consumer_accum_regs: ClassVar[int | None] = None
    fusions: ClassVar[frozenset[str]] = frozenset()
    emits_standalone: ClassVar[bool] = False

    def supports(self, program: Program, problem: Problem | None = None) -> str | None:
        """None if this backend can emit `program` (for `problem`, if given), else the reason.

        Called by ir.verify after the capability checks; override for rules the
        class attributes can't say. Never raises.
        """
        return None

    def unavailable(self) -> str | None:
        """Why this backend can't build on this machine (headers or a toolchain it needs
        are not installed); None when it can. dispatch.choice skips shipped and tuned
        programs of such a backend rather than fail the user's call."""
        return None

    def smem_bytes(self, program: Program) -> int | None:
        """Shared memory one CTA of `program` needs, where this backend knows its own
        staging better than ir.graph's generic pipeline (which stages the whole C tile for
        smem/tma epilogues); None takes the generic count."""
        return None

    @abstractmethod
    def lower(self, program: Program, problem: Problem) -> Source:
        """Generate source for `program` computing `problem` (assumes verify passed)."""

    @abstractmethod
    def build(self, source: Source, target: Target, out_dir: Path) -> Artifact:
        """Compile `source` for `target` into `out_dir` (an empty folder the caller owns);
        raise BuildError with a command that reproduces the failure."""

    def fingerprint(self) -> str:
        """A hash of everything besides the program that shapes this backend's output
        (templates, generator version): part of every artifact cache key."""
        return type(self).__module__

    def nvcc_flags(self, program: Program) -> list[str]:
        """Flags besides -gencode that nvcc needs for this backend's .cu files (include
        paths, language options); `gemmforge emit --compile` uses them too."""
        return []

    def standalone(self, program: Program, problem: Problem) -> str | None:
        """A self-contained .cu file (kernel, extern "C" launcher, test main()), or None
        if this backend can't emit one (then `emits_standalone` is False)."""
        return None
