"""Device facts per class, named once: what the policies, the dispatch rules, the replay
model and the measurement sanity limits reckon with.

    DEVICES["h200"].hbm_bytes_per_s    # 4.8e12
    H100.sms                           # 132: the wave a grid of one-CTA-per-SM tiles fills
    for_arch(Arch.SM80).name           # "a100": the class an arch's figures default to

Figures are the SXM boards' datasheet numbers (NVIDIA's H100, H200 and A100 datasheets);
peak FLOP/s is the dense fp16 tensor-core rate with fp32 accumulation (no sparsity). Shared
memory per SM is the unified L1/shared carve-out's shared maximum (CUDA C Programming
Guide, technical specifications per compute capability). Measured figures (what a copy
reaches, what an SM holds under load) belong to the models that measured them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .program import Arch

MIB = 1 << 20
KIB = 1 << 10


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    name: str                  # the class, as dispatch.devices names devices: "h100"
    arch: Arch                 # the arch its kernels are built for
    sms: int                   # streaming multiprocessors
    l2_bytes: int
    peak_fp16_flops: float     # dense tensor-core FLOP/s, fp16 in, fp32 accumulate
    hbm_bytes_per_s: float     # memory bandwidth
    smem_per_sm: int           # bytes of shared memory an SM holds

    @property
    def peak_tflops(self) -> float:
        return self.peak_fp16_flops / 1e12


H100 = DeviceFacts("h100", Arch.SM90A, sms=132, l2_bytes=50 * MIB, peak_fp16_flops=989e12,
                   hbm_bytes_per_s=3.35e12, smem_per_sm=228 * KIB)
H200 = DeviceFacts("h200", Arch.SM90A, sms=132, l2_bytes=50 * MIB, peak_fp16_flops=989e12,
                   hbm_bytes_per_s=4.8e12, smem_per_sm=228 * KIB)
GH200 = DeviceFacts("gh200", Arch.SM90A, sms=132, l2_bytes=50 * MIB, peak_fp16_flops=989e12,
                    hbm_bytes_per_s=4.0e12, smem_per_sm=228 * KIB)
A100 = DeviceFacts("a100", Arch.SM80, sms=108, l2_bytes=40 * MIB, peak_fp16_flops=312e12,
                   hbm_bytes_per_s=2.039e12, smem_per_sm=164 * KIB)

DEVICES: dict[str, DeviceFacts] = {d.name: d for d in (H100, H200, GH200, A100)}
"""Every class with known facts, by class name."""

ARCH_DEFAULT: dict[Arch, DeviceFacts] = {Arch.SM90A: H100, Arch.SM80: A100}
"""The class whose facts stand for an arch where no device is named."""


def for_arch(arch: Arch) -> DeviceFacts:
    return ARCH_DEFAULT[arch]
