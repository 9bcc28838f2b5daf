"""The launch path's caches on a machine with no GPU: what a cached launch hands Triton (or
the .so) equals what the uncached computation gives (KernelPlan.args over a fresh dict of
values, fresh TMA descriptors), for several sizes, split-K plans with zero and reduce
kernels and TMA plans; the caches follow pointer and size changes; launching through
`compiled.run` equals launching through the runner; and `Kernel.__call__` keeps its checks
and messages. Triton kernels are stand-ins that record their launches, except in the one
test that compiles a real kernel (for sm_90a, on the CPU) to compare Triton's two entries."""
import ctypes
import shutil
import subprocess
import types

import pytest
import torch

from gemmforge.compiler.values import Artifact
from gemmforge.backends.triton import runtime as triton_runtime
from gemmforge.backends.triton import toolchain
from gemmforge.backends.triton.plan import DESCRIPTOR_BASES, KernelPlan, aligned_params, make_plan
from gemmforge.backends.triton.runtime import DevicePointer, TritonKernel, fill_per_call, make_descriptors
from gemmforge.compiler import runtime as core
from gemmforge.ir import Problem, parse, verify
from gemmforge.ir.program import Accum, Layout

SMS = 132
DIRECT = "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct"
PERSISTENT = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows direct"
PARTIALS = "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k4 dp c1x1 nows direct"
ATOMIC = "triton sm_80 64x64x32 w2x2 s3 swnone col/4 pred k3a persistent c1x1 nows direct"
TMA = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma"
TMA_SPLIT = "triton sm_90a 64x128x64 w2x2 s3 swnone row/8 pred k2 dp c1x1 nows tma"
PLANS = [DIRECT, PERSISTENT, PARTIALS, ATOMIC, TMA, TMA_SPLIT]
SHAPES = [(256, 256, 256), (256, 256, 64), (100, 120, 72), (1000, 4096, 336), (8, 8, 8),
          (333, 40, 1000)]
A, B, C, WS = 0x7F00_0000_0000, 0x7F00_0010_0000, 0x7F00_0020_0000, 0x7F00_0030_0000


# ---- stand-ins: a CPU "device" and Triton kernels that record their launches -------------

class RecordingCompiled:
    """A loaded CompiledKernel's two launch entries, each appending (kernel, variant, grid,
    stream, args, entry) to `log`; the launcher checks what it is passed besides args."""

    def __init__(self, kernel: KernelPlan, aligned: tuple, log: list):
        self.name, self.aligned, self.log = kernel.name, aligned, log
        self.function, self.packed_metadata = ("function", self.name, aligned), ("meta",)
        self.run = self._launcher

    def _launcher(self, gx, gy, gz, stream, function, metadata, launch_metadata, enter, leave,
                  *args):
        assert (gy, gz, function, metadata) == (1, 1, self.function, self.packed_metadata)
        assert launch_metadata is enter is leave is None
        self.log.append((self.name, self.aligned, gx, stream, args, "run"))

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.log.append((self.name, self.aligned, grid[0], stream, args, "runner"))
        return runner


@pytest.fixture
def device(monkeypatch):
    """torch's device queries answer an H200; Triton compiles become RecordingCompileds."""
    log = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(multi_processor_count=SMS))
    monkeypatch.setattr(toolchain, "load_module", lambda path: None)
    monkeypatch.setattr(toolchain, "compile_kernel", lambda module, kernel, capability, env,
                        aligned: RecordingCompiled(kernel, aligned, log))
    return log


def triton_kernel(text: str, problem: Problem, tmp_path) -> TritonKernel:
    program = verify(parse(text), problem)
    meta = {"plan": make_plan(program, problem).as_json(), "entry": "kernel.py",
            "aligned": list(aligned_params(problem.m, problem.n, problem.k))}
    return TritonKernel(Artifact(key="test", kind="triton", path=tmp_path / "x.json",
                                 program_text=str(program), layout=problem.layout,
                                 acc=problem.acc, meta=meta))


