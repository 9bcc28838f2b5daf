"""The pipeline: named stages, GEMMFORGE_DUMP, a content-keyed atomic cache, and build
errors that carry the command reproducing them."""
import stat

import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import BuildError, Target
from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.ir import Problem, VerifyError, parse

P = parse("cuda_simt sm_80 32x32x32 w1x1 s2 swnone row/1 pred k1 dp c1x1 nows direct")


@pytest.mark.nvcc
def test_cache_hit_skips_the_build(tmp_path, monkeypatch):
    cache = ArtifactCache(tmp_path / "cache")
    first = pipeline.compile(P, Problem(64, 64, 64), Target(90), cache)
    assert first.path.exists() and first.key

    def no_rebuild(*args):
        raise AssertionError("built again despite a cached artifact")
    monkeypatch.setattr(type(registry.get(P.backend)), "build", no_rebuild)
    second = pipeline.compile(P, Problem(64, 64, 64), Target(90), cache)
    assert second == first
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".build-")]


@pytest.mark.nvcc
def test_key_depends_on_layout_acc_and_target(tmp_path):
    cache = ArtifactCache(tmp_path)
    keys = {pipeline.compile(P, Problem(64, 64, 64, lay, acc), Target(t), cache).key
            for lay in ("nn", "nt") for acc in ("f32", "f16") for t in (80, 90)}
    assert len(keys) == 8


def test_dump_writes_each_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_DUMP", str(tmp_path / "dump"))
    backend = pipeline.verify_stage(P, Problem(17, 33, 65))
    pipeline.lower_stage(backend, P, Problem(17, 33, 65))
    folder = tmp_path / "dump" / P.name
    assert "A.gmem --gmem_to_smem--> A.smem[0]" in (folder / "verify.txt").read_text()
    assert (folder / f"lower.{P.name}.cu").read_text().startswith("// gemmforge kernel")


def test_illegal_program_stops_at_verify(tmp_path):
    with pytest.raises(VerifyError, match="cluster"):
        pipeline.compile(P.replace(cluster=P.cluster.__class__(2, 1)), Problem(8, 8, 8),
                         Target(90), ArtifactCache(tmp_path))


def _fake_nvcc(tmp_path, body):
    script = tmp_path / "nvcc"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_failing_nvcc_reports_source_and_reproduce_command(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_NVCC", _fake_nvcc(tmp_path, "echo 'error: boom' >&2; exit 1"))
    with pytest.raises(BuildError) as e:
        pipeline.compile(P, Problem(64, 64, 64), Target(90), ArtifactCache(tmp_path / "c"))
    msg = str(e.value)
    assert "nvcc failed with exit code 1" in msg and "error: boom" in msg
    assert f"reproduce: {tmp_path / 'nvcc'} -O3" in msg and f"{P.name}.cu" in msg
    assert "source: " in msg
    assert not list((tmp_path / "c").rglob("artifact.json"))  # nothing half-written cached


def test_missing_nvcc_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_NVCC", str(tmp_path / "no-nvcc-here"))
    with pytest.raises(BuildError, match="nvcc not found .* set GEMMFORGE_NVCC"):
        pipeline.compile(P, Problem(64, 64, 64), Target(90), ArtifactCache(tmp_path / "c"))


def test_hanging_nvcc_times_out(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMFORGE_NVCC", _fake_nvcc(tmp_path, "sleep 30"))
    monkeypatch.setenv("GEMMFORGE_BUILD_TIMEOUT", "1")
    with pytest.raises(BuildError, match="longer than 1 s"):
        pipeline.compile(P, Problem(64, 64, 64), Target(90), ArtifactCache(tmp_path / "c"))


def test_damaged_cache_entry_counts_as_missing(tmp_path):
    cache = ArtifactCache(tmp_path)
    d = tmp_path / "ab" / "abcdef"
    d.mkdir(parents=True)
    (d / "artifact.json").write_text("{ truncated")
    assert cache.get("abcdef") is None
