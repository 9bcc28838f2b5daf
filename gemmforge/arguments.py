"""Checks for the `gemmforge` command's arguments, run before any work.

Each function takes an argument's value and the name to blame, returns the value ready to
use, and raises gemmforge.errors.UsageError (exit 2) with one line naming the argument and
what was wrong; `storage` raises gemmforge.errors.Failure (exit 1) when a well-formed URL's
server can't be reached.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import Failure, UsageError
from .ir.program import IRError

STORAGE_CONNECT_TIMEOUT_S = 10
STORAGE_EXAMPLES = "e.g. sqlite:///tune.db or postgresql+psycopg://user@host/db"


def at_least(name: str, value: int, least: int = 1) -> int:
    if value < least:
        raise UsageError(f"{name}: {value} must be >= {least}")
    return value


def positive_seconds(name: str, value: float | None) -> float | None:
    """None (no limit) or a number of seconds > 0."""
    return positive(name, value, " (seconds)")


def positive(name: str, value: float | None, unit: str = "") -> float | None:
    """None (not given) or a number > 0 (nan refused); `unit` follows the message."""
    if value is not None and not value > 0:
        raise UsageError(f"{name}: {value:g} must be > 0{unit}")
    return value


def _shape_texts(spec: str, name: str) -> list[str]:
    """search.measure.shapes.shape_texts with each way it can fail said as a UsageError."""
    from .search.measure.shapes import shape_texts
    if spec.startswith("sample:"):
        parts = spec.split(":")
        grid = shape_texts("grid")
        try:
            count = int(parts[1])
            if len(parts) > 2:
                int(parts[2])
            if len(parts) > 3 or not 1 <= count <= len(grid):
                raise ValueError
        except (ValueError, IndexError):
            raise UsageError(f"{name}: {spec!r} is not sample:N[:SEED] with N in "
                             f"1..{len(grid)}") from None
    if spec.startswith("@"):
        text_file(name, spec[1:])  # unreadable: a UsageError naming the file
    try:
        return shape_texts(spec)
    except IRError as e:
        raise UsageError(str(e)) from None


def shapes(spec: str, layout: str = "nn", acc: str = "f32", name: str = "--shapes",
           dtype: str = "f16") -> list:
    """Problems from a --shapes value: a comma list of MxNxK, `grid`, `grid:CLASSES`,
    `sample:N[:SEED]`, or `@file` (shapes per line, '#' comments); at least one; of operand
    `dtype` ("f16" or "bf16"; a bad value is a UsageError naming --dtype)."""
    texts = _shape_texts(spec, name)
    if not texts:
        raise UsageError(f"{name}: no shapes in {spec!r}")
    return [problem(t, layout, acc, name, dtype) for t in texts]


def problem(text: str, layout: str = "nn", acc: str = "f32", name: str = "--shape",
            dtype: str = "f16"):
    """One Problem from MxNxK and the layout, accumulator and dtype options."""
    from .ir.program import Accum, DType, Layout
    from .ir.text import parse_problem
    try:
        Layout.parse(layout, "layout")  # an empty value would vanish from the text below
        Accum.parse(acc, "acc")
        DType.parse(dtype, "dtype")
        return parse_problem(f"{text} {layout} {acc} {dtype}")
    except IRError as e:
        raise UsageError(_blame(str(e), text, name)) from None


def _blame(message: str, text: str, name: str) -> str:
    if message.startswith("shape: "):
        return name + message[len("shape"):]
    if message.startswith(("layout: ", "acc: ", "dtype: ")):
        return "--" + message
    return f"{name}: {text!r}: {message}"


def text_file(name: str, path: str) -> str:
    """The text of a file an argument names."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file: {path}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{name}: {path} is not a text file") from None
    except OSError as e:
        raise UsageError(f"{name}: can't read {path}: {e.strerror}") from None


def backends(text: str | None, name: str = "--backends") -> tuple[str, ...] | None:
    """A comma list of registered backend names (None or empty: every one)."""
    if text is None:
        return None
    from .backends import registry
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise UsageError(f"{name}: no backend in {text!r}")
    known = sorted(registry.names())
    unknown = [x for x in names if x not in known]
    if unknown:
        raise UsageError(f"{name}: {unknown[0]!r} is not a registered backend "
                         f"(one of {', '.join(known)})")
    return names


def program(value: str, name: str = "--program"):
    """A Program from text, JSON or @file; an empty value is an error, not "none"."""
    from .ir.schema import from_json
    from .ir.text import parse
    text = text_file(name, value[1:]) if value.startswith("@") else value
    text = text.strip()
    if not text:
        raise UsageError(f"{name}: empty" + (f" file {value[1:]}" if value.startswith("@") else
                                             " (give program text, JSON or @file)"))
    try:
        return from_json(text) if text.startswith("{") else parse(text)
    except IRError as e:
        raise UsageError(f"{name}: {e}") from None


def replay(value: str | None, name: str = "--replay") -> str | None:
    """'synthetic', or a record file that holds at least one record."""
    if value is None or value == "synthetic":
        return value
    from .search.measure.replay import load_records
    text_file(name, value)  # missing, unreadable or binary: said plainly
    try:
        records = load_records(value)
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{name}: {value} is not a record file (search.measure.report CSV or JSON "
                         f"lines of results): {type(e).__name__}: {e}") from None
    if not records:
        raise UsageError(f"{name}: {value} holds no records (or give 'synthetic')")
    return value


