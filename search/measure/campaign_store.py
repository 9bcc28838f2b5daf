"""The grid campaign's state: one SQLite file that travels between machines and runs.

    store = CampaignStore("campaign.db")
    store.plan(problem, "portfolio", programs)             # what a pass will measure
    store.pending(problem, "portfolio")                     # planned, not yet measured
    store.record(problem, "portfolio", results)             # one transaction per call

Tables (sqlite3 from the standard library; the search pass's optuna studies live in the
same file, in optuna's own tables):
  meta(key, value) ............ the device, the settings, throughput counters (JSON values);
  programs(id, text) .......... each program's canonical text once (the rows name its id);
  plan(problem, pass, program)  what a pass measures at a shape (INSERT OR IGNORE: planning
                                again adds only what is new);
  measurements ................ one row per (problem, pass, round, program): the Result as
                                JSON (less what the row's problem and program say), its
                                status and its speedup (NULL unless ok and plausible);
                                UNIQUE, so a measurement is recorded once, never replaced;
  done(problem, pass, round) .. a pass finished at a shape (search, confirm rounds).
Every write is one transaction, committed before the call returns: a process killed at any
moment leaves whole measurements or none. A measurement in flight at the kill is not in the
file and is measured on resume; a recorded one is never measured again.
"""
from __future__ import annotations

import fcntl
import json
import sqlite3
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from ...ir.program import Problem
from .records import Result

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS programs (id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS plan (
    problem TEXT NOT NULL, pass TEXT NOT NULL, program INTEGER NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (problem, pass, program));
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT, problem TEXT NOT NULL, pass TEXT NOT NULL,
    round INTEGER NOT NULL DEFAULT 0, program INTEGER NOT NULL, status TEXT NOT NULL,
    speedup REAL, result TEXT NOT NULL, at REAL NOT NULL,
    UNIQUE (problem, pass, round, program));
CREATE TABLE IF NOT EXISTS done (
    problem TEXT NOT NULL, pass TEXT NOT NULL, round INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT '', at REAL NOT NULL, PRIMARY KEY (problem, pass, round));
