"""The tuned database, write side: the tuner keeps each (device, problem)'s best program.

    db = TunedDatabase()                       # SQLite in the user cache dir, or any URL
    db.record("NVIDIA H200", problem, result, command="gemmforge tune --shapes grid ...")
    db.best("NVIDIA H200", problem)            # -> Entry | None (dispatch.tuned)

The table and its reading (best, entries, candidates) are dispatch.tuned's, where `matmul`
reads them without the tuner; this adds `record`, one transaction per result.
"""
from __future__ import annotations

from datetime import datetime, timezone

from ...dispatch.tuned import TunedTable
from ...ir.program import Problem
from ..measure.records import Result
from ..measure.selection import selection_ratio


class TunedDatabase(TunedTable):
    """The tuned table behind a SQLAlchemy URL (None: the default SQLite file). Safe for
    several processes: `record` is one transaction and retries a lost insert race."""

    def record(self, device: str, problem: Problem, result: Result, command: str = "",
               study: str = "", replace: bool = False) -> bool:
        """Keep `result` as the (device, problem) entry if it is ok and beats the stored
        one (by speedup), or, with `replace`, whatever is stored (a confirmation: the
        winner of a head-to-head measurement that included the stored program, see
        search.tune.confirm); True if stored."""
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
        from ...ir.text import parse
        program = parse(result.program)
        values = dict(device=device, problem=str(problem), m=problem.m, n=problem.n,
                      k=problem.k, layout=str(problem.layout), acc=str(problem.acc),
                      dtype=str(problem.dtype),
                      arch=program.arch.value, backend=program.backend, program=str(program),
                      key=program.key, kernel_us=result.kernel_us, cublas_us=result.cublas_us,
                      speedup=result.speedup, call_us=result.call_us,
                      cublas_call_us=result.cublas_call_us, call_speedup=result.call_speedup,
                      ratio=selection_ratio(problem, result), command=command, study=study, updated=datetime.now(timezone.utc))
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
