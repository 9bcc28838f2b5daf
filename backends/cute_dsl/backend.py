"""The cute_dsl backend: CuTe DSL (nvidia-cutlass-dsl) GEMM kernels, compiled ahead of time.

  sm_80   kernels/sm80.py: cp.async multistage pipeline, ldmatrix, mma.sync m16n8k16
  sm_90a  kernels/sm90.py: TMA (multicast over clusters) + wgmma, a producer warpgroup
          and cooperative consumer warpgroups, persistent or one-pass grid, TMA store

Build (no GPU needed): the plan (plan.py) goes to a worker process (aot.py) that sets
CUTE_DSL_ARCH before importing cutlass, compiles the kernel with m, n, k as runtime
arguments and exports it (`export_to_c`: a header + an object holding the host launch
code and the cubin); nvcc links that object, the wheel's static CUDA-dialect runtime and
our launcher (templates/launcher.cpp.jinja: the extern "C" gemmforge_launch API) into a
shared library that needs only the CUDA driver (cudart is linked statically). The
artifact is an ordinary "cuda_so", loaded by compiler.runtime where the 92 MB wheel is
absent: build here into a cache folder (scripts/prebuild_cute_dsl.py) and carry it.

Toolchain and driver (checked on an H200, driver 580.159.04 = CUDA 13.0, torch 2.11+cu130):
  the cu13 wheel (4.8.1) compiles with its own CUDA 13.4 NVVM and ptxas (PTX ISA 9.4),
  newer than the driver. Its PTX does not JIT there: cuModuleLoadData answers 222
  (CUDA_ERROR_UNSUPPORTED_PTX_VERSION); the same PTX with `.version 9.0` does. Its cubin
  is SASS, and SASS from the newer 13.4 ptxas loads under the 13.0 driver (minor-version
  compatibility): the exported libraries loaded through ctypes and ran correctly, sm_90a
  and sm_80-built-as-sm_90 alike. So `CUBIN_SOURCE` is "wheel". The fallback, also seen
  loading and running there, is "ptxas": the DSL's PTX with `.version` lowered to 9.0,
  assembled by the local CUDA 13.0 ptxas and embedded in place of the wheel's cubin
  (aot.py --ptxas). The exported object fetches driver entry points
  (cuTensorMapEncodeTiled) at version 12000, which a 13.0 driver serves.

Measured there (CUDA graphs of back-to-back launches, torch.matmul best of NN/TN in the
same process): sm_90a 128x256x64 w8x1 s3 persistent c1x1, 4096^3: 643-710 TF/s,
0.98-1.00x cuBLAS (nt and nn); 8192^3: 652-660 TF/s, 1.01-1.03x. Persistent grids with
clusters are sized by cudaOccupancyMaxActiveClusters (30 four-CTA clusters fit on an
H200, not 132/4 = 33; 33 ran at 0.5x). sm_80 kernels on Hopper: 0.45-0.56x (mma.sync).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

from .. import register
from ..base import Backend
from ...compiler.values import Artifact, BuildError, Source, Target
from . import plan as planning
from . import toolchain
from ..templating import render
from ...ir.arch import MmaFamily
from ...ir.program import (
    Arch, Cluster, Epilogue, Padding, Problem, Program, Schedule, SplitK, Swizzle, WarpSpec,
)

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
PLAN_FILE, LAUNCHER_FILE = "plan.json", "launcher.cu"
CUBIN_SOURCE = "wheel"   # "wheel": the DSL's own cubin; "ptxas": re-assembled by the local ptxas
_CLUSTERS = frozenset(Cluster(cm, cn) for cm in (1, 2, 4) for cn in (1, 2, 4) if cm * cn <= 4)


@register
class CuteDslBackend(Backend):
    """CuTe DSL kernels. IR fields, and what they become:

      tile      the CTA tile (bm, bn, bk)
      warps     sm_80: the mma.sync atom layout (wm x wn warps); sm_90a: w4x1 or w8x1,
                one or two consumer warpgroups stacked along M
      stages    shared-memory pipeline depth (cp.async groups / TMA mbarrier stages)
      swizzle   sm_80: XOR swizzle of 16-byte chunks (none, 32B, 64B, 128B); sm_90a: 128B
      raster    grouped tile order (row or col bands of `group` tiles), both archs
      schedule  sm_80: data_parallel; sm_90a: data_parallel or persistent (grid = SMs)
      cluster   sm_90a thread-block cluster; A is multicast along cn, B along cm
      warp_spec sm_80: none; sm_90a: cooperative (producer warpgroup + consumers)
      epilogue  sm_80: smem (staged, vectorised masked stores); sm_90a: tma
      layout    nt: K-major B; nn: N-major B (ldmatrix.trans / MN-major wgmma operand)
      acc       f32 or f16 accumulators (MmaF16BF16Op / wgmma .f16)
      padding, split_k: predicate and k1 only (masks on sm_80, TMA bounds on sm_90a)

    Constraints: see plan.refusal (and each kernel's docstring).
    """

    name = "cute_dsl"
    archs = frozenset({Arch.SM80, Arch.SM90A})
    instruction = "mma.sync m16n8k16 (sm_80) / wgmma (sm_90a)"
    mma_family = MmaFamily.WGMMA
    mma_shape = (16, 8, 16)
    unit_threads = 32
    allowed = {
        "swizzle": frozenset({Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128}),
        "padding": frozenset({Padding.PREDICATE}),
        "split_k": frozenset({SplitK()}),
        "schedule": frozenset({Schedule.DATA_PARALLEL, Schedule.PERSISTENT}),
        "cluster": _CLUSTERS,
        "warp_spec": frozenset({WarpSpec.NONE, WarpSpec.COOPERATIVE}),
        "epilogue": frozenset({Epilogue.SMEM, Epilogue.TMA}),
    }

    def supports(self, program: Program, problem: Problem | None = None) -> str | None:
        return planning.refusal(program, problem)

    def lower(self, program: Program, problem: Problem) -> Source:
        plan = planning.make_plan(program, problem)
        launcher = render(TEMPLATES, "launcher.cpp.jinja", {
            "program_text": plan.program, "prefix": plan.prefix, "bm": plan.bm, "bn": plan.bn,
            "cm": plan.cm, "cn": plan.cn, "align": plan.align, "pointer_align": plan.align * 2,
            "persistent": "true" if plan.persistent else "false", "threads": plan.threads})
        return Source(program, problem, "cute_dsl",
                      {PLAN_FILE: plan.as_json() + "\n", LAUNCHER_FILE: launcher}, LAUNCHER_FILE,
                      meta={"plan": plan.as_json()})

    def build(self, source: Source, target: Target, out_dir: Path) -> Artifact:
        plan = planning.KernelPlan.from_json(source.files[PLAN_FILE])
        if source.program.arch == Arch.SM90A and target.device_sm not in (None, 90):
            raise BuildError(f"an sm_90a program can't run on compute capability "
                             f"{target.device_sm}")
        plan = dataclasses.replace(
            plan, dsl_arch=planning.dsl_arch(source.program, target.device_sm))
        for name, text in source.files.items():
            (out_dir / name).write_text(text)
        (out_dir / PLAN_FILE).write_text(plan.as_json() + "\n")
        toolchain.compile_plan(out_dir / PLAN_FILE, out_dir,
                               ptxas=toolchain.local_ptxas() if CUBIN_SOURCE == "ptxas" else None)
        lib = out_dir / f"{source.program.name}.so"
        toolchain.link(out_dir / LAUNCHER_FILE, out_dir / "kernel.o", lib)
        return Artifact(key="", kind="cuda_so", path=lib, program_text=str(source.program),
                        layout=source.problem.layout, acc=source.problem.acc,
                        meta={"symbol": "gemmforge_launch",
                              "workspace_symbol": "gemmforge_workspace_bytes",
                              "plan": plan.as_json(), "align": plan.align,
                              "dsl": f"{toolchain.DSL_DISTRIBUTION}=={toolchain.DSL_VERSION}",
                              "cubin": CUBIN_SOURCE})

    def fingerprint(self) -> str:
        return _fingerprint()


@functools.lru_cache(maxsize=None)
def _fingerprint() -> str:
    """Templates, the kernel and build sources, the pinned DSL version and the cubin
    source: everything but the program that shapes an artifact."""
    h = hashlib.sha256(f"{toolchain.DSL_VERSION}:{CUBIN_SOURCE}\0".encode())
    for path in sorted([*HERE.rglob("*.py"), *TEMPLATES.rglob("*.jinja")]):
        h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
