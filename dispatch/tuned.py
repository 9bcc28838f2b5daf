"""The tuned database, read side: the best program per (device, problem) and what it measured.

    table = TunedTable()                       # SQLite in the user cache dir, or any URL
    table.best("NVIDIA H200", problem)         # -> Entry | None
    tuned_candidates(problem, Arch.SM90A, ("h200", "h100"))   # what dispatch.choice reads

One table, `gemmforge_tuned` (SQLAlchemy Core), one row per (device, problem text), kept
only while it is the best measured (highest cuBLAS/kernel ratio). The problem text carries
the operands' dtype where it is not f16 (ir Problem), and the `dtype` column holds it for
queries (NULL in rows written before the column: f16). Rows carry the program's
canonical text and content key, the measured times (µs) and ratios, the command that
measured them and the study it came from. The tuner writes it (search.tune.database's
TunedDatabase adds `record`); the default URL (default_storage()) is also the tuner's study
storage, so `--storage URL` shares both. Binaries live apart, in the artifact cache
(compiler.artifacts).
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..ir.program import Arch, DType, Problem, Program

TABLE = "gemmforge_tuned"
DB_FILE = "tuning.db"
SQLITE_TIMEOUT_S = 60


def default_storage() -> str:
    """$GEMMFORGE_TUNE_DB if set (an SQLAlchemy URL), else
    sqlite:///<user cache dir>/gemmforge/tuning.db (the folder is created)."""
    from ..compiler.knobs import knobs
    url = knobs().tune_db
    if url:
        return url
    import platformdirs
    folder = Path(platformdirs.user_cache_dir("gemmforge"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / DB_FILE}"


def engine_kwargs(url: str) -> dict:
    """SQLAlchemy engine options: SQLite in WAL mode with a long lock timeout (several
    processes write one file); a pre-ping for server databases."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return {"pool_pre_ping": True} if not url.startswith("sqlite") else {}
    path = url[len("sqlite:///"):]

    def connect():
        conn = sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn
    return {"creator": connect}


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
        Column("dtype", String(8)),  # the operands' dtype; NULL in rows from before: f16
        Column("backend", String(64), nullable=False), Column("program", Text, nullable=False),
        Column("key", String(32), nullable=False),
        Column("kernel_us", Float), Column("cublas_us", Float), Column("speedup", Float),
        Column("call_us", Float), Column("cublas_call_us", Float),
        Column("call_speedup", Float),
        Column("ratio", Float),  # the ratio the entry was chosen by (RATIO_DOC)
        Column("command", Text, nullable=False, default=""),
        Column("study", Text, nullable=False, default=""),
        Column("updated", DateTime, nullable=False),
        UniqueConstraint("device", "problem", name=f"{TABLE}_device_problem"),
    )


RATIO_DOC = """cuBLAS time / ours by the protocol the entry was chosen by
(search.measure.selection.selection_ratio: after another kernel below the large class where
measured, sustained for the large class): what dispatch.choice's cuBLAS rule reads. None in
rows written before the column existed (the rule then reads `speedup`)."""


@dataclass(frozen=True)
class Entry:
    """One tuned row: times in µs; speedup is Result.speedup (the median per-round ratio
    where measured), call_speedup = cublas_call_us / call_us, ratio as RATIO_DOC says."""

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
    ratio: float | None = None


def _entry(row) -> Entry:
    from ..ir.text import parse
    problem = Problem(row.m, row.n, row.k, row.layout, row.acc,
                      getattr(row, "dtype", None) or DType.F16)
    return Entry(row.device, problem, parse(row.program), row.kernel_us, row.cublas_us,
                 row.speedup, row.call_us, row.cublas_call_us, row.call_speedup, row.command,
                 row.study, row.updated, getattr(row, "ratio", None))


class TunedTable:
    """The tuned table behind a SQLAlchemy URL (None: the default SQLite file), read side;
    opening creates the table if it is missing (several processes may race to)."""

    def __init__(self, url: str | None = None):
        import sqlalchemy
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
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        """Bring a table made by an earlier version up to this one: add the nullable columns
        it lacks (ALTER TABLE ADD COLUMN; a concurrent opener may have added them first)."""
        import sqlalchemy
        have = {c["name"] for c in sqlalchemy.inspect(self.engine).get_columns(TABLE)}
        for column in self.table.columns:
            if column.name in have or not column.nullable:
                continue
            kind = column.type.compile(dialect=self.engine.dialect)
            try:
                with self.engine.begin() as conn:
                    conn.execute(sqlalchemy.text(f'ALTER TABLE {TABLE} ADD COLUMN "{column.name}" {kind}'))
            except sqlalchemy.exc.DBAPIError:
                if column.name not in {c["name"] for c in
                                       sqlalchemy.inspect(self.engine).get_columns(TABLE)}:
                    raise

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
        accumulator, an `arch` program and a device of one of `classes` (dispatch.devices:
        replayed and synthetic devices have none). Distance and legality are the reader's
        to judge (dispatch.choice). Entries are keyed by the operands' dtype too: a bf16
        problem reads bf16 entries only, an f16 one f16 entries (and rows written before
        the dtype column, all f16)."""
        from .devices import device_class
        t = self.table
        same_dtype = t.c.dtype == str(problem.dtype)
        if problem.dtype == DType.F16:
            same_dtype = same_dtype | t.c.dtype.is_(None)
        query = t.select().where((t.c.layout == str(problem.layout)) &
                                 (t.c.acc == str(problem.acc)) & (t.c.arch == arch.value)
                                 & same_dtype)
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
    """TunedTable.candidates of the database at `url` (default: the tuner's storage);
    [] when SQLAlchemy is not installed or the database doesn't exist or can't be read
    (the last two said once per database on stderr, where the database was named: by
    `url` or GEMMFORGE_TUNE_DB; the default file missing means nothing was tuned yet).
    Never creates a database file."""
    try:
        import sqlalchemy
    except ImportError:  # the [search] extra is not installed: no tuned database
        return []
    from ..compiler.knobs import knobs
    from .storage_files import sqlite_path, sqlite_refusal
    named = url or knobs().tune_db
    url = url or default_storage()
    path = sqlite_path(url)
    if path is not None and not path.exists():
        if named:
            skipped(url, "no such file")
        return []  # nothing tuned yet: don't create an empty file
    reason = sqlite_refusal(path) if path is not None else None
    if reason:
        skipped(url, f"{path} {reason}")
        return []
    try:
        db = TunedTable(url)
        try:
            return db.candidates(problem, arch, classes)
        finally:
            db.close()
    except sqlalchemy.exc.SQLAlchemyError as e:
        first = str(getattr(e, "orig", None) or e).strip().splitlines()
        skipped(url, first[0] if first else type(e).__name__)
        return []


_SKIPPED: set[str] = set()


def skipped(url: str, reason: str) -> None:
    """Say on stderr, once per database, that the tuned database at `url` is not read."""
    import sys

    import sqlalchemy
    if url not in _SKIPPED:
        _SKIPPED.add(url)
        try:
            shown = sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
        except sqlalchemy.exc.ArgumentError:
            shown = url
        print(f"gemmforge: tuned database {shown} skipped: {reason}", file=sys.stderr)
