"""`gemmforge emit`: write a standalone .cu for one shape, needing only the CUDA toolkit.

The file holds the kernel, the extern "C" launcher and, under GEMMFORGE_STANDALONE_MAIN,
a main() that checks the result against a simple reference kernel and prints its time;
its header comment gives the nvcc command lines.
"""
from __future__ import annotations

from pathlib import Path

from .backends import registry
from .compiler.values import BuildError
from .ir.program import Arch, Problem, Program, lowered_name
from .ir.verify import VerifyError, verify


def choose_program(problem: Problem, arch: Arch, program: Program | None = None,
                   device_class: str | None = None):
    """(program, where it came from as one line): `program` if given (checked against
    `arch`), else dispatch.choice's resolution for a device of `device_class` (default: the
    arch's dispatch.devices.DEFAULT_CLASS): tuned, shipped or the heuristic's."""
    if program is None:
        from .ops import choice_for
        from .dispatch.devices import DEFAULT_CLASS
        choice = choice_for(problem, arch, device_class or DEFAULT_CLASS[arch])
        return choice.program, choice.line()
    if program.arch != arch:
        raise VerifyError(f"arch: the program is {program.arch.value} but --arch is {arch.value}")
    return program, "program: given (--program)"


def emit(problem: Problem, program: Program, out_dir: Path) -> Path:
    """Write `<out_dir>/<kernel name>.cu` for `program` computing `problem` (the name as
    lowered: a bf16 file is named apart from the f16 one) and return its path."""
    verify(program, problem)
    text = registry.get(program.backend).standalone(program, problem)
    if text is None:
        raise VerifyError(f"backend: {program.backend} can't emit a standalone .cu file")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{lowered_name(program, problem)}.cu"
    tmp = path.with_suffix(".cu.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def build_selftest(cu_path: Path, program: Program, device_sm: int | None = None) -> Path:
    """Compile the file's self-test executable next to it (BuildError with the command)."""
    from .compiler import nvcc
    exe = cu_path.with_suffix("")
    flags = [*nvcc.gencode(program.arch, device_sm), *registry.get(program.backend).nvcc_flags(program)]
    nvcc.compile_cuda(cu_path, exe, [*flags, "-DGEMMFORGE_STANDALONE_MAIN"], shared=False)
    return exe


__all__ = ["BuildError", "build_selftest", "choose_program", "emit"]
