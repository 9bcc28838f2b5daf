"""Hardware limits per arch, named once. Sources: CUDA C Programming Guide, table of
technical specifications per compute capability (8.0 for A100, 9.0 for H100/H200)."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .program import Arch


@dataclass(frozen=True, slots=True)
class ArchLimits:
    max_smem_per_block: int  # bytes of dynamic shared memory one CTA may opt in to
    max_threads_per_block: int
    max_regs_per_thread: int
    regs_per_sm: int
    has_wgmma: bool
    has_tma: bool
    has_clusters: bool


LIMITS = {
    Arch.SM80: ArchLimits(max_smem_per_block=166_912, max_threads_per_block=1024,
                          max_regs_per_thread=255, regs_per_sm=65_536,
                          has_wgmma=False, has_tma=False, has_clusters=False),
    Arch.SM90A: ArchLimits(max_smem_per_block=232_448, max_threads_per_block=1024,
                           max_regs_per_thread=255, regs_per_sm=65_536,
                           has_wgmma=True, has_tma=True, has_clusters=True),
}

class MmaFamily(enum.Enum):
    """The matrix-instruction family a kernel's inner product runs on."""
    SIMT = "simt"            # fp16 FMA on the CUDA cores
    WMMA = "wmma"            # warp-level wmma fragments
    MMA_SYNC = "mma.sync"    # warp-level mma.sync
    WGMMA = "wgmma"          # warpgroup-level asynchronous MMA (sm_90a)


def mma_family_on(family: MmaFamily, arch: Arch) -> MmaFamily:
    """The family a backend declaring `family` runs on `arch`: wgmma where the arch has it,
    else mma.sync (the backends that emit wgmma on sm_90a fall back to it on sm_80)."""
    if family == MmaFamily.WGMMA and not LIMITS[arch].has_wgmma:
        return MmaFamily.MMA_SYNC
    return family


HALF_BYTES = 2
WARP_THREADS = 32
WARPGROUP_THREADS = 128
SMEM_ROW_PAD_HALFS = 8  # swizzle=pad adds 16 bytes per shared-memory row
MAX_GRID_CTAS = 2 ** 31 - 1  # gridDim.x's limit, and the largest tile count the launchers' int holds
ACCUM_REG_BUDGET = 160  # accumulator registers per thread that leave room for addressing
