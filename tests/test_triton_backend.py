"""The triton backend on a machine with no GPU: verify's verdicts match the declared
capabilities; lowering renders every layout and accumulator; the rendered kernels compute
the right GEMM under Triton's interpreter (ragged shapes, split-K both ways, persistent
loops, grouped rasters, TMA descriptors); and real ahead-of-time compiles for sm_80 and
sm_90a hold mma.sync, wgmma and TMA copies (cp.async.bulk.tensor) where promised."""
import ast
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import BuildError, Target
from gemmforge.backends.triton import toolchain
from gemmforge.backends.triton.plan import KernelPlan, LaunchPlan, aligned_params, make_plan
from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.compiler.runtime import _LOADERS
from gemmforge.ir import Problem, VerifyError, check, parse, verify

try:
    import triton  # noqa: F401
    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton is not importable: "
                                  "pip install 'gemmforge[triton]' for the compile tests")

SM80 = "triton sm_80 128x128x32 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows direct"
SM90 = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows direct"
SM90_TMA = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 persistent c1x1 nows tma"
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]


@pytest.fixture(scope="module")
def backend():
    return registry.get("triton")


@pytest.mark.parametrize("text", [
    SM80, SM90, SM90_TMA,
    "triton sm_80 64x64x32 w1x1 s2 swnone col/4 pred k4a persistent c1x1 nows direct",
    "triton sm_80 32x256x64 w2x4 s3 swnone row/1 pred k16 dp c1x1 nows direct",
    "triton sm_90a 64x256x64 w4x1 s4 swnone row/8 pred k2 dp c1x1 nows tma",
])
def test_accepts_declared_programs(text):
    assert check(parse(text), Problem(4096, 4096, 4096)) is None


@pytest.mark.parametrize("text, problem, message", [
    (SM80.replace("swnone", "sw128"), None, "swizzle: triton ignores this field"),
    (SM80.replace("pred", "padop"), None, "padding: triton ignores this field"),
    (SM80.replace(" dp ", " streamk "), None, "schedule: triton accepts dp, persistent"),
    (SM90.replace("c1x1", "c2x1"), None, "cluster: triton ignores this field"),
    (SM90.replace("nows", "coop"), None, "warp_spec: triton ignores this field"),
    (SM80.replace("direct", "smem"), None, "epilogue: triton accepts direct, tma"),
    (SM80.replace("direct", "tma"), None, "epilogue: the TMA store epilogue need sm_90a"),
    (SM90.replace("128x128x64 w2x2", "64x64x64 w1x2"), None,
     "warps: sm_90a needs whole warpgroups"),
    (SM90.replace("128x128x64", "32x128x64"), None, "tile.bm: sm_90a needs a multiple of 64"),
    (SM90_TMA.replace("128x128x64 w2x2", "64x512x16 w2x4"), None,
     "tile: epilogue tma needs bm and bn at most 256"),
    (SM90_TMA, Problem(1000, 4096, 333), "epilogue: tma needs n and k multiples of 8"),
    (SM90_TMA, Problem(17, 33, 64), "epilogue: tma needs n and k multiples of 8"),
    (SM80.replace("128x128x32", "128x128x8"), None, "tile.bk: 8 is not a multiple"),
])
def test_declines_with_reason(text, problem, message):
    with pytest.raises(VerifyError, match=message):
        verify(parse(text), problem)


@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("text", [SM80, SM90_TMA, SM80.replace("k1", "k3a"),
                                  SM90_TMA.replace("k1", "k4")])
def test_lowered_source_is_python_and_says_what_the_program_says(backend, text, layout, acc):
    p, problem = parse(text), Problem(256, 256, 256, layout, acc)
    src = backend.lower(p, problem)
    assert src.language == "triton" and src.entry == "kernel.py"
    assert list(src.files) == ["kernel.py"]
    tree = ast.parse(src.text)
    functions = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    plan = make_plan(p, problem)
    assert {k.name for k in plan.kernels} <= functions
    assert f"program: {p}" in src.text
    assert ("out_dtype=tl.float16" in src.text) == (acc == "f16")
    assert ("tl.trans(" in src.text) == (layout == "nt")
    assert ("a_desc.load(" in src.text) == (p.epilogue.value == "tma")
    assert ("tl.atomic_add(" in src.text) == (p.split_k.reduction.value == "atomic")
    assert ("for unit in tl.range(" in src.text) == (p.schedule.value == "persistent")
    assert backend.lower(p, problem).files == src.files