"""
SQLITE_TIMEOUT_S = 60
RECONFIRM_KEY = "reconfirm"  # meta: {reason: {problem: its first current confirm round}}


class CampaignStore:
    """The campaign's SQLite file at `path` (created with its tables if missing)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=SQLITE_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a commit survives a killed process
        self._db.executescript(SCHEMA)
        self._ids: dict[str, int] = {}
        self._current: dict[str, int] | None = None  # current_from's marks, read once

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the same file (optuna's studies go there)."""
        return f"sqlite:///{self.path.resolve()}"

    @contextmanager
    def lock(self):
        """Hold an exclusive lock on <file>.lock for a run (the kernel drops it if the
        process dies): two campaigns never write one store at once."""
        with open(f"{self.path}.lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(f"another campaign is running on {self.path}") from None
            try:
                yield self
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def close(self) -> None:
        """Fold the write-ahead log into the file and close: the .db alone then carries
        everything (while a run is going, or after a kill, carry the -wal file too)."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass  # another connection still reading: the log stays, nothing is lost
        self._db.close()

    def _write(self, statements: Iterable[tuple[str, tuple]]) -> None:
        """Run `statements` as one transaction."""
        with self._db:  # commits, or rolls back on an exception
            self._db.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                self._db.execute(sql, args)

    # meta ------------------------------------------------------------------------------
    def get(self, key: str, default=None):
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def put(self, key: str, value) -> None:
        self._write([("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))])

    def add_time(self, name: str, candidates: int, seconds: float) -> None:
        """Add to the throughput counter `name`: [candidates, seconds]."""
        count, total = self.get(f"rate:{name}", [0, 0.0])
        self.put(f"rate:{name}", [count + candidates, total + seconds])

    def seconds_per_candidate(self, name: str, default: float) -> float:
        count, total = self.get(f"rate:{name}", [0, 0.0])
        return total / count if count else default

    def _id(self, text: str) -> int:
        """The id of program `text` (added to the programs table if new)."""
        if text not in self._ids:
            self._db.execute("INSERT OR IGNORE INTO programs (text) VALUES (?)", (text,))
            self._ids[text] = self._db.execute("SELECT id FROM programs WHERE text = ?",
                                               (text,)).fetchone()[0]
        return self._ids[text]

    # plan ------------------------------------------------------------------------------
    def plan(self, problem: Problem, pass_name: str, programs: Sequence[str]) -> None:
        """Add `programs` to what `pass_name` measures at `problem` (kept in first-planned
        order; programs already planned stay where they are)."""
        key = str(problem)
        start = self._db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM plan WHERE problem = ? "
                                 "AND pass = ?", (key, pass_name)).fetchone()[0]
        ids = [self._id(p) for p in programs]
        self._write([("INSERT OR IGNORE INTO plan VALUES (?, ?, ?, ?)",
                      (key, pass_name, p, start + i)) for i, p in enumerate(ids)])

    def planned(self, problem: Problem, pass_name: str) -> list[str]:
        return [r[0] for r in self._db.execute(
            "SELECT g.text FROM plan p JOIN programs g ON g.id = p.program WHERE p.problem = ? "
            "AND p.pass = ? ORDER BY p.seq", (str(problem), pass_name))]

    def pending(self, problem: Problem, pass_name: str) -> list[str]:
        """Planned programs of the pass with no measurement yet, in plan order."""
        return [r[0] for r in self._db.execute(
            "SELECT g.text FROM plan p JOIN programs g ON g.id = p.program WHERE p.problem = ? "
            "AND p.pass = ? AND NOT EXISTS (SELECT 1 FROM measurements m WHERE m.problem = "
            "p.problem AND m.pass = p.pass AND m.program = p.program) ORDER BY p.seq",
            (str(problem), pass_name))]

    def count_pending(self, pass_name: str) -> int:
        return self._db.execute(
            "SELECT COUNT(*) FROM plan p WHERE p.pass = ? AND NOT EXISTS (SELECT 1 FROM "
            "measurements m WHERE m.problem = p.problem AND m.pass = p.pass AND m.program = "
            "p.program)", (pass_name,)).fetchone()[0]

    # measurements ----------------------------------------------------------------------
    def record(self, problem: Problem, pass_name: str, results: Sequence[Result],
               round_: int = 0, done: bool = False) -> int:
        """Store `results` (one transaction; with `done`, the round's done mark in the same
        one); a (problem, pass, round, program) already recorded is kept as it is. Returns
        how many rows were new."""
        before = self._db.total_changes
        now = time.time()
        statements = [("INSERT OR IGNORE INTO measurements (problem, pass, round, program, "
                       "status, speedup, result, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (str(problem), pass_name, round_, self._id(r.program), r.status,
                        _counted_speedup(r), _row_json(r), now)) for r in results]
        if done:
            statements.append(("INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?, ?)",
                               (str(problem), pass_name, round_, "", now)))
        self._write(statements)
        return self._db.total_changes - before - int(done)

    def results(self, problem: Problem | None = None, pass_name: str | None = None,
                round_: int | None = None) -> list[Result]:
        """Recorded Results (in the order recorded), filtered by what is given."""
        where, args = [], []
        for column, value in (("problem", None if problem is None else str(problem)),
                              ("pass", pass_name), ("round", round_)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = ("SELECT m.result, g.text, m.problem FROM measurements m JOIN programs g ON "
               "g.id = m.program" + (" WHERE " + " AND ".join(f"m.{w}" for w in where)
                                     if where else "") + " ORDER BY m.id")
        return [_from_row(*row) for row in self._db.execute(sql, args)]

    def rows(self) -> list[tuple[str, str, int, str]]:
        """(problem, pass, round, program) of every measurement, in the order recorded."""
        return list(self._db.execute(
            "SELECT m.problem, m.pass, m.round, g.text FROM measurements m JOIN programs g ON "
            "g.id = m.program ORDER BY m.id"))

    def count(self, pass_name: str | None = None) -> int:
        sql, args = "SELECT COUNT(*) FROM measurements", ()
        if pass_name is not None:
            sql, args = sql + " WHERE pass = ?", (pass_name,)
        return self._db.execute(sql, args).fetchone()[0]

    # done marks ------------------------------------------------------------------------
    def mark_done(self, problem: Problem, pass_name: str, round_: int = 0,
                  note: str = "") -> None:
        self._write([("INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?, ?)",
                      (str(problem), pass_name, round_, note, time.time()))])

    def is_done(self, problem: Problem, pass_name: str, round_: int | None = None) -> bool:
        sql = "SELECT 1 FROM done WHERE problem = ? AND pass = ?"
        args: tuple = (str(problem), pass_name)
        if round_ is not None:
            sql, args = sql + " AND round = ?", (*args, round_)
        return self._db.execute(sql, args).fetchone() is not None

    def mark_reconfirm(self, reason: str, problems: Sequence[Problem]) -> int:
        """Confirmation rounds so far at `problems` stop counting as current (a timing protocol
        changed; `reason` says how), kept under `reason`: marking a reason again changes
        nothing. Returns how many shapes it marked (0 when the reason was marked before)."""
        marks = self.get(RECONFIRM_KEY, {})
        if reason in marks:
            return 0
        marks[reason] = {str(p): (self.last_round(p, "confirm") or 0) + 1 for p in problems}
        self.put(RECONFIRM_KEY, marks)
        self._current = None
        return len(marks[reason])

    def current_from(self, problem: Problem) -> int:
        """The first confirmation round at `problem` measured the current way (1 where no
        mark_reconfirm covered the shape)."""
        if self._current is None:
            self._current = {}
            for marks in self.get(RECONFIRM_KEY, {}).values():
                for key, first in marks.items():
                    self._current[key] = max(first, self._current.get(key, 1))
        return self._current.get(str(problem), 1)

    def last_round(self, problem: Problem, pass_name: str) -> int | None:
        """The highest round of `pass_name` marked done at `problem`, or None."""
        row = self._db.execute("SELECT MAX(round) FROM done WHERE problem = ? AND pass = ?",
                               (str(problem), pass_name)).fetchone()
        return row[0]


def read_only_rows(path: Path | str, passes: Sequence[str] | None = None):
    """(problem text, pass, program text, status, speedup, result JSON) of every measurement
    of the store at `path` (of `passes` only, where given), in the order recorded. The file
    is opened read-only: a copy of a store, or one a campaign is writing, is never changed."""
    sql = ("SELECT m.problem, m.pass, p.text, m.status, m.speedup, m.result FROM measurements m "
           "JOIN programs p ON p.id = m.program")
    args: tuple = ()
    if passes is not None:
        sql, args = sql + f" WHERE m.pass IN ({','.join('?' * len(passes))})", tuple(passes)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield from con.execute(sql + " ORDER BY m.id", args)
    finally:
        con.close()


def _counted_speedup(r: Result) -> float | None:
    """The speedup column: the Result's speedup where it counts (ok and plausible)."""
    return r.speedup if r.ok and not r.implausible else None


def compact(r: Result) -> dict:
    """Result.to_dict() without its empty fields (Result.from_dict restores them): the
    file stays small enough to travel (about 400 bytes a measurement)."""
    return {k: v for k, v in r.to_dict().items() if v not in (None, "", [])}


ROW_FIELDS = ("program", "m", "n", "k", "layout", "acc")
"""Result fields a measurement row holds in its columns, not in its JSON."""


def _row_json(r: Result) -> str:
    data = {k: v for k, v in compact(r).items() if k not in ROW_FIELDS}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=4096)
def _problem_fields(text: str) -> dict:
    from ...ir.text import parse_problem
    p = parse_problem(text)
    return {"m": p.m, "n": p.n, "k": p.k, "layout": str(p.layout), "acc": str(p.acc)}


def _from_row(data: str, program: str, problem: str) -> Result:
    return Result.from_dict({**json.loads(data), "program": program,
                             **_problem_fields(problem)})
