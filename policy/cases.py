"""The heuristic's measured special cases: programs that led where a round of measurements
found them leading, each with the condition it led under and where the evidence lives.

`CASES` is one ordered table; policy.heuristic proposes, before its own rules, the programs
of every case whose condition holds, in table order, each once. A condition is a `When`
record: inclusive ranges on M, N, K and M x N, divisibility, a window on the count of output
tiles of a given size, and the problem's FLOP class. A program text may hold `{pad}`: `pred`
where TMA reads the operands' rows as they are (K % 8 == 0, and N % 8 == 0 for layout nn),
else `padop` (the operands copied to padded buffers).

    applying(problem)        # the cases whose condition holds, in table order
    programs(problem)        # their program texts, in order, each once
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.devices import H100
from ..ir.program import Layout, Problem

SMS = H100.sms          # multiprocessors on H100/H200: the wave the windows count against
SEED_MIN_FLOPS = 1e10   # 2mnk from which the large class's seeds fill the chip
NOTES = "benchmarks/NOTES.md"

Range = tuple[int | None, int | None]
"""Inclusive (lo, hi); None leaves that end open."""


def _within(value: int, bounds: Range) -> bool:
    lo, hi = bounds
    return (lo is None or value >= lo) and (hi is None or value <= hi)


@dataclass(frozen=True, slots=True)
class Tiles:
    """A window on ceil(M / bm) x ceil(N / bn), the output tiles of bm x bn."""

    bm: int
    bn: int
    count: Range

    def holds(self, problem: Problem) -> bool:
        tiles = math.ceil(problem.m / self.bm) * math.ceil(problem.n / self.bn)
        return _within(tiles, self.count)


@dataclass(frozen=True, slots=True)
class When:
    """A condition on a problem: every field given must hold. `large`: True for 2mnk >=
    SEED_MIN_FLOPS, False below it."""

    large: bool | None = None
    m: Range = (None, None)
    n: Range = (None, None)
    k: Range = (None, None)
    mn: Range = (None, None)
    m_multiple_of: int = 1
    n_multiple_of: int = 1
    tiles: Tiles | None = None

    def holds(self, problem: Problem) -> bool:
        return ((self.large is None or (problem.flops >= SEED_MIN_FLOPS) == self.large)
                and _within(problem.m, self.m) and _within(problem.n, self.n)
                and _within(problem.k, self.k) and _within(problem.m * problem.n, self.mn)
                and problem.m % self.m_multiple_of == 0 and problem.n % self.n_multiple_of == 0
                and (self.tiles is None or self.tiles.holds(problem)))


@dataclass(frozen=True, slots=True)
class Case:
    """Programs proposed first where `applies` holds and `unless` (if given) does not;
    `evidence` names the benchmarks/NOTES.md section holding the measurement, and its figure."""

    name: str
    programs: tuple[str, ...]
    applies: When
    evidence: str
    unless: When | None = None

    def holds(self, problem: Problem) -> bool:
        return self.applies.holds(problem) and not (self.unless and self.unless.holds(problem))


_WG = "cuda_wgmma sm_90a "
_SMALL = "sw128 row/8 {pad} "  # the small forms' swizzle, raster and padding
_LONG_K = When(k=(2048, None))  # K from which a split or a 128-deep step paid in the sweeps
_SPLIT_SWAP = When(n=(None, 64 * SMS - 1), k=(2048, None))  # N's 64-wide tiles under a wave
_HOPPER = f"{NOTES}, Hopper kernels (cuda_wgmma)"
_SPLITS = f"{NOTES}, Stream-K, split-K, and the L2 request coalescer"
_SMALL_NOTES = f"{NOTES}, Small shapes and pdl"
_LARGE = f"{NOTES}, Power and clocks: the large class (2mnk >= 1e11)"
_OUTPUT_BOUND = When(k=(None, 128), mn=(3 << 23, None))
_OUTPUT_BOUND_FORMS = (_WG + "128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop direct",
                       _WG + "128x256x128 w2x1 s2 sw128 row/8 pred k1 persistent c1x1 coop direct")
_OUTPUT_BOUND_EVIDENCE = (
    f"{_HOPPER}, Direct epilogue: K <= 128 over M x N >= 3 * 2^23, 128x256 persistent coop "
    "with direct stores: 45 H200 nn rows changed, +5.2 % warm, +6.7 % cold (16384x16384x128 "
    f"195.8 -> 178.3 us); {_SMALL_NOTES}, Output-bound shapes")


def _decode(token: int, low: int, stages: int) -> Case:
    # 256-deep stages of token + 64 weight rows: as many as 227 KB of shared memory holds
    return Case(f"decode-{token}", (f"{_WG}{token}x64x256 w1x1 s{stages} {_SMALL}k1 dp c1x1 coop "
                                    "direct swap pdl",),
                When(large=False, m=(low, token), k=_LONG_K.k),
                f"{_SMALL_NOTES}, Decode (M = 1..32): swapped programs stream the weights at "
                "0.965-0.975 of a same-size copy at the 14336- and 28672-wide layers")


def _swap(token: int, low: int, split: bool) -> Case:
    text = (f"{_WG}{token}x64x64 w1x1 s16 {_SMALL}{'k2i' if split else 'k1'} dp c1x1 coop direct "
            "swap pdl")
    return Case(f"swap-{token}" + ("-split" if split else ""), (text,),
                When(large=False, m=(low, token), n=_SPLIT_SWAP.n if split else (None, None),
                     k=_SPLIT_SWAP.k if split else (None, None)),
                f"{_SMALL_NOTES}, Decode (M = 1..32): the token side on wgmma's narrow side; "
                "split in the kernel where N's 64-wide tiles number under a wave",
                unless=None if split else _SPLIT_SWAP)


def _small(name: str, text: str, applies: When, evidence: str) -> Case:
    """A cuda_wgmma form below SEED_MIN_FLOPS: with pdl, as every launch there."""
    return Case(name, (_WG + text.format(small=_SMALL) + " pdl",), applies, evidence)


CASES: tuple[Case, ...] = (
    # leads at any size
    Case("output-bound-pdl", tuple(t + " pdl" for t in _OUTPUT_BOUND_FORMS),
         When(large=False, k=_OUTPUT_BOUND.k, mn=_OUTPUT_BOUND.mn), _OUTPUT_BOUND_EVIDENCE),
    Case("output-bound", _OUTPUT_BOUND_FORMS,
         When(large=True, k=_OUTPUT_BOUND.k, mn=_OUTPUT_BOUND.mn), _OUTPUT_BOUND_EVIDENCE),
    Case("long-k-split-16",
         (_WG + "128x128x64 w2x1 s6 sw128 row/8 pred k8 dp c1x1 coop direct",),
         When(m=(256, None), n=(256, None), k=(16384, None), tiles=Tiles(128, 128, (16, 16))),
         f"{_SPLITS}, Split-K at few-tile long-K shapes: a 128x128 tile split through the "
         "workspace, 14 of 152 H200 nn rows changed, +2.0 % warm, +3.1 % cold"),
    Case("long-k-split-32",
         (_WG + "128x128x64 w2x1 s7 sw128 row/8 pred k4 dp c1x1 coop direct",),
         When(m=(256, None), n=(256, None), k=(12288, None), tiles=Tiles(128, 128, (32, 32))),
         f"{_SPLITS}, Split-K at few-tile long-K shapes: 2048x256x16384 0.92 -> 0.995"),
    Case("stream-n128",
         (_WG + "192x64x64 w1x1 s7 sw128 row/8 pred k1 dp c1x2 coop direct pdl",),
         When(n=(128, 128), k=(1024, None), tiles=Tiles(192, 64, (120, SMS))),
         f"{_SPLITS}, Narrow sides streaming the other operand: 192x64 c1x2 took "
         "12288x128x2048 from 0.89x to 1.05x (20 nn rows, +5.2 % warm)"),
    Case("stream-m128-192",  # M <= 128 is one 128-row tile: the window counts N's tiles
         (_WG + "64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c1x1 coop direct l2first",),
         When(m=(None, 128), k=(1024, None), tiles=Tiles(128, 192, (60, 66))),
         f"{_SPLITS}, Narrow sides streaming the other operand: 64x192 with B evict-first"),
    Case("stream-m128-128",
         (_WG + "64x128x64 w1x1 s9 sw128 row/8 pred k1 dp c1x1 coop direct l2first",),
         When(m=(None, 128), k=(1024, None), tiles=Tiles(64, 128, (96, SMS))),
         f"{_SPLITS}, Narrow sides streaming the other operand: 64x128 tiles, 96-128 CTAs"),
    # below SEED_MIN_FLOPS: cuda_wgmma's small and medium forms
    _decode(8, 1, 6), _decode(16, 9, 5), _decode(32, 17, 4),
    *(_swap(token, low, split) for token, low in ((8, 1), (16, 9), (32, 17), (48, 33))
      for split in (True, False)),
    _small("many-tiles", "128x128x64 w1x1 s6 {small}k1 persistent c1x1 pingpong tma",
           When(large=False, tiles=Tiles(64, 64, (3 * SMS, None))),
           f"{_HOPPER}, TMA epilogue and ping-pong consumers: 128x128 ping-pong read 1.097"),
    # long K over under half a wave of 64x64 tiles: split so tiles x slices nears one wave
    *(_small(f"few-tiles-k{slices}", f"64x64x64 w1x1 s8 {{small}}k{slices} dp c1x1 coop direct",
             When(large=False, k=_LONG_K.k, tiles=Tiles(64, 64, window)),
             f"{_SPLITS}, Split-K at few-tile long-K shapes")
      for slices, window in ((8, (1, 16)), (4, (17, 33)), (2, (34, SMS // 2 - 1)))),
    _small("long-k-128-deep", "64x64x128 w1x1 s6 {small}k1 dp c1x1 coop direct",
           When(large=False, k=_LONG_K.k, tiles=Tiles(64, 64, (SMS // 2, SMS - 1))),
           f"{_HOPPER}, Bytes in flight: bk=128 took 4096x64x4096 from 0.725 to 0.953 "
           "(64x64x128 s6); bk=128 twins moved the grid below 1e11 1.084 -> 1.101 warm"),
    _small("long-k-128-deep-wide", "64x128x128 w1x1 s4 {small}k1 dp c1x1 coop direct",
           When(large=False, k=_LONG_K.k, tiles=Tiles(64, 64, (SMS, None))),
           f"{_HOPPER}, Bytes in flight: bk=128 twins moved the grid below 1e11 1.084 -> 1.101"),
    _small("deep-ring", "64x64x64 w1x1 s8 {small}k1 dp c1x1 coop direct",
           When(large=False, tiles=Tiles(64, 64, (None, SMS - 1))),
           f"{_HOPPER}, Bytes in flight, not sync work, is what the ring buys"),
    _small("deep-ring-wide", "64x128x64 w1x1 s8 {small}k1 dp c1x1 coop direct",
           When(large=False, tiles=Tiles(64, 64, (SMS, None))),
           f"{_HOPPER}, Bytes in flight, not sync work, is what the ring buys"),
    # the large class: 192-wide tiles where 192 divides the side, then the seeds
    Case("192-rows-narrow-n",
         ("cute_cpp sm_90a 192x128x64 w1x2 s5 swnone row/8 pred k1 persistent c1x1 coop tma",),
         When(large=True, m_multiple_of=192, n=(None, 256)),
         f"{_LARGE}, Two-CTA multicast and the largest tiles: 192-wide tiles win where 192 "
         "divides the side (12288x256x16384: one 192x128 tile a CTA, one wave) and read "
         "0.50-0.68x over a ragged last row"),
    Case("192-rows",
         ("cute_cpp sm_90a 192x128x64 w1x1 s4 swnone row/8 pred k1 persistent c1x1 pingpong tma",
          _WG + "192x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 pingpong tma"),
         When(large=True, m_multiple_of=192, n=(257, None)),
         f"{_HOPPER}, TMA epilogue and ping-pong consumers: 192x128 ping-pong made 8192^3 "
         "1.05-1.06x; at M = 12288 1.03-1.13x, cuda_wgmma 1.10-1.15x at K = 1024"),
    Case("192-cols-short-m",
         ("cute_cpp sm_90a 128x192x64 w2x1 s5 swnone row/8 pred k1 persistent c1x1 coop tma",),
         When(large=True, n_multiple_of=192, m=(None, 512)),
         f"{_LARGE}, Two-CTA multicast and the largest tiles: 128x192 where M is short and "
         "192 divides N (512x12288x8192)"),
    # per backend in the order of their geomean over the large shapes (cuda_wgmma: 1.008,
    # 0.991, 0.989, ...); a stream-K program runs as its persistent twin wherever its
    # launcher shares no tiles
    Case("large-seeds", (
        _WG + "128x128x64 w1x1 s6 sw128 row/4 pred k1 streamk c1x1 pingpong tma",
        _WG + "128x256x64 w2x1 s4 sw128 row/8 pred k1 streamk c1x1 coop tma",
        _WG + "128x128x64 w1x1 s6 sw128 row/4 pred k1 persistent c1x1 pingpong tma",
        _WG + "256x128x64 w2x1 s4 sw128 row/8 pred k1 streamk c1x1 coop tma",
        "cute_dsl sm_90a 128x256x64 w8x1 s3 sw128 row/8 pred k1 persistent c2x1 coop tma",
        _WG + "128x128x64 w1x1 s6 sw128 row/8 pred k1 streamk c1x1 pingpong tma",
        _WG + "128x128x64 w1x1 s5 sw128 row/4 pred k1 persistent c1x1 pingpong tma",
        "cute_cpp sm_90a 256x128x64 w1x2 s4 swnone col/8 pred k1 persistent c1x1 coop tma",
        "cute_cpp sm_90a 128x256x64 w1x2 s4 swnone row/8 pred k1 persistent c1x1 coop tma",
        "cute_cpp sm_90a 128x256x64 w2x1 s3 swnone row/8 pred k1 streamk c1x1 coop tma",
        "triton sm_90a 128x256x64 w2x4 s3 swnone row/8 pred k1 persistent c1x1 nows tma"),
        When(large=True),
        f"{_HOPPER}, TMA epilogue and ping-pong consumers (128x128 ping-pong 1.097); Stream-K "
        "as heads and tails: 1-2.5 % over persistent where the last wave is 0.88-0.97 full"),
)


def _pad(problem: Problem) -> str:
    aligned = problem.k % 8 == 0 and (problem.layout == Layout.NT or problem.n % 8 == 0)
    return "pred" if aligned else "padop"


def applying(problem: Problem) -> list[Case]:
    """The cases of CASES whose condition holds for `problem`, in table order."""
    return [case for case in CASES if case.holds(problem)]


def programs(problem: Problem) -> list[str]:
    """Program texts of the cases that hold for `problem`, in table order, each once."""
    pad = _pad(problem)
    texts = (t.format(pad=pad) for case in applying(problem) for t in case.programs)
    return list(dict.fromkeys(texts))

