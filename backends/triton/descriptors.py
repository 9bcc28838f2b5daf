"""Host TMA descriptors for triton plans, and the opt-in cache of their encodings.

    base = DevicePointer(a.data_ptr(), torch.float16)
    desc = make_descriptor("a_desc", base, m, k, (128, 64))   # a triton TensorDescriptor
    install_descriptor_cache()    # GEMMFORGE_TRITON_DESCRIPTOR_CACHE=1: reuse CUtensorMaps

A plan's descriptors (plan.LaunchPlan.descriptors) are host `TensorDescriptor`s over the
operands' device addresses; Triton's launcher encodes each into a CUtensorMap at launch
(backends/triton/runtime.py keeps them per address).
"""
from __future__ import annotations

from .plan import TMA_ROW_ALIGN_HALFS, LaunchPlan


class DevicePointer:
    """A raw device address that looks enough like a tensor of `dtype` for TensorDescriptor."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self.ptr


def make_descriptors(plan: LaunchPlan, values: dict, bases: dict) -> dict:
    """Host TMA descriptors of `plan` over `bases` (tensors, or DevicePointers), shaped by
    the problem sizes in `values`; Triton fills each CUtensorMap at launch."""
    return {name: make_descriptor(name, bases[name], *(values[d] for d in desc["dims"]),
                                  desc["block"])
            for name, desc in plan.descriptors.items()}


def make_descriptor(name: str, base, rows: int, cols: int, block):
    """One host TMA descriptor: a row-major rows x cols fp16 matrix at `base`, loaded in
    `block` boxes; ValueError where TMA can't address its rows."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    if cols % TMA_ROW_ALIGN_HALFS:
        raise ValueError(f"TMA needs rows of a multiple of {TMA_ROW_ALIGN_HALFS} halves; "
                         f"{name} is {rows} x {cols} (use epilogue direct)")
    return TensorDescriptor(base, [rows, cols], [cols, 1], list(block))


def install_descriptor_cache() -> bool:
    """Make Triton's launcher reuse the CUtensorMap it encodes for a host TensorDescriptor
    while the descriptor's address, shape, strides and kernel metadata repeat, instead of
    encoding it on every launch (three cuTensorMapEncodeTiled calls per TMA GEMM launch,
    ~16 µs a call on an H100, benchmarks/NOTES.md). The encoding depends on nothing else,
    so a launch gets the same bytes either way, for Triton kernels outside gemmforge too.
    Installed once, where the Triton release builds its launchers through a module-level
    `make_tensordesc_arg(arg, metadata, ...)` (as 3.9 does); returns whether it is in
    place. Launchers made before it was installed keep encoding."""
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return False
    current = getattr(driver, "make_tensordesc_arg", None)
    code = getattr(getattr(driver, "wrap_handle_tensordesc", None), "__code__", None)
    if current is None or code is None or "make_tensordesc_arg" not in code.co_names:
        return False
    if getattr(current, "gemmforge_cached", False):
        return True
    driver.make_tensordesc_arg = _cached_encoding(current)
    return True


def _cached_encoding(encode, size: int = 256):
    """`encode` (Triton's make_tensordesc_arg) memoised on everything it reads."""
    cache: dict = {}

    def cached(arg, metadata, *rest):
        if metadata is None:
            return encode(arg, metadata, *rest)
        key = (id(metadata), arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides),
               getattr(arg, "padding", None), getattr(arg, "round_f32_to_tf32", None),
               getattr(arg, "block_shape", None) and tuple(arg.block_shape))
        hit = cache.get(key)
        if hit is None or hit[0] is not metadata:
            if len(cache) >= size:
                cache.pop(next(iter(cache)))
            hit = cache[key] = (metadata, encode(arg, metadata, *rest))
        return list(hit[1])
    cached.gemmforge_cached = True
    return cached
