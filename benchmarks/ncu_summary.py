"""A table from a log of benchmarks/ncu_tensor_pipe.sh: per shape, cuBLAS's and our kernel's
tensor-pipe activity, SM clock, DRAM bytes (read + write) and time, one launch each; and
where the log holds the L2 request coalescer's counters (NCU_EXTRA with
lrc__request_sectors_op_read_coalescable.sum,
lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum and
lrc__lts2lrc_sectors_op_read.sum), the share of the read sectors the SMs requested that it
merged with another SM's request for the same sector, and the sectors L2 then read. No GPU.

    python3 benchmarks/ncu_summary.py ncu.log        # the log ncu_tensor_pipe.sh printed
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

FIELDS = {"pipe": "pipe_tensor", "hz": "sm__cycles_elapsed", "ns": "gpu__time_duration",
          "read": "dram__bytes_read", "write": "dram__bytes_write", "l2hit": "lts__t_sector_hit",
          "asked": "lrc__request_sectors_op_read_coalescable",
          "merged": "lrc__request_sectors_op_read_coalescing_achieved_type_hardware",
          "l2read": "lrc__lts2lrc_sectors_op_read"}
HEADER = re.compile(r"^== (\S+) (cublas|gemmforge) \(rc (\d+)\)\s*(.*)$")
METRIC = re.compile(r"^\s+(\S+) = ([\d,.]+)")


def parse_log(text: str) -> list[dict]:
    """One dict per profiled kernel: shape, who, program, and the FIELDS found."""
    runs: list[dict] = []
    for line in text.splitlines():
        if m := HEADER.match(line):
            runs.append({"shape": m[1], "who": m[2], "rc": int(m[3]), "program": m[4]})
        elif (m := METRIC.match(line)) and runs:
            for key, needle in FIELDS.items():
                if needle in m[1]:
                    runs[-1][key] = float(m[2].replace(",", ""))
    return runs


def _pair(c: dict, r: dict, value) -> str:
    """'cuBLAS / ours' of value(run) (a string), '-' for cuBLAS where its run is absent."""
    return f"{value(c) if c else '-'} / {value(r)}"


def table(runs: list[dict]) -> str:
    """Markdown rows pairing each shape's cuBLAS run with the gemmforge run after it (a log
    of ours alone, NCU_WHO=gemmforge, shows '-' for cuBLAS)."""
    lrc = any("merged" in r for r in runs)
    rows = ["| shape | program | tensor pipe % cuBLAS / ours | SM GHz | DRAM GB | µs |"
            + (" reads merged % | L2 read G sectors |" if lrc else ""),
            "| --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if lrc else "")]
    cublas: dict[str, dict] = {}
    for r in runs:
        if r["who"] == "cublas":
            cublas[r["shape"]] = r
            continue
        c = cublas.get(r["shape"], {})
        if not all(k in r and (not c or k in c) for k in ("pipe", "hz", "ns")):
            rows.append(f"| {r['shape']} | {r['program']} | (missing counters) | | | |")
            continue
        program = " ".join(r["program"].split()[:3] + r["program"].split()[-3:])
        row = f"| {r['shape']} | {program} | "
        row += " | ".join((
            _pair(c, r, lambda x: f"{x['pipe']:.1f}"),
            _pair(c, r, lambda x: f"{x['hz'] / 1e9:.3f}"),
            _pair(c, r, lambda x: f"{(x.get('read', 0) + x.get('write', 0)) / 1e9:.2f}"),
            _pair(c, r, lambda x: f"{x['ns'] / 1e3:.0f}"))) + " |"
        if lrc:
            row += " " + " | ".join((
                _pair(c, r, lambda x: f"{100 * x['merged'] / x['asked']:.0f}"
                      if x.get("asked") else "-"),
                _pair(c, r, lambda x: f"{x['l2read'] / 1e9:.3f}" if "l2read" in x else "-"),
            )) + " |"
        rows.append(row)
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    args = ap.parse_args()
    if not args.log.is_file():
        print(f"ncu_summary: no such log: {args.log}", file=sys.stderr)
        return 2
    print(table(parse_log(args.log.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