def test_plan_launches_and_workspace(backend):
    m, n, k = 1000, 4096, 333
    atomic = make_plan(parse(SM80.replace("k1", "k4a")), Problem(m, n, k))
    assert [kp.role for kp in atomic.kernels] == ["zero", "gemm", "reduce"]
    assert atomic.workspace_bytes(m, n, k) == m * n * 4
    partials = make_plan(parse(SM80.replace("k1", "k4")), Problem(m, n, k))
    assert [kp.role for kp in partials.kernels] == ["gemm", "reduce"]
    assert partials.workspace_bytes(m, n, k) == 4 * m * n * 4
    gemm = partials.kernels[0]
    assert gemm.num_warps == 4 and gemm.num_stages == 3
    assert partials.grid(gemm, m, n, 132) == math.ceil(m / 128) * math.ceil(n / 128) * 4
    persistent = make_plan(parse(SM90), Problem(m, n, k))
    assert persistent.grid(persistent.kernels[0], m, n, 132) == 132
    assert persistent.workspace_bytes(m, n, k) == 0
    tma = make_plan(parse(SM90_TMA), Problem(256, 256, 256, "nt"))
    assert tma.kernels[0].signature["b_desc"] == "tensordesc<fp16[128, 64]>"
    assert tma.descriptors["b_desc"]["dims"] == ["N", "K"]


def test_plan_json_keeps_the_launch_order():
    """Regression: the artifact cache writes JSON with sorted keys; a signature stored as
    an object came back alphabetical, and the launcher then passed K, M, N where the
    kernel took its pointers (all-NaN output and misaligned addresses on every cache hit)."""
    for text in (SM80.replace("k1", "k4"), SM80.replace("k1", "k3a"), SM90_TMA):
        plan = make_plan(parse(text), Problem(256, 256, 256, "nt"))
        again = LaunchPlan.from_json(json.loads(json.dumps(plan.as_json(), sort_keys=True)))
        assert again == plan
        for before, after in zip(plan.kernels, again.kernels):
            assert list(after.signature.items()) == list(before.signature.items())
    legacy = plan.as_json()["kernels"][0]
    legacy["signature"] = dict(legacy["signature"])
    with pytest.raises(ValueError, match="list of \\[name, type\\] pairs"):
        KernelPlan.from_json(legacy)


@needs_triton
def test_compile_refuses_a_plan_out_of_the_kernels_parameter_order(tmp_path):
    program, problem = parse(SM80), Problem(64, 64, 64)
    (tmp_path / "kernel.py").write_text(registry.get("triton").lower(program, problem).text)
    module = toolchain.load_module(tmp_path / "kernel.py")
    gemm = make_plan(program, problem).kernels[0]
    shuffled = dataclasses.replace(gemm, signature=dict(sorted(gemm.signature.items())))
    with pytest.raises(BuildError, match="must match in order"):
        toolchain.compile_kernel(module, shuffled, 80, {}, ())


def test_capability_rule():
    from gemmforge.ir.program import Arch
    assert toolchain.capability_for(Arch.SM80, None) == (80, {})
    assert toolchain.capability_for(Arch.SM80, 90) == (90, {"DISABLE_MMA_V3": "1"})
    assert toolchain.capability_for(Arch.SM90A, None) == (90, {})
    with pytest.raises(BuildError, match="can't run on a device of compute capability 80"):
        toolchain.capability_for(Arch.SM90A, 80)
    assert aligned_params(1000, 4096, 333) == ("N", "NUMEL")


def test_loader_is_registered():
    registry.names()
    assert "triton" in _LOADERS


