"""A/B of a template change across commits: the same programs built at two (or more) commits
as standalone self-test executables (`gemmforge emit` with its main), then timed side by side
on the GPU machine, each executable run in turn so that drift hits all alike.

    python3 benchmarks/selftest_ab.py build .carry/ab --commits 838bc84 HEAD \\
        --programs "cuda_wgmma sm_90a 64x256x64 w1x1 s5 sw128 row/8 pred k1 streamk c1x1 pingpong tma"
    python3 benchmarks/selftest_ab.py run .carry/ab --shapes 1024x8192x16384,4096x1024x16384

`build` (CPU machine, nvcc) checks each commit out into a temporary git worktree and emits
from there; `run` prints one line per run, then the median time per (shape, executable).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EMIT = """
import subprocess
import sys
from pathlib import Path
from gemmforge.compiler import nvcc
from gemmforge.emit import emit
from gemmforge.ir import Arch, Problem, parse
program, cu_dir, exe = sys.argv[1:4]
cu = emit(Problem(4096, 4096, 4096, "nn", "f32"), parse(program), Path(cu_dir))
cmd = [nvcc.knobs().nvcc, *nvcc.BASE_FLAGS, *nvcc.gencode(Arch.SM90A),
       "-DGEMMFORGE_STANDALONE_MAIN", "-o", exe, str(cu)]
sys.exit(subprocess.run(cmd).returncode)
"""
TIME = re.compile(r"(\d+)x(\d+)x(\d+) rel_err=(\S+) .*time=([\d.]+) us")


def build(out: Path, commits: list[str], programs: list[str]) -> int:
    out = out.resolve()  # nvcc runs in each commit's worktree, not here
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for commit in commits:
        sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip()
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), sha],
                           cwd=ROOT, check=True)
            try:
                for i, program in enumerate(programs):
                    exe = out / f"{sha}_{i}_{'_'.join(program.split()[2:3] + program.split()[9:10])}"
                    r = subprocess.run([sys.executable, "-c", EMIT, program, tmp, str(exe)],
                                       cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                                       capture_output=True, text=True)
                    print(f"{exe.name}: {'built' if r.returncode == 0 else r.stderr[-300:]}")
                    failed += r.returncode != 0
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    return 1 if failed else 0


def run(out: Path, shapes: list[str], repeats: int) -> int:
    exes = sorted(p for p in out.iterdir() if p.is_file())
    if not exes:
        print(f"nothing built in {out}", file=sys.stderr)
        return 2
    times: dict[tuple[str, str], list[float]] = {}
    for shape in shapes:
        for _ in range(repeats):
            for exe in exes:
                r = subprocess.run([str(exe), *shape.split("x")], capture_output=True, text=True)
                m = TIME.search(r.stdout)
                print(f"{shape:>16} {exe.name}: {r.stdout.strip() or r.stderr.strip()[-200:]}")
                if m and r.returncode == 0:
                    times.setdefault((shape, exe.name), []).append(float(m.group(5)))
    print(f"\n{'shape':>16} {'median us':>10}  executable")
    for (shape, name), ts in times.items():
        print(f"{shape:>16} {statistics.median(ts):10.1f}  {name}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["build", "run"])
    ap.add_argument("out", type=Path, help="folder of the executables")
    ap.add_argument("--commits", nargs="+", default=["HEAD"])
    ap.add_argument("--programs", nargs="+", default=[])
    ap.add_argument("--shapes", default="4096x4096x4096", help="comma list of MxNxK")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.action == "build":
        if not args.programs:
            ap.error("build needs --programs")
        return build(args.out, args.commits, args.programs)
    return run(args.out, args.shapes.split(","), args.repeats)


if __name__ == "__main__":
    sys.exit(main())
