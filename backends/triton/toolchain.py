"""Ahead-of-time Triton compilation of a rendered kernel.py, with or without a GPU.

One function, `compile_kernel`, serves both the build (on a CPU worker, for a named
`GPUTarget`) and the loader (on the GPU machine, for the device's capability), so the
two can't drift apart. It takes care of what differs between Triton releases (the
ASTSource keyword for constexprs) and of the two facts Triton hides in its options:

- an sm_80 program run on a Hopper device is compiled for capability 90 with
  DISABLE_MMA_V3 set (a cache-invalidating Triton variable), so tl.dot stays on
  mma.sync as the program asked; cubins for sm_80 don't load on sm_90;
- a variant names the integer arguments known to be multiples of 16 (N, K, NUMEL):
  Triton is told so through `tt.divisibility` attributes, which is what lets it issue
  16-byte vector loads; the runtime picks the variant per launch.
- a kernel planned with `launch_pdl` (the program's `pdl`) is compiled with Triton's
  `launch_pdl` option, so its launcher (compiled.run, and launcher.RawLauncher) sets
  programmatic stream serialization; Triton drops options it does not know without a
  word, so the release is checked first (PDL_MIN_RELEASE: the option and
  triton.language.extra.cuda.gdc_wait / gdc_launch_dependents) and the compiled
  kernel's metadata after, and either missing is a BuildError, never a plain launch.

Reproduce a build:  python -m backends.triton.toolchain OUT_DIR
(OUT_DIR holds kernel.py and plan.json, as `build()` writes them before compiling).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import inspect
import json
import os
import sys
import threading
from pathlib import Path

from ...compiler.values import BuildError
from .plan import ALIGN_HINT, KernelPlan, LaunchPlan
from ...ir.program import Arch

AMPERE, HOPPER, BLACKWELL = 80, 90, 100
WARP_SIZE = 32
PDL_MIN_RELEASE = "3.4"  # launch_pdl and extra.cuda.gdc_* (3.6 and 3.9 checked)
_ENV_LOCK = threading.Lock()


def import_triton():
    """The triton module, or BuildError saying it is missing."""
    try:
        import triton
        import triton.compiler  # noqa: F401
    except ImportError as e:
        raise BuildError(f"triton is not importable ({e}); "
                         "pip install 'gemmforge[triton]'") from None
    return triton


def version() -> str:
    """Triton's version string ('missing' without triton): part of every cache key."""
    try:
        import triton
    except ImportError:
        return "missing"
    return triton.__version__


def capability_for(arch: Arch, device_sm: int | None) -> tuple[int, dict[str, str]]:
    """(compute capability to compile for, environment to compile under) for a program
    of `arch` run on a device of `device_sm` (None: the program's own arch)."""
    if arch == Arch.SM90A:
        if device_sm not in (None, HOPPER):
            raise BuildError(f"an sm_90a program can't run on a device of compute "
                             f"capability {device_sm}")
        return HOPPER, {}
    capability = device_sm or AMPERE
    env = {"DISABLE_MMA_V3": "1"} if capability >= HOPPER else {}
    if capability >= BLACKWELL:
        env["DISABLE_MMA_V5"] = "1"
    return capability, env


def load_module(path: Path):
    """Import a rendered kernel.py by path under a name unique to that path."""
    path = Path(path).resolve()
    name = "gemmforge_triton_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # inspect (and so @triton.jit) looks modules up here
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


UNHINTED_POINTER = "bias_ptr"  # read once a tile: its alignment buys nothing


def _attrs(kernel: KernelPlan, aligned: tuple[str, ...]) -> dict:
    """tt.divisibility for every pointer but the fused bias (the runtime checks 16-byte
    alignment; a bias may be any fp16 vector, as cuda_wgmma takes it) and for the integer
    arguments the variant marks aligned."""
    hint = [["tt.divisibility", ALIGN_HINT]]
    return {(i,): hint for i, (name, ty) in enumerate(kernel.signature.items())
            if (ty.startswith("*") and name != UNHINTED_POINTER) or name in aligned}


