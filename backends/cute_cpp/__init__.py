"""The cute_cpp backend: CUTLASS/CuTe C++ kernels from the nvidia-cutlass wheel's headers."""
from gemmforge.backends.cute_cpp.backend import CuteCpp

__all__ = ["CuteCpp"]