def uncached(kernel: TritonKernel, ptrs, m, n, k, stream=0) -> list:
    """What the launch path computed before any caching: a dict of values per call,
    fresh descriptors, KernelPlan.args per kernel."""
    plan = kernel.plan
    values = dict(zip(("a_ptr", "b_ptr", "c_ptr", "ws_ptr"), ptrs))
    values.update({"M": m, "N": n, "K": k, "NUMEL": m * n})
    if plan.descriptors:
        bases = {name: DevicePointer(values[DESCRIPTOR_BASES[name]], torch.float16)
                 for name in plan.descriptors}
        values.update(make_descriptors(plan, values, bases))
    launches = []
    for kp in plan.kernels:
        values["NUM_PROGRAMS"] = grid = plan.grid(kp, m, n, SMS)
        launches.append((kp.name, aligned_params(m, n, k), grid, stream,
                         plain(kp.args(values))))
    return launches


def plain(args) -> tuple:
    """Launch arguments comparable by value (a TensorDescriptor compares its pointer shim
    by identity)."""
    return tuple((d.base.data_ptr(), list(d.shape), list(d.strides), list(d.block_shape))
                 if hasattr(d, "block_shape") else d for d in args)


def launched(log: list) -> list:
    out = [(name, aligned, grid, stream, plain(args)) for name, aligned, grid, stream, args, _
           in log]
    log.clear()
    return out


# ---- the Triton launch path ----------------------------------------------------------------

@pytest.mark.parametrize("text", PLANS)
def test_cached_launches_equal_uncached(device, tmp_path, text):
    layouts = ("nn", "nt")
    for layout in layouts:
        kernel = triton_kernel(text, Problem(256, 256, 256, layout), tmp_path)
        device.clear()
        for m, n, k in SHAPES:
            need = kernel.workspace_bytes(m, n, k)
            for ptrs in ((A, B, C, WS if need else 0), (B, C, A, WS), (A, B, C, WS)):
                for _ in range(2):  # prepares, then from the caches
                    kernel.launch(*ptrs[:3], m, n, k, ptrs[3], need, 0x5)
                    assert launched(device) == uncached(kernel, ptrs, m, n, k, 0x5)


@pytest.mark.parametrize("text", [DIRECT, PARTIALS, TMA_SPLIT])
def test_runner_and_run_launch_alike(device, tmp_path, text, monkeypatch):
    """Direct, with no launch hook set, the kernel goes through compiled.run; with one (or
    where Triton's release was not read) through the runner: the same arguments either way."""
    from triton import knobs
    monkeypatch.setenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", "1")
    kernel = triton_kernel(text, Problem(256, 256, 256), tmp_path)
    need = kernel.workspace_bytes(512, 256, 128)
    kernel.launch(A, B, C, 512, 256, 128, WS, need, 0)
    assert {entry[-1] for entry in device} == {"run"}
    direct = launched(device)
    def hook(metadata):
        pass
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        kernel.launch(A, B, C, 512, 256, 128, WS, need, 0)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert {entry[-1] for entry in device} == {"runner"}
    assert launched(device) == direct
    kernel._knobs = None  # a Triton release whose runner was not read
    kernel.launch(A, B, C, 512, 256, 128, WS, need, 0)
    assert {entry[-1] for entry in device} == {"runner"}
    assert launched(device) == direct


@pytest.mark.parametrize("setting, path", [(None, "run"), ("1", "run"), ("0", "runner")])
def test_direct_launch_is_the_default(device, tmp_path, monkeypatch, setting, path):
    """compiled.run unless GEMMFORGE_TRITON_DIRECT_LAUNCH=0 (the GPU tier passed with it)."""
    if setting is None:
        monkeypatch.delenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", raising=False)
    else:
        monkeypatch.setenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", setting)
    kernel = triton_kernel(DIRECT, Problem(256, 256, 256), tmp_path)
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)
    assert {entry[-1] for entry in device} == {path}


def test_hooks_idle():
    from triton.knobs import HookChain
    chain = HookChain()
    knobs = types.SimpleNamespace(launch_enter_hook=chain, launch_exit_hook=HookChain())
    assert triton_runtime._hooks_idle(knobs)
    chain.add(print)
    assert not triton_runtime._hooks_idle(knobs)
    assert triton_runtime._hooks_idle(types.SimpleNamespace(launch_enter_hook=None,
                                                            launch_exit_hook=None))
    assert not triton_runtime._hooks_idle(types.SimpleNamespace(launch_enter_hook=print,
                                                                launch_exit_hook=None))


