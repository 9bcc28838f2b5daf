"""Loading and launching triton artifacts: `@loader("triton")` gives a compiler.runtime.Kernel.

The loader recompiles the artifact's kernel.py through the local Triton for the current
device (toolchain.compile_kernel, the same call the build made, so Triton's own cache
usually answers at once) rather than loading the stored cubin: a cubin is tied to the
Triton release whose launcher passes its arguments, and the GPU machine's Triton need
not be the build machine's. The stored PTX and cubin stay as the build's record.

The host path: per problem size, everything that follows from the sizes is prepared once
(`_Prepared`: the workspace size and, per kernel of the plan, its grid, its Triton runner
and its argument tuple with the per-call slots left open, plan.PER_CALL_ARGS). Where the
Triton release's launcher was read (launcher.RAW_RELEASES, 3.6) and no launch hook is set,
a launch goes straight to the C launcher Triton built for each kernel (launcher.py), with
the argument list, TMA descriptors encoded, kept per (a, b, c, workspace, bias) address set:
a call with buffers seen before does no per-argument Python work and no
cuTensorMapEncodeTiled. Otherwise a launch builds one tuple of per-call values (the four
addresses, and for TMA plans the host `TensorDescriptor`s over them, kept per address)
and, per kernel, fills the slots with one itemgetter and a tuple concatenation; the kernel
is then launched the way JITFunction.run launches it: `compiled.run(grid..., stream,
function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)`, with no launch
metadata when no launch hook is set (the metadata is only ever read by hooks); when a
hook is set, or the Triton release is not one whose runner was read (DIRECT_RUN_RELEASES),
the CompiledKernel's public runner `compiled[grid](*args, stream=stream)` launches
instead, which builds the metadata and calls the hooks. Each _Step holds its
CompiledKernel: from 3.9 on, dropping it unloads the module its function handle points
into. Pointers go in as plain ints, which Triton's launchers accept; on the `compiled.run`
path Triton's launcher encodes each host TensorDescriptor into a CUtensorMap on every
launch, unless GEMMFORGE_TRITON_DESCRIPTOR_CACHE=1 (opt-in, not checked on a GPU) makes
`install_descriptor_cache` reuse the encoding while the buffer repeats. A variant per
alignment class of (n, k, m * n) is compiled on first use. A plan with in-kernel split-K
(plan.counters) gets its per-tile counters here, zeroed once per prepared size on the
kernel's device and passed as `cnt_ptr` (not a per-call argument): every launch leaves
them zero (Kernel.zeroed_bytes), so no call clears them. Where the first launch at a size
is captured into a CUDA graph, the graph zeroes its own counters at each replay, and the
size is prepared again outside it.
"""
from __future__ import annotations

from operator import itemgetter
from pathlib import Path
from typing import Callable

from ...compiler.values import Artifact, BuildError
from . import toolchain
from .descriptors import DevicePointer, install_descriptor_cache, make_descriptor
from .plan import (
    ALIGN_HINT, DESCRIPTOR_BASES, PER_CALL_ARGS, KernelPlan, LaunchPlan, aligned_params,
)
from .launcher import raw_launcher
from ...compiler.knobs import knobs
from ...compiler.runtime import TORCH_DTYPES, Kernel, loader
from ...ir.arch import HALF_BYTES

PREPARED_SHAPES = 64   # problem sizes whose launch preparation a kernel keeps
DESCRIPTORS_KEPT = 24  # TMA descriptors (and C launcher argument sets) a prepared size keeps
# Triton releases whose CompiledKernel runner was read: it launches with
# `compiled.run(gx, gy, gz, stream, compiled.function, compiled.packed_metadata,
# launch_metadata, enter_hook, exit_hook, *args)`, the call JITFunction.run makes too.
DIRECT_RUN_RELEASES = ("3.6.", "3.9.")
DESCRIPTOR_SLOTS = PER_CALL_ARGS[PER_CALL_ARGS.index("a_desc"):]  # after the addresses


