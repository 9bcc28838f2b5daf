"""Issue 3's host overhead, the part gemmforge controls: the Python run around a launch,
per call, timed on the CPU with the device parts replaced by stand-ins.

    python3 benchmarks/host_path_cpu.py [--number 3000] [--repeat 40] [--json PATH] [--gpu]

What runs for real: gemmforge's code (compiler.runtime, backends.triton.runtime), torch's
tensor reads and `torch.empty`, and Triton's own Python launch path: the kernels are real
CompiledKernels (compiled here for sm_90a, on the CPU) whose module counts as loaded, and
their launcher is Triton 3.9's CudaLauncher.__call__ (scratch checks, the tensor-descriptor
wrapper with its `make_tensordesc_arg` per descriptor, launch hooks called as the C launcher
calls them). What stands in:

- operands are CPU fp16 tensors, and `Kernel.device_flag` is "is_cpu" (the checks read
  `t.is_cpu` where they read `t.is_cuda`, one attribute read either way);
- torch's device queries answer an H200 (capability 9.0, 132 SMs); the current-stream call
  `torch._C._cuda_getCurrentRawStream` and `torch.cuda.current_device` are the builtin `int`
  (one C call returning 0; CPU tensors have no device index, so both are asked);
- Triton's two C calls are Python no-ops: the kernel launch (`utils.launch`) and, for TMA,
  `fill_tma_descriptor_tiled` (cuTensorMapEncodeTiled);
- the cuda-family .so is a C file compiled here with gcc, exporting gemmforge_launch and
  gemmforge_workspace_bytes with the generated API's signatures and doing nothing.

So a row is a floor on the host time of that piece on a GPU machine: the C launch
(cuLaunchKernelEx), CUtensorMap encoding and the caching allocator's CUDA bookkeeping come
on top and only a GPU run shows them. Each row is timeit's best of --repeat runs of --number
calls, in µs per call, of a lambda (an empty lambda costs the "lambda" row). Problem:
256x256x256 nn (the small shapes where issue 3's host overhead shows).

Rows: `call` is the user path, `Kernel.__call__` (checks, output allocation, workspace,
stream, launch); `wrapper` is `Kernel.__call__` with `launch` a no-op; `launch` is
`Kernel.launch` alone (raw pointers, as search.measure.bench's kernel protocol calls it); `triton/`
rows are Triton's share of one kernel launch (its runner down to the stubbed C launch).

Results, `python3 benchmarks/host_path_cpu.py` (AMD EPYC VM, 2 cores shared, Python 3.11.7,
torch 2.13.0+cpu, triton 3.9.0), µs per call, best of 3 runs alternating the code before
this change (commit 13162ee) and after it, same session. "before" has only the runner
path, so its "through the runner" rows equal its "launch" rows.

| row                                         | before | after |
| ------------------------------------------- | ------ | ----- |
| torch.empty(m, n) fp16 (reference)          |   0.93 |  0.94 |
| direct: call                                |   6.40 |  3.96 |
| direct: call, out=                          |   5.52 |  3.28 |
| direct: wrapper (launch a no-op)            |   3.06 |  2.53 |
| direct: launch                              |   3.23 |  1.34 |
| direct: launch through the runner           |   3.22 |  2.43 |
| split-K: call (gemm + reduce kernels)       |   9.26 |  4.96 |
| split-K: wrapper (launch a no-op)           |   3.51 |  2.61 |
| split-K: launch                             |   5.68 |  2.20 |
| split-K: launch through the runner          |   5.71 |  4.57 |
| tma: call                                   |   9.80 |  6.23 |
| tma: call, out=                             |   8.56 |  5.50 |
| tma: wrapper (launch a no-op)               |   3.12 |  2.50 |
| tma: launch (same buffers: descriptors hit) |   6.37 |  3.60 |
| tma: launch, c alternating over 2           |  12.41 |  4.27 |
| tma: launch, c new every call               |  12.36 |  6.84 |
| tma: launch through the runner              |   6.13 |  4.62 |
| cuda .so: call                              |   4.45 |  3.34 |
| cuda .so: call, out=                        |   3.35 |  2.71 |
| cuda .so: wrapper (launch a no-op)          |   3.51 |  2.47 |
| cuda .so: launch (ctypes)                   |   0.69 |  0.75 |
| triton/direct: runner to C launch           |   1.98 |  2.00 |
| triton/direct: compiled.run to C launch     |   0.76 |  0.74 |
| triton/tma: runner to C launch              |   4.19 |  4.01 |
| triton/tma: compiled.run to C launch        |   2.82 |  2.63 |

Predicted before changing, from the pieces timed alone: the .so's workspace_bytes ctypes
call ~0.45 µs of its wrapper (now asked once per size and device), torch.empty((m, n))
~0.3 µs over torch.empty(m, n), imports and the stream lookup ~0.2 µs; per kernel of a
Triton launch, the values dict and KernelPlan.args ~0.94 µs against ~0.2 µs for an
itemgetter over the per-call tuple plus the precomputed tail (predicted -0.75 µs), and
Triton's runner ~1.0 µs (closure, LazyDict of launch metadata, checks) plus two empty
HookChain calls from C (~0.45 µs) over calling compiled.run with no hooks as
JITFunction.run does (predicted -1.0 µs); a TMA descriptor set ~6 µs to rebuild when c
alternates. Measured: wrapper -0.5 µs (Triton) and -1.0 µs (.so); launch -0.8 µs per
kernel from the argument template and -1.0 to -1.2 µs per kernel from skipping the runner.
gemmforge's own share of a launch is now launch minus "compiled.run to C launch": 0.6 µs
direct (was 1.25), 1.0 µs TMA (was 2.2). ctypes variants for the .so (9 arguments):
argtypes c_void_p 0.62 µs (kept), c_uint64/c_size_t argtypes 0.89, a CFUNCTYPE prototype
0.91, no argtypes with c_void_p(...) objects 0.56 (no type checks; within noise).
What the CPU can't show: the C launch (Triton's launchKernel and cuLaunchKernelEx),
cuTensorMapEncodeTiled (once per descriptor per TMA launch, inside Triton), the CUDA
caching allocator behind torch.empty, and torch.matmul's own host path; `--gpu` times
the real calls on an sm_90a GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))  # siblings; gemmforge: the installed one

import torch  # noqa: E402

from gemmforge.backends import registry  # noqa: E402
from gemmforge.compiler.values import Artifact, Target  # noqa: E402
from gemmforge.backends.triton import toolchain  # noqa: E402
from gemmforge.compiler import runtime as core  # noqa: E402
from gemmforge.ir import Problem, parse, verify  # noqa: E402
from gemmforge.ir.program import Accum, Layout  # noqa: E402

M = N = K = 256
H200_CAPABILITY, H200_SMS = (9, 0), 132
PROGRAMS = {
    "direct": "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows direct",
    "split-K": "triton sm_90a 64x64x64 w2x2 s3 swnone row/8 pred k4 dp c1x1 nows direct",
    "tma": "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma",
}
STUB_C = r"""
#include <stddef.h>
int gemmforge_launch(const void* a, const void* b, void* c, int m, int n, int k,
                     void* ws, size_t ws_bytes, void* stream) { return 0; }
