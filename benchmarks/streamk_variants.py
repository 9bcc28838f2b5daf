"""Where cuda_wgmma's stream-K loses its time: the same program built five ways as standalone
self-test executables (kernel, launcher and main from `gemmforge emit`), then each timed at a
few shapes. The variants patch the emitted source (they are diagnostics, not programs):

  persistent  schedule persistent
  streamk     schedule streamk, as built
  no_wait     streamk, the owner does not wait for the flags (sums may be wrong)
  no_fixup    streamk, no workspace slots written or added (sums wrong)
  no_share    streamk code, but the launcher shares no tiles (sk_tiles = 0)

    python3 benchmarks/streamk_variants.py build .carry/skdbg        # CPU machine, nvcc
    python3 benchmarks/streamk_variants.py run .carry/skdbg          # GPU machine

With `build --trace`, every consumer warpgroup also records, per unit, the global timer
before its turn wait, after it, after its mainloop and after its epilogue (or its stream-K
publish), and `run --trace DIR` writes each variant's last launch there; `summary DIR`
prints, per variant and shape, where the CTAs' time went (when the whole tiles ended, the
longest head and spare, the whole tiles' mainloops and epilogues).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

from gemmforge.compiler import nvcc  # noqa: E402
from gemmforge.emit import emit  # noqa: E402
from gemmforge.ir import Arch, Problem, parse  # noqa: E402

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
}

# The trace: per CTA, consumer and unit (the consumer's n-th), 8 words: tile << 32 | kt_begin
# << 16 | kt_end, then global-timer ns before the turn wait, after it, after the mainloop,
# after the epilogue, and the SM id.
TRACE_CTAS, TRACE_UNITS, TRACE_WORDS = 160, 64, 8
TRACE_PATCHES = [
    ("// A consumer warpgroup: every unit of this CTA", f"""\
constexpr int kTraceCtas = {TRACE_CTAS}, kTraceUnits = {TRACE_UNITS};
__device__ unsigned long long g_trace[kTraceCtas][2][kTraceUnits][{TRACE_WORDS}];
__device__ __forceinline__ unsigned long long gf_now() {{
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}}
__device__ __forceinline__ void gf_trace(int c, int n, const Unit& w, unsigned long long tw,
                                         unsigned long long t0, unsigned long long t1) {{
  if (threadIdx.x % kWarpgroupThreads != 0 || blockIdx.x >= kTraceCtas || n >= kTraceUnits) return;
  unsigned long long* e = g_trace[blockIdx.x][c][n];
  unsigned int sm;
  asm volatile("mov.u32 %0, %smid;" : "=r"(sm));
  e[0] = (unsigned long long)w.tile << 32 | (unsigned long long)w.kt_begin << 16 | w.kt_end;
  e[1] = tw; e[2] = t0; e[3] = t1; e[4] = gf_now(); e[5] = sm;
}}

// A consumer warpgroup: every unit of this CTA"""),
    ("    if (kPingpong && turn > 0) mbar_wait(r.turn(c), (c == 0 ? mine - 1 : mine) & 1);\n",
     "    const unsigned long long gf_tw = gf_now();\n"
     "    if (kPingpong && turn > 0) mbar_wait(r.turn(c), (c == 0 ? mine - 1 : mine) & 1);\n"
     "    const unsigned long long gf_t0 = gf_now();\n"),
    ("    wgmma_wait<0>();\n    fence_acc(acc);\n",
     "    wgmma_wait<0>();\n    fence_acc(acc);\n    const unsigned long long gf_t1 = gf_now();\n"),
    ("    else store_acc(args, w, row0, col0, acc);\n  }\n",
     "    else store_acc(args, w, row0, col0, acc);\n"
     "    gf_trace(c, mine - 1, w, gf_tw, gf_t0, gf_t1);\n  }\n"),
    ("  const bool ok = rel == rel", """\
  if (const char* path = std::getenv("GF_TRACE")) {
    std::vector<unsigned long long> trace(sizeof(gf::g_trace) / sizeof(unsigned long long));
    GF_CHECK(cudaMemcpyFromSymbol(trace.data(), gf::g_trace, sizeof(gf::g_trace)));
    if (FILE* f = std::fopen(path, "wb")) {
      std::fwrite(trace.data(), sizeof(unsigned long long), trace.size(), f);
      std::fclose(f);
    }
  }
  const bool ok = rel == rel"""),
]
# in stream-K builds only: a published part's record (it skips the epilogue)
TRACE_PUBLISH = ("      sk_publish(args, w, c, place, acc);\n",
                 "      sk_publish(args, w, c, place, acc);\n"
                 "      gf_trace(c, mine - 1, w, gf_tw, gf_t0, gf_t1);\n")


