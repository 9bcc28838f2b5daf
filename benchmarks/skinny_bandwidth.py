"""Issue 20's bandwidth target for the skinny path: M = 1 and 16 (a decode step) read the whole
weight, so their floor is its bytes at HBM rate. This measures, per shape, the bytes of A, B
and C over the kernel's time for our shipped/confirmed program and for cuBLAS, against the
device's copy bandwidth, with L2 cold in three ways:

    python3 benchmarks/skinny_bandwidth.py --programs benchmarks/results/llm_layers_h100.csv \
        --name skinny_bandwidth_h100 [--report-dir .] [--rounds 7]

  write_flush  the campaigns' cold protocol (search.measure.timing.cold_protocol): a buffer of 2x L2
               written before each launch; L2 is left full of dirty lines, so the launch's
               reads also pay for writing the flush buffer back to HBM;
  read_flush   the same with a buffer of 2x L2 read (a sum) before each launch: L2 left
               clean, the operands not in it;
  rotated      the issue's definition: the operands rotated through copies whose total is
               over 2.5x L2, launched back to back in a CUDA graph with no flush (a model's
               forward pass: each layer's weights come from HBM, nothing to write back but C).

`copy` is torch's device-to-device copy of a 1 GiB buffer (read + write bytes over time, graph
of back-to-back copies; column of_copy); `copy_rotated` copies B-sized buffers rotated like the
GEMMs' operands, the stricter reference the target is judged against (column
of_same_size_copy, in the same protocol). Every contender of a shape is timed in the
same process, round by round in the balanced orders of search.measure.timing.interleave. Layout nt
(B is N x K, as a linear layer's weight). Prints a table; writes <report-dir>/<name>.csv.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

SHAPES = ("1x4096x4096", "16x4096x4096", "1x4096x14336", "16x4096x14336",
          "1x28672x4096", "16x28672x4096")
GIB = 1 << 30


def gemm_bytes(m: int, n: int, k: int) -> int:
    return 2 * (m * k + n * k + m * n)


def programs_from(path: str) -> dict[str, str]:
    """{MxNxK: program text} from a results CSV (its nt rows)."""
    with open(path, newline="") as f:
        return {f"{r['m']}x{r['n']}x{r['k']}": r["program"] for r in csv.DictReader(f)
                if r.get("layout", "nt") == "nt" and r.get("program")}


class Operands:
    """`copies` sets of (a, b as N x K, c) for one shape, b's values the same in each."""

    def __init__(self, m: int, n: int, k: int, copies: int):
        import torch
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=gen)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=gen)
        self.sets = [(a.clone(), b.clone(), torch.empty(m, n, device="cuda", dtype=torch.float16))
                     for _ in range(copies)]


def _launcher(kernel, ops: Operands, m: int, n: int, k: int):
    """launch(i): `kernel` on operand set i, on the current stream, its own workspace."""
    import torch
    ws_bytes = kernel.workspace_bytes(m, n, k)
    ws = torch.zeros(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")

    def launch(i):
        a, b, c = ops.sets[i]
        kernel.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k,
                      ws.data_ptr() if ws_bytes else 0, ws_bytes,
                      torch.cuda.current_stream().cuda_stream)
    return launch


