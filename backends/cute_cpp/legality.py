"""What the cute_cpp backend can emit: one predicate per rule, each returning a reason.

`check(program, problem)` runs the rules for the program's arch after ir.verify's generic
checks (arch features, `allowed` fields, warp/tile divisibility, resource budgets) and
returns the first reason, or None. No rule raises. Every reason names the IR field, what
CUTLASS needs, and why.
"""
from __future__ import annotations

from ...ir.arch import HALF_BYTES
from ...ir.program import Arch, Padding, Problem, Program, Reduction, Schedule
from ...ir.text import field_text
from .kernels import (
    ALIGNMENT_HALFS, SM80_BK, SM80_EPILOGUES, SM80_MIN_STAGES, SM80_UNIT_WARPS,
    SM80_WARP_GRAIN, SM90_COOP_M_GRAIN, SM90_KERNELS, SM90_MAX_CLUSTER, SM90_MAX_TILE,
    SM90_SMEM_BYTES, SM90_SMEM_SLACK, sm90_tile, sm90_transposed,
)


def _values(fld: str, values) -> str:
    return ", ".join(sorted(field_text(fld, v) for v in values))


def _sm90_kernel(p: Program) -> str | None:
    k = SM90_KERNELS[p.warp_spec]
    ws = field_text("warp_spec", p.warp_spec)
    name = k.schedule.rsplit("::", 1)[-1]
    if p.warps not in k.warps:
        return (f"warps: {ws} is CUTLASS's {name}, whose consumer warpgroups lay out as "
                f"{_values('warps', k.warps)}; got {field_text('warps', p.warps)}")
    if p.epilogue not in k.epilogues:
        return (f"epilogue: {name} takes {_values('epilogue', k.epilogues)} (TMA stores need a "
                f"warp-specialized kernel; sm90 has no smem-staged non-TMA epilogue); "
                f"got {p.epilogue.value}")
    if p.schedule not in k.schedules:
        return (f"schedule: {name} serves {_values('schedule', k.schedules)}; "
                f"got {field_text('schedule', p.schedule)}")
    if p.raster not in k.rasters:
        return (f"raster: {name} launches one CTA per tile along M (blockIdx.x); use "
                f"{_values('raster', k.rasters)}, not {field_text('raster', p.raster)}")
    if p.split_k.slices > 1 and not k.stream_k:
        return (f"split_k: split-K runs on CUTLASS's stream-K scheduler, which only the "
                f"cooperative kernel (coop) supports; {ws} needs k1")
    if p.stages < k.min_stages:
        return f"stages: {name}'s mainloop needs at least {k.min_stages} stages; got {p.stages}"
    return None


def _sm90_shape(p: Program) -> str | None:
    t, c = p.tile, p.cluster
    if sm90_transposed(p.warp_spec, p.warps) and t.bn % SM90_COOP_M_GRAIN:
        return (f"tile.bn: w1x2 runs CUTLASS's cooperative kernel on the transposed problem, "
                f"whose two consumer warpgroups split our N in 64-column GMMAs: bn must be a "
                f"multiple of {SM90_COOP_M_GRAIN}; got {t.bn}")
    if max(t.bm, t.bn) > SM90_MAX_TILE:
        return (f"tile: a TMA box spans at most {SM90_MAX_TILE} rows; "
                f"{t.bm}x{t.bn} is too large")
    if c.size > SM90_MAX_CLUSTER:
        return (f"cluster: {c.cm}x{c.cn} is {c.size} CTAs; CUTLASS launches portable clusters "
                f"of at most {SM90_MAX_CLUSTER}")
    need = sm90_smem_bytes(p)
    if need > SM90_SMEM_BYTES:
        return (f"stages: {p.stages} stages of {t.bm}x{t.bn}x{t.bk} plus the epilogue need about "
                f"{need} B of shared memory; sm_90a allows {SM90_SMEM_BYTES} B per CTA")
    return None


