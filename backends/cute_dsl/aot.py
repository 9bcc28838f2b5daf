"""Ahead-of-time compile of one CuTe DSL kernel: the build step's worker process.

    python -m backends.cute_dsl.aot PLAN.json OUT_DIR [--ptxas PTXAS]

reads a KernelPlan, sets CUTE_DSL_ARCH to the plan's arch *before* importing cutlass
(the DSL reads it at import; no GPU is needed), traces and compiles the kernel with
m, n, k as runtime arguments, and exports it with `export_to_c` as OUT_DIR/kernel.h and
OUT_DIR/kernel.o (host launch code + the embedded cubin), plus kernel_info.h (symbol and
shared memory, for the launcher) and kernel.ptx / kernel.cubin for inspection.
One process per kernel: the arch is process-wide state in the DSL.

--ptxas: embed a cubin assembled by that ptxas from the DSL's PTX (its `.version`
lowered to what that ptxas accepts) instead of the DSL's own cubin: the way out when the
driver that runs the kernel rejects cubins from the wheel's newer toolchain.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

EXPORT_NAME = "kernel"
DUMP = "dsl-dump"
PTX_ISA_FOR_PTXAS = "9.0"  # what a CUDA 13.0 ptxas accepts


def _kernel_class(plan):
    if plan.kernel == "sm90_warpspecialized":
        from .kernels.sm90 import Sm90Gemm
        return Sm90Gemm
    from .kernels.sm80 import Sm80Gemm
    return Sm80Gemm


def compile_plan(plan, out_dir: Path, ptxas: str | None = None) -> None:
    """Trace, compile and export `plan`'s kernel into out_dir (see the module docstring)."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    gemm = _kernel_class(plan)(plan)
    ptr = [make_ptr(cutlass.Float16, 0, cute.AddressSpace.gmem, assumed_align=plan.align * 2)
           for _ in range(3)]
    sizes = [cutlass.Int32(1) for _ in range(4)]  # m, n, k, and the grid (clusters)
    compiled = cute.compile(gemm, *ptr, *sizes, cuda.CUstream(0),
                           options="--keep-ptx --keep-cubin")
    _keep_products(out_dir)
    if ptxas:
        _embed_cubin_from(ptxas, plan.dsl_arch, out_dir)
    compiled.export_to_c(file_path=str(out_dir), file_name=EXPORT_NAME,
                         function_prefix=plan.prefix)
    _write_launch_facts(compiled, gemm, out_dir)


def _write_launch_facts(compiled, gemm, out_dir: Path) -> None:
    """kernel_info.h: the kernel's symbol in the cubin and its dynamic shared memory, which
    the launcher needs to ask the occupancy API how many clusters stay resident."""
    (name,) = compiled.kernel_info.keys()
    storage = getattr(gemm, "storage", None)
    smem = storage.size_in_bytes() if storage is not None else 0
    (out_dir / f"{EXPORT_NAME}_info.h").write_text(
        f'#define GF_KERNEL_NAME "{name}"\n#define GF_DYNAMIC_SMEM_BYTES {smem}\n')


def _keep_products(out_dir: Path) -> None:
    """Copy the PTX and cubin that --keep-ptx/--keep-cubin wrote into the dump folder."""
    for suffix in ("ptx", "cubin"):
        for kept in (out_dir / DUMP).glob(f"*.{suffix}"):
            shutil.copyfile(kept, out_dir / f"{EXPORT_NAME}.{suffix}")
    shutil.rmtree(out_dir / DUMP, ignore_errors=True)


def _embed_cubin_from(ptxas: str, arch: str, out_dir: Path) -> None:
    """Assemble kernel.ptx with `ptxas` and make export_to_c embed that cubin."""
    import re
    import subprocess
    from cutlass.base_dsl import jit_executor

    ptx = (out_dir / f"{EXPORT_NAME}.ptx").read_text()
    ptx = re.sub(r"^\.version \d+\.\d+", f".version {PTX_ISA_FOR_PTXAS}", ptx, count=1,
                 flags=re.M)
    (out_dir / f"{EXPORT_NAME}.local.ptx").write_text(ptx)
    cubin = out_dir / f"{EXPORT_NAME}.local.cubin"
    subprocess.run([ptxas, f"-arch={arch}", "-O3", str(out_dir / f"{EXPORT_NAME}.local.ptx"),
                    "-o", str(cubin)], check=True)
    data = cubin.read_bytes()
    jit_executor._decode_gpu_binary_cubin = lambda _raw: data


def main(argv: list[str]) -> int:
    plan_path, out_dir = Path(argv[0]), Path(argv[1])
    ptxas = argv[argv.index("--ptxas") + 1] if "--ptxas" in argv else None
    from .plan import KernelPlan
    plan = KernelPlan.from_json(plan_path.read_text())
    os.environ["CUTE_DSL_ARCH"] = plan.dsl_arch
    (out_dir / DUMP).mkdir(exist_ok=True)
    os.environ["CUTE_DSL_DUMP_DIR"] = str(out_dir / DUMP)
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"  # the artifact cache is ours
    compile_plan(plan, out_dir, ptxas)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
