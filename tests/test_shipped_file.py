"""The shipped file inside the package (dispatch/data/shipped.json): every row legal at its
shape, each with the command that measured it on its GPU, the rows of each round where its
shape lists say, and the geomeans README quotes."""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmforge.ir.verify import check
from gemmforge.search.campaign.grid_report import geomean
from gemmforge.dispatch.shipped import DEFAULT_PATH, read

SHAPES = Path(__file__).resolve().parents[1] / "benchmarks" / "shapes"
GEO_NN_H200 = 1.0532  # kernel-protocol geomean of the H200's 813 nn rows below 1e11, as shipped
GEO_NT_H200 = 1.0611  # and of its 160 nt rows (README, "Where it stands")


def test_the_package_ships_the_large_class_confirmations():
    """187 shapes with 2mnk >= 1e11 per class, each program legal for its shape, each with
    its command; geomeans as benchmarks/README.md. H100: the large campaigns under sustained
    load of the eighteenth and nineteenth sessions (one reading a shape, two where both runs
    confirmed the winner), the twenty-third's raster twins and the twenty-fourth's big-tile
    multicast round and the twenty-fifth's 192-tile rounds (M or N = 12288); H200: the
    twenty-seventh session's campaign (its own twelfth-session program beside the H100's,
    one reading a shape). Every row has its sustained figures."""
    book = read(DEFAULT_PATH)
    for cls, readings, tool, expected in (
            ("h100", {1, 2}, "campaign --storage large_", 1.0241),
            ("h200", {1}, "campaign --storage .carry/h200/large_h200_s27.db", 1.0265)):
        rows = [r for r in book.rows if r.device_class == cls and r.problem.flops >= 1e11
                and str(r.problem.layout) == "nn"]
        assert len(rows) == 187 and len({r.problem for r in rows}) == 187
        assert all(r.readings in readings for r in rows)
        assert all(check(r.program, r.problem) is None for r in rows)
        assert all(tool in r.measured["command"] and r.measured["commit"] for r in rows)
        geo = geomean(r.speedup for r in rows)
        assert geo == pytest.approx(expected, abs=1e-4)
        assert all(r.figures.get("sustained_us") and r.figures.get("cublas_sustained_us")
                   for r in rows)


def test_the_package_ships_the_nt_sample_and_llm_layers_for_the_h100():
    """Layout nt (a linear layer's x @ W.t()): issue 20's sample and LLM-layer shapes from
    their campaigns' confirmations (benchmarks/README.md, small_medium.py), each legal."""
    from gemmforge.search.measure.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows if r.device_class == "h100"
            and str(r.problem.layout) == "nt"}
    want = {*parse_shapes(f"@{SHAPES / 'small_medium_sample.txt'}", "nt", "f32"),
            *parse_shapes(f"@{SHAPES / 'llm_layers.txt'}", "nt", "f32")}
    assert set(rows) == want and len(want) == 160
    assert all(check(r.program, r.problem) is None for r in rows.values())
    assert all(r.measured["command"].startswith("gemmforge campaign") and r.measured["commit"]
               for r in rows.values())


def test_the_package_ships_every_grid_shape_for_the_h100():
    """The 813 shapes below 1e11 from the grid campaign's confirmations (benchmarks/README.md,
    grid_h100), the large class from hopper_large.py's: one legal program per grid shape."""
    from gemmforge.search.measure.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows if r.device_class == "h100"}
    grid = parse_shapes("grid")
    assert set(grid) <= set(rows)
    below = [rows[p] for p in grid if p.flops < 1e11]
    assert len(below) == 813 and all(check(r.program, r.problem) is None for r in below)
    assert all(r.measured["command"].startswith("gemmforge campaign") and r.measured["commit"]
               and r.figures.get("cold_us") and r.figures.get("call_us") for r in below)


