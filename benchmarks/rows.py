"""One table row per (shape, program), printed as soon as it is measured: the layout of
host_overhead_gpu.py and launch_latency_gpu.py."""
from __future__ import annotations

from typing import Callable


def measure_rows(shapes: list[str], programs: tuple[str, ...], measure: Callable[[str, str], dict],
                 cols: tuple[str, ...], short: Callable[[str], str], width: int) -> dict:
    """Run `measure(shape, program)` for every pair; print `cols` of each row (µs, two
    decimals) under a header; return the rows by "shape | program"."""
    print(f"{'shape':>15} {'program':>28} " + " ".join(f"{c:>{width}}" for c in cols), flush=True)
    rows = {}
    for shape in shapes:
        for text in programs:
            row = rows[f"{shape} | {text}"] = measure(shape, text)
            cells = " ".join(f"{row[c]:{width}.2f}" for c in cols)
            print(f"{shape:>15} {short(text):>28} {cells}", flush=True)
    return rows