class _Step:
    """One kernel of the plan, compiled and ready to launch."""

    def __init__(self, kernel: KernelPlan, compiled, plan: LaunchPlan):
        self.kernel, self.plan, self.compiled = kernel, plan, compiled
        run = compiled.run  # (loads the module on this device now: fail at load)
        if kernel.launch_pdl and not getattr(run, "launch_pdl", False):
            raise BuildError(f"{kernel.name}: planned with pdl, but Triton's launcher for it "
                             "does not set programmatic serialization (run.launch_pdl)")


class _Launch:
    """One kernel of the plan at one problem size: grid, runner and launcher, and `args`,
    a function from the per-call tuple (plan.PER_CALL_ARGS order) to its arguments."""

    __slots__ = ("grid", "runner", "run", "function", "metadata", "args", "raw")

    def __init__(self, compiled, grid: int, args: Callable[[tuple], tuple], raw=None):
        self.grid, self.args, self.raw = grid, args, raw
        self.runner = compiled[(grid, 1, 1)]
        self.run = compiled.run
        self.function = getattr(compiled, "function", None)
        self.metadata = getattr(compiled, "packed_metadata", None)


class _Prepared:
    """What every launch at one problem size shares. `descriptors` is None for a plan
    without TMA, else the specs of TritonKernel._descriptor_specs; `last` is the latest
    ((a, b, c) addresses, descriptors) and `kept` the descriptors built at this size, by
    (name, address). `raw` is True when every kernel has a RawLauncher; `expanded` then maps
    (a, b, c, workspace, bias) addresses to per kernel its C launcher's arguments. `counters`
    holds the zero-initialised tensor of in-kernel split-K's per-tile counters at this
    size (plan.counters), kept alive while the size is prepared."""

    __slots__ = ("need", "launches", "descriptors", "last", "kept", "raw", "expanded",
                 "counters")

    def __init__(self, need: int, launches: tuple, descriptors: tuple | None, counters=None):
        self.need, self.launches, self.descriptors = need, launches, descriptors
        self.counters = counters  # in-kernel split-K's zeroed int32 counters (or None)
        self.last: tuple = (None, ())
        self.kept: dict = {}
        self.raw = all(step.raw is not None for step in launches)
        self.expanded: dict = {}