def test_the_package_ships_every_grid_shape_for_the_h200():
    """The H200's 813 shapes below 1e11 from its own campaign's confirmations (twenty-eighth
    session: each shape's H100 program, its twins and the heuristic's proposals timed on an
    H200; benchmarks/README.md, grid_h200), those from 1e8 re-chosen in the thirtieth's
    wave-fit round (wave_fit_h200_s30), those with K <= 512 and M x N >= 2^23 in the
    thirty-first's output-bound round (output_bound_h200_s31) and those with K >= 4096 and
    M x N <= 2^21 in the thirty-second's long-K split round (long_k_split_h200_s32), then those
    with a narrow side in its streaming round (stream_h200_s32), 14 of the rows under 1.0x in
    the cuBLAS-mirror round (cublas_mirror_nn_h200_s32, shipped in the thirty-third at the
    shapes two fresh pairs confirmed), its large class from the twenty-seventh's; then every
    row below 1e11 whose program had pdl, ranked after another kernel in the thirty-fourth
    (pdl_after_nn_h200_s34); then the thirty-fifth's campaign round at the rows under 1.0x
    (under_after_nn_h200_s35), and the rest of the thirty-fourth's rows re-timed as shipped for
    their call figures (calls_nn_h200_s35): one legal program per grid shape, each with the
    command that measured it on an H200."""
    from gemmforge.search.measure.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows
            if r.device_class == "h200" and str(r.problem.layout) == "nn"}
    grid = parse_shapes("grid")
    assert set(rows) == set(grid)
    below = [rows[p] for p in grid if p.flops < 1e11]
    assert len(below) == 813 and all(check(r.program, r.problem) is None for r in below)
    bound = set(parse_shapes(f"@{SHAPES / 'output_bound_nn_h200.txt'}"))
    assert sum(r.problem in bound for r in below) == 117
    long_k = set(parse_shapes(f"@{SHAPES / 'long_k_split_nn_h200.txt'}"))
    assert len(long_k) == 152 and long_k < {r.problem for r in below} and not long_k & bound
    stream = set(parse_shapes(f"@{SHAPES / 'stream_nn_h200.txt'}"))
    assert len(stream) == 105 and stream < {r.problem for r in below} and not stream & bound
    mirror = set(parse_shapes(f"@{SHAPES / 'cublas_mirror_confirmed_nn_h200.txt'}"))
    assert len(mirror) == 14 and mirror < {r.problem for r in below} and not mirror & bound
    after, under, no_call = _pdl_after_shapes("nn"), *_s35_shapes("nn")
    assert len(after) == 684 and after < {r.problem for r in below}
    assert (len(under), len(no_call)) == (280, 446) and after <= under | no_call
    for r in below:
        if r.problem in under | no_call:
            _check_s35_row(r, under)
            continue
        store = ("output_bound_" if r.problem in bound else
                 "cublas_mirror_" if r.problem in mirror else
                 "stream_" if r.problem in stream else
                 "long_k_split_" if r.problem in long_k else
                 "wave_fit_" if r.problem.flops >= 1e8 else "grid_h200_s28.db")
        assert f".carry/h200/{store}" in r.measured["command"] and r.measured["commit"]
        assert r.figures.get("cold_us") and r.figures.get("call_us")
    assert all(r.measured["devices"] == ["NVIDIA H200"] for r in rows.values())
    geo = geomean(r.speedup for r in below)
    assert geo == pytest.approx(GEO_NN_H200, abs=1e-4)


