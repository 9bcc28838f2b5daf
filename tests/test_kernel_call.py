"""`Kernel.__call__` and the .so path on a machine with no GPU: a call hands the launch the
operands' pointers, sizes, a workspace asked for once per size and the stream; its size cache
is bounded; its checks keep their messages; and a compiled C stand-in for a `cuda_so`
library receives exactly what `Kernel.launch` passes."""
import ctypes

import pytest
import torch

from gemmforge.compiler import runtime as core
from gemmforge.compiler.values import Artifact
from gemmforge.ir.program import Accum, Layout
from launch_stand_ins import A, B, C, WS, c_library


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
    return c_library(tmp_path, STUB_C)


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
