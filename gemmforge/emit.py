"""`gemmforge emit`: write a standalone .cu for one shape, needing only the CUDA toolkit.

The file, `<kernel name>_<layout>_<acc>.cu`, holds the kernel, the extern "C" launcher
(`gemmforge_launch`, also exported as `gemmforge_launch_<layout>_<acc>`) and, under
GEMMFORGE_STANDALONE_MAIN, a main() that checks the result against a simple reference
kernel and prints its time; its header comment gives the nvcc command lines.

Every shape gets a file: where the resolved program's backend can't write standalone
code (a backend whose `emits_standalone` is False: its kernels need its own runtime), the
best program among the backends that can serves instead (dispatch.choice.resolve with those
backends excluded: a shipped or tuned program of the shape or its nearest neighbour, else
the heuristic's), and the provenance line says which and why.
"""
from __future__ import annotations

from pathlib import Path

from .backends import registry
from .compiler.values import BuildError
from .errors import UsageError
from .ir.program import Arch, Problem, Program, lowered_name
from .ir.verify import VerifyError, verify


def unemittable() -> frozenset[str]:
    """Registered backends that can't write a standalone .cu file."""
    return frozenset(b.name for b in registry.all() if not b.emits_standalone)


def choose_program(problem: Problem, arch: Arch, program: Program | None = None,
                   device_class: str | None = None):
    """(program, where it came from as one line): `program` if given (checked against
    `arch` and for a backend that emits standalone files), else dispatch.choice's resolution
    for a device of `device_class` (default: the arch's dispatch.devices.DEFAULT_CLASS) among
    the backends that emit standalone files (module doc)."""
    if program is not None:
        if program.arch != arch:
            raise VerifyError(f"arch: the program is {program.arch.value} but --arch is "
                              f"{arch.value}")
        if program.backend in unemittable():
            raise VerifyError(f"backend: {program.backend} can't emit a standalone .cu file "
                              f"(give a program of {', '.join(_emitters())})")
        return program, "program: given (--program)"
    from .dispatch.choice import resolve
    from .dispatch.devices import DEFAULT_CLASS
    cls = device_class or DEFAULT_CLASS[arch]
    choice = resolve(problem, arch, cls)
    if choice.program.backend not in unemittable():
        return choice.program, choice.line()
    first = choice
    choice = resolve(problem, arch, cls, exclude=unemittable())
    return choice.program, (f"{choice.line()}; instead of the {first.provenance} "
                            f"{first.program.backend} program ({first.program.backend} can't "
                            f"emit a standalone .cu file: the best of "
                            f"{', '.join(_emitters())} here)")


def _emitters() -> list[str]:
    return sorted(set(registry.names()) - unemittable())


def file_name(program: Program, problem: Problem) -> str:
    """`<kernel name>_<layout>_<acc>.cu`: layout and accumulator are baked into the file (the
    kernel name as lowered: a bf16 file is named apart from the f16 one)."""
    return f"{lowered_name(program, problem)}_{problem.layout.value}_{problem.acc.value}.cu"


def emit(problem: Problem, program: Program, out_dir: Path, force: bool = False) -> Path:
    """Write `<out_dir>/<file_name>` for `program` and return its path. A file of that name
    that holds other text (the same program and kind, another self-test shape) is replaced
    only when `force`; else UsageError naming it."""
    verify(program, problem)
    text = registry.get(program.backend).standalone(program, problem)
    if text is None:
        raise VerifyError(f"backend: {program.backend} can't emit a standalone .cu file")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name(program, problem)
    if not force and path.exists() and _text(path) != text:
        raise UsageError(f"-o: {path} exists and holds another file (another shape's "
                         f"self-test, or edited); give --force to replace it, or another -o")
    tmp = path.with_suffix(".cu.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def build_selftest(cu_path: Path, program: Program, device_sm: int | None = None) -> Path:
    """Compile the file's self-test executable next to it (BuildError with the command)."""
    from .compiler import nvcc
    exe = cu_path.with_suffix("")
    flags = [*nvcc.gencode(program.arch, device_sm), *registry.get(program.backend).nvcc_flags(program)]
    nvcc.compile_cuda(cu_path, exe, [*flags, "-DGEMMFORGE_STANDALONE_MAIN"], shared=False)
    return exe


__all__ = ["BuildError", "build_selftest", "choose_program", "emit", "file_name", "unemittable"]
