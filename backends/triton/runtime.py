"""Loading and launching triton artifacts: `@loader("triton")` gives a compiler.runtime.Kernel.

The loader recompiles the artifact's kernel.py through the local Triton for the current
device (toolchain.compile_kernel, the same call the build made, so Triton's own cache
usually answers at once) rather than loading the stored cubin: a cubin is tied to the
Triton release whose launcher passes its arguments, and the GPU machine's Triton need
not be the build machine's. The stored PTX and cubin stay as the build's record.

The host path: per problem size, the grids and `compiled[grid]` runners are prepared once;
per launch, one dict of argument values and, for each kernel of the plan, the prepared
runner called with `(*args, stream=stream)`: the CompiledKernel's public entry, which
is what JITFunction.run itself calls after its lookups, and which hands the launcher
whatever its release wants (3.6 and 3.9 agree today; scratch buffers, launch hooks and
metadata come with it). Each _Step holds its CompiledKernel: from 3.9 on, dropping it
unloads the module its function handle points into. Pointers go in as plain ints, which
Triton's launchers accept; TMA descriptors are host-side `TensorDescriptor`s over a tiny
pointer shim. A variant per alignment class of (n, k, m * n) is compiled on first use.
"""
from __future__ import annotations

from pathlib import Path

from backends.base import Artifact
from backends.triton import toolchain
from backends.triton.plan import (
    ALIGN_HINT, TMA_ROW_ALIGN_HALFS, KernelPlan, LaunchPlan, aligned_params,
)
from compiler.runtime import Kernel, loader

PREPARED_SHAPES = 64  # problem sizes whose launch preparation a kernel keeps


class DevicePointer:
    """A raw device address that looks enough like a fp16 tensor for TensorDescriptor."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self.ptr


class _Step:
    """One kernel of the plan, compiled and ready to launch."""

    def __init__(self, kernel: KernelPlan, compiled, plan: LaunchPlan):
        self.kernel, self.plan, self.compiled = kernel, plan, compiled
        compiled.run  # noqa: B018  (loads the module on this device now: fail at load)


class TritonKernel(Kernel):
    """A loaded triton artifact: the plan's kernels, compiled per alignment variant."""

    def __init__(self, artifact: Artifact):
        import torch
        import triton  # noqa: F401  (fail here, clearly, where Triton is missing)
        super().__init__(artifact)
        meta = artifact.meta
        self.plan = LaunchPlan.from_json(meta["plan"])
        self._module = toolchain.load_module(Path(artifact.path).with_name(meta["entry"]))
        device = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(device)
        self._num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        self._capability, self._env = toolchain.capability_for(
            _arch_of(artifact), major * 10 + minor)
        self._f16 = torch.float16
        self._variants: dict[tuple[str, ...], list[_Step]] = {}
        self._prepared: dict[tuple[int, int, int], tuple] = {}
        self._last_descriptors: tuple = (None, {})
        self._steps(tuple(meta["aligned"]))  # the built variant: fail at load, not launch

    def _steps(self, aligned: tuple[str, ...]) -> list[_Step]:
        steps = self._variants.get(aligned)
        if steps is None:
            steps = [_Step(k, toolchain.compile_kernel(self._module, k, self._capability,
                                                       self._env, aligned), self.plan)
                     for k in self.plan.kernels]
            self._variants[aligned] = steps
        return steps

    def workspace_bytes(self, m: int, n: int, k: int) -> int:
        return self.plan.workspace_bytes(m, n, k)

    def launch(self, a_ptr, b_ptr, c_ptr, m, n, k, workspace_ptr, workspace_bytes, stream):
        if (a_ptr | b_ptr | c_ptr | (workspace_ptr or 0)) % ALIGN_HINT:
            raise ValueError(f"{self.artifact.program_text}: a, b, c and the workspace must "
                             f"be {ALIGN_HINT}-byte aligned")
        prepared = self._prepared.get((m, n, k))
        if prepared is None:
            prepared = self._prepare(m, n, k)
        need, runners = prepared
        if workspace_bytes < need:
            raise ValueError(f"{self.artifact.program_text}: needs a workspace of {need} B at "
                             f"{m}x{n}x{k}, got {workspace_bytes} B")
        values = {"a_ptr": a_ptr, "b_ptr": b_ptr, "c_ptr": c_ptr, "ws_ptr": workspace_ptr or 0,
                  "M": m, "N": n, "K": k, "NUMEL": m * n}
        if self.plan.descriptors:
            values.update(self._descriptors(values))
        for run, step in runners:
            values["NUM_PROGRAMS"] = step.grid
            run(*step.kernel.args(values), stream=stream or 0)

    def _prepare(self, m: int, n: int, k: int):
        """What a launch at (m, n, k) needs that doesn't change between calls: the
        workspace size, and per kernel its grid and Triton runner (the lean host path)."""
        runners = []
        for step in self._steps(aligned_params(m, n, k)):
            grid = self.plan.grid(step.kernel, m, n, self._num_sms)
            runners.append((step.compiled[(grid, 1, 1)], _Sized(step.kernel, grid)))
        prepared = (self.plan.workspace_bytes(m, n, k), runners)
        if len(self._prepared) >= PREPARED_SHAPES:
            self._prepared.pop(next(iter(self._prepared)))
        self._prepared[(m, n, k)] = prepared
        return prepared

    def _descriptors(self, values: dict) -> dict:
        """TMA descriptors for these pointers and sizes; the last set is reused while the
        caller passes the same buffers (the usual case with PyTorch's caching allocator)."""
        key = tuple(values[k] for k in ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"))
        if self._last_descriptors[0] != key:
            bases = {"a_desc": values["a_ptr"], "b_desc": values["b_ptr"],
                     "c_desc": values["c_ptr"]}
            bases = {name: DevicePointer(ptr, self._f16) for name, ptr in bases.items()}
            self._last_descriptors = (key, make_descriptors(self.plan, values, bases))
        return self._last_descriptors[1]


class _Sized:
    """A kernel of the plan with its grid at one problem size."""

    __slots__ = ("kernel", "grid")

    def __init__(self, kernel: KernelPlan, grid: int):
        self.kernel, self.grid = kernel, grid


def make_descriptors(plan: LaunchPlan, values: dict, bases: dict) -> dict:
    """Host TMA descriptors of `plan` over `bases` (tensors, or DevicePointers), shaped by
    the problem sizes in `values`; Triton fills each CUtensorMap at launch."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    out = {}
    for name, desc in plan.descriptors.items():
        rows, cols = (values[d] for d in desc["dims"])
        if cols % TMA_ROW_ALIGN_HALFS:
            raise ValueError(f"TMA needs rows of a multiple of {TMA_ROW_ALIGN_HALFS} halves; "
                             f"{name} is {rows} x {cols} (use epilogue direct)")
        out[name] = TensorDescriptor(bases[name], [rows, cols], [cols, 1], list(desc["block"]))
    return out


def _arch_of(artifact: Artifact):
    from ir.text import parse
    return parse(artifact.program_text).arch


@loader("triton")
def load_triton(artifact: Artifact) -> Kernel:
    return TritonKernel(artifact)
