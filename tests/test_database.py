"""search.database: the best program per (device, problem) with its command, the nearest
tuned shape for an untuned one (log-space distance) and its legality, and lookup()."""
from __future__ import annotations

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.search.database import TunedDatabase, distance, lookup
from gemmforge.search.records import Result

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


def test_nearest_uses_log_distance_and_reports_legality(db):
    near, far = Problem(1024, 1024, 1024), Problem(64, 64, 8192)
    db.record("H200", near, _result(MMA, near, 8.0))
    db.record("H200", far, _result(TMA, far, 8.0))
    found = db.nearest(Problem(1000, 1200, 900), Arch.SM90A)
    assert found.entry.problem == near and found.legal
    assert found.distance == pytest.approx(distance(Problem(1000, 1200, 900), near))
    ragged = Problem(80, 80, 8000 + 3)  # k not a multiple of 8: TMA is illegal there
    assert db.nearest(ragged, Arch.SM90A).entry.problem == far
    assert not db.nearest(ragged, Arch.SM90A).legal
    assert db.nearest(ragged, Arch.SM90A, legal_only=True).entry.problem == near
    assert db.nearest(near, Arch.SM80) is None
    assert db.nearest(Problem(1024, 1024, 1024, "nt"), Arch.SM90A) is None


def test_lookup(db, tmp_path):
    p = Problem(2048, 512, 256)
    db.record("H200", p, _result(MMA, p, 5.0))
    assert lookup(p, Arch.SM90A, url=db.url) == parse(MMA)
    assert lookup(Problem(2000, 500, 250), Arch.SM90A, url=db.url) == parse(MMA)
    assert lookup(p, Arch.SM80, url=db.url) is None
    assert lookup(p, Arch.SM90A, url=f"sqlite:///{tmp_path / 'missing.db'}") is None
    assert not (tmp_path / "missing.db").exists()
