"""Legality of a Program for its backend and arch (and, optionally, a Problem).

`check()` returns the first reason a program is illegal, or None; `verify()` raises
`VerifyError` with it. Each rule is its own predicate, run in order from the
cheapest to the most specific; each message names the field and the limit.
"""
from __future__ import annotations

from . import capabilities, graph
from .arch import ACCUM_REG_BUDGET, LIMITS, MAX_GRID_CTAS
from .text import field_text
from .program import (
    DEFAULTS, FUSION_FIELDS, OPT_IN_FIELDS, TILE_STEP, Accum, IRError, Layout, Problem, Program, Schedule, WarpSpec,
)

# Fields whose non-default values need an sm_90a feature, and which feature.
_HOPPER_ONLY = {
    "cluster": ("thread-block clusters", lambda p: p.cluster.size > 1),
    "warp_spec": ("warp specialization with setmaxnreg", lambda p: p.warp_spec.value != "none"),
    "epilogue": ("the TMA store epilogue", lambda p: p.epilogue.value == "tma"),
    "l2_hint": ("TMA loads with L2 cache hints", lambda p: p.l2_hint.value != "none"),
    "pdl": ("programmatic dependent launches (griddepcontrol)", lambda p: p.pdl),
    "split_k": ("split-K slices summed through a cluster",
                lambda p: p.split_k.reduction.value == "cluster"),
}


class VerifyError(IRError):
    """The program is well-formed but not a legal kernel (for this backend, arch, problem)."""


def _backend(p: Program):
    try:
        return capabilities.table.get(p.backend), None
    except KeyError as e:
        return None, f"backend: {e.args[0]}"


def _check_arch(p: Program, be) -> str | None:
    if p.arch not in be.archs:
        need = " or ".join(sorted(a.value for a in be.archs))
        return (f"arch: {p.backend} emits {be.instruction}, which {p.arch.value} lacks "
                f"(needs {need})")
    if not LIMITS[p.arch].has_clusters:
        for fld, (feature, used) in _HOPPER_ONLY.items():
            if used(p):
                return f"{fld}: {feature} need sm_90a; this program is {p.arch.value}"
    return None


def _check_fields(p: Program, be) -> str | None:
    opt_in = {fld: frozenset({getattr(DEFAULTS, fld)}) for fld in OPT_IN_FIELDS}
    for fld, values in {**opt_in, **be.allowed}.items():
        value = getattr(p, fld)
        if value in values:
            continue
        default = getattr(DEFAULTS, fld)
        if values == {default}:
            return (f"{fld}: {p.backend} ignores this field; leave it at its default "
                    f"({field_text(fld, default)}), not {field_text(fld, value)}")
        shown = ", ".join(sorted(field_text(fld, v) for v in values))
        return f"{fld}: {p.backend} accepts {shown}; got {field_text(fld, value)}"
    if p.schedule == Schedule.STREAM_K and p.split_k.slices > 1:
        return "split_k: stream_k already divides K; use split_k k1 with it"
    if p.split_k.reduction not in be.reductions:
        shown = ", ".join(sorted(r.value for r in be.reductions))
        return (f"split_k.reduction: {p.backend} reduces split-K slices by {shown}; "
                f"got {p.split_k.reduction.value} ({field_text('split_k', p.split_k)})")
    if p.stages > be.max_stages:
        return f"stages: {p.backend} builds at most {be.max_stages} stages; got {p.stages}"
    return None


def _check_fusions(p: Program, be) -> str | None:
    """A fused epilogue operation (FUSION_FIELDS) set on a backend that doesn't lower it."""
    for fld in FUSION_FIELDS:
        if getattr(p, fld) and fld not in getattr(be, "fusions", ()):
            others = [e.name for e in capabilities.table.all()
                      if fld in getattr(e, "fusions", ())]
            lowered = f" ({', '.join(others)} do)" if others else ""
            return (f"{fld}: {p.backend} does not fuse a {fld} add into its epilogue"
                    f"{lowered}; leave it off ({field_text(fld, getattr(DEFAULTS, fld))})")
    return None


def runs_text(values: list[int]) -> str:
    """Sorted tile values beyond the powers of two as text, runs in steps of TILE_STEP
    (powers of two between them aside) written 'lo..hi by 8', e.g. '24..56 by 8, 192'."""
    runs: list[list[int]] = []
    for v in values:
        between = range(runs[-1][-1] + TILE_STEP, v, TILE_STEP) if runs else ()
        if runs and all(b & (b - 1) == 0 for b in between):
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}..{r[-1]} by {TILE_STEP}" if len(r) > 2 else
                     ", ".join(map(str, r)) for r in runs)


