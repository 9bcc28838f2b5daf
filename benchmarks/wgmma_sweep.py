"""cuda_wgmma on the GPU machine: a smoke run of standalone self-tests, then timing against
cuBLAS (torch.matmul, best of NN and TN) in the same process.

    python3 benchmarks/wgmma_sweep.py --smoke                # self-tests, each under a timeout
    python3 benchmarks/wgmma_sweep.py --out results.csv      # timing at 4096^3 and 8192^3

Smoke: every program x (layout, acc) is emitted as a standalone .cu, built with nvcc and run
as its own process on a few shapes with a timeout, so a hung pipeline (a barrier waited on
forever) shows up as HANG for that program alone, not as a dead run.

Timing: search.measure.bench.run_request for every (program, problem): the correctness gate first,
then the "kernel" protocol (CUDA graphs of back-to-back launches, L2 warm, candidate and
cuBLAS NN/TN interleaved over `--rounds` rounds, median) and the "call" protocol (one
Python call + synchronize, fresh inputs). Prints a table last; --out writes the rows as CSV
(columns as benchmarks/README.md asks: m,n,k,device,backend,program,kernel_us,cublas_us,
call_us,cublas_call_us, then layout, acc, TFLOP/s, ratio, rel_err, error).
"""
from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.backends import pipeline  # noqa: E402
from gemmforge.emit import build_selftest, emit  # noqa: E402
from gemmforge.ir import Problem, parse  # noqa: E402

PROGRAMS = [
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 dp c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w1x2 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 256x128x64 w4x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x2 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/4 pred k1 persistent c2x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 col/8 pred k1 persistent c2x1 coop direct",
]
SHAPES = ["2048x2048x2048", "4096x4096x4096", "6144x6144x6144", "8192x8192x8192"]
SMOKE_PROGRAMS = [
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 dp c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 col/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w2x1 s5 sw128 col/4 padop k3 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 64x128x128 w1x1 s3 sw128 row/1 padop k2a dp c1x1 nows direct",
    "cuda_wgmma sm_90a 256x128x64 w4x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 padop k2 dp c2x2 nows direct",
]
SMOKE_SHAPES = [(256, 256, 256), (1000, 4096, 336), (4096, 64, 8192)]
SMOKE_PAD_SHAPES = [(17, 33, 65), (1, 1, 1)]
KINDS = [("nt", "f32"), ("nn", "f32"), ("nt", "f16"), ("nn", "f16")]
SMOKE_TIMEOUT_S = 20
SELFTEST_LINE = re.compile(r"rel_err=(\S+) .* time=(\S+) us (\S+) TFLOP/s (PASS|FAIL)")


def _short(text: str) -> str:
    return " ".join(text.split()[2:])


def smoke(programs: list[str], workdir: Path) -> list[list[str]]:
    """Build every self-test in parallel, run each shape in its own process; table rows."""
    jobs = [(text, lay, acc) for text in programs for lay, acc in KINDS]

    def build(job):
        text, lay, acc = job
        program = parse(text)
        out = workdir / f"{program.key}-{lay}-{acc}"
        try:
            return job, build_selftest(emit(Problem(256, 256, 256, lay, acc), program, out),
                                       program)
        except Exception as e:  # a build failure is a row, not the end of the run
            return job, e
    rows = []
    with ThreadPoolExecutor(16) as pool:
        built = list(pool.map(build, jobs))
    for (text, lay, acc), exe in built:
        shapes = SMOKE_SHAPES + (SMOKE_PAD_SHAPES if " padop " in text else [])
        for m, n, k in shapes:
            rows.append([_short(text), lay, acc, f"{m}x{n}x{k}", *_run_selftest(exe, m, n, k)])
    return rows


