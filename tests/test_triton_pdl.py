"""The triton backend's `pdl` (programmatic dependent launch) on a machine with no GPU:
every kernel of a pdl plan (the GEMM, split-K's zero and reduce kernels) starts with
gdc_wait then gdc_launch_dependents, before any global load or store, and none does
without pdl; verify takes pdl on sm_90a and refuses it on sm_80; every kernel is planned,
compiled (real sm_90 compiles: the metadata's launch_pdl, griddepcontrol in the PTX
before the first global access) and launched with pdl, through Triton's C launcher,
`compiled.run` and the runner alike; a Triton that can't is a BuildError, never a plain
launch."""
from __future__ import annotations

import ast
import json
import re
import types

import pytest

from gemmforge.backends import registry
from gemmforge.backends.triton import toolchain
from gemmforge.backends.triton.plan import LaunchPlan, make_plan
from gemmforge.compiler.values import BuildError, Target
from gemmforge.ir import Problem, VerifyError, check, parse, verify
from launch_stand_ins import triton_kernel

DIRECT = "triton sm_90a 64x32x64 w2x2 s6 swnone row/8 pred k1 dp c1x1 nows direct pdl"
PROGRAMS = [
    DIRECT,
    "triton sm_90a 64x64x64 w1x4 s14 swnone row/8 pred k2i dp c1x1 nows direct pdl",
    "triton sm_90a 64x64x64 w2x2 s4 swnone row/8 pred k4 dp c1x1 nows direct pdl",
    "triton sm_90a 64x64x64 w1x4 s4 swnone row/8 pred k3a persistent c1x1 nows tma pdl",
    "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma pdl",
    "triton sm_90a 64x64x64 w1x4 s2 swnone row/8 pred k1 dp c1x1 nows direct swap pdl",
]
PROBLEM = Problem(256, 256, 512)
GLOBAL_ACCESS = re.compile(r"\b(ld\.global|st\.global|red\.|atom\.|cp\.async)")


def plain(text: str) -> str:
    return text.removesuffix(" pdl")


def kernel_bodies(text: str, problem: Problem = PROBLEM) -> dict[str, list[ast.stmt]]:
    """The statements, docstring dropped, of every kernel the plan launches."""
    program = parse(text)
    tree = ast.parse(registry.get("triton").lower(program, problem).text)
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    return {k.name: functions[k.name].body[1:] for k in make_plan(program, problem).kernels}


def called(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return getattr(stmt.value.func, "id", None)
    return None


@pytest.mark.parametrize("text", PROGRAMS)
def test_every_kernel_waits_first_exactly_when_pdl(text):
    for name, body in kernel_bodies(text).items():
        assert [called(s) for s in body[:2]] == ["gdc_wait", "gdc_launch_dependents"], name
        assert not any("gdc_" in ast.dump(s) for s in body[2:]), name
    source = registry.get("triton").lower(parse(plain(text)), PROBLEM).text
    assert "gdc_" not in source and "extra.cuda" not in source


@pytest.mark.parametrize("text", PROGRAMS)
def test_every_kernel_is_planned_with_launch_pdl(text):
    plan = make_plan(parse(text), PROBLEM)
    assert plan.kernels and all(k.launch_pdl for k in plan.kernels)
    assert not any(k.launch_pdl for k in make_plan(parse(plain(text)), PROBLEM).kernels)
    again = LaunchPlan.from_json(json.loads(json.dumps(plan.as_json(), sort_keys=True)))
    assert again == plan
    legacy = plan.as_json()  # an artifact built before the field: launched without pdl
    for kernel in legacy["kernels"]:
        del kernel["launch_pdl"]
    assert not any(k.launch_pdl for k in LaunchPlan.from_json(legacy).kernels)


def test_verify_takes_pdl_on_sm90a_and_refuses_it_on_sm80():
    for text in PROGRAMS:
        assert check(parse(text), PROBLEM) is None, text
    sm80 = "triton sm_80 64x64x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct pdl"
    with pytest.raises(VerifyError, match=re.escape(
            "pdl: programmatic dependent launches (griddepcontrol) need sm_90a")):
        verify(parse(sm80), PROBLEM)
    assert check(parse(plain(sm80)), PROBLEM) is None


def test_the_search_space_offers_pdl_on_sm90a_only():
    from gemmforge.ir.program import Arch
    from gemmforge.ir.space import variant
    assert variant("triton", Arch.SM90A).choices("pdl") == (False, True)
    assert variant("triton", Arch.SM80).choices("pdl") == (False,)
    assert variant("triton", Arch.SM90A).contains(parse(DIRECT))


# ---- launching: every path of the runtime hands Triton's C launcher pdl -----------------

class CLaunch:
    """A C launcher (no __code__, as Triton's builtin): records what it is handed."""

    def __init__(self, log: list):
        self.log = log

    def __call__(self, *args):
        self.log.append(args)


class PdlAwareLauncher:
    """Triton's CudaLauncher as far as pdl goes: `launch_pdl` from the compiled kernel's
    metadata, handed to the C launcher (`launch`) on every call."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid = False

    def __init__(self, launch_pdl: bool, log: list):
        self.launch_pdl, self.launch = launch_pdl, CLaunch(log)

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, None, None, *args)


class PdlCompiled:
    """A CompiledKernel's three launch entries (`run`, `run.launch`, the runner
    `compiled[grid]`), all through one PdlAwareLauncher whose launch_pdl is the plan's
    (or `launch_pdl`, to play a Triton that dropped it)."""

    def __init__(self, kernel, log, launch_pdl=None):
        self.function, self.packed_metadata = ("function", kernel.name), ("meta",)
        pdl = kernel.launch_pdl if launch_pdl is None else launch_pdl
        self.run = PdlAwareLauncher(pdl, log)

    def __getitem__(self, grid):
        return lambda *args, stream=None: self.run(*grid, stream, self.function,
                                                   self.packed_metadata, None, None, None,
                                                   *args)


@pytest.fixture
def pdl_device(monkeypatch):
    """A CPU stand-in for an H100 whose Triton compiles give PdlCompileds."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    import triton
    import torch
    from gemmforge.backends.triton import launcher
    log: list = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(multi_processor_count=132))
    monkeypatch.setattr(toolchain, "load_module", lambda path: None)
    monkeypatch.setattr(toolchain, "compile_kernel", lambda module, kernel, capability, env,
                        aligned: PdlCompiled(kernel, log))
    monkeypatch.setattr(launcher, "RAW_RELEASES", (triton.__version__,))
    return log


