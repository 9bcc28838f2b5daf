"""Load a built Artifact and launch it on torch tensors, on the current CUDA stream.

A loader per artifact kind (`@loader("cuda_so")`) turns an Artifact into a `Kernel`.
`Kernel.__call__` is the user path (checks its inputs, allocates the output and a
cached workspace); `Kernel.launch` is the lean path the benchmark uses (raw pointers,
no checks). A program with the bias field (a fused bias add) takes its bias through
`kernel(a, b, bias=t)` and `Kernel.launch_bias`; a cuda_so artifact's C entry for it is
`meta["bias_symbol"]` (SharedLibraryKernel._launch_bias, beside `_launch`). torch is
imported lazily: building and emitting need no torch.

The user path is host overhead on every call (held to torch.matmul's), so
it reads each tensor attribute once, remembers the workspace size per problem size and
device, keeps the workspace's address beside it, and asks torch for the current stream
through the raw call it binds once (benchmarks/NOTES.md, Host path).
"""
from __future__ import annotations

import ctypes
import json
from abc import ABC, abstractmethod
from typing import Callable

from .values import Artifact
from ..ir.program import DType, Layout

_LOADERS: dict[str, Callable[[Artifact], "Kernel"]] = {}


def loader(kind: str):
    """Decorator: register a function Artifact -> Kernel for artifacts of `kind`."""
    def wrap(fn):
        _LOADERS[kind] = fn
        return fn
    return wrap


def load(artifact: Artifact) -> "Kernel":
    """A callable Kernel for `artifact`; ValueError for a kind no loader knows.

    Backends register their loaders when they are imported; `backends.pipeline.load`
    imports them first, so callers above the backends use that."""
    if artifact.kind not in _LOADERS:
        raise ValueError(f"no loader for artifact kind {artifact.kind!r}; "
                         f"known: {', '.join(sorted(_LOADERS))}")
    return _LOADERS[artifact.kind](artifact)


SHAPES_KEPT = 64  # (problem size, device) pairs whose workspace size a kernel remembers