def test_tma_descriptors_follow_pointers_and_sizes(device, tmp_path):
    kernel = triton_kernel(TMA, Problem(256, 256, 256), tmp_path)
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)
    first = device[-1][4][:3]
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)
    assert all(x is y for x, y in zip(device[-1][4][:3], first))  # the same set, reused
    kernel.launch(A, B, WS, 256, 256, 256, 0, 0, 0)  # a new output buffer
    second = device[-1][4][:3]
    assert second[0] is first[0] and second[1] is first[1] and second[2] is not first[2]
    assert second[2].base.data_ptr() == WS
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)  # the first buffer again: kept
    assert device[-1][4][2] is first[2]
    kernel.launch(A, B, C, 512, 256, 128, 0, 0, 0)  # new sizes: new descriptors
    assert [list(d.shape) for d in device[-1][4][:3]] == [[512, 128], [128, 256], [512, 256]]
    device.clear()
    kernel.launch(A, B, C, 512, 256, 128, 0, 0, 0)
    assert launched(device) == uncached(kernel, (A, B, C, 0), 512, 256, 128)


def test_caches_are_bounded(device, tmp_path, monkeypatch):
    monkeypatch.setattr(triton_runtime, "PREPARED_SHAPES", 2)
    monkeypatch.setattr(triton_runtime, "DESCRIPTORS_KEPT", 4)
    kernel = triton_kernel(TMA, Problem(256, 256, 256), tmp_path)
    for m in (64, 128, 192, 64):
        for c in range(8):
            kernel.launch(A, B, C + 256 * c, m, 256, 256, 0, 0, 0)
            assert launched(device) == uncached(kernel, (A, B, C + 256 * c, 0), m, 256, 256)
        assert len(kernel._prepared) <= 2
        assert all(len(p.kept) <= 4 for p in kernel._prepared.values())


def test_launch_errors_keep_their_messages(device, tmp_path):
    split = triton_kernel(PARTIALS, Problem(256, 256, 256), tmp_path)
    with pytest.raises(ValueError, match="must be 16-byte aligned"):
        split.launch(A + 8, B, C, 256, 256, 256, WS, 1 << 30, 0)
    need = split.workspace_bytes(256, 256, 256)
    with pytest.raises(ValueError, match=f"needs a workspace of {need} B at 256x256x256, "
                                         f"got {need - 1} B"):
        split.launch(A, B, C, 256, 256, 256, WS, need - 1, 0)
    tma = triton_kernel(TMA, Problem(256, 256, 256), tmp_path)
    for _ in range(2):  # raised again from the cache
        with pytest.raises(ValueError, match="TMA needs rows of a multiple of 8 halves; "
                                             "b_desc is 256 x 100"):
            tma.launch(A, B, C, 256, 100, 256, 0, 0, 0)


@pytest.mark.parametrize("text", PLANS)
def test_launch_template_fills_to_args(text):
    problem = Problem(1000, 4096, 336)
    plan = make_plan(parse(text), problem)
    live = (A, B, C, WS, "a_desc", "b_desc", "c_desc")
    values = dict(zip(triton_runtime.PER_CALL_ARGS, live))
    values.update({"M": 1000, "N": 4096, "K": 336, "NUMEL": 4096000, "NUM_PROGRAMS": 7})
    for kp in plan.kernels:
        template = kp.launch_template(values)
        assert fill_per_call(*template)(live) == tuple(kp.args(values))
        shuffled = KernelPlan(kp.role, kp.name, dict(reversed(kp.signature.items())),
                              kp.constexprs, kp.num_warps, kp.num_stages, kp.grid)
        assert fill_per_call(*shuffled.launch_template(values))(live) == tuple(
            shuffled.args(values))


