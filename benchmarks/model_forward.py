"""A transformers decoder's forward, stock against `gemmforge.patch`ed, side by side.

    python3 benchmarks/model_forward.py --models llama,qwen2,mistral,gemma \\
        --tokens 1,16,64,256,1024,4096 --modes eager,graph,compile --tuned no --csv model_forward.csv
    python3 benchmarks/model_forward.py --dtype bf16 --csv model_forward_bf16.csv   # bf16 weights
    python3 benchmarks/model_forward.py --plan --tuned yes      # the rows and layers, no GPU
    python3 benchmarks/model_forward.py --plan --configs cfg    # cfg/llama.json ... for tune --model

Per model family (random weights, fp16 or `--dtype bf16`, batch 1, `--layers` decoder layers of the family's 7-9B
dimensions, the family's own transformers code): one model, and a deep copy of it patched
(same weights). Per token count T and mode: eager calls, one CUDA graph per side (captured
after a warm-up), or `torch.compile(fullgraph=True)` of each side; `--rounds` rounds, each
timing `--iters` forwards of one side then the other with CUDA events (the order alternates
between rounds); a row's figures are medians over the rounds, speedup = the median of the
per-round stock/gemmforge ratios. The forward computes the last position's logits only
(`logits_to_keep=1`, as generation does) and no KV cache. One CSV row per (model, T, mode,
tuned): stock_ms, gemmforge_ms, speedup, spread (the rounds' min and max ratio), routed (layers
patched), programs (how many distinct buckets run a program of ours rather than cuBLAS) and
dtype (f16 or bf16: the weights' and activations', the stock side's cuBLAS included). A file
written before the dtype column is not appended to (another --csv).

`--tuned no` runs with an empty tuned database (GEMMFORGE_TUNE_DB pointed at a fresh file):
the shipped file alone serves. `--tuned yes` runs with the user's (GEMMFORGE_TUNE_DB or the
default), which must hold entries for the GPU: `gemmforge tune --model cfg/llama.json` after
`--plan --configs cfg` wrote each family's config.json. `--plan` prints the (model, T, mode,
tuned) of every row it would write and each family's layer shapes, and needs no GPU.

`--host N` times the eager host cost of one Linear instead, nn.Linear against a patched one,
at N small shapes (bias on every other), paired, each call synchronised.
"""
from __future__ import annotations

import argparse
import copy
import csv
import statistics
import sys
import time

FAMILIES = {
    # name (its transformers model_type): (config class, keyword arguments: the 7-9B model's
    # dimensions)
    "llama": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                  num_key_value_heads=8, vocab_size=128256)),
    "qwen2": ("Qwen2Config", dict(hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                                  num_key_value_heads=4, vocab_size=152064)),
    "mistral": ("MistralConfig", dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                                      num_key_value_heads=8, vocab_size=32768)),
    "gemma": ("GemmaConfig", dict(hidden_size=3072, intermediate_size=24576, num_attention_heads=16,
                                  num_key_value_heads=16, head_dim=256, vocab_size=256000)),
}
COLUMNS = ["model", "tokens", "mode", "tuned", "stock_ms", "gemmforge_ms", "speedup", "min_ratio",
           "max_ratio", "routed", "programs", "device", "dtype"]
MODES = ("eager", "graph", "compile")
TUNED = ("no", "yes")
DTYPES = {"f16": "float16", "bf16": "bfloat16"}  # --dtype -> torch's name
MAX_ERROR = {"f16": 2e-2, "bf16": 1e-1}
"""Default --max-error, patched against stock logits: a guard against wrong answers. bf16
keeps 8 bits of mantissa to fp16's 11 (8x the roundoff), and two orders of summation drift
apart layer by layer."""


def config_dict(family: str, layers: int) -> dict:
    """The family's config as a config.json holds it (what `gemmforge tune --model` reads)."""
    _, dims = FAMILIES[family]
    return {"model_type": family, "num_hidden_layers": layers, **dims}


def plan(args) -> list[dict]:
    """The key columns of every row the run writes, in the order it writes them."""
    return [{"model": m, "tokens": t, "mode": mode, "tuned": args.tuned}
            for m in args.models for t in args.tokens for mode in args.modes]


def csv_row(figures: dict) -> dict:
    """One CSV row of COLUMNS from a row's figures and keys (floats to 4 places)."""
    missing = [c for c in COLUMNS if c not in figures]
    if missing:
        raise ValueError(f"row lacks {', '.join(missing)}")
    return {c: (f"{figures[c]:.4f}" if isinstance(figures[c], float) else figures[c])
            for c in COLUMNS}


def build(family: str, layers: int, dtype: str = "f16"):
    """The family's causal LM with random weights of `dtype` (f16 or bf16) on the GPU."""
    import torch
    import transformers
    name, _ = FAMILIES[family]
    config = getattr(transformers, name)(**{k: v for k, v in config_dict(family, layers).items()
                                            if k != "model_type"})
    config._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config,
                                                              dtype=getattr(torch, DTYPES[dtype]))
    return model.eval()