# ---- the kernels' arithmetic, on the CPU, under Triton's interpreter ----------------------

INTERPRETED = [
    ("triton sm_80 32x32x16 w1x1 s2 swnone row/1 pred k1 dp c1x1 nows direct", (17, 33, 65)),
    ("triton sm_80 32x32x16 w1x1 s2 swnone row/3 pred k3 persistent c1x1 nows direct",
     (100, 120, 70)),
    ("triton sm_80 32x32x16 w1x1 s2 swnone col/2 pred k4a dp c1x1 nows direct", (70, 90, 100)),
    ("triton sm_80 16x16x16 w1x1 s2 swnone row/1 pred k8 dp c1x1 nows direct", (1, 1, 1)),
    ("triton sm_90a 64x32x16 w2x2 s2 swnone row/2 pred k1 persistent c1x1 nows tma", (70, 96, 80)),
    ("triton sm_90a 64x32x16 w2x2 s2 swnone col/2 pred k8 dp c1x1 nows tma", (70, 96, 40)),
    # the fused bias: in the store, the reduce kernel (both reductions), the last slice, TMA
    ("triton sm_80 32x32x16 w1x1 s2 swnone row/1 pred k1 dp c1x1 nows direct bias", (17, 33, 65)),
    ("triton sm_80 32x32x16 w1x1 s2 swnone row/3 pred k3 persistent c1x1 nows direct bias",
     (100, 120, 70)),
    ("triton sm_80 32x32x16 w1x1 s2 swnone col/2 pred k4a dp c1x1 nows direct swap bias",
     (70, 90, 100)),
    ("triton sm_80 16x32x16 w1x1 s2 swnone row/1 pred k3i dp c1x1 nows direct swap bias",
     (40, 50, 100)),
    ("triton sm_90a 64x32x16 w2x2 s2 swnone row/2 pred k1 persistent c1x1 nows tma bias",
     (70, 96, 80)),
]


INTERPRETED_KINDS = [("nn", "f32"), ("nt", "f16")]


