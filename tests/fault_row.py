"""One row of the fault tables (tests/fault_rows.py and the fault_table_*.py beside it)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Row:
    """One fault: what is tried, the argv ({tmp}, {url} filled in), the exit code and the
    regex picking the documented line from stderr then stdout. `llm`: a tests/fake_llm
    mode ("dead": no server); `signal`: a signal for a slow tune in a child process
    ("kill9": SIGKILL, then the row is the rerun's); `patch`: module attributes to set."""

    what: str
    argv: tuple[str, ...]
    code: int
    pick: str = r"^gemmforge: "
    env: dict = field(default_factory=dict)
    llm: str | None = None
    signal: str | None = None
    patch: dict = field(default_factory=dict)
    counts: str = ""  # a regex of the line's part that varies from run to run: shown as N
