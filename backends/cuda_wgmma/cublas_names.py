"""cuBLAS's Hopper GEMM kernels (nvjet) read as cuda_wgmma programs.

An nvjet kernel's name carries its tile, k-step, ring depth and cluster, in cuBLAS's
column-major terms: the first side of each pair runs along cuBLAS's M, which is our N
(cuBLAS computes C^T). `mirror` writes that kernel as the cuda_wgmma program of the same
tile and cluster, so the campaign can time it beside ours (`--portfolio all=FILE`).
"""
from __future__ import annotations

import math
import re

from ...ir import check, parse, parse_problem

NVJET = re.compile(r"nvjet_sm90_hsh_(?P<along_n>\d+)x(?P<along_m>\d+)_(?P<bk>\d+)x(?P<stages>\d+)_"
                   r"(?P<cluster_n>\d)x(?P<cluster_m>\d)_[hv]_bz(?P<rest>\w*)")
SPLIT_TARGET_CTAS = 128  # the name does not carry the slice count: enough slices for ~a wave
MMA_ROWS = 64  # one wgmma's M side: a narrower tile on our M side needs a swapped kernel


def mirror(kernel_name: str, shape: tuple[int, int, int], layout: str = "nn") -> str | None:
    """cuBLAS's kernel `kernel_name` at `shape` (M, N, K) as a cuda_wgmma program that
    ir.verify accepts for it (the name's ring depth, lowered until it fits), or None: not an
    nvjet GEMM kernel, a tile narrower than one 64-row MMA on our M side (cuBLAS's decode
    kernels: our unswapped kernels cannot take it), or nothing legal."""
    found = NVJET.search(kernel_name)
    if not found:
        return None
    bm, bn = int(found["along_m"]), int(found["along_n"])
    if bm < MMA_ROWS:
        return None
    m, n, k = shape
    slices = 1
    if "splitK" in found["rest"]:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        slices = max(2, min(8, round(SPLIT_TARGET_CTAS / tiles)))
    consumers = {192: 1, 256: 2}.get(bm, bm // MMA_ROWS)
    problem = parse_problem(f"{m}x{n}x{k} {layout} f32")
    for stages in range(int(found["stages"]), 1, -1):
        text = (f"cuda_wgmma sm_90a {bm}x{bn}x{found['bk']} w{consumers}x1 s{stages} sw128 row/8 "
                f"pred k{slices} dp c{found['cluster_m']}x{found['cluster_n']} coop direct")
        if check(parse(text), problem) is None:
            return text
    return None
