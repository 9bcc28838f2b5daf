"""The Triton launch path's caches on a machine with no GPU: what a cached launch hands
Triton equals what the uncached computation gives (KernelPlan.args over a fresh dict of
values, fresh TMA descriptors), for several sizes, split-K plans with zero and reduce
kernels and TMA plans; the caches follow pointer and size changes and stay bounded;
launching through `compiled.run` equals launching through the runner; and launch errors keep
their messages. Triton kernels are stand-ins that record their launches
(tests/launch_stand_ins.py), except in the one test that compiles a real kernel (for sm_90a,
on the CPU) to compare Triton's two entries. `Kernel.__call__` and the .so path are
tests/test_kernel_call.py's."""
import types

import pytest

from gemmforge.backends.triton import runtime as triton_runtime
from gemmforge.backends.triton import toolchain
from gemmforge.backends.triton.plan import KernelPlan, make_plan
from gemmforge.backends.triton.runtime import fill_per_call
from gemmforge.ir import Problem, parse, verify
from launch_stand_ins import (  # noqa: F401 (device is a fixture)
    A, B, C, DIRECT, PARTIALS, PLANS, SHAPES, TMA, TMA_SPLIT, WS, device, launched, triton_kernel,
    uncached,
)


@pytest.mark.parametrize("text", PLANS)
def test_cached_launches_equal_uncached(device, tmp_path, text):
    layouts = ("nn", "nt")
    for layout in layouts:
        kernel = triton_kernel(text, Problem(256, 256, 256, layout), tmp_path)
        device.clear()
        for m, n, k in SHAPES:
            need = kernel.workspace_bytes(m, n, k)
            for ptrs in ((A, B, C, WS if need else 0), (B, C, A, WS), (A, B, C, WS)):
                for _ in range(2):  # prepares, then from the caches
                    kernel.launch(*ptrs[:3], m, n, k, ptrs[3], need, 0x5)
                    assert launched(device) == uncached(kernel, ptrs, m, n, k, 0x5)


@pytest.mark.parametrize("text", [DIRECT, PARTIALS, TMA_SPLIT])
def test_runner_and_run_launch_alike(device, tmp_path, text, monkeypatch):
    """Direct, with no launch hook set, the kernel goes through compiled.run; with one (or
    where Triton's release was not read) through the runner: the same arguments either way."""
    from triton import knobs
    monkeypatch.setenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", "1")
    kernel = triton_kernel(text, Problem(256, 256, 256), tmp_path)
    need = kernel.workspace_bytes(512, 256, 128)
    kernel.launch(A, B, C, 512, 256, 128, WS, need, 0)
    assert {entry[-1] for entry in device} == {"run"}
    direct = launched(device)
    def hook(metadata):
        pass
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        kernel.launch(A, B, C, 512, 256, 128, WS, need, 0)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert {entry[-1] for entry in device} == {"runner"}
    assert launched(device) == direct
    kernel._knobs = None  # a Triton release whose runner was not read
    kernel.launch(A, B, C, 512, 256, 128, WS, need, 0)
    assert {entry[-1] for entry in device} == {"runner"}
    assert launched(device) == direct


@pytest.mark.parametrize("setting, path", [(None, "run"), ("1", "run"), ("0", "runner")])
def test_direct_launch_is_the_default(device, tmp_path, monkeypatch, setting, path):
    """compiled.run unless GEMMFORGE_TRITON_DIRECT_LAUNCH=0 (the GPU tier passed with it)."""
    if setting is None:
        monkeypatch.delenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", raising=False)
    else:
        monkeypatch.setenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", setting)
    kernel = triton_kernel(DIRECT, Problem(256, 256, 256), tmp_path)
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)
    assert {entry[-1] for entry in device} == {path}


def test_hooks_idle():
    from triton.knobs import HookChain
    chain = HookChain()
    knobs = types.SimpleNamespace(launch_enter_hook=chain, launch_exit_hook=HookChain())
    assert triton_runtime._hooks_idle(knobs)
    chain.add(print)
    assert not triton_runtime._hooks_idle(knobs)
    assert triton_runtime._hooks_idle(types.SimpleNamespace(launch_enter_hook=None,
                                                            launch_exit_hook=None))
    assert not triton_runtime._hooks_idle(types.SimpleNamespace(launch_enter_hook=print,
                                                                launch_exit_hook=None))


