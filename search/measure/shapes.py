"""Shape lists for the commands and benchmarks: `--shapes` values turned into Problems.

    parse_shapes("1024x1024x1024,1000x4096x333")   # a comma list of MxNxK
    parse_shapes("grid")                            # the 1,000 shapes of data/grid_1000.txt
    parse_shapes("sample:20:3")                     # 20 grid shapes drawn with random.Random(3)
    parse_shapes("grid:small,medium")               # the grid shapes of those FLOP classes
    parse_shapes("@shapes.txt")                     # MxNxK per line ('#' starts a comment)
"""
from __future__ import annotations

import random
from pathlib import Path

from ...ir.program import Problem

GRID = Path(__file__).parents[1] / "data" / "grid_1000.txt"
LARGE_FLOPS = 1e11   # the large class (187 grid shapes): sustained load matters
MEDIUM_FLOPS = 1e9   # below: a call is mostly launch and host time
CLASSES = ("small", "medium", "large")


def shape_class(problem: Problem) -> str:
    """'large' (2mnk >= 1e11), 'medium' (>= 1e9) or 'small'."""
    if problem.flops >= LARGE_FLOPS:
        return "large"
    return "medium" if problem.flops >= MEDIUM_FLOPS else "small"


def parse_shapes(spec: str, layout: str = "nn", acc: str = "f32") -> list[Problem]:
    """Problems from a --shapes value (see the module docstring); raises IRError on a bad
    shape."""
    from ...ir.text import parse_problem
    return [parse_problem(f"{s} {layout} {acc}") for s in shape_texts(spec)]


def shape_texts(spec: str) -> list[str]:
    """The MxNxK texts of a --shapes value, not yet parsed. `sample:N[:SEED]` draws N grid
    shapes with SEED (default 0); `grid:CLASSES` keeps the grid shapes of the FLOP classes
    named (shape_class; IRError for an unknown one)."""
    if spec.startswith("grid:"):
        return _grid_classes(spec[len("grid:"):].split(","))
    if spec == "grid" or spec.startswith("sample:"):
        shapes = GRID.read_text().split()
        if spec != "grid":
            _, count, *seed = spec.split(":")
            shapes = random.Random(int(seed[0]) if seed else 0).sample(shapes, int(count))
        return shapes
    if spec.startswith("@"):
        lines = Path(spec[1:]).read_text().splitlines()
        return [s for line in lines for s in line.partition("#")[0].split()]
    return [s.strip() for s in spec.split(",") if s.strip()]


def _grid_classes(classes: list[str]) -> list[str]:
    from ...ir.program import IRError
    from ...ir.text import parse_problem
    unknown = sorted(set(classes) - set(CLASSES))
    if unknown:
        raise IRError(f"--shapes grid:{','.join(classes)}: unknown class "
                      f"{', '.join(unknown)} (classes: {', '.join(CLASSES)})")
    return [s for s in GRID.read_text().split()
            if shape_class(parse_problem(f"{s} nn f32")) in classes]
