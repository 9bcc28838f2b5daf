"""The CuTe DSL toolchain as the build step uses it: is the DSL here, compile a plan in a
worker process (aot.py), and link the exported object into a shared library with nvcc.

Nothing here imports cutlass: the parent process only looks the package up, so the
backend lists, lowers and fingerprints everywhere, the GPU machine (no wheel) included.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from ...compiler import nvcc
from ...compiler.child import python_module
from ...compiler.knobs import knobs
from ...compiler.values import BuildError

DSL_DISTRIBUTION = "nvidia-cutlass-dsl"
DSL_VERSION = "4.8.1"      # pinned: part of every cache key (see backend.fingerprint)
DSL_CUDA_FLAVOR = "cu13"   # the wheel's CUDA 13 runtime (pyproject extra: cute-dsl)
RUNTIME_LIBRARY = "libcuda_dialect_runtime_static.a"
INSTALL_HINT = ("install gemmforge[cute-dsl] (nvidia-cutlass-dsl[cu13]=="
                f"{DSL_VERSION}) or prebuild with scripts/prebuild_cute_dsl.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    """Why the DSL can't build here (not installed, or another version), or None."""
    try:
        version = importlib.metadata.version(DSL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return f"the CuTe DSL ({DSL_DISTRIBUTION}) is not installed"
    if version != DSL_VERSION:
        return f"{DSL_DISTRIBUTION} {version} is installed; gemmforge pins {DSL_VERSION}"
    if importlib.util.find_spec("cutlass") is None:
        return f"{DSL_DISTRIBUTION} is installed but `cutlass` is not importable"
    return None


def runtime_library() -> Path:
    """The wheel's static CUDA-dialect runtime that exported objects link against."""
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        lib = Path(root) / DSL_CUDA_FLAVOR / "lib" / RUNTIME_LIBRARY
        if lib.exists():
            return lib
    raise BuildError(f"{RUNTIME_LIBRARY} not found under {roots or DSL_DISTRIBUTION}; "
                     f"reinstall {DSL_DISTRIBUTION}[{DSL_CUDA_FLAVOR}]=={DSL_VERSION}")


def compile_plan(plan_path: Path, out_dir: Path, ptxas: str | None = None) -> None:
    """Run the AOT worker (python -m backends.cute_dsl.aot) on a plan file."""
    reason = missing()
    if reason:
        raise BuildError(f"cute_dsl: {reason}; {INSTALL_HINT}", source_path=str(plan_path))
    cmd = python_module("gemmforge.backends.cute_dsl.aot", str(plan_path), str(out_dir))
    if ptxas:
        cmd += ["--ptxas", ptxas]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    repro = f"cd {shlex.quote(str(REPO_ROOT))} && {shlex.join(cmd)}"
    timeout = knobs().build_timeout_s
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        raise BuildError(f"the CuTe DSL compile took longer than {timeout:.0f} s "
                         "(GEMMFORGE_BUILD_TIMEOUT)", repro, str(plan_path)) from None
    if done.returncode != 0:
        raise BuildError(f"the CuTe DSL compile failed (exit {done.returncode})", repro,
                         str(plan_path), done.stderr + done.stdout)


def local_ptxas() -> str:
    """The ptxas beside the nvcc gemmforge builds with (for CUBIN_SOURCE = "ptxas")."""
    found = shutil.which(knobs().nvcc)
    return str(Path(found).resolve().parent / "ptxas") if found else "ptxas"


def link(launcher: Path, kernel_object: Path, output: Path) -> None:
    """nvcc: the launcher + the exported object + the DSL runtime -> one shared library
    (static cudart; the runtime's symbols stay private to it; symbol tables stripped)."""
    nvcc.compile_cuda(launcher, output, [f"-I{launcher.parent}", str(kernel_object),
                                         str(runtime_library()),
                                         "-Xlinker", "--exclude-libs,ALL", "-Xlinker", "-s"])
