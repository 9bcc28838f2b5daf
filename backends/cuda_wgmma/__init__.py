"""cuda_wgmma: TMA + mbarrier + wgmma.mma_async kernels for sm_90a, from jinja2 templates."""
from .backend import CudaWgmma

__all__ = ["CudaWgmma"]
