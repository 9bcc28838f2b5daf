"""Diagnose cuda_wgmma's clusters with layout nn. Builds the programs past verify, runs each on a
NaN-filled C, and prints where C went wrong: the fraction of unwritten (NaN) and of wrong
elements, and which tiles, rows within a tile and columns within a tile hold them. Layout nt
with the same programs is the control. It found (logs/wgmma_cluster_nn_h100.log) that with a
cluster and a warpgroup wider than one 64-column atom, columns past the first atom went wrong
off rank 0 -- the rank bits of the shared address spilling into the wgmma descriptor's
leading-byte offset -- and showed the fix (logs/wgmma_cluster_nn_h100_v12.log: all clean).

    python3 benchmarks/wgmma_cluster_nn.py [--shapes 4096x4096x4096,512x512x512]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

PROGRAMS = [
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c1x1 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c1x2 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/1 pred k1 dp c2x1 nows direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop direct",
    "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x2 coop direct",
    "cuda_wgmma sm_90a 128x64x64 w1x1 s4 sw128 row/1 pred k1 dp c1x2 nows direct",
    "cuda_wgmma sm_90a 128x128x128 w1x1 s3 sw128 row/1 pred k1 dp c1x2 nows direct",
    "cuda_wgmma sm_90a 128x128x64 w1x2 s4 sw128 row/1 pred k1 dp c1x2 coop direct",
    "cuda_wgmma sm_90a 128x128x64 w1x2 s4 sw128 row/1 pred k1 dp c2x1 coop direct",
]


def build(text: str, layout: str):
    """The kernel of `text` for `layout`, f32 accumulate, lowered and built without verify."""
    from gemmforge.backends import registry
    from gemmforge.backends import pipeline
    from gemmforge.ir import Problem, parse
    program = parse(text)
    backend = registry.get(program.backend)
    source = pipeline.lower_stage(backend, program, Problem(256, 256, 256, layout, "f32"))
    return pipeline.load(pipeline.build_stage(backend, source, pipeline.current_target(), None))


def where(mask, bm: int, bn: int) -> str:
    """Which tiles, rows of a tile and columns of a tile `mask` (m x n, bool) marks."""
    import torch
    m, n = mask.shape
    if not mask.any():
        return "none"
    tm, tn = (m + bm - 1) // bm, (n + bn - 1) // bn
    padded = torch.zeros(tm * bm, tn * bn, dtype=torch.bool, device=mask.device)
    padded[:m, :n] = mask
    per_tile = padded.reshape(tm, bm, tn, bn).permute(0, 2, 1, 3)
    hit = per_tile.any(-1).any(-1)
    rows = padded.reshape(tm, bm, tn * bn).any(-1).any(0).nonzero().flatten().tolist()
    cols = padded.reshape(tm * bm, tn, bn).any(0).any(0).nonzero().flatten().tolist()
    first = hit.nonzero()[:6].tolist()
    return (f"{int(hit.sum())}/{tm * tn} tiles (first {first}); rows in tile "
            f"{_spans(rows)}; cols in tile {_spans(cols)}")


def _spans(xs: list[int]) -> str:
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return ",".join(out[:8]) + ("..." if len(out) > 8 else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="4096x4096x4096,512x512x512,1024x768x320")
    ap.add_argument("--only", type=int, nargs="*", help="indices into PROGRAMS")
    args = ap.parse_args()
    import torch
    from gemmforge.ir import parse
    for text in [PROGRAMS[i] for i in args.only] if args.only else PROGRAMS:
        tile = parse(text).tile
        for layout in ("nt", "nn"):
            try:
                kernel = build(text, layout)
            except Exception as e:  # a build failure is a line, not the end of the run
                print(f"{layout} {text}: build failed: {e}")
                continue
            for shape in args.shapes.split(","):
                m, n, k = map(int, shape.split("x"))
                a = torch.randn(m, k, device="cuda", dtype=torch.float16)
                b = torch.randn(k, n, device="cuda", dtype=torch.float16)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
                try:
                    kernel(a, b if layout == "nn" else b.t().contiguous(), out=out)
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    print(f"{layout} {shape} {text}: {e}")
                    continue
                ref = (a.float() @ b.float())
                nan = torch.isnan(out)
                wrong = ~nan & ((out.float() - ref).abs() > 0.05 * ref.abs() + 0.5)
                print(f"{layout} {shape:>16} {' '.join(text.split()[i] for i in (2, 3, 10))}: "
                      f"NaN {nan.float().mean().item():.4f} [{where(nan, tile.bm, tile.bn)}] "
                      f"wrong {wrong.float().mean().item():.4f} "
                      f"[{where(wrong, tile.bm, tile.bn)}]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