size_t gemmforge_workspace_bytes(int m, int n, int k) { return 0; }
"""


# ---- stand-ins -----------------------------------------------------------------------------

class _Patches:
    """setattr with undo, in reverse order."""

    def __init__(self):
        self.undo = []

    def set(self, obj, name, value):
        self.undo.append((obj, name, getattr(obj, name, _MISSING)))
        setattr(obj, name, value)

    def restore(self):
        for obj, name, old in reversed(self.undo):
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)


_MISSING = object()


def _cpu_operands(p: _Patches) -> None:
    """gemmforge's operand checks accept CPU tensors (Kernel.device_flag: one attribute
    read either way)."""
    p.set(core.Kernel, "device_flag", "is_cpu")


def _c_launch_stub(*args):
    """Triton 3.9's utils.launch minus the C work: it calls the enter and exit hooks."""
    metadata, enter, leave = args[8], args[9], args[10]
    if enter is not None:
        enter(metadata)
    if leave is not None:
        leave(metadata)


def _python_launcher(compiled):
    """Triton's CudaLauncher for `compiled`, its C launch stubbed (3.9's attributes)."""
    from triton.backends.nvidia import driver as nv
    meta = compiled.metadata
    launcher = object.__new__(nv.CudaLauncher)
    launcher.gsan_enabled = False
    launcher.arg_annotations = launcher.kernel_signature = None
    launcher.num_ctas = getattr(meta, "num_ctas", 1)
    launcher.launch = nv.wrap_handle_tensordesc(
        _c_launch_stub, dict(compiled.src.signature), getattr(meta, "tensordesc_meta", None))
    for name in ("global_scratch_size", "global_scratch_align", "profile_scratch_size",
                 "profile_scratch_align", "launch_cooperative_grid", "launch_pdl"):
        setattr(launcher, name, getattr(meta, name))
    return launcher


