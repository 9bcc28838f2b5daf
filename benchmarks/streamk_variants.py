"""Where cuda_wgmma's stream-K loses its time: the same program built five ways as standalone
self-test executables (kernel, launcher and main from `gemmforge emit`), then each timed at a
few shapes. The variants patch the emitted source (they are diagnostics, not programs):

  persistent  schedule persistent
  streamk     schedule streamk, as built
  no_wait     streamk, the owner does not wait for the flags (sums may be wrong)
  no_fixup    streamk, no workspace slots written or added (sums wrong)
  no_share    streamk code, but the launcher shares no tiles (sk_tiles = 0)
  no_fixup_no_shift  no_fixup, and the whole tiles start from tile 0 as in persistent (the
              shared tiles are computed twice: is the shift of the raster the cost?)

    python3 benchmarks/streamk_variants.py build .carry/skdbg        # CPU machine, nvcc
    python3 benchmarks/streamk_variants.py run .carry/skdbg          # GPU machine
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler import nvcc  # noqa: E402
from compiler.emit import emit  # noqa: E402
from ir import Arch, Problem, parse  # noqa: E402

PROGRAM = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 {} c1x1 pingpong tma"
SHAPES = ["12288 8192 1024", "8192 8192 8192", "2048 4096 8192"]
PATCHES = {  # variant: (schedule, [(text in the emitted source, replacement)])
    "persistent": ("persistent", []),
    "streamk": ("streamk", []),
    "no_wait": ("streamk", [("} while (!__all_sync(0xffffffffu, done >= kSkPlaces));",
                             "} while (false);")]),
    "no_fixup": ("streamk", [("      sk_publish(args, w, c, place, acc);\n", ""),
                             ("if (w.kt_end < args.k_tiles) sk_absorb(args, w, c, place, acc);", "")]),
    "no_share": ("streamk", [("args.sk_tiles = plan.sk.sk_tiles;", "args.sk_tiles = 0;")]),
    "no_fixup_no_shift": ("streamk", [
        ("      sk_publish(args, w, c, place, acc);\n", ""),
        ("if (w.kt_end < args.k_tiles) sk_absorb(args, w, c, place, acc);", ""),
        ("dp(a.sk_tiles + first_unit())", "dp(first_unit())")]),
}


def build(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    problem = Problem(8192, 8192, 8192, "nn", "f32")

    def one(variant: str) -> str:
        schedule, patches = PATCHES[variant]
        with tempfile.TemporaryDirectory() as tmp:
            text = emit(problem, parse(PROGRAM.format(schedule)), Path(tmp)).read_text()
            for old, new in patches:
                if old not in text:
                    return f"{variant}: the emitted source no longer holds {old!r}"
                text = text.replace(old, new)
            cu = Path(tmp) / f"{variant}.cu"
            cu.write_text(text)
            cmd = [nvcc.knobs().nvcc, *nvcc.BASE_FLAGS, *nvcc.gencode(Arch.SM90A),
                   "-DGEMMFORGE_STANDALONE_MAIN", "-o", str(out / variant), str(cu)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            return f"{variant}: built" if r.returncode == 0 else f"{variant}: {r.stderr[-400:]}"

    with ThreadPoolExecutor() as pool:
        results = list(pool.map(one, PATCHES))
    print("\n".join(results))
    return 0 if all(r.endswith("built") for r in results) else 1


def run(out: Path, repeats: int) -> int:
    missing = [v for v in PATCHES if not (out / v).is_file()]
    if missing:
        print(f"not built: {', '.join(missing)} (run `build` first)", file=sys.stderr)
        return 2
    for shape in SHAPES:
        for _ in range(repeats):
            for variant in PATCHES:
                r = subprocess.run([str(out / variant), *shape.split()], capture_output=True,
                                   text=True)
                line = (r.stdout.strip() or r.stderr.strip()).split(" rel_err=")[-1]
                print(f"{shape.replace(' ', 'x'):>16} {variant:>10}  rel_err={line}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["build", "run"])
    ap.add_argument("out", type=Path, help="folder of the executables")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    return build(args.out) if args.action == "build" else run(args.out, args.repeats)


if __name__ == "__main__":
    sys.exit(main())
