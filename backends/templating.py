"""One StrictUndefined jinja2 environment per template folder: an undefined name in a
template is an error at render time, never an empty string in generated code.

Every environment also searches `backends/templates/`, which holds the pieces several
backends share (the standalone self-test main()).
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import jinja2

SHARED = Path(__file__).with_name("templates")


@functools.lru_cache(maxsize=None)
def environment(template_dir: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([template_dir, str(SHARED)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template_dir: Path, name: str, context: dict) -> str:
    """Render `name` from `template_dir` with `context` (a plain dict)."""
    return environment(str(template_dir)).get_template(name).render(**context)


@functools.lru_cache(maxsize=None)
def fingerprint(template_dir: str) -> str:
    """sha256 over every template file (name and bytes): part of every cache key."""
    h = hashlib.sha256()
    for root in (Path(template_dir), SHARED):
        for path in sorted(root.rglob("*.jinja")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()
