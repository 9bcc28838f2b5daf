"""The JSON round trip every plain record of search.measure.records shares.

    class MyRecord(Record): ...           # a frozen dataclass
    MyRecord.from_json(record.to_json()) == record

`to_dict` writes nested records as dicts and tuples as lists; `from_dict` ignores keys the
class doesn't know, so a file written by a later version (one more field) still reads, and a
missing field takes its default. A class whose fields hold records converts them back in its
own `from_dict` (search.measure.records.MeasureRequest) and then calls `known_fields`.
"""
from __future__ import annotations

import dataclasses
import json


def known_fields(cls, data: dict):
    """`cls` built from the keys of `data` that are its fields."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def as_dict(record) -> dict:
    """`record`'s fields as a JSON-ready dict (nested records as dicts, tuples as lists)."""
    out = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if dataclasses.is_dataclass(value):
            value = value.to_dict()
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


class Record:
    """to_dict/from_dict and to_json/from_json for a dataclass record."""

    def to_dict(self) -> dict:
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: dict):
        return known_fields(cls, data)

    def to_json(self) -> str:
        """One line of JSON (NaN and infinity are written as Python's json writes them)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))