def build(out: Path, trace: bool = False) -> int:
    out.mkdir(parents=True, exist_ok=True)
    problem = Problem(8192, 8192, 8192, "nn", "f32")

    def one(variant: str) -> str:
        schedule, patches = PATCHES[variant]
        with tempfile.TemporaryDirectory() as tmp:
            text = emit(problem, parse(PROGRAM.format(schedule)), Path(tmp)).read_text()
            if trace:  # before the variant's own patches, which may remove the publish
                patches = [*TRACE_PATCHES, *([TRACE_PUBLISH] if TRACE_PUBLISH[0] in text else []),
                           *patches]
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


def run(out: Path, repeats: int, shapes: list[str], trace: Path | None = None) -> int:
    missing = [v for v in PATCHES if not (out / v).is_file()]
    if missing:
        print(f"not built: {', '.join(missing)} (run `build` first)", file=sys.stderr)
        return 2
    if trace:
        trace.mkdir(parents=True, exist_ok=True)
    for shape in shapes:
        for _ in range(repeats):
            for variant in PATCHES:
                env = dict(os.environ)
                if trace:
                    env["GF_TRACE"] = str(trace / f"{variant}_{shape.replace(' ', 'x')}.bin")
                r = subprocess.run([str(out / variant), *shape.split()], capture_output=True,
                                   text=True, env=env)
                line = (r.stdout.strip() or r.stderr.strip()).split(" rel_err=")[-1]
                print(f"{shape.replace(' ', 'x'):>16} {variant:>10}  rel_err={line}")
    return 0


def summary(folder: Path) -> int:
    """Per trace file, in µs from the first unit's start: the kernel's span, when the last
    whole (data-parallel) tile ended, the longest head and the longest spare's parts
    (mainloop start of its first part to the end of its last), and per whole tile the
    median and 90th-percentile mainloop and the median epilogue."""
    import numpy as np
    files = sorted(folder.glob("*.bin"))
    if not files:
        print(f"no traces in {folder}", file=sys.stderr)
        return 2
    print(f"{'variant':>10} {'shape':>17} {'span':>8} {'dp end':>8} {'head':>7} {'spare':>7} "
          f"{'ml med':>7} {'ml p90':>7} {'epi med':>7}")
    for f in files:
        e = np.fromfile(f, dtype=np.uint64).reshape(TRACE_CTAS, 2, TRACE_UNITS, TRACE_WORDS)
        used = e[..., 2] > 0
        t0 = e[..., 1][used].min()
        kb, ke = (e[..., 0] >> 16) & 0xFFFF, e[..., 0] & 0xFFFF
        full = used & (kb == 0) & (ke == ke[used].max())
        head, part = used & (kb == 0) & ~full, used & (kb > 0)
        us = lambda x: float(x) / 1e3  # noqa: E731
        ml = e[..., 3][full].astype(np.int64) - e[..., 2][full].astype(np.int64)
        epi = e[..., 4][full].astype(np.int64) - e[..., 3][full].astype(np.int64)
        heads = (e[..., 3][head].astype(np.int64) - e[..., 2][head].astype(np.int64))
        spare = [us(e[c][..., 4][part[c]].max() - e[c][..., 2][part[c]].min())
                 for c in range(TRACE_CTAS) if part[c].any()]
        variant, shape = f.stem.rsplit("_", 1)
        print(f"{variant:>10} {shape:>17} {us(e[..., 4][used].max() - t0):8.1f} "
              f"{us(e[..., 4][full].max() - t0) if full.any() else 0:8.1f} "
              f"{us(heads.max()) if heads.size else 0:7.1f} {max(spare, default=0):7.1f} "
              f"{us(np.median(ml)):7.2f} {us(np.percentile(ml, 90)):7.2f} {us(np.median(epi)):7.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["build", "run", "summary"])
    ap.add_argument("out", type=Path, help="folder of the executables (summary: of the traces)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of 'M N K'")
    ap.add_argument("--trace", nargs="?", const=True, default=None,
                    help="build: record a trace; run: write the traces to this folder")
    args = ap.parse_args()
    if args.action == "build":
        return build(args.out, trace=bool(args.trace))
    if args.action == "summary":
        return summary(args.out)
    trace = Path(args.trace) if isinstance(args.trace, str) else None
    return run(args.out, args.repeats, args.shapes.split(","), trace)


if __name__ == "__main__":
    sys.exit(main())
