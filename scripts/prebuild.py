"""Build programs ahead of time into an artifact cache, to carry to a GPU machine.

    GEMMFORGE_CACHE_DIR=.carry/cache python scripts/prebuild.py --sm 90 \\
        --kinds nn:f32,nt:f32 --programs-file tests/data/large_programs.txt

Builds happen in parallel (--jobs). On the GPU machine, point GEMMFORGE_CACHE_DIR at the
carried folder: backends.pipeline.compile finds each artifact by its content key (the
lowered source, the backend's fingerprint, the nvcc version and the target), so nothing
is rebuilt there when the toolchains match, and anything that does not match is simply
built again.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.compiler.values import BuildError, Target  # noqa: E402
from gemmforge.backends import pipeline  # noqa: E402
from gemmforge.ir import IRError, Problem, parse  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sm", type=int, default=90, help="device compute capability (90)")
    ap.add_argument("--kinds", default="nn:f32", help="layout:acc pairs, comma separated")
    ap.add_argument("--programs-file", required=True, help="one program text per line")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    lines = Path(args.programs_file).read_text().splitlines()
    programs = [parse(t) for t in lines if t.strip() and not t.startswith("#")]
    kinds = [k.split(":") for k in args.kinds.split(",")]
    # an aligned size: the shape only decides legality (aligned rows) and, for backends
    # that specialise on alignment, which variant is built
    jobs = [(p, Problem(64, 64, 64, lay, acc)) for p in programs for lay, acc in kinds]
    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(_build, p, pr, args.sm): (p, pr) for p, pr in jobs}
        for done in as_completed(futures):
            p, pr = futures[done]
            ok, note = done.result()
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {pr.layout}/{pr.acc} {p}  {note}", flush=True)
    return 1 if failed else 0


def _build(program, problem, sm) -> tuple[bool, str]:
    start = time.time()
    try:
        artifact = pipeline.compile(program, problem, Target(sm))
    except (IRError, BuildError) as e:
        return False, str(e).splitlines()[0]
    return True, f"{time.time() - start:.0f} s {artifact.key}"


if __name__ == "__main__":
    sys.exit(main())
