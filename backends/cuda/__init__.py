"""The cuda backend family (cuda_simt, cuda_wmma, cuda_mma): raw CUDA from jinja2 templates."""
from .backend import CudaMma, CudaSimt, CudaWmma

__all__ = ["CudaMma", "CudaSimt", "CudaWmma"]
