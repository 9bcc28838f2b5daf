"""Several tuner worker processes on one set of studies in a real PostgreSQL server.

The server is started here, private to the test (its own data dir and port on 127.0.0.1,
trust auth), and stopped after. scripts/test.sh installs Debian's `postgresql` package where
it is missing (as root); without a server binary, or if it can't start, the test skips and
says why. Runs as the `postgres` user when the tests run as root (initdb refuses root).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import optuna
import pytest

from gemmforge.ir.program import Problem
from gemmforge.search.tune.tune_jobs import run_workers
from gemmforge.search.tune.database import TunedDatabase

USER = "gemmforge"


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                        key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0)
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], owner: str | None) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=120,
                   user=owner)


@pytest.fixture(scope="module")
def postgres_url():
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e .[search])")
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql; "
                    "scripts/test.sh does it as root)")
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres").pw_name
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server")
    root = Path(tempfile.mkdtemp(prefix="gemmforge-pg-"))
    os.chmod(root, 0o755)
    data, port = root / "data", _free_port()
    if owner:
        shutil.chown(root, owner)
    try:
        _run([initdb, "-D", str(data), "-U", USER, "-A", "trust", "--no-sync"], owner)
        _run([pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "-o",
              f"-F -p {port} -k {root} -c listen_addresses=127.0.0.1", "start"], owner)
    except (subprocess.SubprocessError, OSError) as e:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be started: {e} {getattr(e, 'stderr', '')} {log}")
    try:
        yield f"postgresql+psycopg://{USER}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True, timeout=120, user=owner)
        shutil.rmtree(root, ignore_errors=True)


def test_three_workers_share_the_studies(postgres_url):
    problems = [Problem(512, 2048, 1024), Problem(256, 256, 4096)]
    job = {"problems": [(p.m, p.n, p.k, "nn", "f32") for p in problems], "budget": 18,
           "batch": 3, "policy": "heuristic", "storage": postgres_url,
           "backends": ["cuda_mma"], "workers": 3, "seed": 0, "replay": "synthetic",
           "archs": ["sm_90a"], "delay_s": 0.02, "command": "pytest test_postgres"}
    outcomes = run_workers(job, progress=False)
    assert [o["measured"] for o in outcomes] == [18, 18]
    storage = optuna.storages.RDBStorage(postgres_url)
    for problem in problems:
        study = optuna.load_study(study_name=f"replay | {problem}", storage=storage)
        measured = [t for t in study.trials if t.user_attrs.get("measured")]
        assert len(measured) == 18
        assert len({t.user_attrs["program"] for t in measured}) == 18  # no program twice
    workers = {t.user_attrs["worker"] for problem in problems for t in optuna.load_study(
        study_name=f"replay | {problem}", storage=storage).trials if t.user_attrs.get("measured")}
    assert workers == {"0", "1", "2"}
    db = TunedDatabase(postgres_url)
    entries = db.entries("replay")
    assert {e.problem for e in entries} == set(problems)
    assert all(e.command == "pytest test_postgres" for e in entries)
    db.close()
