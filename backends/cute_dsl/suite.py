"""The cute_dsl programs and problems the GPU tier checks, and that the prebuild script
builds by default (the GPU machine has no DSL wheel: it runs what was built here).

Artifacts are shape-generic within an alignment class, so one build per (program,
layout, accumulator, alignment class) serves every shape of that class.
"""
from __future__ import annotations

from ...ir import Problem, parse

PROGRAMS = (
    # sm_90a: 2 consumer warpgroups, persistent grid, grouped rows
    "cute_dsl sm_90a 128x256x64 w8x1 s3 sw128 row/8 pred k1 persistent c1x1 coop tma",
    # sm_90a: 1 consumer warpgroup over two 64-row blocks, B multicast over a 2x1 cluster
    "cute_dsl sm_90a 128x128x64 w4x1 s4 sw128 col/4 pred k1 dp c2x1 coop tma",
    # sm_90a: 256-row tile, A multicast over a 1x2 cluster, persistent
    "cute_dsl sm_90a 256x128x64 w8x1 s3 sw128 row/4 pred k1 persistent c1x2 coop tma",
    # sm_80 (mma.sync, built as sm_90 for Hopper)
    "cute_dsl sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows smem",
    "cute_dsl sm_80 64x128x64 w2x2 s3 sw64 col/4 pred k1 dp c1x1 nows smem",
)
SHAPES = ((1000, 4096, 336), (256, 256, 256), (4096, 64, 8192))
RAGGED_SHAPES = ((17, 33, 65), (129, 255, 1000))   # odd n or k: sm_80 narrow-vector classes
CLUSTER_EDGE_SHAPES = ((300, 520, 264),)  # tile counts that don't fill the last cluster
KINDS = (("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16"))
BENCH_SHAPE = (4096, 4096, 4096)
TARGET_SM = 90


def cases() -> list[tuple[str, Problem]]:
    """Every (program text, problem) the GPU tier runs, legal ones only."""
    from ...ir.verify import check
    out = []
    for text in PROGRAMS:
        program = parse(text)
        shapes = SHAPES + (RAGGED_SHAPES if program.arch.value == "sm_80" else CLUSTER_EDGE_SHAPES)
        for m, n, k in shapes + (BENCH_SHAPE,):
            for layout, acc in KINDS:
                problem = Problem(m, n, k, layout, acc)
                if check(program, problem) is None:
                    out.append((text, problem))
    return out


def builds() -> list[tuple[str, Problem]]:
    """One (program, problem) per distinct artifact among `cases()`."""
    from .plan import problem_align
    seen, out = set(), []
    for text, problem in cases():
        key = (text, problem.layout, problem.acc, problem_align(problem))
        if key not in seen:
            seen.add(key)
            out.append((text, problem))
    return out
