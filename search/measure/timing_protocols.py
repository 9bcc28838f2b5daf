"""The timing protocols by name: what one reading of each is, and where it goes in a Result.

A static table, not a record that crosses processes: search.measure.records' BenchSettings names
its protocols from it, search.measure.timing implements each one, search.measure.bench runs them, and
search.measure.report writes their columns.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Protocol:
    """One timing protocol: its name, what one reading is, and how it is grouped.

    `alone`: each candidate is timed with cuBLAS alone (call, server), rather than with its
    whole group (kernel, cold, sustained). `by_default`: in BenchSettings' default list
    (sustained is not: it takes seconds per group). Its readings go to Result.<field> and
    Result.<cublas_field>. search.measure.timing implements each one; search.measure.bench runs those
    BenchSettings.protocols names."""

    name: str
    reading: str
    alone: bool = False
    by_default: bool = True

    @property
    def field(self) -> str:
        return f"{self.name}_us"

    @property
    def cublas_field(self) -> str:
        return "cublas_us" if self.name == "kernel" else f"cublas_{self.name}_us"


PROTOCOLS = {p.name: p for p in (
    Protocol("kernel", "CUDA-graph median per launch, L2 warm"),
    Protocol("cold", "the same with L2 cold: operands rotated through copies over 2x L2"),
    Protocol("call", "one Python call + synchronize, wall clock, fresh inputs", alone=True),
    Protocol("server", "calls after random idle gaps", alone=True),
    Protocol("sustained", "per launch, back to back for seconds (under the power cap), the "
             "median over turns", by_default=False),
    Protocol("after", "per launch after another kernel (a 1 MiB add), L2 warm: nothing to "
             "overlap with", by_default=False),
)}
"""Every timing protocol, by name, in the order reports list them ("kernel" first: the
reward's, and the one every measurement includes)."""
