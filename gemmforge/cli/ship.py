"""`gemmforge ship`: build the shipped-programs file from confirmation CSVs (search.campaign.ship).

    gemmforge ship --from confirm_a.csv confirm_b.csv confirm_c.csv \
        --device-class h100 --command "gemmforge campaign --incumbents shipped ..."
"""
from __future__ import annotations

import math
import statistics
import sys
from collections import Counter
from pathlib import Path

from .. import arguments
from .common import UsageError


def cmd_ship(args) -> int:
    from ..dispatch.devices import check_class
    from ..search.campaign.ship import ship
    from ..dispatch.shipped import DEFAULT_PATH
    paths = [Path(p) for p in args.sources]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"--from: no such file: {', '.join(missing)}")
    try:
        want = check_class(args.device_class) if args.device_class is not None else None
    except ValueError as e:
        raise UsageError(f"--device-class: {e}") from None
    from ..search.measure.shapes import CLASSES
    shape_classes = None
    if args.shape_classes:
        shape_classes = frozenset(c.strip() for c in args.shape_classes.split(",") if c.strip())
        unknown = sorted(shape_classes - set(CLASSES))
        if unknown or not shape_classes:
            raise UsageError(f"--shape-classes: {', '.join(unknown) or 'none given'}: "
                             f"give a comma list of {', '.join(CLASSES)}")
    shapes = None
    if args.shapes:
        from ..arguments import shapes as read_shapes
        shapes = frozenset((p.m, p.n, p.k) for p in read_shapes(args.shapes))
    if not args.command.strip():
        raise UsageError("--command: say which command measured these files")
    out = arguments.output_file(args.out, "--out") if args.out is not None else DEFAULT_PATH
    rows, refused = ship(paths, out, args.command, want, shape_classes, shapes, args.rank_by)
    for why, count in refused.most_common():
        print(f"refused {count} row(s): {why}")
    if not rows:
        print(f"gemmforge: ship: no row of {len(paths)} file(s) passed; {out} unchanged",
              file=sys.stderr)
        return 1
    by_class = Counter(r.device_class for r in rows)
    geo = math.exp(statistics.fmean(math.log(r.speedup) for r in rows))
    print(f"shipped {len(rows)} shape(s) ({', '.join(f'{c}: {n}' for c, n in sorted(by_class.items()))}), "
          f"median-of-readings geomean {geo:.4f}x cuBLAS\nwrote {out}")
    return 0


def add_to(sub) -> None:
    s = sub.add_parser("ship", help="build the shipped-programs file from confirmation CSVs",
                       description="build the shipped-programs file from confirmation CSVs: per "
                                   "(device class, layout, acc, shape) the program with the best "
                                   "median over its readings (search.campaign.ship)")
    s.add_argument("--from", dest="sources", nargs="+", required=True, metavar="CSV",
                   help="confirmation CSVs (results-file columns)")
    s.add_argument("--device-class", help="ship only rows of this class (h100, h200, a100, ...)")
    s.add_argument("--shape-classes", metavar="CLASSES",
                   help="ship only rows of these shape classes, a comma list of small, medium, "
                        "large (2mnk >= 1e11); the others keep their shipped rows (default: all)")
    s.add_argument("--shapes", metavar="SHAPES",
                   help="ship only rows of these shapes (MxNxK list, @FILE, grid:CLASSES; any "
                        "layout); the others keep their shipped rows (default: all)")
    s.add_argument("--rank-by", choices=("auto", "kernel", "after"), default="auto",
                   help="what picks each shape's program: auto (default), the sustained ratio "
                        "where every reading has it, else the after protocol's (each launch "
                        "after another kernel: bench --protocols kernel,after), else the kernel "
                        "protocol's; kernel, the same without the after step; after, the after "
                        "protocol's alone (rows without it refused)")
    s.add_argument("--command", required=True, help="the command that measured the files")
    s.add_argument("--out", help="the shipped file to update (default: the package's "
                                 "dispatch/data/shipped.json.gz)")
    s.set_defaults(run=cmd_ship)
