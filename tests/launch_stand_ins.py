"""Stand-ins for the launch path's CPU tests (tests/test_host_path.py, test_kernel_call.py,
test_triton_raw_launch.py, test_triton_pdl.py): a CPU "device" that answers as an H200,
Triton kernels that record their launches instead of running, and what a launch computed
before any caching (`uncached`), to compare the cached path against. Import `device` into a
test module to use it as a fixture."""
import shutil
import subprocess
import types

import pytest
import torch

from gemmforge.backends.triton import toolchain
from gemmforge.backends.triton.plan import DESCRIPTOR_BASES, KernelPlan, aligned_params, make_plan
from gemmforge.backends.triton.descriptors import DevicePointer, make_descriptors
from gemmforge.backends.triton.runtime import TritonKernel
from gemmforge.compiler.values import Artifact
from gemmforge.ir import Problem, parse, verify

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
    values = dict(zip(("a_ptr", "b_ptr", "c_ptr", "ws_ptr", "bias_ptr"), ptrs))
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


def c_library(tmp_path, source: str):
    """`source` (C) built into tmp_path/stub.so: a launcher stand-in for the ctypes path
    (skips where no C compiler is found)."""
    if not shutil.which("cc"):
        pytest.skip("no C compiler for the .so stand-in")
    (tmp_path / "stub.c").write_text(source)
    lib = tmp_path / "stub.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "stub.c")],
                   check=True)
    return lib