class _FakeDriver:
    """triton.runtime.driver.active for the stubbed launcher: only TMA encoding is asked."""

    def __init__(self):
        self.utils = SimpleNamespace(fill_tma_descriptor_tiled=lambda *args: "CUtensorMap")


def _loaded_compile(real):
    def compile_kernel(*args, **kwargs):
        """toolchain.compile_kernel, the result marked loaded, its launcher stubbed."""
        compiled = real(*args, **kwargs)
        compiled.module, compiled.function = "stand-in module", 0
        compiled._run = _python_launcher(compiled)
        return compiled
    return compile_kernel


@contextlib.contextmanager
def stand_ins():
    """Everything above, undone on exit."""
    import triton
    if not triton.__version__.startswith("3.9"):
        raise SystemExit(f"the launcher stand-in copies Triton 3.9's CudaLauncher; this is "
                         f"triton {triton.__version__}")
    from triton.runtime import driver
    p = _Patches()
    try:
        _cpu_operands(p)
        p.set(torch.cuda, "current_device", int)
        p.set(torch.cuda, "get_device_capability", lambda device=None: H200_CAPABILITY)
        p.set(torch.cuda, "get_device_properties",
              lambda device=None: SimpleNamespace(multi_processor_count=H200_SMS))
        p.set(torch._C, "_cuda_getCurrentRawStream", int)
        p.set(toolchain, "compile_kernel", _loaded_compile(toolchain.compile_kernel))
        p.set(driver, "_active", _FakeDriver())
        yield
    finally:
        p.restore()


# ---- kernels and operands ------------------------------------------------------------------

def triton_kernel(text: str, folder: Path) -> core.Kernel:
    problem = Problem(M, N, K)
    program = verify(parse(text), problem)
    backend = registry.get("triton")
    source = backend.lower(program, problem)
    out = folder / program.name
    out.mkdir()
    return core.load(backend.build(source, Target(device_sm=90), out))


def shared_library_kernel(folder: Path) -> core.Kernel:
    (folder / "stub.c").write_text(STUB_C)
    lib = folder / "stub.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(folder / "stub.c")],
                   check=True)
    return core.load(Artifact(key="stub", kind="cuda_so", path=lib, program_text="stub",
                              layout=Layout.NN, acc=Accum.F32, meta={}))


def operands():
    a = torch.randn(M, K).half()
    b = torch.randn(K, N).half()
    return a, b, torch.empty(M, N, dtype=torch.float16), torch.empty(M, N, dtype=torch.float16)


# ---- timing --------------------------------------------------------------------------------

def per_call_us(fn, number: int, repeat: int) -> float:
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def rows(kernels: dict, number: int, repeat: int) -> dict[str, float]:
    a, b, c, c2 = operands()
    out: dict[str, float] = {}

    def time(name, fn):
        out[name] = per_call_us(fn, number, repeat)
        print(f"{name:44s} {out[name]:7.2f} us", flush=True)

    time("lambda (empty)", lambda: None)
    time("torch.empty(m, n) fp16", lambda: torch.empty(M, N, dtype=torch.float16, device=a.device))
    for name, kern in kernels.items():
        kernel_rows(time, name, kern, (a, b, c, c2))
    for name in ("direct", "tma"):
        runner, run = _triton_share(kernels[name], a, b, c)
        time(f"triton/{name}: runner to C launch", runner)
        time(f"triton/{name}: compiled.run to C launch", run)
    return out


def kernel_rows(time, name: str, kern, tensors) -> None:
    """The call, wrapper and launch rows of one kernel."""
    a, b, c, c2 = tensors
    ap, bp, cp = a.data_ptr(), b.data_ptr(), c.data_ptr()
    need = kern.workspace_bytes(M, N, K)
    ws = torch.empty(max(need, 1), dtype=torch.uint8)
    wp = ws.data_ptr() if need else 0
    time(f"{name}: call", lambda: kern(a, b))
    time(f"{name}: call, out=", lambda: kern(a, b, out=c))
    time(f"{name}: launch", lambda: kern.launch(ap, bp, cp, M, N, K, wp, need, 0))
    if name == "tma":
        cycle = itertools.cycle((cp, c2.data_ptr()))
        time(f"{name}: launch, c alternating over 2",
             lambda: kern.launch(ap, bp, next(cycle), M, N, K, wp, need, 0))
        fresh = itertools.count(cp, 1 << 12)  # addresses never seen (never dereferenced)
        time(f"{name}: launch, c new every call",
             lambda: kern.launch(ap, bp, next(fresh), M, N, K, wp, need, 0))
    if not isinstance(kern, core.SharedLibraryKernel):
        # the runner path, as with a launch hook set (before this change: the only path)
        knobs, kern._knobs = getattr(kern, "_knobs", None), None
        time(f"{name}: launch through the runner",
             lambda: kern.launch(ap, bp, cp, M, N, K, wp, need, 0))
        kern._knobs = knobs
    kern.launch = lambda *args: None
    time(f"{name}: wrapper (launch a no-op)", lambda: kern(a, b))
    del kern.launch