def test_real_triton_entries_pass_the_same_arguments(tmp_path):
    """A real CompiledKernel (sm_90a, compiled on the CPU): its runner and compiled.run
    as the runtime calls it hand the launcher the same grid, stream and arguments."""
    pytest.importorskip("triton")
    from gemmforge.backends import registry
    problem = Problem(256, 256, 256)
    program = verify(parse(TMA), problem)
    (tmp_path / "kernel.py").write_text(registry.get("triton").lower(program, problem).text)
    module = toolchain.load_module(tmp_path / "kernel.py")
    gemm = make_plan(program, problem).kernels[0]
    compiled = toolchain.compile_kernel(module, gemm, 90, {}, ("N", "K", "NUMEL"))
    calls = []
    compiled.module, compiled.function = "stand-in", 0
    compiled._run = lambda *args: calls.append(args)
    args = tuple(range(len(gemm.signature)))
    compiled[(132, 1, 1)](*args, stream=7)
    step = triton_runtime._Launch(compiled, 132, lambda live: args)
    step.run(step.grid, 1, 1, 7, step.function, step.metadata, None, None, None, *args)
    via_runner, via_run = calls
    assert via_runner[:6] == via_run[:6] and via_runner[9:] == via_run[9:]
    assert via_run[6:9] == (None, None, None)


# ---- Kernel.__call__ and the .so path ----------------------------------------------------------

@pytest.fixture
def cpu_operands():
    """Stream requests, recorded: the kernels below take CPU tensors (Kernel.device_flag)
    and hand each launch stream 0x77, so Kernel.__call__ runs unchanged on the host."""
    return []


def on_host(kernel, asked: list):
    """`kernel` taking CPU tensors, its stream requests recorded in `asked`."""
    kernel.device_flag = "is_cpu"
    kernel._stream = lambda index: asked.append(index) or 0x77
    return kernel


class RecordingKernel(core.Kernel):
    """A kernel that records its launches, on the host (CPU tensors, stream 0x77)."""

    device_flag = "is_cpu"

    def __init__(self, layout="nn", slices=0, streams_asked=None):
        super().__init__(Artifact(key="k", kind="test", path=None, program_text="test",
                                  layout=Layout(layout), acc=Accum.F32))
        self.slices, self.sizes_asked, self.launches = slices, [], []
        self.streams_asked = [] if streams_asked is None else streams_asked

    def _stream(self, index):
        self.streams_asked.append(index)
        return 0x77

    def workspace_bytes(self, m, n, k):
        self.sizes_asked.append((m, n, k))
        return self.slices * m * n * 4

    def launch(self, *args):
        self.launches.append(args)


def half(*shape):
    return torch.randn(*shape).half()


def test_call_launches_with_the_same_arguments(cpu_operands):
    kernel = RecordingKernel(slices=2, streams_asked=cpu_operands)
    a, b = half(64, 32), half(32, 48)
    out = kernel(a, b)
    assert out.shape == (64, 48) and out.dtype == torch.float16 and out.is_contiguous()
    (args,) = kernel.launches
    assert args[:6] == (a.data_ptr(), b.data_ptr(), out.data_ptr(), 64, 48, 32)
    assert args[7:] == (2 * 64 * 48 * 4, 0x77) and cpu_operands == [None]  # a's device index
    ws = args[6]
    given = torch.empty(64, 48, dtype=torch.float16)
    assert kernel(a, b, out=given) is given
    assert kernel.launches[-1][2] == given.data_ptr() and kernel.launches[-1][6] == ws
    assert kernel.sizes_asked == [(64, 48, 32)]  # asked once per size
    kernel(half(128, 32), b)  # more workspace: asked again, a bigger buffer
    assert kernel.sizes_asked == [(64, 48, 32), (128, 48, 32)]
    assert kernel._workspace[None][1] >= 2 * 128 * 48 * 4
    kernel(a, b)  # the bigger buffer serves the smaller size
    assert kernel.launches[-1][6] == kernel._workspace[None][0]
    nt = RecordingKernel("nt")
    nt(a, half(48, 32))
    assert nt.launches[-1][3:8] == (64, 48, 32, 0, 0)


def test_call_bounds_its_size_cache(cpu_operands, monkeypatch):
    monkeypatch.setattr(core, "SHAPES_KEPT", 3)
    kernel = RecordingKernel(slices=1)
    for m in (8, 16, 24, 32, 8):
        kernel(half(m, 8), half(8, 8))
    assert len(kernel._needs) == 3 and kernel.sizes_asked[-1] == (8, 8, 8)