def sm90_smem_bytes(p: Program) -> int:
    """Shared memory the CUTLASS sm90 kernel needs, from the builder's own rules: the
    mainloop's A and B stages, the TMA epilogue's D staging (EpilogueTileAuto: 128 x 32
    for cooperative, 64 x 32 otherwise, in CUTLASS's M x N, two stages at most) and a slack
    for barriers."""
    t = p.tile
    mainloop = p.stages * (t.bm + t.bn) * t.bk * HALF_BYTES
    epilogue = 0
    if p.epilogue.value == "tma":
        tile_m, tile_n = sm90_tile(p)
        epi_m = min(128 if p.warp_spec.value == "cooperative" else 64, tile_m)
        epi_n = min(32, tile_n)
        stages_d = min((tile_m // epi_m) * (tile_n // epi_n), 2)
        epilogue = stages_d * epi_m * epi_n * HALF_BYTES
    return mainloop + epilogue + SM90_SMEM_SLACK


def _sm80_fields(p: Program) -> str | None:
    if p.epilogue not in SM80_EPILOGUES:
        return (f"epilogue: CUTLASS 2.x's tensor-op epilogue stages C through shared memory; "
                f"use smem, not {p.epilogue.value}")
    if p.schedule != Schedule.DATA_PARALLEL:
        return (f"schedule: cutlass::gemm::device::Gemm launches one CTA per tile; use dp, not "
                f"{field_text('schedule', p.schedule)}")
    if p.split_k.reduction == Reduction.ATOMIC:
        return ("split_k: CUTLASS 2.x reduces split-K serially (a semaphore per tile in the "
                f"workspace, deterministic); use k{p.split_k.slices}, not atomics")
    if p.stages < SM80_MIN_STAGES:
        return (f"stages: CUTLASS 2.x's sm80 multistage mainloop needs at least "
                f"{SM80_MIN_STAGES} stages; got {p.stages}")
    return None


def _sm80_shape(p: Program) -> str | None:
    t, w = p.tile, p.warps
    if t.extras:
        return (f"tile: {t.bm}x{t.bn}: the sm_80 mainloops take powers of two; "
                f"{'/'.join(map(str, t.extras))}-wide tiles are for sm_90a's GMMA")
    if t.bk not in SM80_BK:
        return (f"tile.bk: CUTLASS 2.x's fp16 crosswise shared-memory layouts take bk "
                f"{' or '.join(map(str, SM80_BK))}; got {t.bk}")
    um, un = SM80_UNIT_WARPS
    warp_m, warp_n = t.bm // (w.wm * um), t.bn // (w.wn * un)
    if warp_m % SM80_WARP_GRAIN or warp_n % SM80_WARP_GRAIN:
        return (f"warps: on sm_80 each warps unit is {um}x{un} warps, so {t.bm}x{t.bn} over "
                f"w{w.wm}x{w.wn} gives {warp_m}x{warp_n} warp tiles; CUTLASS's warp tiles are "
                f"multiples of {SM80_WARP_GRAIN}x{SM80_WARP_GRAIN}")
    return None


def _alignment(p: Program, problem: Problem | None) -> str | None:
    if problem is None or p.padding != Padding.PREDICATE:
        return None
    if problem.n % ALIGNMENT_HALFS or problem.k % ALIGNMENT_HALFS:
        return (f"padding: pred needs n and k multiples of {ALIGNMENT_HALFS} (TMA and CUTLASS's "
                f"{ALIGNMENT_HALFS}-half vectors need 16-byte aligned rows); {problem.shape} is "
                "not: use padop, which pads the operands into an aligned workspace")
    return None


RULES = {Arch.SM90A: (_sm90_kernel, _sm90_shape), Arch.SM80: (_sm80_fields, _sm80_shape)}


def check(p: Program, problem: Problem | None = None) -> str | None:
    """The first reason CUTLASS can't serve `p` (for `problem`, if given), or None."""
    for rule in RULES[p.arch]:
        reason = rule(p)
        if reason:
            return reason
    return _alignment(p, problem)
