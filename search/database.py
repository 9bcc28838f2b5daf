"""The tuned database: the best program per (device, problem), what it measured, and how.

    db = TunedDatabase()                       # SQLite in the user cache dir, or any URL
    db.record("NVIDIA H200", problem, result, command="gemmforge tune --shapes grid ...")
    db.best("NVIDIA H200", problem)            # -> Entry | None
    lookup(problem, Arch.SM90A)                # -> Program | None (what emit/ops should use)

One table, `gemmforge_tuned` (SQLAlchemy Core), one row per (device, problem text), kept
only while it is the best measured (highest cuBLAS/kernel ratio). Rows carry the program's
canonical text and content key, the measured times (µs) and ratios, the command that
measured them and the study it came from. The default URL is the tuner's storage
(search.studies.default_storage()), so `--storage URL` shares both. Tuning decisions live
here; binaries live in the artifact cache (compiler.artifacts): they are stored apart.
"""
from __future__ import annotations

import math
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


@dataclass(frozen=True)
class Nearest:
    """The tuned entry nearest an untuned problem: `distance` is the Euclidean distance of
    (log2 m, log2 n, log2 k); `reason` is why its program is illegal there (None: legal)."""

    entry: Entry
    distance: float
    reason: str | None

    @property
    def legal(self) -> bool:
        return self.reason is None


def _entry(row) -> Entry:
    from gemmforge.ir.text import parse
    problem = Problem(row.m, row.n, row.k, row.layout, row.acc)
    return Entry(row.device, problem, parse(row.program), row.kernel_us, row.cublas_us,
                 row.speedup, row.call_us, row.cublas_call_us, row.call_speedup, row.command,
                 row.study, row.updated)


def distance(a: Problem, b: Problem) -> float:
    """Euclidean distance of (log2 m, log2 n, log2 k) between two problems."""
    return math.dist([math.log2(a.m), math.log2(a.n), math.log2(a.k)],
                     [math.log2(b.m), math.log2(b.n), math.log2(b.k)])


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

    def nearest(self, problem: Problem, arch: Arch, device: str | None = None,
                legal_only: bool = False) -> Nearest | None:
        """The entry with the same layout, accumulator and program arch nearest `problem`
        (the exact one at distance 0), preferring `device`'s entries, then the higher
        speedup; with `legal_only`, the nearest whose program passes verify for `problem`."""
        from gemmforge.ir.verify import check
        t = self.table
        query = t.select().where((t.c.layout == str(problem.layout)) &
                                 (t.c.acc == str(problem.acc)) & (t.c.arch == arch.value))
        with self.engine.connect() as conn:
            rows = [_entry(r) for r in conn.execute(query).all()]
        ranked = sorted(rows, key=lambda e: (distance(problem, e.problem),
                                             device is not None and e.device != device,
                                             -(e.speedup or 0.0)))
        for e in ranked:
            reason = check(e.program, problem)
            if reason is None or not legal_only:
                return Nearest(e, distance(problem, e.problem), reason)
        return None

    def close(self) -> None:
        self.engine.dispose()


def lookup(problem: Problem, arch: Arch, url: str | None = None,
           device: str | None = None) -> Program | None:
    """The tuned program for `problem` on `arch`: the exact entry if one exists, else the
    nearest tuned shape's program that is legal for `problem`; None when the database has
    none (or doesn't exist yet). Never raises for a missing or empty database."""
    import sqlalchemy
    from gemmforge.search.studies import default_storage
    url = url or default_storage()
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return None  # nothing tuned yet: don't create an empty file
    try:
        db = TunedDatabase(url)
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    try:
        found = db.nearest(problem, arch, device=device, legal_only=True)
        return found.entry.program if found else None
    finally:
        db.close()