@pytest.mark.parametrize("a, b, kwargs, message", [
    (torch.randn(4, 8), half(8, 4), {}, "a must be a float16 CPU tensor"),
    (half(4, 8), torch.randn(8, 4), {}, "b must be a float16 CPU tensor"),
    (half(8), half(8, 4), {}, r"a must be a contiguous 2-D tensor, got shape \(8,\)"),
    (half(8, 4).t(), half(8, 4), {}, r"a must be a contiguous 2-D tensor, got shape \(4, 8\)"),
    (half(4, 8), half(4, 8).t(), {}, r"b must be a contiguous 2-D tensor, got shape \(8, 4\)"),
    (half(4, 8), half(6, 4), {}, r"b must be \(k, n\) for layout nn with k=8; got shape \(6, 4\)"),
    (half(4, 8), half(8, 4), {"out": half(4, 5)},
     r"out must be a contiguous float16 tensor of shape \(4, 4\)"),
    (half(4, 8), half(8, 4), {"out": torch.empty(4, 4)},
     r"out must be a contiguous float16 tensor of shape \(4, 4\)"),
    (half(4, 8), half(8, 4), {"out": half(4, 4).t()},
     r"out must be a contiguous float16 tensor of shape \(4, 4\)"),
])
def test_call_keeps_its_messages(cpu_operands, a, b, kwargs, message):
    kernel = RecordingKernel()
    with pytest.raises(ValueError, match=message):
        kernel(a, b, **kwargs)
    assert not kernel.launches


def test_call_keeps_its_messages_nt(cpu_operands):
    with pytest.raises(ValueError, match=r"b must be \(n, k\) for layout nt with k=8; "
                                         r"got shape \(4, 6\)"):
        RecordingKernel("nt")(half(4, 8), half(4, 6))


def test_call_refuses_cpu_tensors():
    kernel = RecordingKernel()
    kernel.device_flag = core.Kernel.device_flag  # a CUDA kernel's
    with pytest.raises(ValueError, match="a must be a float16 CUDA tensor"):
        kernel(half(4, 8), half(8, 4))


STUB_C = r"""
#include <stddef.h>
unsigned long long seen[9]; int sizes_asked; int result;
int gemmforge_launch(const void* a, const void* b, void* c, int m, int n, int k, void* ws,
                     size_t ws_bytes, void* stream) {
  const unsigned long long got[9] = {(size_t)a, (size_t)b, (size_t)c, m, n, k, (size_t)ws,
                                     ws_bytes, (size_t)stream};
  for (int i = 0; i < 9; ++i) seen[i] = got[i];
  return result;
}
size_t gemmforge_workspace_bytes(int m, int n, int k) { ++sizes_asked; return 64; }
"""


@pytest.fixture
def stub_library(tmp_path):
    if not shutil.which("cc"):
        pytest.skip("no C compiler for the .so stand-in")
    (tmp_path / "stub.c").write_text(STUB_C)
    lib = tmp_path / "stub.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "stub.c")],
                   check=True)
    return lib


def test_shared_library_launch_and_workspace(stub_library, cpu_operands):
    kernel = on_host(core.load(Artifact(key="k", kind="cuda_so", path=stub_library,
                                        program_text="p", layout=Layout.NN, acc=Accum.F32)),
                     cpu_operands)
    lib = kernel._lib
    seen = (ctypes.c_ulonglong * 9).in_dll(lib, "seen")
    kernel.launch(A, B, C, 256, 128, 64, 0, 0, 0)
    assert list(seen) == [A, B, C, 256, 128, 64, 0, 0, 0]
    kernel.launch(A, B, C, 256, 128, 64, WS, 64, 0x1234)
    assert list(seen) == [A, B, C, 256, 128, 64, WS, 64, 0x1234]
    a, b = half(16, 8), half(8, 4)
    for _ in range(3):
        out = kernel(a, b)
    assert ctypes.c_int.in_dll(lib, "sizes_asked").value == 1
    assert list(seen)[:8] == [a.data_ptr(), b.data_ptr(), out.data_ptr(), 16, 4, 8,
                              kernel._workspace[None][0], 64]
    ctypes.c_int.in_dll(lib, "result").value = 1
    with pytest.raises(RuntimeError, match=r"p: launch failed with cudaError 1 \("):
        kernel.launch(A, B, C, 256, 128, 64, 0, 0, 0)
