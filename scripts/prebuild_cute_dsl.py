#!/usr/bin/env python3
"""Build cute_dsl artifacts here (where the CuTe DSL wheel is installed) into a cache folder
that a machine without the wheel uses as its GEMMFORGE_CACHE_DIR.

    python scripts/prebuild_cute_dsl.py             # the GPU tier's suite -> .carry/cache
    python scripts/prebuild_cute_dsl.py --out DIR --target 90 \\
        "cute_dsl sm_90a 128x256x64 w8x1 s3 sw128 row/8 pred k1 persistent c1x1 coop tma" \\
        4096x4096x4096:nt:f32

Pairs are a program's text form and a problem written M x N x K[:layout[:acc]]. The
artifact cache key hashes the lowered source, the backend fingerprint, the nvcc version
and the target, so `backends.pipeline.compile(program, problem, Target(90))` on the GPU
machine (same nvcc, same checkout) is a cache hit: point GEMMFORGE_CACHE_DIR at DIR.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from gemmforge.compiler.values import BuildError, Target  # noqa: E402
from gemmforge.backends import pipeline  # noqa: E402
from gemmforge.compiler.artifacts import ArtifactCache  # noqa: E402
from gemmforge.ir import Problem, VerifyError, parse  # noqa: E402

DEFAULT_OUT = ROOT / ".carry" / "cache"


def parse_problem(text: str) -> Problem:
    shape, *rest = text.split(":")
    m, n, k = (int(v) for v in shape.lower().split("x"))
    layout = rest[0] if rest else "nn"
    acc = rest[1] if len(rest) > 1 else "f32"
    return Problem(m, n, k, layout, acc)


def requested(pairs: list[str]) -> list[tuple[str, Problem]]:
    if not pairs:
        from gemmforge.backends.cute_dsl.suite import builds
        return builds()
    if len(pairs) % 2:
        raise SystemExit("give PROGRAM PROBLEM pairs (an odd number of arguments was given)")
    return [(pairs[i], parse_problem(pairs[i + 1])) for i in range(0, len(pairs), 2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("pairs", nargs="*", help="PROGRAM PROBLEM pairs (default: the GPU suite)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"cache folder ({DEFAULT_OUT})")
    ap.add_argument("--target", type=int, default=90, help="device compute capability (90)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel builds (2)")
    args = ap.parse_args(argv)
    cache, target = ArtifactCache(args.out), Target(args.target)
    jobs = requested(args.pairs)

    def build(job):
        text, problem = job
        start = time.time()
        try:
            artifact = pipeline.compile(parse(text), problem, target, cache)
        except (BuildError, VerifyError) as e:
            return job, None, f"FAILED: {str(e).splitlines()[0]}", time.time() - start
        return job, artifact, artifact.key, time.time() - start

    failed = 0
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for (text, problem), artifact, what, secs in pool.map(build, jobs):
            failed += artifact is None
            print(f"{secs:6.1f}s  {problem}  {text}  ->  {what}", flush=True)
    print(f"{len(jobs) - failed} built or cached, {failed} failed, in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
