"""The values that lowering, building and loading pass on: `Source` (lowered files),
`Target` (what a build is for), `Artifact` (a built kernel on disk) and `BuildError`.

They sit in the toolchain floor so that nvcc, the artifact cache and the runtime can name
them without importing the backends that produce them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..ir.program import Accum, DType, Layout, Problem, Program


@dataclass(frozen=True)
class Source:
    """Lowered code for one (program, layout, acc, dtype): text files and how to build them.

    `files` maps file names to their text; `entry` is the file the build starts from.
    `specialized` is True when the code is valid only for `problem`'s exact m, n, k.
    """

    program: Program
    problem: Problem
    language: str  # "cuda", "triton", ...
    files: dict[str, str]
    entry: str
    specialized: bool = False
    meta: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.files[self.entry]


@dataclass(frozen=True)
class Target:
    """What a build is for: the device's compute capability (e.g. 90), or None for the
    program's own arch (a portable file, as `gemmforge emit` writes)."""

    device_sm: int | None = None

    @property
    def tag(self) -> str:
        return f"sm{self.device_sm}" if self.device_sm else "portable"


@dataclass(frozen=True)
class Artifact:
    """A built kernel on disk: `path` is what the runtime loads (a .so, a cubin, ...).

    `kind` names the loader (see compiler.runtime); `meta` is JSON-serialisable launch
    metadata (symbol names, grid rules, workspace formula) the loader needs.
    """

    key: str
    kind: str
    path: Path
    program_text: str
    layout: Layout
    acc: Accum
    meta: dict = field(default_factory=dict)
    dtype: DType = DType.F16  # of A, B and C: what the loaded Kernel takes and returns


class BuildError(RuntimeError):
    """A build failed. `command` reproduces it; `source_path` is the file it built."""

    def __init__(self, message: str, command: str = "", source_path: str = "", log: str = ""):
        self.command, self.source_path, self.log = command, source_path, log
        parts = [message]
        if source_path:
            parts.append(f"source: {source_path}")
        if command:
            parts.append(f"reproduce: {command}")
        if log:
            parts.append(log.strip()[-4000:])
        super().__init__("\n".join(parts))
