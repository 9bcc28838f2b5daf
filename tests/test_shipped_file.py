"""The shipped file inside the package (dispatch/data/shipped.json.gz): what must hold for every
re-tune, whatever the figures. Every grid shape has a row per GPU class in layout nn, layout
nt covers its shape list, every row is legal at its shape and names the command, commit and
GPU that measured it, and carries the figures its class needs. The figures themselves are
not pinned here: README's results table is generated from the file
(tests/test_shipped_table.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmforge.ir.verify import check
from gemmforge.search.measure.shapes import parse_shapes
from gemmforge.dispatch.shipped import DEFAULT_PATH, read

NT_SHAPES = Path(__file__).resolve().parent / "data" / "nt_shapes.txt"
CLASSES = {"h100": "NVIDIA H100", "h200": "NVIDIA H200"}  # device class: its GPU's name
LARGE_FLOPS = 1e11  # the large class, chosen under sustained load


@pytest.fixture(scope="module")
def book():
    return read(DEFAULT_PATH)


def _rows(book, device_class: str, layout: str) -> dict:
    rows = [r for r in book.rows if r.device_class == device_class
            and str(r.problem.layout) == layout]
    by_problem = {r.problem: r for r in rows}
    assert len(by_problem) == len(rows), f"{device_class} {layout}: a shape shipped twice"
    return by_problem


@pytest.mark.parametrize("device_class", sorted(CLASSES))
def test_every_grid_shape_ships_for_each_class_in_layout_nn(book, device_class):
    rows = _rows(book, device_class, "nn")
    assert set(parse_shapes("grid")) <= set(rows)


@pytest.mark.parametrize("device_class", sorted(CLASSES))
def test_layout_nt_ships_its_shape_list_for_each_class(book, device_class):
    want = set(parse_shapes(f"@{NT_SHAPES}", "nt", "f32"))
    cublas = {r.problem for r in book.cublas_rows if r.device_class == device_class}
    assert len(want) == 160 and want <= set(_rows(book, device_class, "nt")) | cublas


def test_every_row_is_legal_at_its_shape(book):
    bad = [(str(r.problem), r.program) for r in book.rows if check(r.program, r.problem)]
    assert not bad


def test_every_row_names_the_command_commit_and_gpu_that_measured_it(book):
    for r in book.rows:
        measured = r.measured
        assert measured.get("command", "").startswith("gemmforge "), r.problem
        assert measured.get("commit"), r.problem
        devices = measured.get("devices") or []
        assert devices and all(d.startswith(CLASSES[r.device_class]) for d in devices), r.problem


def test_every_row_has_the_figures_its_class_needs(book):
    """Kernel time beside cuBLAS's everywhere; the large class its sustained figures (it is
    chosen under sustained load); below it the L2-cold figures the confirmations take."""
    for r in book.rows:
        assert r.speedup and r.speedup > 0, r.problem
        if r.problem.flops >= LARGE_FLOPS:
            assert r.figures.get("sustained_us") and r.figures.get("cublas_sustained_us"), r.problem
        else:
            assert r.figures.get("cold_us") and r.figures.get("cublas_cold_us"), r.problem
