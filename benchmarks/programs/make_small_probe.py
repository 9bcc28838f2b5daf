"""Writes benchmarks/programs/small_probe_v18b.txt: issue 20's second probe, the new forms
(operand swap with token-side tiles in steps of 8, split-K reduced in the kernel) at the
deepest ring that verify accepts, beside the first probe's winners.

    python3 benchmarks/programs/make_small_probe.py
"""
from pathlib import Path

from gemmforge.ir import Problem, check, parse

HERE = Path(__file__).parent
LLM = Problem(64, 4096, 4096, "nt", "f32")
NN = Problem(256, 1024, 4096, "nn", "f32")


# the first probe's winners at its 16 shapes (benchmarks/README.md, issue 20's first probe)
FIRST_WINNERS = {
    f"cuda_wgmma sm_90a 64x{bn}x64 w1x1 s8 sw128 row/8 pred {k} dp c1x1 coop direct"
    for bn, k in ((128, "k1"), (128, "k2"), (128, "k4"), (64, "k1"), (64, "k2"), (64, "k8"))
} | {f"triton sm_90a 64x{bn}x64 w2x2 s4 swnone row/8 pred {k} dp c1x1 nows direct"
     for bn, k in ((64, "k1"), (64, "k4"), (128, "k4"))}


def deepest(template: str, problem: Problem) -> str | None:
    """`template` with the most stages (16 down to 3) that verify accepts for `problem`."""
    for s in range(16, 2, -1):
        text = template.format(s=s)
        if check(parse(text), problem) is None:
            return text
    return None


def programs() -> list[str]:
    out = []
    for bm in (8, 16, 32, 40, 48, 64, 128):
        for bn in (64, 128):
            for k in ("k1", "k2i", "k4i"):
                t = deepest(f"cuda_wgmma sm_90a {bm}x{bn}x64 w1x1 s{{s}} sw128 row/8 pred {k} dp "
                            f"c1x1 coop direct swap", LLM)
                out += [t] if t else []
    for bn, ks in ((64, ("k2i", "k4i", "k8i")), (128, ("k2i", "k4i"))):
        for k in ks:
            t = deepest(f"cuda_wgmma sm_90a 64x{bn}x64 w1x1 s{{s}} sw128 row/8 pred {k} dp c1x1 "
                        f"coop direct", NN)
            out += [t] if t else []
    return out


def mid_programs() -> list[str]:
    """The third probe: medium shapes are L2-bound (benchmarks/NOTES.md), so larger tiles,
    split-K in the kernel to fill the SMs without more operand traffic, and multicast
    clusters; and 80-row token tiles for M = 77 (one tile, split instead of two tiles)."""
    out = []
    for tile, warps in (("64x128", "w1x1"), ("128x64", "w1x1"), ("128x128", "w1x1"),
                        ("128x128", "w2x1"), ("128x256", "w2x1")):
        for k in ("k1", "k2i", "k4i", "k8i"):
            for c in ("c1x1", "c2x1", "c1x2"):
                t = deepest(f"cuda_wgmma sm_90a {tile}x64 {warps} s{{s}} sw128 row/8 pred {k} dp "
                            f"{c} coop direct", NN)
                out += [t] if t else []
    for bn in (64, 128, 256):
        for k in ("k1", "k2i", "k4i"):
            t = deepest(f"cuda_wgmma sm_90a 80x{bn}x64 w1x{max(1, bn // 128)} s{{s}} sw128 row/8 "
                        f"pred {k} dp c1x1 coop direct swap", LLM)
            out += [t] if t else []
    return out


if __name__ == "__main__":
    mid = mid_programs()
    (HERE / "small_probe_v18c.txt").write_text(
        "# issue 20's third probe (make_small_probe.py): larger tiles with in-kernel split-K "
        "and clusters, 80-row swapped token tiles\n" + "\n".join(mid) + "\n")
    print(len(mid), "programs in the third probe")
    first = [t for t in (HERE / "small_probe_v18.txt").read_text().splitlines()
             if t and not t.startswith("#") and t in FIRST_WINNERS]
    body = programs() + first
    (HERE / "small_probe_v18b.txt").write_text(
        "# issue 20's second probe (make_small_probe.py): swap + token tiles, in-kernel split-K,"
        " and the first probe's list\n" + "\n".join(body) + "\n")
    print(len(body), "programs")
