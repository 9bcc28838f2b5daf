"""The artifact cache: built kernels on disk, keyed by the content hash of what shaped them.

The key hashes the lowered source files (which carry the program and the templates
that rendered it), the backend's fingerprint (templates, generator version), the
toolchain version and the build target. An entry is a folder `<root>/<key[:2]>/<key>/`
holding the binary and `artifact.json`; a build happens in a private temporary folder
that is renamed into place in one step (os.replace), so a crash or a concurrent build
never leaves a half-written entry visible. The record holds the binary's size and sha256,
checked on every `get`: an entry whose binary was truncated, overwritten or removed
afterwards (a full disk, a user's copy, another tool) is moved aside and counts as missing,
so the caller builds it again instead of loading a broken file. (Records written before
the digest was kept are trusted as they are.)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .values import Artifact, Source, Target
from ..ir.program import Accum, DType, Layout

RECORD = "artifact.json"
DIGEST_CHUNK = 1 << 20  # bytes read at a time while hashing a binary


def cache_key(source: Source, target: Target, backend_fingerprint: str, toolchain: str) -> str:
    h = hashlib.sha256()
    for part in (source.language, source.entry, target.tag, backend_fingerprint, toolchain):
        h.update(part.encode() + b"\0")
    for name in sorted(source.files):
        h.update(name.encode() + b"\0" + source.files[name].encode() + b"\0")
    return h.hexdigest()[:24]


class ArtifactCache:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Artifact | None:
        """The cached artifact for `key`, or None (a damaged entry counts as missing)."""
        record = self._dir(key) / RECORD
        try:
            data = json.loads(record.read_text())
            artifact = Artifact(key=key, kind=data["kind"], path=self._dir(key) / data["file"],
                                program_text=data["program"], layout=Layout(data["layout"]),
                                acc=Accum(data["acc"]), meta=data["meta"],
                                dtype=DType(data.get("dtype", DType.F16.value)))
        except OSError:  # no entry
            return None
        except (ValueError, KeyError):  # a record of another kind or cut short
            self._discard(key)
            return None
        if _damaged(artifact.path, data):
            self._discard(key)
            return None
        return artifact

    def _discard(self, key: str) -> None:
        """Move a damaged entry out of the way (one rename, then removal), so that `put`
        can place a fresh build under its key."""
        aside = self.root / f".broken-{key}-{os.getpid()}"
        try:
            os.replace(self._dir(key), aside)
        except OSError:  # another process discarded or replaced it first
            return
        shutil.rmtree(aside, ignore_errors=True)

    def put(self, key: str, build: Callable[[Path], Artifact]) -> Artifact:
        """Run `build(tmp_dir)` and move its folder into the cache atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key[:8]}-", dir=self.root))
        try:
            artifact = build(tmp)
            (tmp / RECORD).write_text(json.dumps({
                "kind": artifact.kind, "file": artifact.path.name,
                "program": artifact.program_text, "layout": artifact.layout.value,
                "acc": artifact.acc.value, "dtype": artifact.dtype.value,
                "meta": artifact.meta, "bytes": artifact.path.stat().st_size,
                "sha256": file_digest(artifact.path)}, indent=1, sort_keys=True))
            final = self._dir(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(tmp, final)
            except OSError:  # another process put the same key first: theirs is as good
                if self.get(key) is None:
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dataclasses.replace(artifact, key=key, path=self._dir(key) / artifact.path.name)


def file_digest(path: Path) -> str:
    """sha256 of the file at `path`, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(DIGEST_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _damaged(path: Path, record: dict) -> bool:
    """Whether the binary at `path` is missing or differs from what `record` says was
    written (size first: a truncated file is caught without reading it)."""
    try:
        size = path.stat().st_size
        if "bytes" in record and size != record["bytes"]:
            return True
        return "sha256" in record and file_digest(path) != record["sha256"]
    except OSError:
        return True
