"""Two `gemmforge tune` commands started together on one storage (SQLite, and PostgreSQL
where a server can be started) both finish, spend the budget exactly between them, measure
no program twice, and each reports the count the storage holds."""
import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from test_postgres import postgres_url  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ("64x64x64", "96x64x128")
BUDGET = 20


def _start(url: str, seed: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "gemmforge", "tune", "--shapes", ",".join(SHAPES),
            "--replay", "synthetic", "--storage", url, "--budget", str(BUDGET), "--batch", "4",
            "--backends", "cuda_mma,cuda_simt", "--seed", str(seed), "--quiet", "--report", ""]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _two_tunes(url: str) -> None:
    """Run the two tunes; check the storage (budget exact, nothing measured twice, both
    finished) and that each summary counts every shape's whole budget: a worker whose
    last asks were surplus (the other's candidates filled the budget) waits for those
    candidates before it reports."""
    procs = [_start(url, seed) for seed in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
        assert "Traceback" not in err
    this_run = [int(re.search(r"^(\d+) candidates measured this run", out, re.M).group(1))
                for out, _ in outs]
    assert sum(this_run) == BUDGET * len(SHAPES), outs  # each counted its own, none twice
    for out, _ in outs:
        for shape in SHAPES:
            row = next(line for line in out.splitlines() if line.startswith(shape))
            assert re.search(rf"\b{BUDGET}/{BUDGET}\b", row), \
                f"a summary counted fewer trials than the storage holds: {row}"
    storage = optuna.storages.RDBStorage(url)
    names = optuna.study.get_all_study_names(storage)
    assert len(names) == len(SHAPES)
    for name in names:
        trials = optuna.load_study(study_name=name, storage=storage).trials
        measured = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
                    and t.user_attrs.get("measured")]
        assert len(measured) == BUDGET, name
        programs = [t.user_attrs["program"] for t in measured]
        assert len(set(programs)) == len(programs), "a program was measured twice"
        assert optuna.trial.TrialState.RUNNING not in {t.state for t in trials}


def test_two_tunes_on_one_sqlite_file(tmp_path):
    _two_tunes(f"sqlite:///{tmp_path}/shared.db")


def test_two_tunes_on_one_postgresql_database(postgres_url):  # noqa: F811
    _two_tunes(postgres_url)
