"""The null backend: verify, lower, build, cache, load and the user call path, end to end,
with no nvcc and no GPU (the kernel computes on the host)."""
import json

import numpy as np
import pytest

from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.compiler.values import Target
from gemmforge.ir import Problem, VerifyError, parse

torch = pytest.importorskip("torch")

P = parse("null sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct")


def _operands(m, n, k, layout):
    a = torch.randn(m, k).half()
    b = torch.randn(k, n).half()
    return a, b, (b if layout == "nn" else b.t().contiguous())


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_compile_load_and_call_compute_the_product(null_backend, tmp_path, layout, acc):
    problem = Problem(33, 17, 65, layout, acc)
    kernel = pipeline.load(pipeline.compile(P, problem, Target(90), ArtifactCache(tmp_path)))
    a, b, b_arg = _operands(33, 17, 65, layout)
    out = kernel(a, b_arg)
    ref = (a.float() @ b.float()).numpy()
    assert out.shape == (33, 17) and out.dtype == torch.float16
    assert np.allclose(out.float().numpy(), ref, rtol=1e-2, atol=1e-2)


def test_the_cache_serves_the_second_compile(null_backend, tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path)
    first = pipeline.compile(P, Problem(64, 64, 64), Target(90), cache)

    def no_rebuild(*args):
        raise AssertionError("built again despite a cached artifact")
    monkeypatch.setattr(type(null_backend), "build", no_rebuild)
    assert pipeline.compile(P, Problem(64, 64, 64), Target(90), cache) == first
    assert json.loads(first.path.read_text())["program"] == str(P)


def test_keys_differ_by_layout_acc_and_target(null_backend, tmp_path):
    cache = ArtifactCache(tmp_path)
    keys = {pipeline.compile(P, Problem(64, 64, 64, lay, acc), Target(t), cache).key
            for lay in ("nn", "nt") for acc in ("f32", "f16") for t in (80, 90)}
    assert len(keys) == 8


def test_dump_writes_every_stage(null_backend, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_DUMP", str(tmp_path / "dump"))
    pipeline.compile(P, Problem(64, 64, 64), Target(90), ArtifactCache(tmp_path / "c"))
    names = {p.name.split(".")[0] for p in (tmp_path / "dump" / P.name).iterdir()}
    assert names == {"verify", "lower", "build"}


def test_verify_sees_it_only_while_registered(null_backend):
    assert "null" in pipeline.registry.names()
    null_backend_name = null_backend.name
    pipeline.registry.remove(null_backend_name)
    try:
        with pytest.raises(VerifyError, match="backend 'null' is not registered"):
            pipeline.compile(P, Problem(64, 64, 64))
    finally:
        pipeline.registry.add(null_backend)


def test_split_k_workspace_is_asked_for_and_handed_over(null_backend, tmp_path):
    program = P.replace(split_k=P.split_k.__class__(2))
    kernel = pipeline.load(pipeline.compile(program, Problem(16, 24, 64), Target(90),
                                            ArtifactCache(tmp_path)))
    assert kernel.workspace_bytes(16, 24, 64) == 2 * 16 * 24 * 4
    a, b, _ = _operands(16, 24, 64, "nn")
    out = kernel(a, b)
    assert np.allclose(out.float().numpy(), (a.float() @ b.float()).numpy(), rtol=1e-2, atol=1e-2)
    assert kernel._workspace[None][1] >= 2 * 16 * 24 * 4


def test_operands_on_the_wrong_device_are_refused(null_backend, tmp_path):
    kernel = pipeline.load(pipeline.compile(P, Problem(8, 8, 8), Target(90),
                                            ArtifactCache(tmp_path)))
    with pytest.raises(ValueError, match="float16 CPU tensor"):
        kernel(torch.randn(8, 8), torch.randn(8, 8).half())
