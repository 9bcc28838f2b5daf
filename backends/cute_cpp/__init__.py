"""The cute_cpp backend: CUTLASS/CuTe C++ kernels from the nvidia-cutlass wheel's headers."""
from .backend import CuteCpp

__all__ = ["CuteCpp"]