def output_folder(path: str, name: str = "-o") -> Path:
    """A folder that exists (created if missing) and can be written."""
    if not path.strip():
        raise UsageError(f"{name}: empty (give a folder)")
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{name}: can't create {path}: {e.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{name}: can't write in {path}")
    return folder


def output_file(path: str, name: str) -> Path:
    """A file to write: not empty, not a folder, in a folder that exists and can be written."""
    if not path.strip():
        raise UsageError(f"{name}: empty (give a file)")
    file = Path(path).expanduser()
    if file.is_dir():
        raise UsageError(f"{name}: {path} is a folder (give a file)")
    if not file.parent.is_dir():
        raise UsageError(f"{name}: folder {file.parent} does not exist")
    if not os.access(file.parent, os.W_OK | os.X_OK) or (file.exists() and
                                                         not os.access(file, os.W_OK)):
        raise UsageError(f"{name}: can't write {path}")
    return file


def environment() -> None:
    """Every GEMMFORGE_* setting readable (compiler.knobs raises KnobError, exit 2)."""
    from .compiler.knobs import knobs
    knobs()


def cuda_devices(name: str, needed: int, hint: str = "") -> None:
    """At least `needed` CUDA devices visible to torch; else bad input (`hint` says what
    to do instead)."""
    import torch
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if seen == 0:
        raise UsageError(f"{name}: needs a CUDA GPU (torch sees none){hint}")
    if seen < needed:
        raise UsageError(f"{name}: {needed} GPU(s) asked for, torch sees {seen}")


def storage(url: str, name: str = "--storage") -> str:
    """A storage URL that opens: ':memory:', or an SQLAlchemy URL whose dialect loads, whose
    SQLite folder can be written and whose server answers (Failure if it doesn't). A
    new SQLite file is not created here: the command that writes it does."""
    if url == ":memory:":
        return url
    import sqlalchemy
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise UsageError(f"{name}: {url!r} is not an SQLAlchemy URL ({STORAGE_EXAMPLES})") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        _sqlite_folder(name, Path(parsed.database))
        if not sqlite_file(name, Path(parsed.database)).expanduser().exists():
            _dialect(name, parsed, shown).dispose()
            return url  # opening it would create an empty file a failed command leaves behind
    engine = _dialect(name, parsed, shown)
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.DBAPIError as e:
        from .errors import one_line
        raise Failure(f"{name}: can't open {shown}: {one_line(e.orig or e)}") from None
    finally:
        engine.dispose()
    return url


def _dialect(name: str, parsed, shown: str):
    """An SQLAlchemy engine for `parsed` (nothing connects yet); UsageError where its
    dialect or driver is missing."""
    import sqlalchemy
    connect_args = ({"connect_timeout": STORAGE_CONNECT_TIMEOUT_S}
                    if parsed.get_backend_name() == "postgresql" else {})
    try:
        return sqlalchemy.create_engine(parsed, connect_args=connect_args)
    except sqlalchemy.exc.NoSuchModuleError:
        raise UsageError(f"{name}: {shown!r}: no SQLAlchemy dialect "
                         f"{parsed.drivername!r} ({STORAGE_EXAMPLES})") from None
    except ImportError as e:
        raise UsageError(f"{name}: {shown!r}: its driver is not installed ({e})") from None


def sqlite_file(name: str, path: Path) -> Path:
    """`path`, where it is an SQLite database or not there yet; UsageError where it is
    another file (empty, truncated, of another kind), which is then left untouched."""
    from .dispatch.storage_files import sqlite_refusal
    reason = sqlite_refusal(path.expanduser())
    if reason:
        raise UsageError(f"{name}: {path} {reason}")
    return path


def tuned_database() -> None:
    """GEMMFORGE_TUNE_DB, where set, is a storage URL whose dialect loads (UsageError
    naming it if not); nothing is opened (a database that can't be read is skipped, and
    named, when programs are looked up)."""
    from .compiler.knobs import knobs
    url = knobs().tune_db
    if not url or url == ":memory:":
        return
    try:
        import sqlalchemy
    except ImportError:
        return  # no [search] extra: no tuned database is read at all
    name = "GEMMFORGE_TUNE_DB"
    try:
        parsed = sqlalchemy.engine.make_url(url)
        parsed.get_dialect()
    except sqlalchemy.exc.ArgumentError:
        raise UsageError(f"{name}: {url!r} is not an SQLAlchemy URL ({STORAGE_EXAMPLES})") from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise UsageError(f"{name}: {url!r}: no SQLAlchemy dialect {parsed.drivername!r} "
                         f"({STORAGE_EXAMPLES})") from None
    except ImportError as e:
        raise UsageError(f"{name}: {url!r}: its driver is not installed ({e})") from None


def _sqlite_folder(name: str, path: Path) -> None:
    folder = path.expanduser().parent
    if not folder.is_dir():
        raise UsageError(f"{name}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{name}: can't write {path}")


def positive_ints(name: str, text: str) -> tuple[int, ...]:
    """A comma list of positive integers (a UsageError naming `name` otherwise)."""
    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"{name}: {text!r} is not a comma list of positive integers")
    return values