def test_the_package_ships_the_nt_shapes_for_the_h200():
    """Layout nt: the H200's own rows at the H100's 160 nt shapes (twenty-ninth session: each
    shape's H100 program, its twins, the heuristic's proposals and the skinny list timed on an
    H200; benchmarks/README.md, nt_h200_s29; then a search round at the 31 under 1.0x,
    nt_weak_h200_s29; those from 1e8 to 1e11 re-chosen in the thirtieth's wave-fit round,
    wave_fit_h200_s30, the nine with K <= 512 and M x N >= 2^23 in the thirty-first's
    output-bound round, the 32 with K >= 4096 and M x N <= 2^21 in the thirty-second's
    long-K split round and the 20 with a narrow side in its streaming round), each legal, the
    large ones chosen under load; the 120 below 1e11 whose program had pdl ranked after another
    kernel in the thirty-fourth session; the thirty-fifth's round at the 44 under 1.0x and the
    call figures of the rest, as for nn)."""
    from gemmforge.search.measure.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows
            if r.device_class == "h200" and str(r.problem.layout) == "nt"}
    h100 = {r.problem for r in book.rows
            if r.device_class == "h100" and str(r.problem.layout) == "nt"}
    assert set(rows) == h100 == set(parse_shapes(f"@{SHAPES / 'nt_shipped.txt'}", "nt", "f32"))
    assert all(check(r.program, r.problem) is None for r in rows.values())
    weak = set(parse_shapes(f"@{SHAPES / 'nt_weak_h200.txt'}", "nt", "f32"))
    assert len(weak) == 31 and weak < set(rows)
    bound = {p for p in parse_shapes(f"@{SHAPES / 'output_bound_nt_h200.txt'}", "nt", "f32")
             if p.flops < 1e11}
    assert len(bound) == 9 and bound < set(rows)
    long_k = set(parse_shapes(f"@{SHAPES / 'long_k_split_nt_h200.txt'}", "nt", "f32"))
    assert len(long_k) == 32 and long_k < set(rows) and not long_k & bound
    stream = set(parse_shapes(f"@{SHAPES / 'stream_nt_h200.txt'}", "nt", "f32"))
    assert len(stream) == 20 and stream < set(rows) and not stream & bound
    after, under, no_call = _pdl_after_shapes("nt"), *_s35_shapes("nt")
    assert len(after) == 120 and after < set(rows)
    assert (len(under), len(no_call)) == (44, 91) and after <= under | no_call
    for problem, r in rows.items():
        if problem in under | no_call:
            _check_s35_row(r, under)
            continue
        store = ("output_bound_" if problem in bound else
                 "stream_" if problem in stream else
                 "long_k_split_" if problem in long_k else
                 "wave_fit_" if 1e8 <= problem.flops < 1e11 else
                 "nt_weak_h200_s29.db" if problem in weak else "nt_h200_s29.db")
        assert f".carry/h200/{store}" in r.measured["command"] and r.measured["commit"]
        assert r.measured["devices"] == ["NVIDIA H200"] and r.figures.get("cold_us")
    large = [r for r in rows.values() if r.problem.flops >= 1e11]
    assert len(large) == 7 and all(r.figures.get("sustained_us") for r in large)
    geo = geomean(r.speedup for r in rows.values())
    assert geo == pytest.approx(GEO_NT_H200, abs=1e-4)


def _s35_shapes(layout: str) -> tuple[set, set]:
    """The H200 rows of `layout` the thirty-fifth session's round re-chose (those under 1.0x
    after another kernel, and under 1.0x warm without an after figure), and those it re-timed
    as shipped for their call figures."""
    from gemmforge.search.measure.shapes import parse_shapes
    return tuple(set(parse_shapes(f"@{SHAPES / f'{name}_{layout}_h200.txt'}", layout, "f32"))
                 for name in ("under_after", "no_call"))


def _check_s35_row(r, under: set) -> None:
    """A row the thirty-fifth session's round re-chose (in `under`) or re-timed as shipped:
    its command names the list, and it has after, cold and call figures."""
    name = "under_after" if r.problem in under else "no_call"
    assert f"{name}_{{nn,nt}}_h200" in r.measured["command"] and r.measured["commit"]
    assert all(r.figures.get(f) for f in ("after_us", "cold_us", "call_us"))


def _pdl_after_shapes(layout: str) -> set:
    """The H200 rows of `layout` the thirty-fourth session ranked after another kernel."""
    from gemmforge.search.measure.shapes import parse_shapes
    return {p for name in ("pdl_small", "pdl_rest")
            for p in parse_shapes(f"@{SHAPES / f'{name}_{layout}_h200.txt'}", layout, "f32")}