def timed(fn, iters: int) -> float:
    """Milliseconds per call of `fn` over `iters` calls (CUDA events around all of them)."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def runner(model, ids, mode: str):
    """A no-argument callable running one forward of `model` on `ids` in `mode`."""
    import torch

    def forward():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    if mode == "eager":
        return forward
    if mode == "compile":
        compiled = torch.compile(forward, fullgraph=True, dynamic=False)
        for _ in range(3):
            compiled()
        return compiled
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    return graph.replay


def compare(stock, ours, rounds: int, iters: int) -> dict:
    """Alternating rounds of the two callables: medians and the per-round ratios' spread."""
    for fn in (stock, ours):
        timed(fn, 2)
    s_ms, g_ms, ratios = [], [], []
    for r in range(rounds):
        pair = [(stock, s_ms), (ours, g_ms)]
        for fn, out in (pair if r % 2 == 0 else pair[::-1]):
            out.append(timed(fn, iters))
        ratios.append(s_ms[-1] / g_ms[-1])
    return {"stock_ms": statistics.median(s_ms), "gemmforge_ms": statistics.median(g_ms),
            "speedup": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios)}


def check_same(stock_model, ours_model, ids) -> float:
    """Relative error of the patched model's logits against the stock model's."""
    import torch
    with torch.no_grad():
        a = stock_model(input_ids=ids, use_cache=False, logits_to_keep=1).logits.float()
        b = ours_model(input_ids=ids, use_cache=False, logits_to_keep=1).logits.float()
    return float((a - b).norm() / a.norm().clamp_min(1e-12))