def _triton_share(kern, a, b, c):
    """Triton's part of one gemm launch with ready arguments: (the prepared runner, the
    launcher called as JITFunction.run calls it with no launch hook set)."""
    from gemmforge.backends.triton.runtime import DevicePointer, make_descriptors
    step = kern._steps(("N", "K", "NUMEL"))[0]
    grid = kern.plan.grid(step.kernel, M, N, H200_SMS)
    values = {"a_ptr": a.data_ptr(), "b_ptr": b.data_ptr(), "c_ptr": c.data_ptr(), "ws_ptr": 0,
              "M": M, "N": N, "K": K, "NUMEL": M * N, "NUM_PROGRAMS": grid}
    if kern.plan.descriptors:
        bases = {name: DevicePointer(values[name.replace("desc", "ptr")], torch.float16)
                 for name in kern.plan.descriptors}
        values.update(make_descriptors(kern.plan, values, bases))
    args = step.kernel.args(values)
    compiled = step.compiled
    runner, run = compiled[(grid, 1, 1)], compiled.run
    function, metadata = compiled.function, compiled.packed_metadata
    return (lambda: runner(*args, stream=0),
            lambda: run(grid, 1, 1, 0, function, metadata, None, None, None, *args))


def gpu_rows(number: int, repeat: int) -> dict[str, float]:
    """--gpu: real kernels and tensors on the current (sm_90a) device, no stand-ins. Two
    kinds of row: "<x>" is the host time of one call, `number` calls (at most 200, so
    that the launch queue, about a thousand launches deep, never fills and blocks)
    enqueued back to back between two synchronizes, best of `repeat`; "<x> + sync" is the
    median wall time of one call followed by a device-wide synchronize (what issue 3's
    call protocol counts, kernel time included), over `number` x `repeat` samples."""
    import statistics
    import time as clock
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    c = torch.empty(M, N, dtype=torch.float16, device="cuda")
    out: dict[str, float] = {}

    def time(name, fn):
        fn()
        best = float("inf")
        for _ in range(repeat):
            torch.cuda.synchronize()
            start = clock.perf_counter_ns()
            for _ in range(number):
                fn()
            best = min(best, (clock.perf_counter_ns() - start) / number / 1e3)
        torch.cuda.synchronize()
        samples = []
        for _ in range(number * repeat):
            start = clock.perf_counter_ns()
            fn()
            torch.cuda.synchronize()
            samples.append((clock.perf_counter_ns() - start) / 1e3)
        out[name], out[name + " + sync"] = best, statistics.median(samples)
        print(f"{name:44s} {best:7.2f} us   + sync {out[name + ' + sync']:7.2f} us",
              flush=True)

    time("torch.cuda.synchronize() alone", lambda: None)
    time("torch.matmul(a, b)", lambda: torch.matmul(a, b))
    time("torch.matmul(a, b, out=c)", lambda: torch.matmul(a, b, out=c))
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in PROGRAMS.items():
            gpu_kernel_rows(time, name, triton_kernel(text, Path(tmp)), (a, b, c))
    return out


def gpu_kernel_rows(time, name: str, kern, tensors) -> None:
    a, b, c = tensors
    need = kern.workspace_bytes(M, N, K)
    ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
    args = (a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K, ws.data_ptr() if need else 0,
            need, torch.cuda.current_stream().cuda_stream)
    time(f"{name}: call", lambda: kern(a, b))
    time(f"{name}: call, out=", lambda: kern(a, b, out=c))
    time(f"{name}: launch", lambda: kern.launch(*args))


def cpu_rows(number: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, stand_ins():
        folder = Path(tmp)
        kernels = {name: triton_kernel(text, folder) for name, text in PROGRAMS.items()}
        kernels["cuda .so"] = shared_library_kernel(folder)
        return rows(kernels, number, repeat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=3000, help="calls per timing run")
    ap.add_argument("--repeat", type=int, default=40, help="timing runs; the best is kept")
    ap.add_argument("--json", type=Path, help="also write the rows here, {row: us}")
    ap.add_argument("--gpu", action="store_true",
                    help="time real launches on the current GPU instead (see gpu_rows)")
    args = ap.parse_args()
    if args.gpu:
        out = gpu_rows(min(args.number, 200), args.repeat)
    else:
        out = cpu_rows(args.number, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
