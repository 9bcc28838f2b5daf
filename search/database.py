"""The tuned database: the best program per (device, problem), what it measured, and how.

    db = TunedDatabase()                       # SQLite in the user cache dir, or any URL
    db.record("NVIDIA H200", problem, result, command="gemmforge tune --shapes grid ...")
    db.best("NVIDIA H200", problem)            # -> Entry | None
    tuned_candidates(problem, Arch.SM90A, ("h200", "h100"))   # what search.choice reads

One table, `gemmforge_tuned` (SQLAlchemy Core), one row per (device, problem text), kept
only while it is the best measured (highest cuBLAS/kernel ratio). Rows carry the program's
canonical text and content key, the measured times (µs) and ratios, the command that
measured them and the study it came from. The default URL is the tuner's storage
(search.studies.default_storage()), so `--storage URL` shares both. Tuning decisions live
here; binaries live in the artifact cache (compiler.artifacts): they are stored apart.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gemmforge.ir.program import Arch, Problem, Program
from gemmforge.search.records import Result

TABLE = "gemmforge_tuned"


def _table(metadata):
    from sqlalchemy import (Column, DateTime, Float, Integer, String, Table, Text,
                            UniqueConstraint)
    return Table(
        TABLE, metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("device", String(200), nullable=False),
        Column("problem", String(100), nullable=False),
        Column("m", Integer, nullable=False), Column("n", Integer, nullable=False),
        Column("k", Integer, nullable=False), Column("layout", String(8), nullable=False),
        Column("acc", String(8), nullable=False), Column("arch", String(16), nullable=False),
        Column("backend", String(64), nullable=False), Column("program", Text, nullable=False),
        Column("key", String(32), nullable=False),
        Column("kernel_us", Float), Column("cublas_us", Float), Column("speedup", Float),
        Column("call_us", Float), Column("cublas_call_us", Float),
        Column("call_speedup", Float),
        Column("command", Text, nullable=False, default=""),
        Column("study", Text, nullable=False, default=""),
        Column("updated", DateTime, nullable=False),
        UniqueConstraint("device", "problem", name=f"{TABLE}_device_problem"),
    )


@dataclass(frozen=True)
class Entry:
    """One tuned row: times in µs; speedup is Result.speedup (the median per-round ratio
    where measured), call_speedup = cublas_call_us / call_us."""

    device: str
    problem: Problem
    program: Program
    kernel_us: float | None
    cublas_us: float | None
    speedup: float | None
    call_us: float | None
    cublas_call_us: float | None
    call_speedup: float | None
    command: str
    study: str
    updated: datetime


def _entry(row) -> Entry:
    from gemmforge.ir.text import parse
    problem = Problem(row.m, row.n, row.k, row.layout, row.acc)
    return Entry(row.device, problem, parse(row.program), row.kernel_us, row.cublas_us,
                 row.speedup, row.call_us, row.cublas_call_us, row.call_speedup, row.command,
                 row.study, row.updated)


class TunedDatabase:
    """The tuned table behind a SQLAlchemy URL (None: the default SQLite file). Safe for
    several processes: `record` is one transaction and retries a lost insert race."""

    def __init__(self, url: str | None = None):
        import sqlalchemy
        from gemmforge.search.studies import default_storage, engine_kwargs
        self.url = url or default_storage()
        self.engine = sqlalchemy.create_engine(self.url, **engine_kwargs(self.url))
        self.metadata = sqlalchemy.MetaData()
        self.table = _table(self.metadata)
        for attempt in range(5):  # workers starting together race to create the table
            try:
                self.metadata.create_all(self.engine, checkfirst=True)
                break
            except sqlalchemy.exc.DBAPIError:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def record(self, device: str, problem: Problem, result: Result, command: str = "",
               study: str = "", replace: bool = False) -> bool:
        """Keep `result` as the (device, problem) entry if it is ok and beats the stored
        one (by speedup), or, with `replace`, whatever is stored (a confirmation: the
        winner of a head-to-head measurement that included the stored program, see
        search.confirm); True if stored."""
        from sqlalchemy.exc import IntegrityError
        if not result.ok or result.speedup is None:
            return False
        for _ in range(3):
            try:
                return self._upsert(device, problem, result, command, study, replace)
            except IntegrityError:  # another process inserted the row first: compare again
                continue
        return False

    def _upsert(self, device, problem, result: Result, command: str, study: str,
                replace: bool = False) -> bool:
        from gemmforge.ir.text import parse
        program = parse(result.program)
        values = dict(device=device, problem=str(problem), m=problem.m, n=problem.n,
                      k=problem.k, layout=str(problem.layout), acc=str(problem.acc),
                      arch=program.arch.value, backend=program.backend, program=str(program),
                      key=program.key, kernel_us=result.kernel_us, cublas_us=result.cublas_us,
                      speedup=result.speedup, call_us=result.call_us,
                      cublas_call_us=result.cublas_call_us, call_speedup=result.call_speedup,
                      command=command, study=study, updated=datetime.now(timezone.utc))
        t = self.table
        where = (t.c.device == device) & (t.c.problem == str(problem))
        with self.engine.begin() as conn:
            old = conn.execute(t.select().where(where).with_for_update()).first()
            if old is None:
                conn.execute(t.insert().values(**values))
                return True
            if not replace and old.speedup is not None and old.speedup >= result.speedup:
                return False
            conn.execute(t.update().where(where).values(**values))
            return True

    def best(self, device: str, problem: Problem) -> Entry | None:
        t = self.table
        with self.engine.connect() as conn:
            row = conn.execute(t.select().where(
                (t.c.device == device) & (t.c.problem == str(problem)))).first()
        return _entry(row) if row else None

    def entries(self, device: str | None = None) -> list[Entry]:
        """Every entry (of `device`, if given), by device then FLOPs."""
        t = self.table
        query = t.select() if device is None else t.select().where(t.c.device == device)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return sorted((_entry(r) for r in rows),
                      key=lambda e: (e.device, e.problem.flops, str(e.problem)))

    def candidates(self, problem: Problem, arch: Arch,
                   classes: tuple[str, ...]) -> list[tuple[Entry, str]]:
        """(entry, its device class) for every entry with `problem`'s layout and
        accumulator, an `arch` program and a device of one of `classes` (search.devices:
        replayed and synthetic devices have none). Distance and legality are the reader's
        to judge (search.choice)."""
        from gemmforge.search.devices import device_class
        t = self.table
        query = t.select().where((t.c.layout == str(problem.layout)) &
                                 (t.c.acc == str(problem.acc)) & (t.c.arch == arch.value))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        out = []
        for row in rows:
            cls = device_class(row.device)
            if cls in classes:
                out.append((_entry(row), cls))
        return out

    def close(self) -> None:
        self.engine.dispose()


def tuned_candidates(problem: Problem, arch: Arch, classes: tuple[str, ...],
                     url: str | None = None) -> list[tuple[Entry, str]]:
    """TunedDatabase.candidates of the database at `url` (default: the tuner's storage);
    [] when SQLAlchemy is not installed or the database doesn't exist or can't be read.
    Never creates a database file."""
    try:
        import sqlalchemy
    except ImportError:  # the [search] extra is not installed: no tuned database
        return []
    from gemmforge.search.studies import default_storage
    url = url or default_storage()
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return []  # nothing tuned yet: don't create an empty file
    try:
        db = TunedDatabase(url)
    except sqlalchemy.exc.SQLAlchemyError:
        return []
    try:
        return db.candidates(problem, arch, classes)
    except sqlalchemy.exc.SQLAlchemyError:
        return []
    finally:
        db.close()
