"""The artifact cache checks each entry's binary against the size and sha256 its record
kept: a truncated, overwritten or missing binary counts as a miss and is built again."""
import json

import pytest

from gemmforge.compiler.artifacts import RECORD, ArtifactCache, file_digest
from gemmforge.compiler.values import Artifact
from gemmforge.ir.program import Accum, Layout

KEY = "ab" + "0" * 22
BINARY = b"\x7fELF" + bytes(range(256)) * 64


def _build(payload: bytes, calls: list):
    def build(folder):
        calls.append(folder)
        path = folder / "kernel.so"
        path.write_bytes(payload)
        return Artifact("", "cuda_so", path, "prog", Layout.NN, Accum.F32, {"symbol": "s"})
    return build


@pytest.fixture
def cache(tmp_path):
    return ArtifactCache(tmp_path / "cache")


def test_an_entry_records_its_size_and_digest(cache):
    art = cache.put(KEY, _build(BINARY, []))
    record = json.loads((art.path.parent / RECORD).read_text())
    assert record["bytes"] == len(BINARY) and record["sha256"] == file_digest(art.path)
    assert cache.get(KEY) == art


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "remove", "empty"])
def test_a_damaged_binary_is_a_miss_and_is_rebuilt(cache, damage):
    calls = []
    art = cache.put(KEY, _build(BINARY, calls))
    if damage == "truncate":
        art.path.write_bytes(BINARY[:100])
    elif damage == "overwrite":  # same size, other bytes: only the digest tells
        art.path.write_bytes(bytes(len(BINARY)))
    elif damage == "empty":
        art.path.write_bytes(b"")
    else:
        art.path.unlink()
    assert cache.get(KEY) is None
    assert not art.path.parent.exists(), "the damaged entry is moved out of the way"
    again = cache.get(KEY) or cache.put(KEY, _build(BINARY, calls))
    assert len(calls) == 2 and again.path.read_bytes() == BINARY
    assert cache.get(KEY) == again


def test_a_record_from_before_digests_is_trusted(cache):
    art = cache.put(KEY, _build(BINARY, []))
    record_path = art.path.parent / RECORD
    record = json.loads(record_path.read_text())
    del record["bytes"], record["sha256"]
    record_path.write_text(json.dumps(record))
    assert cache.get(KEY) == art


def test_a_damaged_record_is_a_miss(cache):
    art = cache.put(KEY, _build(BINARY, []))
    (art.path.parent / RECORD).write_text("{not json")
    assert cache.get(KEY) is None
    assert cache.put(KEY, _build(BINARY, [])).path.read_bytes() == BINARY
