"""Is a file an SQLite database? Checked before optuna, SQLAlchemy or sqlite3 opens it.

Those libraries treat a 0-byte file as a new, empty database (a study of hundreds of
trials would silently start over) and fail deep inside with a DatabaseError on a truncated
one or on a file of another kind. `sqlite_refusal` reads the file with the standard library
alone, read-only (a `file:...?mode=ro` URI: the file is never changed, not even by a
journal), and says what is wrong as one phrase, or None for a sound database:

    sqlite_refusal(Path("tune.db"))   # None, or e.g. "is empty (0 bytes), not an SQLite database"
"""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file
INTEGRITY_TIMEOUT_S = 30  # a writer of another process may hold the file a while
CREATING_S = 10.0
"""SQLite creates a database file empty and writes its header with the first transaction:
a 0-byte file younger than this may be one another process is creating right now (two
tuners started together), so it is watched this long before it is called empty."""
POLL_S = 0.1


def sqlite_refusal(path: Path) -> str | None:
    """Why the existing file at `path` is not a readable SQLite database (one phrase that
    follows the path: "is empty ...", "is not an SQLite database ...", "is damaged ..."),
    or None when it is one (or does not exist: a new database is created there)."""
    try:
        if not path.exists():
            return None
        if path.is_dir():
            return "is a folder, not an SQLite database file"
        size = _settled_size(path)
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as e:
        return f"can't be read: {e.strerror}"
    if size == 0:
        return "is empty (0 bytes), not an SQLite database; remove it to start afresh"
    if head != SQLITE_HEADER:
        return "is not an SQLite database (its header is not 'SQLite format 3')"
    return _integrity(path)


def _settled_size(path: Path) -> int:
    """The file's size, after waiting out a 0-byte file another process may be creating."""
    stat = path.stat()
    while stat.st_size == 0 and time.time() - stat.st_mtime < CREATING_S:
        time.sleep(POLL_S)
        stat = path.stat()
    return stat.st_size


def _integrity(path: Path) -> str | None:
    """PRAGMA integrity_check over a read-only connection; None when it answers "ok"."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=INTEGRITY_TIMEOUT_S)
    except sqlite3.Error as e:
        return f"can't be opened read-only: {e}"
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.DatabaseError as e:
        return f"is damaged (truncated or overwritten: {e})"
    finally:
        conn.close()
    verdict = rows[0][0] if rows else "no answer"
    return None if verdict == "ok" else f"is damaged (integrity check: {verdict})"


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLAlchemy sqlite URL (None for another dialect or an in-memory one)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path).expanduser()
