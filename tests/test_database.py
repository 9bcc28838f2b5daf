"""search.tune.database: the best program per (device, problem) with its command; the candidates
dispatch.choice reads (by device class, layout and arch) and tuned_candidates()."""
from __future__ import annotations

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.dispatch.tuned import tuned_candidates
from gemmforge.search.tune.database import TunedDatabase
from gemmforge.search.measure.records import Result

MMA = "cuda_mma sm_90a 128x128x32 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"
SMALL = "cuda_mma sm_90a 64x64x32 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"
TMA = "triton sm_90a 128x128x64 w2x2 s3 swnone row/8 pred k1 dp c1x1 nows tma"


def _result(program: str, p: Problem, kernel_us: float, cublas_us: float = 10.0) -> Result:
    return Result(program, p.m, p.n, p.k, str(p.layout), str(p.acc), kernel_us=kernel_us,
                  cublas_us=cublas_us, call_us=30.0, cublas_call_us=33.0, device="H200")


@pytest.fixture
def db(tmp_path):
    database = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    yield database
    database.close()


def test_keeps_the_best_with_its_command(db):
    p = Problem(1024, 1024, 1024)
    assert db.record("H200", p, _result(MMA, p, 12.0), "gemmforge tune --shapes a")
    assert db.record("H200", p, _result(SMALL, p, 8.0), "gemmforge tune --shapes b")
    assert not db.record("H200", p, _result(MMA, p, 9.0), "gemmforge tune --shapes c")
    assert not db.record("H200", p, Result(MMA, 1024, 1024, 1024, status="failed",
                                           kind="wrong"))
    best = db.best("H200", p)
    assert best.program == parse(SMALL) and best.speedup == pytest.approx(10 / 8)
    assert best.command == "gemmforge tune --shapes b" and best.call_speedup == pytest.approx(1.1)
    assert db.best("H100", p) is None and len(db.entries()) == 1


def test_candidates_by_class_layout_and_arch(db):
    near, far = Problem(1024, 1024, 1024), Problem(64, 64, 8192)
    db.record("H200", near, _result(MMA, near, 8.0))
    db.record("H200", far, _result(TMA, far, 8.0))
    db.record("replay", near, _result(SMALL, near, 1.0))
    found = db.candidates(Problem(1000, 1200, 904), Arch.SM90A, ("h200",))
    assert sorted((e.problem.m, cls) for e, cls in found) == [(64, "h200"), (1024, "h200")]
    assert db.candidates(near, Arch.SM90A, ("h100",)) == []
    assert db.candidates(near, Arch.SM80, ("h200",)) == []
    assert db.candidates(Problem(1024, 1024, 1024, "nt"), Arch.SM90A, ("h200",)) == []


def test_tuned_candidates(db, tmp_path):
    p = Problem(2048, 512, 256)
    db.record("H200", p, _result(MMA, p, 5.0))
    assert [e.program for e, _ in tuned_candidates(p, Arch.SM90A, ("h200",), db.url)] == [parse(MMA)]
    assert tuned_candidates(p, Arch.SM80, ("h200",), db.url) == []
    assert tuned_candidates(p, Arch.SM90A, ("h200",), f"sqlite:///{tmp_path / 'missing.db'}") == []
    assert not (tmp_path / "missing.db").exists()
