"""The resolver keyed by the operands' dtype: tuned entries stored and read per dtype (and a
table from before the dtype column migrated, its rows f16), a bf16 problem never served on
an f16 record's evidence (cuBLAS under the op's "unmeasured" rule; the heuristic's bf16-legal
program under matmul's), and a bf16 record serving its own problem."""
from __future__ import annotations

import json
import sqlite3

import pytest

pytest.importorskip("sqlalchemy")

from gemmforge.dispatch.choice import resolve  # noqa: E402
from gemmforge.dispatch.tuned import TunedTable  # noqa: E402
from gemmforge.ir import check, parse  # noqa: E402
from gemmforge.ir.program import Arch, DType, Problem  # noqa: E402
from gemmforge.search.measure.records import Result  # noqa: E402
from gemmforge.search.tune.database import TunedDatabase  # noqa: E402

WGMMA = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"
OTHER = WGMMA.replace("s4", "s3")
F16 = Problem(4096, 4096, 4096, "nt")
BF16 = Problem(4096, 4096, 4096, "nt", "f32", "bf16")


def _result(program: str, p: Problem, kernel_us: float, cublas_us: float = 210.0) -> Result:
    return Result(program, p.m, p.n, p.k, str(p.layout), str(p.acc), kernel_us=kernel_us,
                  cublas_us=cublas_us, device="NVIDIA H200")


@pytest.fixture
def db(tmp_path):
    database = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    yield database
    database.close()


@pytest.fixture
def no_shipped(tmp_path):
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps({"format": "gemmforge-shipped/1", "measurements": {}, "rows": []}))
    return path


def test_tuned_entries_are_keyed_by_dtype(db):
    assert db.record("NVIDIA H200", F16, _result(WGMMA, F16, 200.0))
    assert db.record("NVIDIA H200", BF16, _result(OTHER, BF16, 300.0))  # slower: its own row
    assert db.best("NVIDIA H200", F16).program == parse(WGMMA)
    best = db.best("NVIDIA H200", BF16)
    assert best.program == parse(OTHER) and best.problem == BF16
    found = db.candidates(BF16, Arch.SM90A, ("h200",))
    assert [(e.program, e.problem.dtype) for e, _ in found] == [(parse(OTHER), DType.BF16)]
    found = db.candidates(F16, Arch.SM90A, ("h200",))
    assert [(e.program, e.problem.dtype) for e, _ in found] == [(parse(WGMMA), DType.F16)]
    assert len(db.entries()) == 2


def test_a_table_from_before_the_dtype_column_is_migrated(tmp_path):
    """The column is added on open (ALTER TABLE); the old rows read as f16 and serve no
    bf16 problem."""
    path = tmp_path / "old.db"
    old = TunedDatabase(f"sqlite:///{path}")
    old.record("NVIDIA H200", F16, _result(WGMMA, F16, 200.0))
    old.close()
    with sqlite3.connect(path) as conn:  # the table as an earlier version made it
        conn.execute("ALTER TABLE gemmforge_tuned DROP COLUMN dtype")
    table = TunedTable(f"sqlite:///{path}")
    try:
        with sqlite3.connect(path) as conn:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(gemmforge_tuned)")}
        assert "dtype" in columns
        (entry, cls), = table.candidates(F16, Arch.SM90A, ("h200",))
        assert entry.problem == F16 and entry.program == parse(WGMMA) and cls == "h200"
        assert table.candidates(BF16, Arch.SM90A, ("h200",)) == []
    finally:
        table.close()


def test_an_f16_record_is_never_a_bf16_problems_evidence(db, no_shipped):
    """An f16 tuned record at the very shape (1.05x): the bf16 problem under the op's rule
    runs cuBLAS, under matmul's the heuristic's bf16-legal program with no measured ratio."""
    db.record("NVIDIA H200", F16, _result(WGMMA, F16, 200.0))
    args = dict(tuned_url=db.url, shipped_path=no_shipped)
    assert resolve(F16, Arch.SM90A, "h200", cublas="unmeasured", **args).provenance == "tuned-exact"
    choice = resolve(BF16, Arch.SM90A, "h200", cublas="unmeasured", **args)
    assert choice.cublas and "no program was measured at this shape" in choice.why
    for rule in ("learned", "waves", "nearest"):
        choice = resolve(BF16, Arch.SM90A, "h200", cublas="slower", rule=rule, **args)
        assert choice.provenance == "heuristic" and choice.ratio is None
        assert check(choice.program, BF16) is None


def test_a_bf16_record_serves_its_problem_with_its_own_ratio(db, no_shipped):
    db.record("NVIDIA H200", F16, _result(WGMMA, F16, 100.0))  # 2.1x in f16
    db.record("NVIDIA H200", BF16, _result(OTHER, BF16, 200.0))  # 1.05x in bf16
    choice = resolve(BF16, Arch.SM90A, "h200", cublas="unmeasured", tuned_url=db.url,
                     shipped_path=no_shipped)
    assert choice.provenance == "tuned-exact" and choice.program == parse(OTHER)
    assert choice.ratio == pytest.approx(210 / 200)
    db.record("NVIDIA H200", BF16, _result(OTHER, BF16, 250.0), replace=True)  # 0.84x: cuBLAS
    choice = resolve(BF16, Arch.SM90A, "h200", cublas="unmeasured", tuned_url=db.url,
                     shipped_path=no_shipped)
    assert choice.cublas and "reads 0.840x cuBLAS" in choice.why


def test_a_shipped_cublas_row_of_f16_leaves_bf16_alone(tmp_path):
    """cuBLAS won the f16 shape's confirmation: that says nothing of bf16 (the op's rule
    gives the unmeasured bf16 shape to cuBLAS for its own reason)."""
    path = tmp_path / "shipped.json"
    rows = [{"device_class": "h200", "layout": "nt", "acc": "f32", "m": 4096, "n": 4096,
             "k": 4096, "program": "cublas"},
            {"device_class": "h200", "layout": "nt", "acc": "f32", "dtype": "bf16", "m": 4096,
             "n": 4096, "k": 4096, "program": WGMMA, "kernel_us": 200.0, "speedup": 1.03}]
    path.write_text(json.dumps({"format": "gemmforge-shipped/1", "measurements": {}, "rows": rows}))
    f16 = resolve(F16, Arch.SM90A, "h200", cublas="unmeasured", shipped_path=path, use_tuned=False)
    assert f16.cublas and "won this shape's confirmation" in f16.why
    bf16 = resolve(BF16, Arch.SM90A, "h200", cublas="unmeasured", shipped_path=path,
                   use_tuned=False)
    assert bf16.provenance == "shipped-exact" and bf16.ratio == pytest.approx(1.03)
