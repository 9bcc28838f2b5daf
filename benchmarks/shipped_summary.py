"""The shipped file's results table (search.campaign.shipped_table): per GPU class and layout, the
geomeans of cuBLAS time / our time over its rows, each row's figures from the confirmation
that chose it. Measures nothing.

    python3 benchmarks/shipped_summary.py [--shipped dispatch/data/shipped.json.gz]   # print it
    python3 benchmarks/shipped_summary.py --readme README.md                     # rewrite README's

README's results table is this output (tests/test_shipped_table.py checks that it is).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gemmforge.dispatch.shipped import DEFAULT_PATH
from gemmforge.search.campaign.shipped_table import shipped_table, with_table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shipped", type=Path, default=DEFAULT_PATH)
    ap.add_argument("--readme", type=Path, help="rewrite the table between this file's markers")
    args = ap.parse_args()
    try:
        rows = shipped_table(args.shipped)
        if args.readme:
            args.readme.write_text(with_table(args.readme.read_text(), rows))
            print(f"rewrote the results table in {args.readme}")
        else:
            print("\n".join(rows))
    except (OSError, ValueError, KeyError) as e:
        print(f"shipped_summary: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