def test_tma_descriptors_follow_pointers_and_sizes(device, tmp_path):
    kernel = triton_kernel(TMA, Problem(256, 256, 256), tmp_path)
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)
    first = device[-1][4][:3]
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)
    assert all(x is y for x, y in zip(device[-1][4][:3], first))  # the same set, reused
    kernel.launch(A, B, WS, 256, 256, 256, 0, 0, 0)  # a new output buffer
    second = device[-1][4][:3]
    assert second[0] is first[0] and second[1] is first[1] and second[2] is not first[2]
    assert second[2].base.data_ptr() == WS
    kernel.launch(A, B, C, 256, 256, 256, 0, 0, 0)  # the first buffer again: kept
    assert device[-1][4][2] is first[2]
    kernel.launch(A, B, C, 512, 256, 128, 0, 0, 0)  # new sizes: new descriptors
    assert [list(d.shape) for d in device[-1][4][:3]] == [[512, 128], [128, 256], [512, 256]]
    device.clear()
    kernel.launch(A, B, C, 512, 256, 128, 0, 0, 0)
    assert launched(device) == uncached(kernel, (A, B, C, 0), 512, 256, 128)


def test_caches_are_bounded(device, tmp_path, monkeypatch):
    monkeypatch.setattr(triton_runtime, "PREPARED_SHAPES", 2)
    monkeypatch.setattr(triton_runtime, "DESCRIPTORS_KEPT", 4)
    kernel = triton_kernel(TMA, Problem(256, 256, 256), tmp_path)
    for m in (64, 128, 192, 64):
        for c in range(8):
            kernel.launch(A, B, C + 256 * c, m, 256, 256, 0, 0, 0)
            assert launched(device) == uncached(kernel, (A, B, C + 256 * c, 0), m, 256, 256)
        assert len(kernel._prepared) <= 2
        assert all(len(p.kept) <= 4 for p in kernel._prepared.values())


def test_launch_errors_keep_their_messages(device, tmp_path):
    split = triton_kernel(PARTIALS, Problem(256, 256, 256), tmp_path)
    with pytest.raises(ValueError, match="must be 16-byte aligned"):
        split.launch(A + 8, B, C, 256, 256, 256, WS, 1 << 30, 0)
    need = split.workspace_bytes(256, 256, 256)
    with pytest.raises(ValueError, match=f"needs a workspace of {need} B at 256x256x256, "
                                         f"got {need - 1} B"):
        split.launch(A, B, C, 256, 256, 256, WS, need - 1, 0)
    tma = triton_kernel(TMA, Problem(256, 256, 256), tmp_path)
    for _ in range(2):  # raised again from the cache
        with pytest.raises(ValueError, match="TMA needs rows of a multiple of 8 halves; "
                                             "b_desc is 256 x 100"):
            tma.launch(A, B, C, 256, 100, 256, 0, 0, 0)


@pytest.mark.parametrize("text", PLANS)
def test_launch_template_fills_to_args(text):
    problem = Problem(1000, 4096, 336)
    plan = make_plan(parse(text), problem)
    live = (A, B, C, WS, 0, "a_desc", "b_desc", "c_desc")
    values = dict(zip(triton_runtime.PER_CALL_ARGS, live))
    values.update({"M": 1000, "N": 4096, "K": 336, "NUMEL": 4096000, "NUM_PROGRAMS": 7})
    for kp in plan.kernels:
        template = kp.launch_template(values)
        assert fill_per_call(*template)(live) == tuple(kp.args(values))
        shuffled = KernelPlan(kp.role, kp.name, dict(reversed(kp.signature.items())),
                              kp.constexprs, kp.num_warps, kp.num_stages, kp.grid)
        assert fill_per_call(*shuffled.launch_template(values))(live) == tuple(
            shuffled.args(values))


def test_real_triton_entries_pass_the_same_arguments(tmp_path):
    """A real CompiledKernel (sm_90a, compiled on the CPU): its runner and compiled.run
    as the runtime calls it hand the launcher the same grid, stream and arguments."""
    pytest.importorskip("triton")
    from gemmforge.backends import registry
    problem = Problem(256, 256, 256)
    program = verify(parse(TMA), problem)
    (tmp_path / "kernel.py").write_text(registry.get("triton").lower(program, problem).text)
    module = toolchain.load_module(tmp_path / "kernel.py")
    gemm = make_plan(program, problem).kernels[0]
    compiled = toolchain.compile_kernel(module, gemm, 90, {}, ("N", "K", "NUMEL"))
    calls = []
    compiled.module, compiled.function = "stand-in", 0
    compiled._run = lambda *args: calls.append(args)
    args = tuple(range(len(gemm.signature)))
    compiled[(132, 1, 1)](*args, stream=7)
    step = triton_runtime._Launch(compiled, 132, lambda live: args)
    step.run(step.grid, 1, 1, 7, step.function, step.metadata, None, None, None, *args)
    via_runner, via_run = calls
    assert via_runner[:6] == via_run[:6] and via_runner[9:] == via_run[9:]
    assert via_run[6:9] == (None, None, None)