def _ast_source(triton, fn, kernel: KernelPlan, aligned: tuple[str, ...]):
    from triton.compiler import ASTSource
    params = inspect.signature(ASTSource).parameters
    # 3.3 through 3.9 (3.6 and 3.9 checked) take signature and constexprs keyed by name
    if "constexprs" not in params:
        raise BuildError(f"triton {triton.__version__}: ASTSource takes {list(params)}; "
                         "the triton backend needs triton >= 3.3 (ASTSource(constexprs=...))")
    # Triton's launcher takes its arguments in the order of `signature`, whatever the
    # kernel's own order: a plan listing them otherwise would launch with misplaced ones
    if list(kernel.signature) != list(fn.arg_names):
        raise BuildError(f"{kernel.name}: the plan lists the parameters "
                         f"{', '.join(kernel.signature)} but the kernel takes "
                         f"{', '.join(fn.arg_names)}; they must match in order")
    return ASTSource(fn=fn, signature=dict(kernel.signature), constexprs=dict(kernel.constexprs),
                     attrs=_attrs(kernel, aligned))


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """Set `env` for one compile (Triton reads DISABLE_MMA_V3 from the process)."""
    with _ENV_LOCK:
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def pdl_missing() -> str | None:
    """Why the installed Triton can't build a pdl kernel (its CUDA options lack
    `launch_pdl`, or triton.language.extra.cuda lacks gdc_wait / gdc_launch_dependents),
    or None where it can."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        from triton.language.extra import cuda
    except ImportError as e:
        return f"its CUDA backend does not import ({e})"
    options = getattr(CUDAOptions, "__dataclass_fields__", {})
    lacks = ([] if "launch_pdl" in options else ["the compile option launch_pdl"]) + [
        f"triton.language.extra.cuda.{name}" for name in ("gdc_wait", "gdc_launch_dependents")
        if not hasattr(cuda, name)]
    return f"it lacks {' and '.join(lacks)}" if lacks else None


def require_pdl(what: str) -> None:
    """BuildError naming `what` (a kernel or program) where the installed Triton can't
    launch it with programmatic dependent launch (pdl_missing)."""
    triton = import_triton()
    why = pdl_missing()
    if why:
        raise BuildError(f"{what}: pdl needs triton >= {PDL_MIN_RELEASE}; triton "
                         f"{triton.__version__}: {why}. Use the program without pdl")


def _check_launch_pdl(triton, kernel: KernelPlan, compiled) -> None:
    """BuildError where a kernel planned with launch_pdl came out of the compile
    without it in its metadata (it would launch without programmatic serialization)."""
    if not getattr(compiled.metadata, "launch_pdl", False):
        raise BuildError(f"{kernel.name}: triton {triton.__version__} compiled it without "
                         "launch_pdl in its metadata, so it would launch without programmatic "
                         "serialization. Use the program without pdl")


def compile_kernel(module, kernel: KernelPlan, capability: int, env: dict[str, str],
                   aligned: tuple[str, ...]):
    """triton.compile one kernel of `module` for `capability`; returns the CompiledKernel.
    A kernel planned with launch_pdl is compiled with it (BuildError where it can't be)."""
    triton = import_triton()
    from triton.backends.compiler import GPUTarget
    fn = getattr(module, kernel.name)
    options = {"num_warps": kernel.num_warps, "num_stages": kernel.num_stages,
               "enable_fp_fusion": True}
    if kernel.launch_pdl:
        require_pdl(kernel.name)
        options["launch_pdl"] = True
    with _environment(env):
        compiled = triton.compile(_ast_source(triton, fn, kernel, aligned),
                                  target=GPUTarget("cuda", capability, WARP_SIZE),
                                  options=options)
    if kernel.launch_pdl:
        _check_launch_pdl(triton, kernel, compiled)
    return compiled


def repro_command(out_dir: Path) -> str:
    return f"python -m backends.triton.toolchain {out_dir}"


def main(argv: list[str] | None = None) -> int:
    """Recompile OUT_DIR/kernel.py as OUT_DIR/plan.json says; print each kernel's size."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args(argv)
    record = json.loads((args.out_dir / "plan.json").read_text())
    plan = LaunchPlan.from_json(record["plan"])
    module = load_module(args.out_dir / "kernel.py")
    for kernel in plan.kernels:
        compiled = compile_kernel(module, kernel, record["capability"], record["env"],
                                  tuple(record["aligned"]))
        print(f"{kernel.name}: {len(compiled.asm['ptx'])} chars of PTX, "
              f"{compiled.metadata.shared} B shared memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
