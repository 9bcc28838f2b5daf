"""Launching a compiled Triton kernel straight through the C launcher Triton built for it.

`compiled.run` (Triton's CudaLauncher) does, on every launch, work that gemmforge can do
once per buffer set: it asks the allocators for scratch space the kernel does not use,
then (in a Python wrapper) walks every argument to replace each host TensorDescriptor by
what the C launcher takes: a freshly encoded CUtensorMap (cuTensorMapEncodeTiled) and the
tensor's shape and strides. For a TMA GEMM that is three encodings per launch, about 16 µs
of host time on an H100 (benchmarks/NOTES.md). `RawLauncher` keeps the C launcher and the
descriptor positions: `expand` turns an argument tuple into the C launcher's list once,
and the runtime reuses that list while the buffers repeat.

Release-specific by nature: only for the Triton releases whose launcher was read
(RAW_RELEASES: 3.6 builds `CudaLauncher.launch` as the module's C `launch`, wrapped by
`wrap_handle_tensordesc` when a parameter is a tensor descriptor, and calls it as
`launch(gx, gy, gz, stream, function, cooperative, pdl, global_scratch, profile_scratch,
packed_metadata, launch_metadata, enter_hook, exit_hook, *args)`). Anywhere else, or when
the kernel needs scratch memory, `raw_launcher` answers None and the runtime launches
through `compiled.run`.
"""
from __future__ import annotations

RAW_RELEASES = ("3.6.",)


class RawLauncher:
    """The C launcher of one compiled kernel: `launch`, its cooperative and PDL flags, and
    `descriptors`, (argument position, tensordesc metadata) per tensor-descriptor
    parameter in signature order."""

    __slots__ = ("launch", "cooperative", "pdl", "descriptors")

    def __init__(self, launch, cooperative: bool, pdl: bool, descriptors: tuple):
        self.launch, self.cooperative, self.pdl = launch, cooperative, pdl
        self.descriptors = descriptors

    def expand(self, args: tuple) -> tuple:
        """`args` (the kernel's parameters in order) as the C launcher takes them: each
        host TensorDescriptor replaced by what Triton's make_tensordesc_arg makes of it."""
        if not self.descriptors:
            return tuple(args)
        from triton.backends.nvidia.driver import make_tensordesc_arg
        out = list(args)
        for at, meta in reversed(self.descriptors):  # from the back: positions stay valid
            out[at:at + 1] = make_tensordesc_arg(out[at], meta)
        return tuple(out)

    def __call__(self, grid: int, stream: int, function, metadata, expanded: tuple) -> None:
        self.launch(grid, 1, 1, stream, function, self.cooperative, self.pdl, None, None,
                    metadata, None, None, None, *expanded)


def raw_launcher(compiled, version: str | None = None) -> RawLauncher | None:
    """The RawLauncher of a loaded CompiledKernel, or None where this Triton release's
    launcher was not read or the kernel needs scratch memory (then launch through
    `compiled.run`). `version` defaults to the installed Triton's."""
    if version is None:
        import triton
        version = triton.__version__
    if not version.startswith(RAW_RELEASES):
        return None
    run = compiled.run
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    try:
        launch, cooperative, pdl = run.launch, run.launch_cooperative_grid, run.launch_pdl
    except AttributeError:
        return None
    code = getattr(launch, "__code__", None)
    descriptors: tuple = ()
    if code is not None:  # Python: the tensor-descriptor wrapper around the C launcher
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in launch.__closure__ or ())))
        if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= cells.keys():
            return None
        indices = sorted(cells["tensordesc_indices"])
        metas = cells["tensordesc_meta"] or [None] * len(indices)
        if len(metas) != len(indices):
            return None
        launch, descriptors = cells["launcher"], tuple(zip(indices, metas))
    return RawLauncher(launch, bool(cooperative), bool(pdl), descriptors)
