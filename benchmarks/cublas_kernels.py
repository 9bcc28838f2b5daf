"""Which kernel cuBLAS runs per shape (its nvjet name carries tile, cluster and split-K),
and those kernels as cuda_wgmma programs to time beside ours. Needs a CUDA GPU.

    python3 benchmarks/cublas_kernels.py [--shapes 12288x256x16384,8192x8192x8192 | @FILE | grid:...]
                                         [--mirror programs.txt] [--layout nn]

Per shape: torch.matmul (B as K x N, and B stored N x K passed transposed: the NN and TN
calls search.measure.bench times) run under torch.profiler; printed is each call's CUDA kernel
names and times (e.g. "..._tilesize128x256x64_cluster2x1x1_..._execute_segment_k_off_...").

With --mirror FILE: each shape's cuBLAS kernels (NN and TN: search.measure.bench's baseline is the
faster) written as cuda_wgmma programs (backends.cuda_wgmma.cublas_names.mirror: the nvjet
name read column-major, as cuBLAS computes C^T), the distinct ones into FILE, to time beside
the shipped programs (`gemmforge campaign --portfolio all=FILE`; benchmarks/NOTES.md,
"cuBLAS's own kernels").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from gemmforge.backends.cuda_wgmma.cublas_names import mirror
from gemmforge.search.measure.shapes import shape_texts  # --shapes as gemmforge reads it


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"shape {text!r}: write MxNxK, e.g. 8192x8192x8192") from None
    return m, n, k


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="12288x256x16384,12288x8192x1024,8192x8192x8192",
                    help="as gemmforge's --shapes: MxNxK,..., @FILE, grid:CLASSES, sample:N")
    ap.add_argument("--mirror", type=Path,
                    help="write each shape's cuBLAS kernels as cuda_wgmma programs here")
    ap.add_argument("--layout", default="nn", help="--mirror: the layout the programs serve")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