def run_family(family: str, args, device: str, writer) -> None:
    import torch
    import gemmforge
    from gemmforge.torch_op import DTYPE_CODES
    stock = build(family, args.layers, args.dtype)
    ours = copy.deepcopy(stock)
    start = time.time()
    report = gemmforge.patch(ours, tokens=args.tokens)
    print(f"{family}: {report} (prepared in {time.time() - start:.0f} s)", flush=True)
    with torch.no_grad():
        for t in args.tokens:
            ids = torch.randint(0, stock.config.vocab_size, (1, t), device="cuda")
            err = check_same(stock, ours, ids)
            if err > args.max_error:
                raise SystemExit(f"{family} T={t}: patched logits differ from stock by {err:.2e}")
            programs = sum(1 for n, k in report.shapes
                           if torch.ops.gemmforge._registered(t, n, k, 1, DTYPE_CODES[args.dtype], 0)
                           not in ("", "cublas"))
            for mode in args.modes:
                row = compare(runner(stock, ids, mode), runner(ours, ids, mode), args.rounds,
                              args.iters if t < 1024 or mode == "graph" else max(2, args.iters // 4))
                row.update(model=family, tokens=t, mode=mode, tuned=args.tuned,
                           routed=len(report.routed), programs=programs, device=device,
                           dtype=args.dtype)
                writer.writerow(csv_row(row))
                print(f"{family:8} T={t:5} {mode:7} stock {row['stock_ms']:8.3f} ms  gemmforge "
                      f"{row['gemmforge_ms']:8.3f} ms  {row['speedup']:.3f}x "
                      f"[{row['min_ratio']:.3f}, {row['max_ratio']:.3f}] ours at {programs} shapes "
                      f"err {err:.1e}", flush=True)
    del stock, ours
    torch.cuda.empty_cache()


def host_cost(shapes: int, rounds: int, dtype: str = "f16") -> None:
    """Eager host cost per call of nn.Linear against a patched one (module doc)."""
    import random
    import torch
    import gemmforge
    rng = random.Random(0)
    ratios = []
    for i in range(shapes):
        n, k = rng.choice([64, 128, 256, 512]), rng.choice([64, 128, 256])
        layer = torch.nn.Linear(k, n, bias=i % 2 == 0, device="cuda",
                                dtype=getattr(torch, DTYPES[dtype]))
        patched = copy.deepcopy(layer)
        gemmforge.patch(patched, tokens=[rng.choice([1, 8, 16])])
        x = torch.randn(1, rng.choice([1, 8, 16]), k, device="cuda", dtype=layer.weight.dtype)
        with torch.no_grad():
            times = {"stock": [], "ours": []}
            for r in range(rounds):
                for name, fn in (("stock", layer), ("ours", patched))[:: 1 if r % 2 else -1]:
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    for _ in range(200):
                        fn(x)
                    torch.cuda.synchronize()
                    times[name].append((time.perf_counter() - start) / 200 * 1e6)
        s, o = statistics.median(times["stock"]), statistics.median(times["ours"])
        ratios.append(s / o)
        print(f"host n={n} k={k} bias={layer.bias is not None}: nn.Linear {s:.2f} us, patched "
              f"{o:.2f} us", flush=True)
    print(f"host cost over {shapes} shapes: nn.Linear / patched geomean "
          f"{statistics.geometric_mean(ratios):.3f}, worst {min(ratios):.3f}")


def parse(argv=None):
    """The arguments, checked: (args, None), or (None, the one-line reason) for bad input."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(FAMILIES))
    ap.add_argument("--tokens", default="1,16,64,256,1024,4096")
    ap.add_argument("--modes", default="eager,graph,compile")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tuned", default="no", help="no: the shipped file alone; yes: with the "
                                                  "tuned database (module doc)")
    ap.add_argument("--dtype", default="f16", help="weights and activations: f16 or bf16")
    ap.add_argument("--max-error", type=float, help="patched vs stock logits (default: "
                    "MAX_ERROR of the dtype: 2e-2 for f16, 1e-1 for bf16)")
    ap.add_argument("--csv", default="model_forward.csv")
    ap.add_argument("--host", type=int, default=0, help="time N small Linear shapes' host cost instead")
    ap.add_argument("--plan", action="store_true", help="print the rows and layer shapes; no GPU")
    ap.add_argument("--configs", help="with --plan: write each family's config.json here, "
                                      "as <family>.json (for gemmforge tune --model)")
    args = ap.parse_args(argv)
    args.models, args.modes = args.models.split(","), args.modes.split(",")
    bad = ([f"model {m!r}" for m in args.models if m not in FAMILIES]
           + [f"mode {m!r}" for m in args.modes if m not in MODES]
           + ([f"--tuned {args.tuned!r}"] if args.tuned not in TUNED else [])
           + ([f"--dtype {args.dtype!r}"] if args.dtype not in DTYPES else []))
    try:
        args.tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        bad.append(f"--tokens {args.tokens!r}")
    else:
        bad += [f"token count {t}" for t in args.tokens if t < 1]
    if args.layers < 1 or args.rounds < 1 or args.iters < 1:
        bad.append("--layers, --rounds and --iters must be >= 1")
    if bad:
        return None, (f"unknown or bad: {', '.join(bad)} (models: {', '.join(FAMILIES)}; "
                      f"modes: {', '.join(MODES)}; tuned: no or yes; dtype: f16 or bf16)")
    if args.max_error is None:
        args.max_error = MAX_ERROR[args.dtype]
    return args, None


def print_plan(args) -> None:
    """Each family's layer shapes (gemmforge.model_layers, from its config) and the rows;
    with --configs, each family's config.json written there."""
    import json
    from pathlib import Path
    from gemmforge.model_layers import config_layers
    for family in args.models:
        shapes = config_layers(config_dict(family, args.layers), family)
        print(f"layers {family}: {' '.join(str(s).replace(' ', '+') for s in shapes)}")
        if args.configs:
            path = Path(args.configs) / f"{family}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(config_dict(family, args.layers), indent=2) + "\n")
            print(f"wrote {path}")
    for row in plan(args):
        print(f"row {row['model']},{row['tokens']},{row['mode']},{row['tuned']}")


def tuned_database(choice: str, device: str) -> str | None:
    """Set up the tuned database `--tuned` asks for (module doc); the reason it can't be."""
    import os
    import tempfile
    from gemmforge.dispatch.storage_files import sqlite_path
    from gemmforge.dispatch.tuned import TunedTable, default_storage
    if choice == "no":
        url = f"sqlite:///{tempfile.mkdtemp(prefix='untuned-')}/tuned.db"
        TunedTable(url).close()  # an empty table, so nothing tuned serves
        os.environ["GEMMFORGE_TUNE_DB"] = url
        return None
    url = default_storage()
    path = sqlite_path(url)
    entries = 0
    if path is None or path.exists():
        db = TunedTable(url)
        entries = len(db.entries(device))
        db.close()
    return None if entries else (f"--tuned yes: the tuned database {url} holds nothing for "
                                 f"{device} (gemmforge tune --model first)")


def main(argv=None) -> int:
    args, bad = parse(argv)
    if bad:
        print(f"model_forward: {bad}", file=sys.stderr)
        return 2
    if args.plan:
        print_plan(args)
        return 0
    if not _appendable(args.csv):
        print(f"model_forward: {args.csv} has other columns than {','.join(COLUMNS)}: "
              "give another --csv", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("model_forward: needs a CUDA GPU", file=sys.stderr)
        return 1
    if args.host:
        host_cost(args.host, args.rounds, args.dtype)
        return 0
    device = torch.cuda.get_device_name()
    refused = tuned_database(args.tuned, device)
    if refused:
        print(f"model_forward: {refused}", file=sys.stderr)
        return 2
    with open(args.csv, "a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        if f.tell() == 0:
            writer.writeheader()
        for family in args.models:
            run_family(family, args, device, writer)
            f.flush()
    return 0


def _appendable(path: str) -> bool:
    """True when `path` is missing, empty, or a CSV whose header is COLUMNS."""
    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), None)
    except FileNotFoundError:
        return True
    return header is None or header == COLUMNS


if __name__ == "__main__":
    sys.exit(main())
