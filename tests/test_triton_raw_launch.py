"""gemmforge.backends.triton.launcher: launching through Triton's C launcher directly hands it the
same arguments as launching through `compiled.run`, for every plan kind (split-K, atomic,
TMA, TMA split-K), and encodes each TMA descriptor once per buffer set instead of once per
launch. Triton 3.6's CudaLauncher (the release the raw path was read from) is played by a
stand-in with the same structure: `run.launch` is the C launcher, wrapped, when a
parameter is a tensor descriptor, by a closure over `launcher`, `tensordesc_indices` and
`tensordesc_meta` that encodes each descriptor on every call."""
from __future__ import annotations

import types

import pytest

pytest.importorskip("triton")

import triton  # noqa: E402
from triton.backends.nvidia import driver  # noqa: E402

from gemmforge.backends.triton import launcher as raw_module  # noqa: E402
from gemmforge.backends.triton import toolchain  # noqa: E402
from gemmforge.backends.triton.launcher import raw_launcher  # noqa: E402
from gemmforge.ir import Problem  # noqa: E402
from launch_stand_ins import A, B, C, PLANS, SHAPES, WS, device, triton_kernel  # noqa: E402,F401


class Encoder:
    """Stands in for make_tensordesc_arg: counts encodings; returns what it read, the
    metadata's position tag included (a descriptor paired with another parameter's
    metadata gives other arguments)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, arg, metadata, *rest):
        self.calls += 1
        return [("map", arg.base.data_ptr(), tuple(arg.shape), metadata["at"]),
                *arg.shape, *arg.strides]


def wrapped_like_36(launcher, tensordesc_indices: set, tensordesc_meta: list):
    """Triton 3.6's wrap_handle_tensordesc: 13 base arguments, then each descriptor
    parameter expanded by make_tensordesc_arg on every call."""
    def inner(*args):
        final_args = list(args[:13])
        tensordesc_idx = 0
        for i, arg in enumerate(args[13:]):
            if i in tensordesc_indices:
                final_args.extend(driver.make_tensordesc_arg(arg, tensordesc_meta[tensordesc_idx]))
                tensordesc_idx += 1
            else:
                final_args.append(arg)
        return launcher(*final_args)
    return inner


class CLaunch:
    """The C launcher (a builtin, so no __code__): records what it is handed."""

    def __init__(self, log: list):
        self.log = log

    def __call__(self, *args):
        self.log.append(args)


class CudaLauncher36:
    """The shape of Triton 3.6's CudaLauncher for a kernel with no scratch memory."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, signature: dict, log: list):
        c_launch = CLaunch(log)
        indices = {i for i, ty in enumerate(signature.values()) if ty.startswith("tensordesc")}
        metas = [{"swizzle": 3, "at": i} for i in sorted(indices)]
        self.launch = wrapped_like_36(c_launch, indices, metas) if indices else c_launch

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, None, None, *args)


class Compiled36:
    def __init__(self, kernel, aligned, log):
        self.function, self.packed_metadata = ("function", kernel.name, aligned), ("meta",)
        self.run = CudaLauncher36(kernel.signature, log)

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            raise AssertionError("the runner is not used here")
        return runner


@pytest.fixture
def triton36(device, monkeypatch):
    """`device`'s CPU machine, with compiles giving Compiled36 and a counting encoder."""
    log, encoder = [], Encoder()
    monkeypatch.setattr(toolchain, "compile_kernel", lambda module, kernel, capability, env,
                        aligned: Compiled36(kernel, aligned, log))
    monkeypatch.setattr(raw_module, "RAW_RELEASES", (triton.__version__,))
    monkeypatch.setattr(driver, "make_tensordesc_arg", encoder)
    return log, encoder


def launches(kernel, log, m, n, k, ptrs) -> list:
    need = kernel.workspace_bytes(m, n, k)
    kernel.launch(*ptrs[:3], m, n, k, ptrs[3] if need else 0, need, 0x5)
    out = list(log)
    log.clear()
    return out


@pytest.mark.parametrize("text", PLANS)
def test_raw_launches_equal_compiled_run(triton36, tmp_path, monkeypatch, text):
    log, _ = triton36
    raw = triton_kernel(text, Problem(256, 256, 256), tmp_path)
    monkeypatch.setenv("GEMMFORGE_TRITON_RAW_LAUNCH", "0")
    via_run = triton_kernel(text, Problem(256, 256, 256), tmp_path)
    for m, n, k in SHAPES:
        for ptrs in ((A, B, C, WS), (B, C, A, WS), (A, B, C, WS)):
            for _ in range(2):  # expands, then from the cache
                got = launches(raw, log, m, n, k, ptrs)
                assert got and got == launches(via_run, log, m, n, k, ptrs)
    assert all(p.raw for p in raw._prepared.values())
    assert not any(p.raw for p in via_run._prepared.values())


def test_descriptors_are_encoded_once_per_buffer_set(triton36, tmp_path):
    log, encoder = triton36
    kernel = triton_kernel(PLANS[4], Problem(256, 256, 256), tmp_path)  # TMA
    for _ in range(5):
        launches(kernel, log, 256, 256, 256, (A, B, C, 0))
    assert encoder.calls == 3                    # a, b and c, once
    launches(kernel, log, 256, 256, 256, (A, B, WS, 0))
    launches(kernel, log, 256, 256, 256, (A, B, C, 0))  # the first set again: kept
    assert encoder.calls == 6
    first = launches(kernel, log, 256, 256, 256, (A, B, C, 0))[0]
    step = kernel._prepared[(256, 256, 256)].launches[0]
    assert first[:13] == (step.grid, 1, 1, 0x5, step.function, False, True, None, None,
                          ("meta",), None, None, None)
    maps = [arg for arg in first[13:] if isinstance(arg, tuple) and arg[:1] == ("map",)]
    assert [m[1] for m in maps] == [A, B, C]


def test_no_raw_launcher_where_the_release_or_the_kernel_does_not_fit():
    compiled = Compiled36(types.SimpleNamespace(name="k", signature={"a_ptr": "*fp16"}),
                          (), [])
    assert raw_launcher(compiled, "3.9.0") is None       # a release whose launcher was not read
    assert raw_launcher(compiled, "3.6.0") is not None
    compiled.run.global_scratch_size = 64                # needs scratch: compiled.run
    assert raw_launcher(compiled, "3.6.0") is None
    other = Compiled36(types.SimpleNamespace(name="k", signature={"a_ptr": "*fp16"}), (), [])
    other.run.launch = lambda *args: None                # a wrapper of another shape
    assert raw_launcher(other, "3.6.0") is None
    flagless = types.SimpleNamespace(run=types.SimpleNamespace(
        global_scratch_size=0, profile_scratch_size=0, launch=CLaunch([])))
    assert raw_launcher(flagless, "3.6.0") is None       # a launcher without the flags


def test_raw_launch_can_be_turned_off(triton36, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_TRITON_RAW_LAUNCH", "0")
    kernel = triton_kernel(PLANS[0], Problem(256, 256, 256), tmp_path)
    launches(kernel, triton36[0], 256, 256, 256, (A, B, C, 0))
    assert not kernel._prepared[(256, 256, 256)].raw