def _run_selftest(exe, m: int, n: int, k: int) -> list[str]:
    if isinstance(exe, Exception):
        return ["-", "-", "BUILD", str(exe).splitlines()[0][:60]]
    try:
        done = subprocess.run([str(exe), str(m), str(n), str(k)], capture_output=True,
                              text=True, timeout=SMOKE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return ["-", "-", "HANG", f"> {SMOKE_TIMEOUT_S} s"]
    found = SELFTEST_LINE.search(done.stdout)
    if not found:
        return ["-", "-", "ERROR", (done.stdout + done.stderr).strip()[-60:]]
    err, us, tflops, verdict = found.groups()
    return [err, tflops, verdict, f"{float(us):.1f} us"]


def sweep(programs: list[str], problems: list[Problem], rounds: int, on_row=None) -> list[dict]:
    """Gate and time every (program, problem) with search.measure.bench; one dict per pair."""
    from gemmforge.ir.verify import check
    from gemmforge.search.measure import bench
    from gemmforge.search.measure.records import ArtifactRecord, BenchSettings, MeasureRequest
    info = bench.setup(0)
    target = pipeline.current_target()
    # m, n, k are run-time arguments: one build per (program, layout, acc) serves every shape
    legal = [(t, p) for p in problems for t in programs if check(parse(t), p) is None]
    print(f"{len(problems) * len(programs) - len(legal)} (program, problem) pairs declined by verify")
    kinds = {(text, p.layout, p.acc): p for text, p in legal}

    def build(kind):
        try:
            return kind, pipeline.compile(parse(kind[0]), kinds[kind], target)
        except Exception as e:
            return kind, e
    with ThreadPoolExecutor(16) as pool:
        arts = dict(pool.map(build, kinds))
    # clusters last: should one hang, the rest is measured already
    built = [((text, p), arts[(text, p.layout, p.acc)]) for last in (False, True)
             for p in problems for text in programs
             if (" c1x1 " not in text) == last and (text, p) in legal]
    settings = BenchSettings(rounds=rounds, protocols=("kernel", "call"), exact_check=False,
                             call_repeats=3)
    rows = []
    for (text, p), art in built:
        row = {"m": p.m, "n": p.n, "k": p.k, "device": info["device"], "backend": "cuda_wgmma",
               "program": text, "layout": p.layout.value, "acc": p.acc.value, "error": ""}
        try:
            if isinstance(art, Exception):
                raise art
            r = bench.run_request(MeasureRequest.make(parse(text), p, settings),
                                  ArtifactRecord.from_artifact(art))
            row.update(kernel_us=r.kernel_us, cublas_us=r.cublas_us, call_us=r.call_us,
                       cublas_call_us=r.cublas_call_us, rel_err=r.rel_err,
                       tflops=p.flops / r.kernel_us * 1e-6,
                       cublas_tflops=p.flops / r.cublas_us * 1e-6,
                       ratio=r.cublas_us / r.kernel_us, spread=r.spread)
        except Exception as e:  # a wrong answer or a CUDA error: recorded, the run goes on
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
        rows.append(row)
        print(_sweep_line(row), flush=True)
        if on_row:
            on_row(row)
    return rows


def _compact(text: str) -> str:
    """The tokens that vary in this sweep: tile, warps, stages, raster, schedule, cluster."""
    t = text.split()
    return " ".join([t[2], t[3], t[4], t[6], t[9], t[10], t[11]])


def _sweep_line(r: dict) -> str:
    head = f"{r['m']}x{r['n']}x{r['k']} {r['layout']} {_compact(r['program']):<48}"
    if r["error"]:
        return f"{head} FAILED {r['error'][:70]}"
    return (f"{head} {r['kernel_us']:8.1f}us {r['tflops']:5.0f} TF/s | cuBLAS "
            f"{r['cublas_tflops']:5.0f} | x{r['ratio']:.3f} sp {r['spread']:.2f}")


def _best_lines(rows: list[dict]) -> list[str]:
    """Per (shape, layout): the fastest program and its ratio to cuBLAS."""
    best: dict = {}
    for r in rows:
        key = (r["m"], r["n"], r["k"], r["layout"])
        if not r["error"] and (key not in best or r["tflops"] > best[key]["tflops"]):
            best[key] = r
    return [f"best {m}x{n}x{k} {lay}: {r['tflops']:.0f} TF/s vs cuBLAS {r['cublas_tflops']:.0f}"
            f" x{r['ratio']:.3f}  {_compact(r['program'])}"
            for (m, n, k, lay), r in sorted(best.items())]


COLUMNS = ["m", "n", "k", "device", "backend", "program", "kernel_us", "cublas_us", "call_us",
           "cublas_call_us", "layout", "acc", "tflops", "cublas_tflops", "ratio", "spread",
           "rel_err", "error"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="run standalone self-tests only")
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    ap.add_argument("--layouts", nargs="*", default=["nt", "nn"])
    ap.add_argument("--acc", default="f32")
    ap.add_argument("--programs", nargs="*", default=None, help="program texts to time")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, help="CSV file for the timing rows")
    args = ap.parse_args(argv)
    start = time.time()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            rows = smoke(args.programs or SMOKE_PROGRAMS, Path(tmp))
        programs = list(dict.fromkeys(r[0] for r in rows))
        for i, text in enumerate(programs):
            print(f"P{i}: {text}")
        for row in rows:
            print(f"P{programs.index(row[0])} " + " ".join(f"{c:<9}" for c in row[1:]))
        bad = [r for r in rows if r[6] != "PASS"]
        print(f"smoke: {len(rows) - len(bad)}/{len(rows)} PASS in {time.time() - start:.0f} s")
        return 1 if bad else 0
    problems = [Problem(*map(int, s.split("x")), layout, args.acc)
                for s in args.shapes for layout in args.layouts]
    writer = None
    if args.out:  # row by row: a run cut short keeps what it measured
        args.out.parent.mkdir(parents=True, exist_ok=True)
        out = args.out.open("w", newline="")
        writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()

    def on_row(row):
        if writer:
            writer.writerow(row)
            out.flush()
    rows = sweep(args.programs or PROGRAMS, problems, args.rounds, on_row)
    print(f"\n== cuda_wgmma vs cuBLAS ({time.time() - start:.0f} s; kernel time, median)")
    for r in rows:
        print(_sweep_line(r))
    print(*_best_lines(rows), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