def interpret(text, problem, folder, num_sms=3, repeats=1):
    """Run the rendered kernel.py through the plan, as the runtime would, on CPU tensors,
    `repeats` times (C unwritten again before each); returns the worst relative Frobenius
    error against fp32 (NaN if any output was unwritten). In-kernel split-K's counters
    start zeroed once, and must be zero again after every run."""
    import torch
    from gemmforge.backends.triton.descriptors import make_descriptors
    program, (m, n, k) = verify(parse(text), problem), (problem.m, problem.n, problem.k)
    (folder / "kernel.py").write_text(registry.get("triton").lower(program, problem).text)
    module, plan = toolchain.load_module(folder / "kernel.py"), make_plan(program, problem)
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen).half(), torch.randn(k, n, generator=gen).half()
    b_arg = b if problem.layout.value == "nn" else b.t().contiguous()
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    ws = torch.full((max(plan.workspace_bytes(m, n, k) // 4, 1),), float("nan"))  # not zeroed
    counters = torch.zeros(max(plan.counter_bytes(m, n) // 4, 1), dtype=torch.int32)
    bias = torch.randn(n, generator=gen).half()  # read where the program has the field
    values = {"a_ptr": a, "b_ptr": b_arg, "c_ptr": c, "ws_ptr": ws, "cnt_ptr": counters,
              "bias_ptr": bias, "M": m, "N": n, "K": k, "NUMEL": m * n}
    if plan.descriptors:
        values.update(make_descriptors(plan, values, {"a_desc": a, "b_desc": b_arg, "c_desc": c}))
    ref, worst = a.float() @ b.float() + (bias.float() if program.bias else 0.0), 0.0
    for _ in range(repeats):
        c.fill_(float("nan"))
        for kernel in plan.kernels:
            values["NUM_PROGRAMS"] = grid = plan.grid(kernel, m, n, num_sms)
            getattr(module, kernel.name)[(grid,)](*kernel.args(values))
        assert not counters.any(), f"{text}: counters left at {counters.tolist()}"
        err = ((c.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        worst = err if math.isnan(err) else max(worst, err)
    return worst


def interpret_all(out: str) -> None:
    """Subprocess entry (TRITON_INTERPRET=1 must be set before triton is imported)."""
    results = {}
    for i, (text, shape) in enumerate(INTERPRETED):
        for layout, acc in INTERPRETED_KINDS:
            folder = Path(out) / f"{i}-{layout}-{acc}"
            folder.mkdir()
            results[f"{i}-{layout}-{acc}"] = interpret(text, Problem(*shape, layout, acc), folder)
    (Path(out) / "results.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("interpreted")
    code = f"from test_triton_backend import interpret_all; interpret_all({str(out)!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent,
                          capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "results.json").read_text())


@needs_triton
@pytest.mark.parametrize("layout, acc", INTERPRETED_KINDS)
@pytest.mark.parametrize("case", range(len(INTERPRETED)), ids=[
    "-".join([*(t.split()[i] for i in (1, 2, 8, 9)), *t.split()[12:]]) for t, _ in INTERPRETED])
def test_interpreted_kernel_matches_reference(interpreted, case, layout, acc):
    err = interpreted[f"{case}-{layout}-{acc}"]
    assert not math.isnan(err), "unwritten (NaN) outputs"
    assert err < 5e-3, f"relative error {err:.2e}"


# ---- real ahead-of-time compiles, no GPU -----------------------------------------------

def build(backend, text, problem, tmp_path, target=Target()):
    program = verify(parse(text), problem)
    artifact = backend.build(backend.lower(program, problem), target, tmp_path)
    ptx = "".join((tmp_path / k["ptx"]).read_text() for k in artifact.meta["kernels"])
    return artifact, ptx


@needs_triton
@pytest.mark.parametrize("text, problem, target, present, absent", [
    (SM80, Problem(1000, 4096, 333, "nn"), Target(), ["mma.sync.aligned"], ["wgmma"]),
    (SM80.replace("k1", "k3a"), Problem(256, 256, 256, "nt", "f16"), Target(90),
     ["mma.sync.aligned", "red.global"], ["wgmma"]),
    (SM90, Problem(1000, 4096, 333, "nt"), Target(90), ["wgmma.mma_async"], ["mma.sync"]),
    (SM90_TMA, Problem(256, 256, 256, "nn", "f16"), Target(),
     ["wgmma.mma_async", "cp.async.bulk.tensor"], ["mma.sync"]),
], ids=["sm80", "sm80-on-sm90-atomic", "sm90a-wgmma", "sm90a-tma"])
def test_aot_compile_holds_the_instructions(backend, tmp_path, text, problem, target,
                                            present, absent):
    artifact, ptx = build(backend, text, problem, tmp_path, target)
    for needle in present:
        assert needle in ptx
    for needle in absent:
        assert needle not in ptx
    assert artifact.kind == "triton" and artifact.path.exists()
    record = json.loads(artifact.path.read_text())
    assert record["triton_version"] == toolchain.version()
    for kernel in record["kernels"]:
        assert (tmp_path / kernel["cubin"]).stat().st_size > 0
        assert kernel["num_warps"] in (4, make_plan(parse(text), problem).kernels[0].num_warps)


@needs_triton
def test_pipeline_builds_once_then_hits_the_cache(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    program, problem = parse(SM80), Problem(64, 64, 64, "nt", "f16")
    first = pipeline.compile(program, problem, Target(80), cache)
    assert first.kind == "triton" and first.path.exists()
    assert (first.path.parent / "kernel.py").exists()
    again = pipeline.compile(program, problem, Target(80), cache)
    assert again.key == first.key and again.path == first.path
    assert json.loads(json.dumps(first.meta)) == again.meta
    module = toolchain.load_module(again.path.with_name(again.meta["entry"]))
    for kernel in LaunchPlan.from_json(again.meta["plan"]).kernels:
        assert list(kernel.signature) == getattr(module, kernel.name).arg_names
