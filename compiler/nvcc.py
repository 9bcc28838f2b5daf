"""Invoking nvcc: the gencode flags per (program arch, device), the toolchain version for
cache keys, and builds that fail with the exact command that reproduces them."""
from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
from pathlib import Path

from .knobs import knobs
from .values import BuildError
from ..ir.program import Arch

BASE_FLAGS = ("-O3", "-std=c++17", "-DNDEBUG", "-lineinfo")


def gencode(arch: Arch, device_sm: int | None = None) -> list[str]:
    """nvcc -gencode flags for a program of `arch` run on a device of compute capability
    `device_sm` (e.g. 90). None: the program's own arch, plus PTX so newer GPUs can JIT it.
    An sm_80 program on Hopper is compiled for sm_90 from compute_80 features."""
    if arch == Arch.SM90A:
        if device_sm not in (None, 90):
            raise BuildError(f"an sm_90a program can't run on a device of compute capability {device_sm}")
        return ["-gencode=arch=compute_90a,code=sm_90a"]
    if device_sm is None:
        return ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_80,code=compute_80"]
    return [f"-gencode=arch=compute_80,code=sm_{device_sm}"]


@functools.lru_cache(maxsize=None)
def _version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def version() -> str:
    """The toolchain's version line ('missing' when nvcc is not found): part of cache keys."""
    return _version(knobs().nvcc)


def available() -> bool:
    return shutil.which(knobs().nvcc) is not None


def compile_cuda(source_path: Path, output: Path, flags: list[str], shared: bool = True) -> None:
    """Compile `source_path` into `output` (a shared library, or an executable when not
    `shared`); raise BuildError carrying the command that reproduces the failure."""
    k = knobs()
    cmd = [k.nvcc, *BASE_FLAGS, *flags, f"--threads={k.nvcc_threads}"]
    if shared:
        cmd += ["-Xcompiler", "-fPIC", "-shared"]
    cmd += ["-o", str(output), str(source_path)]
    repro = shlex.join(cmd)
    if not available():
        raise BuildError(f"nvcc not found ({k.nvcc!r}); install the CUDA toolkit or set "
                         "GEMMFORGE_NVCC", repro, str(source_path))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=k.build_timeout_s)
    except subprocess.TimeoutExpired:
        raise BuildError(f"nvcc took longer than {k.build_timeout_s:.0f} s "
                         "(GEMMFORGE_BUILD_TIMEOUT)", repro, str(source_path)) from None
    if done.returncode != 0:
        raise BuildError(f"nvcc failed with exit code {done.returncode}", repro,
                         str(source_path), done.stderr + done.stdout)


def cuobjdump() -> str | None:
    """A cuobjdump to disassemble with: on PATH, beside nvcc, or the one Triton ships."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    nvcc_path = shutil.which(knobs().nvcc)
    if nvcc_path:
        beside = Path(nvcc_path).resolve().parent / "cuobjdump"
        if beside.exists():
            return str(beside)
    try:
        import triton
    except ImportError:
        return None
    shipped = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(shipped) if shipped.exists() else None


def disassemble(binary: Path, what: str = "--dump-sass") -> str:
    """cuobjdump's output for `binary` ('' when no cuobjdump is at hand)."""
    tool = cuobjdump()
    if tool is None:
        return ""
    return subprocess.run([tool, what, str(binary)], capture_output=True, text=True,
                          timeout=120).stdout