class TritonKernel(Kernel):
    """A loaded triton artifact: the plan's kernels, compiled per alignment variant."""

    def __init__(self, artifact: Artifact):
        import torch
        import triton  # (fail here, clearly, where Triton is missing)
        super().__init__(artifact)
        meta = artifact.meta
        self.plan = LaunchPlan.from_json(meta["plan"])
        self.fused_bias = any("bias_ptr" in k.signature for k in self.plan.kernels)
        if any(k.launch_pdl for k in self.plan.kernels):  # kernel.py imports gdc_*
            toolchain.require_pdl(artifact.program_text)
        self._module = toolchain.load_module(Path(artifact.path).with_name(meta["entry"]))
        device = self._device = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(device)
        self._num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        self._capability, self._env = toolchain.capability_for(
            _arch_of(artifact), major * 10 + minor)
        self._element = getattr(torch, TORCH_DTYPES[artifact.dtype])  # of A, B and C
        # the launch hooks' home where launches may skip the runner, else None. On by
        # default (the GPU tier passed with it on an H100, Triton 3.6);
        # GEMMFORGE_TRITON_DIRECT_LAUNCH=0 launches through the runner instead.
        direct = knobs().triton_direct_launch and triton.__version__.startswith(
            DIRECT_RUN_RELEASES)
        self._knobs = triton.knobs.runtime if direct else None
        # launch through Triton's C launcher where its release was read (launcher.py);
        # GEMMFORGE_TRITON_RAW_LAUNCH=0 keeps compiled.run
        self._raw = direct and knobs().triton_raw_launch
        if direct and self.plan.descriptors and knobs().triton_descriptor_cache:
            install_descriptor_cache()  # opt-in until a GPU run has checked it
        self._variants: dict[tuple[str, ...], list[_Step]] = {}
        self._prepared: dict[tuple[int, int, int], _Prepared] = {}
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

    def zeroed_bytes(self, m: int, n: int, k: int) -> int:
        return self.plan.counter_bytes(m, n)

    def launch(self, a_ptr, b_ptr, c_ptr, m, n, k, workspace_ptr, workspace_bytes, stream):
        if self.fused_bias:
            raise ValueError(f"{self.artifact.program_text}: a fused-bias program launches "
                             "through launch_bias (kernel(a, b, bias=t))")
        self._launch_with(a_ptr, b_ptr, c_ptr, 0, m, n, k, workspace_ptr, workspace_bytes,
                          stream)

    def launch_bias(self, a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                    workspace_bytes, stream):
        if not self.fused_bias:
            super().launch_bias(a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                                workspace_bytes, stream)
        if not bias_ptr or bias_ptr % HALF_BYTES:
            raise ValueError(f"{self.artifact.program_text}: the bias must be the device "
                             f"address of fp16 values ({HALF_BYTES}-byte aligned)")
        self._launch_with(a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                          workspace_bytes, stream)

    def _launch_with(self, a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                     workspace_bytes, stream):
        ws_ptr = workspace_ptr or 0
        if (a_ptr | b_ptr | c_ptr | ws_ptr) % ALIGN_HINT:
            raise ValueError(f"{self.artifact.program_text}: a, b, c and the workspace must "
                             f"be {ALIGN_HINT}-byte aligned")
        prepared = self._prepared.get((m, n, k)) or self._prepare(m, n, k)
        if workspace_bytes < prepared.need:
            raise ValueError(f"{self.artifact.program_text}: needs a workspace of "
                             f"{prepared.need} B at {m}x{n}x{k}, got {workspace_bytes} B")
        live = (a_ptr, b_ptr, c_ptr, ws_ptr, bias_ptr)
        stream = stream or 0
        direct = self._knobs is not None and _hooks_idle(self._knobs)
        if direct and prepared.raw:
            expanded = prepared.expanded.get(live) or self._expand(prepared, live)
            for step, args in zip(prepared.launches, expanded):
                step.raw(step.grid, stream, step.function, step.metadata, args)
            return
        if prepared.descriptors is not None:
            live += self._descriptors(prepared, live)
        if direct:
            for step in prepared.launches:
                step.run(step.grid, 1, 1, stream, step.function, step.metadata, None, None,
                         None, *step.args(live))
        else:
            for step in prepared.launches:
                step.runner(*step.args(live), stream=stream)

    def _expand(self, prepared: _Prepared, live: tuple) -> tuple:
        """Per kernel, its C launcher's arguments for the addresses in `live` (TMA
        descriptors encoded), kept for buffer sets that come back."""
        full = live
        if prepared.descriptors is not None:
            full += self._descriptors(prepared, live)
        expanded = tuple(step.raw.expand(step.args(full)) for step in prepared.launches)
        if len(prepared.expanded) >= DESCRIPTORS_KEPT:
            prepared.expanded.pop(next(iter(prepared.expanded)), None)
        prepared.expanded[live] = expanded
        return expanded

    def _prepare(self, m: int, n: int, k: int) -> _Prepared:
        """What a launch at (m, n, k) needs that doesn't change between calls: the
        workspace size, per kernel its grid, runner and argument template, and the
        shapes of the TMA descriptors."""
        counters = self._zeroed(m, n)
        sizes = {"M": m, "N": n, "K": k, "NUMEL": m * n,
                 "cnt_ptr": 0 if counters is None else counters.data_ptr()}
        launches = []
        for step in self._steps(aligned_params(m, n, k)):
            grid = self.plan.grid(step.kernel, m, n, self._num_sms)
            template = step.kernel.launch_template({**sizes, "NUM_PROGRAMS": grid})
            launches.append(_Launch(step.compiled, grid, fill_per_call(*template),
                                    raw_launcher(step.compiled) if self._raw else None))
        prepared = _Prepared(self.plan.workspace_bytes(m, n, k), tuple(launches),
                             self._descriptor_specs(sizes), counters)
        if counters is not None and _capturing():
            # The first launch at this size is being captured into a CUDA graph: the zeroing
            # is recorded, not run, and the counters live in the graph's memory pool. The
            # graph zeroes them at each replay (a fill node before the GEMM); launches
            # outside it prepare counters of their own.
            return prepared
        if len(self._prepared) >= PREPARED_SHAPES:
            self._prepared.pop(next(iter(self._prepared)), None)
        self._prepared[(m, n, k)] = prepared
        return prepared

    def _zeroed(self, m: int, n: int):
        """In-kernel split-K's counters at m x n: an int32 tensor zeroed once, here, on
        the device this kernel was loaded on; every launch leaves it zero (Kernel.
        zeroed_bytes). None for plans without counters."""
        need = self.plan.counter_bytes(m, n)
        if not need:
            return None
        import torch
        return torch.zeros(need // 4, dtype=torch.int32, device=self._device)

    def _descriptor_specs(self, sizes: dict) -> tuple | None:
        """Per DESCRIPTOR_SLOTS entry None (not in the plan) or (name, index of its base
        address in the per-call tuple, rows, cols, block) at `sizes`; None without TMA."""
        planned = self.plan.descriptors
        if not planned:
            return None
        return tuple(None if name not in planned else
                     (name, PER_CALL_ARGS.index(DESCRIPTOR_BASES[name]),
                      *(sizes[d] for d in planned[name]["dims"]), planned[name]["block"])
                     for name in DESCRIPTOR_SLOTS)

    def _descriptors(self, prepared: _Prepared, live: tuple) -> tuple:
        """TMA descriptors (DESCRIPTOR_SLOTS order) over the addresses in `live`; the
        last set is reused while the caller passes the same buffers (the usual case with
        PyTorch's caching allocator), and each one is kept per address for buffers that
        come back (outputs alternating between a few tensors)."""
        addresses, last = live[:3], prepared.last  # read once: other threads may launch
        if last[0] != addresses:
            last = prepared.last = (addresses, tuple(
                None if spec is None else self._descriptor(prepared, spec, addresses)
                for spec in prepared.descriptors))
        return last[1]

    def _descriptor(self, prepared: _Prepared, spec: tuple, addresses: tuple):
        name, base, rows, cols, block = spec
        ptr = addresses[base]
        desc = prepared.kept.get((name, ptr))
        if desc is None:
            desc = make_descriptor(name, DevicePointer(ptr, self._element), rows, cols, block)
            if len(prepared.kept) >= DESCRIPTORS_KEPT:
                prepared.kept.pop(next(iter(prepared.kept)), None)
            prepared.kept[(name, ptr)] = desc
        return desc


def fill_per_call(template: tuple, slots: tuple[tuple[int, int], ...]
                  ) -> Callable[[tuple], tuple]:
    """A function from the per-call tuple to the launch arguments: `template` (from
    KernelPlan.launch_template) with each slot (position, index) set to live[index].
    The per-call arguments lead every planned signature, so it is usually one
    itemgetter and one tuple concatenation; any other order is filled slot by slot."""
    if not slots:
        return lambda live: template
    picks = tuple(index for _, index in slots)
    if tuple(at for at, _ in slots) == tuple(range(len(slots))):
        tail = template[len(slots):]
        if len(picks) == 1:
            only = picks[0]
            return lambda live: (live[only],) + tail
        pick = itemgetter(*picks)
        return lambda live: pick(live) + tail

    def fill(live: tuple) -> tuple:
        args = list(template)
        for at, index in slots:
            args[at] = live[index]
        return tuple(args)
    return fill


def _hooks_idle(knobs) -> bool:
    """True when no launch hook is set (then nothing reads the launch metadata). Triton
    3.6 and 3.9 keep hooks in HookChains (`.calls`); older releases a callable or None."""
    enter, leave = knobs.launch_enter_hook, knobs.launch_exit_hook
    return not getattr(enter, "calls", enter) and not getattr(leave, "calls", leave)


def _arch_of(artifact: Artifact):
    from ...ir.text import parse
    return parse(artifact.program_text).arch


@loader("triton")
def load_triton(artifact: Artifact) -> Kernel:
    return TritonKernel(artifact)


def _capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph."""
    import torch
    return torch.cuda.is_current_stream_capturing()