class Kernel(ABC):
    """A loaded GEMM kernel: C[m, n] = A[m, k] @ B with the artifact's layout.

    `device_flag` names the tensor attribute that says an operand is on this kernel's
    device ("is_cuda"; the null backend's host kernel says "is_cpu"), and `_stream` gives
    the stream handle a launch goes to: the user path is the same code for both."""

    device_flag = "is_cuda"

    def __init__(self, artifact: Artifact):
        self.artifact = artifact
        self._nn = artifact.layout == Layout.NN
        # a fused-bias program (launch_bias): a C entry for it is in the launch metadata
        self.fused_bias = "bias_symbol" in artifact.meta
        self._torch_dtype = None  # torch's dtype of the artifact's operands, on first call
        self._workspace = {}  # device index -> (address, bytes, tensor) of the workspace
        self._needs: dict[tuple, int] = {}  # (m, n, k, device index) -> workspace bytes

    @abstractmethod
    def workspace_bytes(self, m: int, n: int, k: int) -> int:
        """Scratch bytes one launch at (m, n, k) needs (on the current device). A launch
        must not rely on what the workspace held before it: other kernels may use the same
        memory in between (search.measure.bench shares one workspace among a group's kernels), so
        a launch re-arms what it needs there (zeroes atomics' sums, resets barriers)."""

    def zeroed_bytes(self, m: int, n: int, k: int) -> int:
        """Bytes of memory a launch at (m, n, k) needs zero on entry and leaves zero on
        exit: the opposite contract to the workspace's. The kernel allocates and zeroes
        it itself, once (per problem size and device), keeps it for its own launches
        only, and never clears it again: each launch restores the zeros (in-kernel
        split-K's per-tile arrival counters, reset by the last slice of each tile). So
        launches of one Kernel that share it must run in stream order, not concurrently
        on several streams. 0 (the default) for kernels without such memory."""
        return 0

    @abstractmethod
    def launch(self, a_ptr: int, b_ptr: int, c_ptr: int, m: int, n: int, k: int,
               workspace_ptr: int, workspace_bytes: int, stream: int) -> None:
        """Enqueue one launch on `stream` (a cudaStream_t as an int); raise RuntimeError on
        a launch error. Pointers are device addresses; no checks happen here."""

    def launch_bias(self, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int, m: int, n: int,
                    k: int, workspace_ptr: int, workspace_bytes: int, stream: int) -> None:
        """`launch` with the fused bias (C = A @ B + bias, `bias_ptr` the address of n
        values of the operands' dtype), for a program with the bias field; ValueError for
        any other."""
        raise ValueError(f"{self.artifact.program_text}: no fused bias (the program has no "
                         "bias token); launch it without one")

    def __call__(self, a, b, out=None, bias=None):
        """C = A @ B (+ bias) on torch CUDA tensors of the artifact's dtype (float16, or
        bfloat16): `a` is (m, k); `b` is (k, n) for layout nn and (n, k) for nt; `bias`, a
        fused-bias program's (and only its), is (n,); all contiguous. Runs on the current
        stream."""
        import torch
        dtype = self._torch_dtype or self._bind_dtype()
        flag = self.device_flag
        m, k, n = _fast_shapes(a, b, self._nn, dtype, flag) or _check_operands(
            a, b, self.artifact.layout, flag, dtype)
        device = a.device
        index = device.index
        if out is None:
            out = torch.empty(m, n, dtype=dtype, device=device)
        elif out.shape != (m, n) or out.dtype != dtype or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous {_dtype_word(dtype)} tensor of shape "
                             f"({m}, {n})")
        need = self._needs.get((m, n, k, index))
        if need is None:
            need = self._need(m, n, k, index)
        ws = self._scratch(device, need) if need else 0
        if bias is None and not self.fused_bias:
            self.launch(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, n, k, ws, need,
                        self._stream(index))
        else:
            self.launch_bias(a.data_ptr(), b.data_ptr(), out.data_ptr(),
                             self._bias_address(bias, n, device), m, n, k, ws, need,
                             self._stream(index))
        return out

    def _bias_address(self, bias, n: int, device) -> int:
        """The address of `bias`, checked: a fused-bias program's bias, n values of the
        operands' dtype on the operands' device; ValueError naming what is wrong."""
        import torch
        dtype = self._torch_dtype or self._bind_dtype()
        if not self.fused_bias:
            raise ValueError(f"bias: {self.artifact.program_text} has no fused bias (no bias "
                             "token); call it without bias, or use its bias twin")
        if bias is None:
            raise ValueError(f"bias: {self.artifact.program_text} adds a fused bias; pass "
                             f"bias=, a {_dtype_word(dtype)} tensor of shape ({n},)")
        word = _DEVICE_WORD.get(self.device_flag, self.device_flag)
        if (not isinstance(bias, torch.Tensor) or bias.dtype != dtype
                or bias.shape != (n,) or not bias.is_contiguous() or bias.device != device):
            got = (f"{bias.dtype} of shape {tuple(bias.shape)} on {bias.device}"
                   if isinstance(bias, torch.Tensor) else type(bias).__name__)
            raise ValueError(f"bias: expected a contiguous {_dtype_word(dtype)} {word} tensor "
                             f"of shape ({n},) on the operands' device, got {got}")
        return bias.data_ptr()

    def _bind_dtype(self):
        """torch's dtype for the artifact's (artifact.dtype), looked up once."""
        import torch
        self._torch_dtype = getattr(torch, TORCH_DTYPES[getattr(self.artifact, "dtype",
                                                                  DType.F16)])
        return self._torch_dtype

    def _stream(self, index: int | None) -> int:
        """The stream handle of device `index` that a launch goes to: the current one."""
        return _current_stream(index)

    def _need(self, m: int, n: int, k: int, index: int | None) -> int:
        """workspace_bytes, remembered per device: it depends on the sizes and the device
        only (a cuda-family .so sizes it from the SM count of the device it launches on)."""
        need = self.workspace_bytes(m, n, k)
        if len(self._needs) >= SHAPES_KEPT:
            self._needs.pop(next(iter(self._needs)), None)
        self._needs[(m, n, k, index)] = need
        return need

    def _scratch(self, device, need: int) -> int:
        """The address of a workspace of at least `need` bytes on `device`, kept between
        calls and grown when a call needs more."""
        cached = self._workspace.get(device.index)
        if cached is None or cached[1] < need:
            import torch
            tensor = torch.empty(max(need, 1), dtype=torch.uint8, device=device)
            cached = self._workspace[device.index] = (tensor.data_ptr(), tensor.numel(), tensor)
        return cached[0]


def _fast_shapes(a, b, nn: bool, dtype, flag: str) -> tuple[int, int, int] | None:
    """(m, k, n) when the operands are plainly fine (the common case, few attribute reads),
    else None: then _check_operands finds what is wrong and says so. `flag`: the tensor
    attribute true on the kernel's device (Kernel.device_flag)."""
    if (a.dtype is not dtype or b.dtype is not dtype or not getattr(a, flag)
            or not a.is_contiguous() or not b.is_contiguous() or a.device != b.device):
        return None
    sa, sb = a.shape, b.shape
    if len(sa) != 2 or len(sb) != 2:
        return None
    m, k = sa
    kb, n = sb if nn else (sb[1], sb[0])
    return (m, k, n) if kb == k else None


_raw_stream = None  # torch's cheapest current-stream call, bound on first use