@pytest.mark.parametrize("path", ["raw", "run", "runner"])
@pytest.mark.parametrize("text", [PROGRAMS[0], PROGRAMS[2], PROGRAMS[3]])
def test_every_launch_path_launches_with_pdl(pdl_device, tmp_path, monkeypatch, text, path):
    """Triton's C launcher straight (launcher.RawLauncher), `compiled.run`, and the
    runner `compiled[grid]`: each kernel of the plan is handed pdl exactly when the
    program has it."""
    monkeypatch.setenv("GEMMFORGE_TRITON_RAW_LAUNCH", str(int(path == "raw")))
    monkeypatch.setenv("GEMMFORGE_TRITON_DIRECT_LAUNCH", str(int(path != "runner")))
    for program, pdl in ((text, True), (plain(text), False)):
        kernel = triton_kernel(program, PROBLEM, tmp_path)
        m, n, k = PROBLEM.m, PROBLEM.n, PROBLEM.k
        need = kernel.workspace_bytes(m, n, k)
        kernel.launch(0x1000, 0x2000, 0x3000, m, n, k, 0x4000 if need else 0, need, 0x5)
        launches, pdl_device[:] = list(pdl_device), []
        assert len(launches) == len(kernel.plan.kernels)
        assert [args[6] for args in launches] == [pdl] * len(launches)
        assert all(p.raw == (path == "raw") for p in kernel._prepared.values())
        assert (kernel._knobs is None) == (path == "runner")


def test_a_launcher_without_pdl_is_refused_at_load(pdl_device, tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "compile_kernel", lambda module, kernel, capability, env,
                        aligned: PdlCompiled(kernel, pdl_device, launch_pdl=False))
    with pytest.raises(BuildError, match="does not set programmatic serialization"):
        triton_kernel(DIRECT, PROBLEM, tmp_path)


# ---- a Triton that can't: a BuildError, never a plain launch ---------------------------

def test_a_triton_without_pdl_is_a_build_error(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(toolchain, "pdl_missing",
                        lambda: "it lacks triton.language.extra.cuda.gdc_wait")
    backend, program = registry.get("triton"), parse(DIRECT)
    with pytest.raises(BuildError, match=r"pdl needs triton >= 3\.4.*lacks .*gdc_wait"):
        backend.build(backend.lower(program, PROBLEM), Target(), tmp_path)


def test_a_compile_that_drops_launch_pdl_is_a_build_error():
    triton = pytest.importorskip("triton")
    kernel = make_plan(parse(DIRECT), PROBLEM).kernels[0]
    dropped = types.SimpleNamespace(metadata=types.SimpleNamespace(launch_pdl=False))
    with pytest.raises(BuildError, match="without launch_pdl in its metadata"):
        toolchain._check_launch_pdl(triton, kernel, dropped)


def test_the_installed_triton_supports_pdl():
    pytest.importorskip("triton")
    assert toolchain.pdl_missing() is None


# ---- real compiles for sm_90, no GPU -----------------------------------------------------

@pytest.mark.parametrize("text", [DIRECT, PROGRAMS[3]], ids=["direct", "k3a-persistent-tma"])
def test_compiled_kernels_carry_launch_pdl_and_wait_before_global_memory(tmp_path, text):
    pytest.importorskip("triton")
    backend = registry.get("triton")
    for program, pdl in ((text, True), (plain(text), False)):
        out = tmp_path / str(pdl)
        out.mkdir()
        artifact = backend.build(backend.lower(verify(parse(program), PROBLEM), PROBLEM),
                                 Target(), out)
        for record in artifact.meta["kernels"]:
            assert record["launch_pdl"] is pdl, record["name"]
            ptx = (out / record["ptx"]).read_text()
            body = ptx[ptx.index(".entry"):]
            if not pdl:
                assert "griddepcontrol" not in body
                continue
            first = GLOBAL_ACCESS.search(body)
            assert first, record["name"]
            wait = body.index("griddepcontrol.wait")
            assert wait < body.index("griddepcontrol.launch_dependents") < first.start()
