"""`torch.ops.gemmforge.mm(a, b)`: the C++ torch operator and its registration table.

    import gemmforge, torch
    gemmforge.load_op()                      # builds the extension once (cached), registers the op
    c = gemmforge.matmul(a, b)               # resolves, builds and registers a's shape, calls the op
    c = torch.ops.gemmforge.mm(a, b)         # the op alone: registered shapes run gemmforge's
                                             # kernel, any other input torch.matmul (warned once)

Before load_op() the namespace has no ops; `torch.ops.gemmforge.mm` then raises an
AttributeError that says to call load_op() first (gemmforge.torch_hint, set up by `import
gemmforge`).

The operator lives in `csrc/gemmforge_op.cpp` (TORCH_LIBRARY: no Python on the call path),
built with torch.utils.cpp_extension.load on first use into
`<GEMMFORGE_CACHE_DIR>/torch_op/<hash of the source and torch's version>` and loaded from
there afterwards. The source includes no CUDA header (the stream comes through c10's
device-guard interface), so the same file builds against a CPU-only torch: the CPU tests
build it and exercise its table, fallbacks and fake-tensor shapes.

`register(m, n, k, layout, device_index, kernel)` puts a loaded kernel's C launch entry (a
cuda_so artifact's `gemmforge_launch`, an address from ctypes) and a workspace for that shape
into the table, under the operand dtype the kernel was built for (its artifact's: fp16 and
bf16 kernels of one shape are two entries, and a call finds only its own dtype's); a kernel
without a C entry (Triton) returns False and stays a Python Kernel.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
import warnings
from pathlib import Path

SOURCE = Path(__file__).with_name("csrc") / "gemmforge_op.cpp"
LAYOUT_CODES = {"nn": 0, "nt": 1}
DTYPE_CODES = {"f16": 0, "bf16": 1}  # the operand dtype of a table key (ir DType's text)
CUBLAS = "cublas"  # what `_registered` reads for a bucket cuBLAS serves

_lock = threading.Lock()
_state: dict = {}  # "loaded": True once the op exists; "error": why it could not be built


class OpUnavailable(RuntimeError):
    """The extension could not be built or loaded here; the message says why."""


def build_dir() -> Path:
    """Where the extension is built: keyed by the source's and torch's version."""
    import torch
    from .compiler.knobs import knobs
    digest = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode()
                            + str(torch._C._GLIBCXX_USE_CXX11_ABI).encode()).hexdigest()[:16]
    return knobs().cache_dir / "torch_op" / digest


def load_op():
    """Build (first time) and load the extension; return torch.ops.gemmforge.mm.
    OpUnavailable, with the compiler's reason, when it can't be built here."""
    import torch
    with _lock:
        if not _state.get("loaded"):
            if "error" in _state:
                raise OpUnavailable(_state["error"])
            try:
                _build_and_load()
            except Exception as e:  # a compiler, ninja or loader failure: say which, once
                _state["error"] = f"torch.ops.gemmforge could not be built: {type(e).__name__}: {e}"
                raise OpUnavailable(_state["error"]) from e
            _register_fake_linear()
            _state["loaded"] = True
    return torch.ops.gemmforge.mm


def _register_fake_linear() -> None:
    """The fake-tensor (and meta) kernel of gemmforge::linear, symbolic sizes included, so
    torch.compile traces it with static or dynamic token counts."""
    import torch
    if getattr(torch.ops.gemmforge.linear.default, "_gemmforge_fake", False):
        return

    @torch.library.register_fake("gemmforge::linear")
    def _(x, w, bias=None):
        return x.new_empty((*x.shape[:-1], w.shape[0]))
    torch.ops.gemmforge.linear.default._gemmforge_fake = True


def _build_and_load() -> None:
    import torch
    if hasattr(torch.ops.gemmforge, "_register"):  # loaded by another path already
        return
    from torch.utils.cpp_extension import is_ninja_available, load
    where = build_dir()
    where.mkdir(parents=True, exist_ok=True)
    name = f"gemmforge_op_{where.name}"
    if is_ninja_available():
        load(name=name, sources=[str(SOURCE)], build_directory=str(where),
             extra_cflags=["-O2"], is_python_module=False, verbose=False)
    else:  # cpp_extension.load needs ninja; one compiler call does the same here
        torch.ops.load_library(str(_compile_without_ninja(where, name)))


def _compile_without_ninja(where: Path, name: str) -> Path:
    """Build `<where>/<name>.so` with one c++ call, the flags cpp_extension would use
    (C++20, else C++17 for older compilers); kept and reused once built."""
    import os
    import subprocess
    import tempfile
    import torch
    from torch.utils.cpp_extension import include_paths, library_paths
    lib = where / f"{name}.so"
    if lib.exists():
        return lib
    flags = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             *(f"-isystem{p}" for p in include_paths()), "-fPIC", "-O2", "-shared",
             str(SOURCE), *(f"-L{p}" for p in library_paths()), "-lc10", "-ltorch_cpu", "-ltorch"]
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=where)
    os.close(fd)
    errors = []
    for std in ("-std=c++20", "-std=c++17"):
        done = subprocess.run([os.environ.get("CXX", "c++"), std, *flags, "-o", tmp],
                              capture_output=True, text=True)
        if done.returncode == 0:
            os.replace(tmp, lib)
            return lib
        errors.append(done.stderr.strip().splitlines()[-1:] or ["(no message)"])
    os.unlink(tmp)
    raise RuntimeError(f"c++ could not build {SOURCE.name}: {errors[-1][0]}")


def op_available() -> bool:
    """True when the op is loaded or can be built now; warns once with the reason if not."""
    try:
        load_op()
        return True
    except OpUnavailable as e:
        if not _state.get("warned"):
            _state["warned"] = True
            warnings.warn(f"{e}; gemmforge.matmul calls its kernels from Python instead",
                          stacklevel=3)
        return False


def layout_of(b) -> str | None:
    """How the op reads `b` (the second operand, k x n): "nn" when row-major, "nt" when it
    is a transposed view of a row-major (n, k) tensor, None otherwise (as the C++ decides)."""
    if b.is_contiguous():
        return "nn"
    if b.stride(0) == 1 and b.stride(1) == b.shape[0]:
        return "nt"
    return None


def launch_address(kernel, entry: str = "_launch") -> int | None:
    """The address of `kernel`'s C launch entry (`entry`: "_launch", or "_launch_bias" for the
    bias epilogue's), or None if it has none (a Python Kernel, or a program without it)."""
    function = getattr(kernel, entry, None)
    if not isinstance(function, ctypes._CFuncPtr):
        return None
    return ctypes.cast(function, ctypes.c_void_p).value


