"""scripts/build_replay_data.py: benchmarks/results CSVs from git history and campaign stores'
readings merged into one row per (problem, device, program)."""
from __future__ import annotations

import gzip
import importlib.util
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from gemmforge.ir import parse
from gemmforge.search.measure.campaign_store import SCHEMA
from gemmforge.search.learn.replay_reward import read_measured

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_replay_data.py"
WGMMA = str(parse("cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 "
                  "coop tma"))
H100 = "NVIDIA H100 80GB HBM3"


def _script():
    spec = importlib.util.spec_from_file_location("build_replay_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _repo(path: Path) -> Path:
    """A git repository with one results CSV: one ok row, one failed row."""
    results = path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "a.csv").write_text(
        "m,n,k,device,program,status,kernel_us,cublas_us\n"
        f"64,64,64,{H100},{WGMMA},ok,10.0,12.0\n"
        f"64,64,64,{H100},{WGMMA.replace('s4', 's3')},failed,,12.0\n")
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "results"], check=True)
    return path


def _store(path: Path, rows) -> Path:
    """A campaign store of (problem, pass, round, program, status, speedup, kernel_us)."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    texts = sorted({r[3] for r in rows})
    con.executemany("INSERT INTO programs VALUES (?, ?)", list(enumerate(texts, 1)))
    con.executemany(
        "INSERT INTO measurements (problem, pass, round, program, status, speedup, result, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
        [(problem, pass_, round_, texts.index(text) + 1, status, speedup,
          json.dumps({"device": H100, "kernel_us": kernel, "cublas_us": kernel * 1.2,
                      "status": status}))
         for problem, pass_, round_, text, status, speedup, kernel in rows])
    con.commit()
    con.close()
    return path


def test_store_readings_of_every_pass_merge_with_the_csv_rows(tmp_path):
    repo = _repo(tmp_path / "repo")
    store = _store(tmp_path / "store.db", [
        ("64x64x64 nn f32", "portfolio", 0, WGMMA, "ok", 1.3, 9.0),
        ("64x64x64 nn f32", "confirm", 1, WGMMA, "ok", 1.1, 11.0),
        ("64x64x64 nn f32", "confirm", 2, WGMMA, "ok", None, 11.0),   # implausible: not counted
        ("128x64x64 nt f32", "search", 0, WGMMA, "ok", 0.9, 20.0),
        ("128x64x64 nt f32", "portfolio", 0, WGMMA.replace("s4", "s3"), "failed", None, 1.0),
    ])
    before = sqlite3.connect(store).execute("SELECT COUNT(*) FROM measurements").fetchone()
    out = tmp_path / "out.csv.gz"
    assert _script().build(repo, out, [store]) == 2
    rows = {(str(r.problem), r.program): r for r in read_measured(out)}
    here = rows[("64x64x64 nn f32", WGMMA)]
    assert here.count == 3 and here.speedup == pytest.approx(1.2)  # median of 1.2, 1.3, 1.1
    assert here.kernel_us == pytest.approx(10.0)
    nt = rows[("128x64x64 nt f32", WGMMA)]
    assert nt.count == 1 and nt.speedup == pytest.approx(0.9) and nt.cublas_us == pytest.approx(24)
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM measurements").fetchone() == before
    with gzip.open(out, "rt") as f:
        assert f.readline().startswith("m,n,k,layout,acc,device,program,speedup")


def test_without_stores_only_the_csv_rows_count(tmp_path):
    out = tmp_path / "out.csv.gz"
    assert _script().build(_repo(tmp_path / "repo"), out) == 1
    (row,) = read_measured(out)
    assert row.speedup == pytest.approx(1.2) and row.count == 1


def test_an_xz_file_as_the_package_keeps_it_reads_the_same_rows_and_is_reproducible(tmp_path):
    repo = _repo(tmp_path / "repo")
    gz, xz, again = tmp_path / "out.csv.gz", tmp_path / "out.csv.xz", tmp_path / "again.csv.xz"
    for out in (gz, xz, again):
        _script().build(repo, out)
    assert read_measured(xz) == read_measured(gz)
    assert xz.read_bytes() == again.read_bytes() and xz.read_bytes()[:6] == b"\xfd7zXZ\x00"