def _current_stream(index: int | None) -> int:
    """The current CUDA stream of device `index` (None: the current device) as a raw
    handle, by the cheapest call torch has."""
    global _raw_stream
    if _raw_stream is None:
        import torch
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda i: torch.cuda.current_stream(i).cuda_stream)
    if index is None:
        import torch
        index = torch.cuda.current_device()
    return _raw_stream(index)


_DEVICE_WORD = {"is_cuda": "CUDA", "is_cpu": "CPU"}
TORCH_DTYPES = {DType.F16: "float16", DType.BF16: "bfloat16"}
"""The torch dtype (an attribute name of the torch module) of each operand dtype."""


def _dtype_word(dtype) -> str:
    """A torch dtype as error messages name it: torch.bfloat16 -> 'bfloat16'."""
    return str(dtype).removeprefix("torch.")


def _check_operands(a, b, layout: Layout, flag: str = "is_cuda",
                    dtype=None) -> tuple[int, int, int]:
    """(m, k, n) of operands of `dtype` (default torch.float16) on the kernel's device
    (`flag`), or ValueError saying what is wrong with them."""
    import torch
    dtype = dtype or torch.float16
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or not getattr(t, flag):
            raise ValueError(f"{name} must be a {_dtype_word(dtype)} "
                             f"{_DEVICE_WORD.get(flag, flag)} tensor")
        if t.dim() != 2 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 2-D tensor, got shape {tuple(t.shape)}")
    m, k = a.shape
    n, kb = (b.shape[1], b.shape[0]) if layout == Layout.NN else (b.shape[0], b.shape[1])
    if kb != k:
        want = "(k, n)" if layout == Layout.NN else "(n, k)"
        raise ValueError(f"b must be {want} for layout {layout.value} with k={k}; "
                         f"got shape {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError("a and b must be on the same device")
    return m, k, n


class SharedLibraryKernel(Kernel):
    """A cuda-family .so with the extern "C" gemmforge_launch API, called through ctypes."""

    def __init__(self, artifact: Artifact):
        super().__init__(artifact)
        self._lib = ctypes.CDLL(str(artifact.path))
        self._launch = getattr(self._lib, artifact.meta.get("symbol", "gemmforge_launch"))
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self._ws = getattr(self._lib, artifact.meta.get("workspace_symbol",
                                                        "gemmforge_workspace_bytes"))
        self._ws.restype = ctypes.c_size_t
        self._ws.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._launch_bias = None  # the fused-bias entry, where the program has one
        if self.fused_bias:
            self._launch_bias = getattr(self._lib, artifact.meta["bias_symbol"])
            self._launch_bias.restype = ctypes.c_int
            self._launch_bias.argtypes = [*self._launch.argtypes[:3], ctypes.c_void_p,
                                          *self._launch.argtypes[3:]]
        self._why = getattr(self._lib, "gemmforge_last_error", None)  # optional: in words
        if self._why is not None:
            self._why.restype, self._why.argtypes = ctypes.c_char_p, []

    def workspace_bytes(self, m, n, k):
        return int(self._ws(m, n, k))

    def launch(self, a_ptr, b_ptr, c_ptr, m, n, k, workspace_ptr, workspace_bytes, stream):
        # c_void_p arguments take ints as they are (0 is NULL): no conversion here
        err = self._launch(a_ptr, b_ptr, c_ptr, m, n, k, workspace_ptr, workspace_bytes, stream)
        if err:
            self._raise(err)

    def launch_bias(self, a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                    workspace_bytes, stream):
        if self._launch_bias is None:
            super().launch_bias(a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                                workspace_bytes, stream)
        err = self._launch_bias(a_ptr, b_ptr, c_ptr, bias_ptr, m, n, k, workspace_ptr,
                                workspace_bytes, stream)
        if err:
            self._raise(err)

    def _raise(self, err: int) -> None:
        why = self._why().decode(errors="replace") if self._why is not None else ""
        raise RuntimeError(f"{self.artifact.program_text}: launch failed with "
                           f"cudaError {err} ({_cuda_error_name(err)})"
                           + (f": {why}" if why else ""))


@loader("cuda_so")
def _load_shared_library(artifact: Artifact) -> Kernel:
    return SharedLibraryKernel(artifact)


def _cuda_error_name(code: int) -> str:
    try:
        rt = ctypes.CDLL("libcudart.so")
        rt.cudaGetErrorName.restype = ctypes.c_char_p
        return rt.cudaGetErrorName(code).decode()
    except OSError:
        return "see cuda_runtime_api.h"


def artifact_meta_json(artifact: Artifact) -> str:
    """The artifact's record as JSON (what the cache stores beside the binary)."""
    return json.dumps({"key": artifact.key, "kind": artifact.kind, "path": str(artifact.path),
                       "program": artifact.program_text, "layout": artifact.layout.value,
                       "acc": artifact.acc.value, "meta": artifact.meta}, sort_keys=True)
