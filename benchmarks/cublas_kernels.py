"""Issue 4's "what limits it": which kernel cuBLAS picks per shape, and the clock and power
the GPU holds while a large GEMM runs.

    python3 benchmarks/cublas_kernels.py [--shapes 12288x256x16384,8192x8192x8192 | @FILE | grid:...]
                                         [--mirror programs.txt] [--layout nn]
                                         [--sustain 8192x8192x8192] [--seconds 5]
                                         [--programs benchmarks/programs/sustain_8192.txt]

Per shape: torch.matmul (B as K x N, and B stored N x K passed transposed: the NN and TN
calls search.measure.bench times) run under torch.profiler; printed is each call's CUDA kernel
names and times (the name carries cuBLAS's tile, cluster and split-K choice, e.g.
"..._tilesize128x256x64_cluster2x1x1_..._execute_segment_k_off_...").

With --mirror FILE: each shape's cuBLAS kernels (NN and TN: search.measure.bench's baseline is the
faster) written as cuda_wgmma programs (mirror(): the nvjet name read column-major, as cuBLAS
computes C^T), the distinct ones into FILE, to time beside the shipped programs (`gemmforge
campaign --portfolio all=FILE`; benchmarks/NOTES.md, thirty-second session).

With --sustain: cuBLAS NN at that shape (then each --program, then cuBLAS again) back to
back for --seconds each while nvidia-smi samples
SM clock, power draw and temperature every 100 ms; printed are the medians and the
TFLOP/s reached, and TFLOP/s per GHz of SM clock against the chip's dense fp16 rate per
GHz (132 SMs x 4096 FLOP per clock on H100/H200: 989 TFLOP/s at 1.83 GHz). A kernel that
holds the same fraction of the per-clock rate is as good as cuBLAS's; a TFLOP/s target
above what the held clock allows needs a higher clock, not a better kernel.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

import torch  # noqa: E402

from clock_under_load import FLOP_PER_SM_CYCLE, run_turn  # noqa: E402

from gemmforge.search.measure.shapes import shape_texts  # noqa: E402  (--shapes as gemmforge reads it)

FLOP_PER_CLOCK = 132 * FLOP_PER_SM_CYCLE  # H100/H200 SXM: dense fp16 tensor FLOP per SM clock


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"shape {text!r}: write MxNxK, e.g. 8192x8192x8192") from None
    return m, n, k


# cuBLAS's Hopper GEMM kernels name their tile, k-step, ring depth and cluster, in cuBLAS's
# column-major terms: the first side of each pair runs along cuBLAS's M, which is our N.
NVJET = re.compile(r"nvjet_sm90_hsh_(?P<along_n>\d+)x(?P<along_m>\d+)_(?P<bk>\d+)x(?P<stages>\d+)_"
                   r"(?P<cluster_n>\d)x(?P<cluster_m>\d)_[hv]_bz(?P<rest>\w*)")
SPLIT_TARGET_CTAS = 128  # the name does not carry the slice count: enough slices for ~a wave


def mirror(kernel_name: str, shape: tuple[int, int, int], layout: str = "nn") -> str | None:
    """cuBLAS's kernel `kernel_name` at `shape` (M, N, K) as a cuda_wgmma program that
    ir.verify accepts for it (the name's ring depth, lowered until it fits), or None: not an
    nvjet GEMM kernel, a tile narrower than one 64-row MMA on our M side (cuBLAS's decode
    kernels: our unswapped kernels cannot take it), or nothing legal."""
    from gemmforge.ir import check, parse, parse_problem
    found = NVJET.search(kernel_name)
    if not found:
        return None
    bm, bn = int(found["along_m"]), int(found["along_n"])
    if bm < 64:
        return None
    m, n, k = shape
    slices = 1
    if "splitK" in found["rest"]:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        slices = max(2, min(8, round(SPLIT_TARGET_CTAS / tiles)))
    consumers = {192: 1, 256: 2}.get(bm, bm // 64)
    problem = parse_problem(f"{m}x{n}x{k} {layout} f32")
    for stages in range(int(found["stages"]), 1, -1):
        text = (f"cuda_wgmma sm_90a {bm}x{bn}x{found['bk']} w{consumers}x1 s{stages} sw128 row/8 "
                f"pred k{slices} dp c{found['cluster_m']}x{found['cluster_n']} coop direct")
        if check(parse(text), problem) is None:
            return text
    return None


def kernels_of(fn) -> list[tuple[str, float]]:
    """(name, µs) of every CUDA kernel one call of `fn` runs, after a warm-up call."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name, e.device_time) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def sustain(m: int, n: int, k: int, seconds: float, program: str | None = None) -> str:
    """One line: `program` (default cuBLAS NN) at m x n x k back to back for `seconds`
    (clock_under_load.run_turn: batches of 10 calls timed with CUDA events, nvidia-smi
    sampling every 100 ms)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    gemm, label = (lambda: torch.matmul(a, b, out=c)), "cuBLAS NN"
    if program:
        from gemmforge.backends.pipeline import compile_and_load
        from gemmforge.ir import Problem, parse
        kernel = compile_and_load(parse(program), Problem(m, n, k))
        gemm, label = (lambda: kernel(a, b, out=c)), program
        torch.testing.assert_close(kernel(a, b), a @ b, rtol=2e-2, atol=1.0)
    for _ in range(3):
        gemm()
    torch.cuda.synchronize()
    flops = 2.0 * m * n * k
    try:
        t = run_turn(gemm, flops, seconds, batch=10, period_ms=100)
    except RuntimeError as e:  # nvidia-smi gave nothing
        return f"{m}x{n}x{k} {label}: {e}"
    per_ghz = t["tflops"] / (t["sm_clock_mhz"] / 1e3)
    return (f"{m}x{n}x{k} {label} for {seconds:.0f} s: {flops / t['tflops'] / 1e6:.1f} us/call, "
            f"{t['tflops']:.0f} TFLOP/s; median SM clock {t['sm_clock_mhz']:.0f} MHz, power "
            f"{t['power_w']:.0f} W, {t['temp_c']:.0f} C ({t['samples']} samples); {per_ghz:.0f} "
            f"TFLOP/s per GHz = {per_ghz / (FLOP_PER_CLOCK / 1e3):.1%} of the dense rate at that clock")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="12288x256x16384,12288x8192x1024,8192x8192x8192",
                    help="as gemmforge's --shapes: MxNxK,..., @FILE, grid:CLASSES, sample:N")
    ap.add_argument("--mirror", type=Path,
                    help="write each shape's cuBLAS kernels as cuda_wgmma programs here")
    ap.add_argument("--layout", default="nn", help="--mirror: the layout the programs serve")
    ap.add_argument("--sustain", help="MxNxK to run back to back while sampling clocks")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--programs", type=Path,
                    help="gemmforge programs to sustain after cuBLAS, one per line")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    mirrors: list[str] = []
    for text in shape_texts(args.shapes):
        m, n, k = parse_shape(text)
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b_kn = torch.randn(k, n, device="cuda", dtype=torch.float16)
        b_nk = b_kn.t().contiguous()
        for label, fn in (("NN", lambda: torch.matmul(a, b_kn)),
                          ("TN", lambda: torch.matmul(a, b_nk.t()))):
            for name, us in kernels_of(fn):
                print(f"{text:>18s} {label} {us:9.1f} us  {name}")
                program = mirror(name, (m, n, k), args.layout)
                if program and program not in mirrors:
                    mirrors.append(program)
        del a, b_kn, b_nk
    if args.mirror:
        args.mirror.write_text(f"# cuBLAS's kernels at {args.shapes} as cuda_wgmma programs "
                               "(benchmarks/cublas_kernels.py --mirror)\n" + "\n".join(mirrors) + "\n")
        print(f"wrote {len(mirrors)} programs to {args.mirror}")
    if args.sustain:
        shape = parse_shape(args.sustain)
        programs = [] if args.programs is None else [
            line.strip() for line in args.programs.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
        for program in (None, *programs, None):
            print(sustain(*shape, args.seconds, program), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