def _check_shape(p: Program, be) -> str | None:
    t, w = p.tile, p.warps
    odd = [v for v in t.extras if v not in be.tile_extras]
    if odd:
        takes = (f"takes {runs_text(sorted(be.tile_extras))} besides powers of two"
                 if be.tile_extras else "takes powers of two only")
        return f"tile: {t.bm}x{t.bn}: {p.backend} {takes}; {odd[0]} is neither"
    mm, mn, mk = be.mma_shape
    threads = w.count * be.unit_threads
    limit = LIMITS[p.arch].max_threads_per_block
    if threads > limit:
        return f"warps: {w.wm}x{w.wn} units of {be.unit_threads} threads is {threads} threads; " \
               f"the limit is {limit}"
    # with swap_ab the MMA's M side runs along bn (and wn), its N side along bm (and wm)
    sides = {"m": ("N", mn), "n": ("M", mm)} if p.swap_ab else {"m": ("M", mm), "n": ("N", mn)}
    for dim, size, units in (("m", t.bm, w.wm), ("n", t.bn, w.wn)):
        side, step = sides[dim]
        if size % (units * step):
            swapped = f" (swap_ab puts tile.b{dim} on the MMA's {side} side)" if p.swap_ab else ""
            return (f"tile.b{dim}: {size} is not a multiple of warps.w{dim} x "
                    f"{be.instruction} {side} ({units} x {step} = {units * step}){swapped}")
    if t.bk % mk:
        return f"tile.bk: {t.bk} is not a multiple of the {be.instruction} K step ({mk})"
    return None


def _check_resources(p: Program, be, problem: Problem | None) -> str | None:
    layout = problem.layout if problem else Layout.NN
    acc = problem.acc if problem else Accum.F32
    g = graph.build(p, be.unit_threads, layout, acc)
    smem = be.smem_bytes(p) or graph.smem_bytes(g)
    budget = LIMITS[p.arch].max_smem_per_block
    if smem > budget:
        return (f"stages: {p.stages} stages of {p.tile.bm}x{p.tile.bn}x{p.tile.bk} need "
                f"{smem} B of shared memory; {p.arch.value} allows {budget} B per CTA")
    acc_regs = graph.reg_bytes(g, "acc") // 4
    limit = (ACCUM_REG_BUDGET if p.warp_spec == WarpSpec.NONE or be.consumer_accum_regs is None
             else be.consumer_accum_regs)
    if acc_regs > limit:
        return (f"tile: {p.tile.bm}x{p.tile.bn} over {g.graph['threads']} threads holds "
                f"{acc_regs} {acc.value} accumulator registers per thread; the limit is "
                f"{limit} (of {LIMITS[p.arch].max_regs_per_thread})")
    return None


def _check_problem(p: Program, be, problem: Problem | None) -> str | None:
    if problem is None:
        return None
    if problem.layout not in be.layouts:
        return f"layout: {p.backend} does not compute layout {problem.layout.value}"
    if problem.acc not in be.accumulators:
        return f"acc: {p.backend} does not accumulate in {problem.acc.value}"
    dtypes = capabilities.serves_dtypes(be)
    if problem.dtype not in dtypes:
        shown = ", ".join(sorted(d.value for d in dtypes))
        return f"dtype: {p.backend} computes {shown} operands, not {problem.dtype.value}"
    ctas = -(-problem.m // p.tile.bm) * -(-problem.n // p.tile.bn) * p.split_k.slices
    if ctas > MAX_GRID_CTAS:
        return (f"tile: {problem.m}x{problem.n} in {p.tile.bm}x{p.tile.bn} tiles (split_k "
                f"{p.split_k.slices}) is {ctas} CTAs, more than a grid holds ({MAX_GRID_CTAS})")
    return None


def check(p: Program, problem: Problem | None = None) -> str | None:
    """The first reason `p` is illegal (for `problem`, if given), or None if it is legal."""
    be, reason = _backend(p)
    if reason:
        return reason
    for rule in (_check_arch, _check_fields, _check_fusions, _check_shape):
        reason = rule(p, be)
        if reason:
            return reason
    return (_check_resources(p, be, problem) or _check_problem(p, be, problem)
            or be.supports(p, problem))


def verify(p: Program, problem: Problem | None = None) -> Program:
    """Return `p` if it is legal, else raise VerifyError naming the field and the limit."""
    reason = check(p, problem)
    if reason:
        raise VerifyError(reason)
    return p
