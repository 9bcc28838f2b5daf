"""How each operand dtype is spelled in generated code: the C++ types and conversions of
CUDA's fp16 and bf16 headers, the PTX type suffix, the TMA tensor-map data type, CUTLASS's
element type and Triton's. Templates take one `Element` as `el` (`{{ el.c_type }}`), so an
f16 program renders the same text whatever other dtypes exist.

Both types are 2 bytes, so tile geometry, shared-memory layouts, swizzles, ldmatrix and
stmatrix are the same for either; only the arithmetic's types and conversions differ.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..ir.program import DType


@dataclass(frozen=True)
class Element:
    name: str          # the IR's spelling, which is also PTX's type suffix (mma, wgmma)
    words: str         # how generated comments name it
    c_type: str        # one element in CUDA C++
    c_type2: str       # two packed elements (32 bits)
    from_float: str    # float -> element, round to nearest even
    from_float2: str   # (float, float) -> packed pair
    to_float: str      # element -> float
    to_float2: str     # packed pair -> float2
    header: str        # the CUDA header that declares them
    tensor_map: str    # CUtensorMapDataType of a TMA descriptor over it
    cutlass: str       # CUTLASS's element type
    triton: str        # Triton's dtype
    triton_ptr: str    # its pointer type in a Triton signature
    selftest_tolerance: str  # relative Frobenius error a standalone self-test accepts
    # (f32 accumulation; search.gate's bound for the dtype, as C++ text)

    def as_dict(self) -> dict:
        return asdict(self)


ELEMENTS = {
    DType.F16: Element(
        "f16", "fp16", "half", "half2", "__float2half", "__floats2half2_rn", "__half2float",
        "__half22float2", "cuda_fp16.h", "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
        "cutlass::half_t", "tl.float16", "*fp16", "5e-3"),
    DType.BF16: Element(
        "bf16", "bf16", "__nv_bfloat16", "__nv_bfloat162", "__float2bfloat16_rn",
        "__floats2bfloat162_rn", "__bfloat162float", "__bfloat1622float2", "cuda_bf16.h",
        "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "cutlass::bfloat16_t", "tl.bfloat16", "*bf16",
        "2e-2"),
}


def element(dtype: DType) -> Element:
    """The spelling of `dtype` in generated code."""
    return ELEMENTS[DType(dtype)]