def copies_for(nbytes: int, l2: int) -> int:
    return max(3, math.ceil(2.5 * l2 / nbytes) + 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="benchmarks/results/llm_layers_h100.csv",
                    help="results CSV whose nt rows give each shape's program")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--candidates", help="a file of more programs (one a line) timed at each "
                    "shape where verify accepts them, warm and rotated only")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--name", default="skinny_bandwidth")
    ap.add_argument("--report-dir", default=".")
    args = ap.parse_args()

    import torch

    from gemmforge.backends.pipeline import compile_and_load
    from gemmforge.ir import check, parse, parse_problem
    from gemmforge.search.measure import timing

    torch.cuda.init()
    stream = torch.cuda.Stream()
    torch.cuda.set_stream(stream)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    junk = torch.zeros(2 * l2, dtype=torch.uint8, device="cuda")
    junk32, junk_sum = junk.view(torch.float32), torch.zeros((), device="cuda")
    flushes = {"write_flush": junk.zero_,
               "read_flush": lambda: torch.sum(junk32, dim=0, out=junk_sum)}
    programs = programs_from(args.programs)
    extra = ([line.strip() for line in Path(args.candidates).read_text().splitlines()
              if line.strip() and not line.startswith("#")] if args.candidates else [])
    rows = []

    big_src = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    big_dst = torch.empty_like(big_src)
    copy_graph = timing.graph(timing.repeat(lambda: big_dst.copy_(big_src), 10), stream)
    copy_us = statistics.median(timing.elapsed_us(copy_graph.replay) / 10 for _ in range(5))
    copy_tbs = 2 * GIB / copy_us / 1e6
    print(f"copy 1 GiB: {copy_us:.1f} us, {copy_tbs:.3f} TB/s (read + write)", flush=True)
    del big_src, big_dst, copy_graph

    for shape in args.shapes.split(","):
        problem = parse_problem(shape)
        m, n, k = problem.m, problem.n, problem.k
        text = programs.get(shape)
        if text is None:
            print(f"{shape}: no program in {args.programs}, skipped", flush=True)
            continue
        problem = parse_problem(f"{shape} nt f32")
        ops = Operands(m, n, k, copies_for(2 * n * k, l2))
        ref = ops.sets[0][0] @ ops.sets[0][1].t()
        texts = {"ours": text, **{f"cand{i}": t for i, t in enumerate(extra)
                                  if t != text and check(parse(t), problem) is None}}
        launches = {}
        for who, t in texts.items():
            fn = _launcher(compile_and_load(parse(t), problem), ops, m, n, k)
            fn(0)
            torch.cuda.synchronize()
            err = (ops.sets[0][2].float() - ref.float()).abs().max().item()
            if err <= 1e-2 * max(1.0, ref.float().abs().max().item()):
                launches[who] = fn
            else:
                print(f"{shape}: {t} is wrong (max error {err}), skipped", flush=True)
        if "ours" not in launches:
            continue

        def blas(i):
            a, b, c = ops.sets[i]
            torch.matmul(a, b.t(), out=c)

        copy_dst = [torch.empty_like(s[1]) for s in ops.sets]

        def copy(i):
            copy_dst[i].copy_(ops.sets[i][1])

        launches.update(cublas=blas, copy_rotated=copy)
        copies = len(ops.sets)
        reps = max(2, math.ceil(2000 / max(1.0, 2 * n * k / 3e6) / copies))
        samples: dict[tuple[str, str], list[float]] = {}
        contenders = []
        for who, fn in launches.items():
            g_rot = timing.graph(timing.repeat(lambda fn=fn: [fn(i) for i in range(copies)],
                                               reps), stream)
            g_warm = timing.graph(timing.repeat(lambda fn=fn: fn(0), reps * copies), stream)
            contenders.append((who, "rotated", g_rot, None, reps * copies))
            contenders.append((who, "warm", g_warm, None, reps * copies))
            if who not in ("ours", "cublas"):
                continue
            for name, flush in flushes.items():
                pair = timing.graph(timing.repeat(lambda fn=fn, flush=flush: (flush(), fn(0)),
                                                  20), stream)
                alone = timing.graph(timing.repeat(flush, 20), stream)
                contenders.append((who, name, pair, alone, 20))
        cs = [timing.Contender(f"{who}/{proto}", None, None) for who, proto, *_ in contenders]
        by_name = {f"{who}/{proto}": (g, alone, count) for who, proto, g, alone, count in contenders}

        def sample(c):
            g, alone, count = by_name[c.name]
            t = timing.elapsed_us(g.replay)
            if alone is not None:
                t -= timing.elapsed_us(alone.replay)
            return t / count
        got = timing.interleave(cs, args.rounds, sample, warm_rounds=1)
        for name, values in got.items():
            samples[tuple(name.split("/"))] = values
        nbytes = gemm_bytes(m, n, k)
        # The same-size copy's bandwidth per protocol: the target's reference (issue 20).
        same_size = {proto: 2 * 2 * n * k / statistics.median(values) / 1e6
                     for (who, proto), values in samples.items() if who == "copy_rotated"}
        for (who, proto), values in sorted(samples.items()):
            us = statistics.median(values)
            moved = 2 * 2 * n * k if who == "copy_rotated" else nbytes
            tbs = moved / us / 1e6
            rows.append({"shape": shape, "contender": who, "protocol": proto,
                         "program": texts.get(who, ""), "us": round(us, 3),
                         "spread": round((max(values) - min(values)) / us, 4),
                         "tb_s": round(tbs, 3), "of_copy": round(tbs / copy_tbs, 3),
                         "copy_tb_s": round(copy_tbs, 3),
                         "of_same_size_copy": round(tbs / same_size[proto], 3) if proto in same_size else "",
                         "copies": copies, "device": torch.cuda.get_device_name()})
        del ops, copy_dst, contenders, by_name, launches
        torch.cuda.empty_cache()

    out = Path(args.report_dir) / f"{args.name}.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["shape"])
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'shape':<15}{'protocol':<13}{'ours us':>9}{'TB/s':>7}{'of copy':>8}"
          f"{'cuBLAS us':>10}{'TB/s':>7}{'copyB TB/s':>11}{'of copyB':>9}")
    table = {(r["shape"], r["contender"], r["protocol"]): r for r in rows}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        for proto in ("warm", "write_flush", "read_flush", "rotated"):
            o, c = table.get((shape, "ours", proto)), table.get((shape, "cublas", proto))
            cp = table.get((shape, "copy_rotated", proto))
            if o and c:
                print(f"{shape:<15}{proto:<13}{o['us']:>9.2f}{o['tb_s']:>7.2f}{o['of_copy']:>8.2f}"
                      f"{c['us']:>10.2f}{c['tb_s']:>7.2f}"
                      f"{(cp['tb_s'] if cp else float('nan')):>11.2f}"
                      f"{(o['of_same_size_copy'] if cp else float('nan')):>9.3f}")
    cands = [r for r in rows if r["contender"].startswith("cand") and r["protocol"] == "rotated"]
    for shape in dict.fromkeys(r["shape"] for r in cands):
        for r in sorted((r for r in cands if r["shape"] == shape), key=lambda r: r["us"])[:4]:
            print(f"{shape:<15}rotated {r['us']:>8.2f} us {r['tb_s']:>5.2f} TB/s  {r['program']}")
    print(f"copy bandwidth (1 GiB, read + write): {copy_tbs:.3f} TB/s; results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
