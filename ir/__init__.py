"""The gemmforge IR: Problem and Program values, their text and JSON forms, and verify."""
from .program import (
    Accum, Arch, Cluster, DType, Epilogue, IRError, L2Hint, Layout, Padding, Problem, Program,
    Raster, RasterOrder, Reduction, Schedule, SplitK, Swizzle, Tile, WarpSpec, Warps,
)
from .schema import from_json, program_schema, to_json
from .text import parse, parse_problem, to_text
from .verify import VerifyError, check, verify

__all__ = [
    "Accum", "Arch", "Cluster", "DType", "Epilogue", "IRError", "L2Hint", "Layout", "Padding",
    "Problem", "Program", "Raster", "RasterOrder", "Reduction", "Schedule", "SplitK", "Swizzle", "Tile",
    "WarpSpec", "Warps", "VerifyError", "check", "from_json", "parse", "parse_problem",
    "program_schema", "to_json", "to_text", "verify",
]