def bucket(m: int) -> int:
    """The token bucket of `m`: the power of two at or above it (as the op computes it). Every
    m of a bucket runs the one program registered for it."""
    return 1 << max(0, (m - 1).bit_length()) if m <= 1 << 30 else 2**31 - 1


def register(m: int, n: int, k: int, layout: str, device_index: int, kernel) -> bool:
    """Put `kernel` into the op's table for (bucket of m, n, k, layout, the dtype its
    artifact was built for, device) with a workspace sized for the bucket's largest m; a
    bias entry too where the program has one. False (nothing registered) if it has no C
    launch entry."""
    import torch
    address = launch_address(kernel)
    if address is None:
        return False
    dtype = DTYPE_CODES[str(getattr(kernel.artifact, "dtype", "f16"))]
    top = min(bucket(m), 2**31 - 1)
    with torch.cuda.device(device_index):  # a cuda_so sizes its workspace by the device
        need = max(int(kernel.workspace_bytes(mm, n, k)) for mm in {m, top})
    workspace = torch.empty(max(need, 1), dtype=torch.uint8, device=f"cuda:{device_index}")
    torch.ops.gemmforge._register(m, n, k, LAYOUT_CODES[layout], dtype, device_index, address,
                                  launch_address(kernel, "_launch_bias") or 0, workspace, need,
                                  kernel.artifact.program_text)
    return True


def register_cublas(m: int, n: int, k: int, layout: str, device_index: int,
                    dtype: str = "f16") -> None:
    """Mark (bucket of m, n, k, layout, dtype, device) as cuBLAS's: the op calls ATen there,
    silently. `dtype`: the operands' (ir DType text, "f16" or "bf16")."""
    import torch
    torch.ops.gemmforge._register(m, n, k, LAYOUT_CODES[layout], DTYPE_CODES[str(dtype)],
                                  device_index, 0, 0,
                                  torch.empty(0, dtype=torch.uint8), 0, CUBLAS)
