"""A campaign re-run from the shipped winners (`--incumbents shipped --twins pdl`): each
shape's shipped program is timed first with its twins, and the confirmation weighs them
against whatever the lists add; replayed, no GPU."""
from __future__ import annotations

import csv
import json

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.search.campaign.portfolio import TWIN_FIELDS, Portfolio
from gemmforge.dispatch.shipped import shipped

ARCHS = (Arch.SM90A,)
WGMMA = "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct"
MMA = "cuda_mma sm_80 64x64x32 w2x2 s3 sw64 row/8 pred k1 dp c1x1 nows direct"
H100 = "NVIDIA H100 80GB HBM3"


def test_incumbent_first_then_its_legal_twins():
    small, other = Problem(64, 64, 1024), Problem(128, 64, 1024)
    portfolio = Portfolio(per_backend=0, incumbents={small: WGMMA, other: MMA},
                          twins=("pdl",))
    assert portfolio.programs_for(small, ARCHS) == [WGMMA, WGMMA + " pdl"]
    # pdl is sm_90a's alone: an sm_80 incumbent keeps no twin (and runs where sm_80 does)
    assert portfolio.programs_for(other, (Arch.SM90A, Arch.SM80)) == [MMA]
    assert portfolio.programs_for(Problem(64, 64, 64 * 3), ARCHS) == []  # no incumbent
    with_list = Portfolio(per_backend=2, incumbents={small: WGMMA}, twins=("pdl",),
                          per_shape=3)
    got = with_list.programs_for(small, ARCHS)
    assert got[:2] == [WGMMA, WGMMA + " pdl"] and len(got) == 3


def test_twins_and_incumbents_are_part_of_the_plan_signature():
    p = Problem(64, 64, 1024)
    plain = Portfolio(per_backend=0)
    seeded = Portfolio(per_backend=0, incumbents={p: WGMMA})
    assert plain.signature() != seeded.signature()
    assert seeded.signature() != Portfolio(per_backend=0, incumbents={p: WGMMA},
                                           twins=("pdl",)).signature()
    assert set(TWIN_FIELDS) == {"swap_ab", "pdl"}
    with pytest.raises(ValueError, match="twin field 'stages'"):
        Portfolio(twins=("stages",))


def _rerun(tmp_path, *extra):
    from gemmforge.cli import main
    return main(["campaign", "--storage", str(tmp_path / "r.db"), "--shapes",
                 "64x64x1024,4096x128x4096", "--replay", "synthetic", "--replay-device",
                 H100, "--per-backend", "0", "--search-budget", "0", "--quiet", *extra])


def test_cli_rerun_times_the_shipped_program_and_its_twin(tmp_path, capsys):
    assert _rerun(tmp_path, "--incumbents", "shipped", "--twins", "pdl") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["confirmed"] == 2
    assert _rerun(tmp_path, "--report", "rerun", "--report-dir", str(tmp_path)) == 0
    with (tmp_path / "rerun.csv").open() as f:
        table = {(int(r["m"]), int(r["n"]), int(r["k"])): r for r in csv.DictReader(f)}
    for shape, row in table.items():
        incumbent = shipped().exact("h100", Problem(*shape)).program_text
        twin = str(parse(incumbent).replace(pdl=True))
        assert row["program"] in {incumbent, twin}


def test_cli_rerun_needs_a_device_class_and_a_known_source(tmp_path, capsys):
    from gemmforge.cli import main
    args = ["campaign", "--storage", str(tmp_path / "x.db"), "--shapes", "64x64x1024",
            "--replay", "synthetic", "--incumbents", "shipped", "--quiet"]
    assert main(args) == 2  # the replay device is no GPU class
    assert "has no device class" in capsys.readouterr().err
    assert _rerun(tmp_path, "--twins", "stages") == 2
    assert "twin field 'stages'" in capsys.readouterr().err


def test_a_winner_is_chosen_over_l2_warm_and_cold_together():
    from gemmforge.search.measure.selection import selected_by, selection_ratio
    from gemmforge.search.measure.records import Result
    small, large = Problem(64, 64, 1024), Problem(4096, 4096, 8192)

    def timed(problem, warm_us, cold_us, sustained_us=None):
        return Result("p", problem.m, problem.n, problem.k, kernel_us=warm_us,
                      cublas_us=10.0, cold_us=cold_us, cublas_cold_us=10.0,
                      sustained_us=sustained_us,
                      cublas_sustained_us=None if sustained_us is None else 10.0)
    fast_warm_only = timed(small, 10 / 1.10, 10 / 0.85)   # overlaps launches warm, slow cold
    even = timed(small, 10.0, 10.0)
    assert selection_ratio(small, fast_warm_only) == pytest.approx((1.10 * 0.85) ** 0.5)
    assert selection_ratio(small, even) > selection_ratio(small, fast_warm_only)
    assert selected_by(small, even) == "kernel+cold"
    warm_only = Result("p", 64, 64, 1024, kernel_us=8.0, cublas_us=10.0)
    assert selection_ratio(small, warm_only) == 1.25 and selected_by(small, warm_only) == "kernel"
    under_load = timed(large, 8.0, 8.0, sustained_us=12.5)
    assert selection_ratio(large, under_load) == 0.8 and selected_by(large, under_load) == "sustained"


def test_the_after_protocol_picks_where_measured_below_the_large_class():
    """A pdl program overlaps its own previous launch in the kernel protocol and in the cold
    protocol's rotated copies; after another kernel it overlaps nothing and pays for pdl."""
    from gemmforge.search.measure.selection import selected_by, selection_ratio
    from gemmforge.search.measure.records import Result
    small, large = Problem(64, 64, 1024), Problem(4096, 4096, 8192)

    def timed(problem, warm_us, cold_us, after_us, sustained_us=None):
        return Result("p", problem.m, problem.n, problem.k, kernel_us=warm_us, cublas_us=10.0,
                      cold_us=cold_us, cublas_cold_us=10.0, after_us=after_us,
                      cublas_after_us=10.0, sustained_us=sustained_us,
                      cublas_sustained_us=None if sustained_us is None else 10.0)
    pdl = timed(small, 10 / 1.20, 10 / 1.15, 10 / 0.99)
    twin = timed(small, 10 / 1.03, 10 / 1.03, 10 / 1.03)
    assert selected_by(small, pdl) == selected_by(small, twin) == "after"
    assert selection_ratio(small, pdl) == pytest.approx(0.99)
    assert selection_ratio(small, twin) > selection_ratio(small, pdl)
    assert selected_by(large, timed(large, 8.0, 8.0, 8.0, sustained_us=12.5)) == "sustained"


def _two_classes(tmp_path, monkeypatch):
    """A shipped file where the H100 has rows at two shapes and the H200 at one of them (its
    own program there), read by the runtime: (own, lone, h100's program, h200's program)."""
    from shipped_helpers import shipped_file
    own, lone = Problem(64, 64, 1024), Problem(128, 64, 1024)
    other = WGMMA.replace("s8", "s4")
    shipped_file(tmp_path, [(p.m, p.n, p.k, WGMMA, 5.0) for p in (own, lone)])
    path = shipped_file(tmp_path, [(own.m, own.n, own.k, other, 4.0)], device="NVIDIA H200")
    monkeypatch.setenv("GEMMFORGE_SHIPPED", str(path))
    return own, lone, WGMMA, other


def test_an_h200_rerun_starts_from_its_own_rows_then_the_h100s(tmp_path, monkeypatch):
    from gemmforge.cli.campaign import incumbents_from
    got = incumbents_from({"incumbents": "shipped"}, "NVIDIA H200")
    h100 = incumbents_from({"incumbents": "shipped"}, H100)
    assert len(got) >= len(h100) and incumbents_from({"incumbents": None}, H100) == {}
    for row in shipped().rows:
        if row.device_class == "h200":
            assert got[row.problem] == row.program_text
    # a shape the H200 has no row for takes the H100's
    own, lone, h100_text, h200_text = _two_classes(tmp_path, monkeypatch)
    got = incumbents_from({"incumbents": "shipped"}, "NVIDIA H200")
    assert got == {own: h200_text, lone: h100_text}
    assert incumbents_from({"incumbents": "shipped"}, H100) == {own: h100_text, lone: h100_text}


def test_shipped_plus_siblings_puts_the_own_class_first_then_the_siblings(tmp_path, monkeypatch):
    from gemmforge.cli.campaign import incumbents_from
    both = incumbents_from({"incumbents": "shipped+siblings"}, "NVIDIA H200")
    rows = shipped().rows
    h200 = {r.problem: r.program_text for r in rows if r.device_class == "h200"}
    h100 = {r.problem: r.program_text for r in rows if r.device_class == "h100"}
    assert h200, "the shipped file has H200 rows to weigh"
    for problem, own in h200.items():
        texts = both[problem]
        sibling = h100.get(problem)  # the H200 has rows the H100 lacks (its model-layer tune)
        assert texts[0] == own and (sibling is None or sibling in texts)
        assert len(texts) == len(set(texts)) == (1 if own == sibling or sibling is None else 2)
    with pytest.raises(Exception, match="one of shipped, shipped\\+siblings"):
        incumbents_from({"incumbents": "cublas"}, H100)
    # where the H200 has no row, the H100's alone
    own, lone, h100_text, h200_text = _two_classes(tmp_path, monkeypatch)
    both = incumbents_from({"incumbents": "shipped+siblings"}, "NVIDIA H200")
    assert both == {own: (h200_text, h100_text), lone: (h100_text,)}


def test_several_incumbents_each_come_with_their_twins_once():
    small = Problem(64, 64, 1024)
    other = WGMMA.replace("s8", "s4")
    portfolio = Portfolio(per_backend=0, incumbents={small: (WGMMA, other, WGMMA)},
                          twins=("pdl",))
    assert portfolio.programs_for(small, ARCHS) == [WGMMA, WGMMA + " pdl", other, other + " pdl"]
    one = Portfolio(per_backend=0, incumbents={small: WGMMA})
    assert one.signature() == Portfolio(per_backend=0, incumbents={small: WGMMA}).signature()
    assert one.signature() != Portfolio(per_backend=0,
                                        incumbents={small: (WGMMA, other)}).signature()


def test_cli_h200_rerun_confirms_its_own_winner_beside_the_h100s(tmp_path, capsys):
    from gemmforge.cli import main
    from gemmforge.search.measure.campaign_store import CampaignStore
    rows = shipped().rows
    h200 = {r.problem: r.program_text for r in rows if r.device_class == "h200"}
    problem = next(p for p, text in h200.items() if shipped().exact("h100", p).program_text != text)
    shape = f"{problem.m}x{problem.n}x{problem.k}"
    store = tmp_path / "h200.db"
    assert main(["campaign", "--storage", str(store), "--shapes", shape, "--replay", "synthetic",
                 "--replay-device", "NVIDIA H200", "--incumbents", "shipped+siblings",
                 "--per-backend", "0", "--per-shape", "2", "--top", "2", "--search-budget", "0",
                 "--sustained-seconds", "0.5", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["confirmed"] == 1
    s = CampaignStore(store)
    try:
        confirmed = {r.program for r in s.results(problem, "confirm")}
    finally:
        s.close()
    assert confirmed == {h200[problem], shipped().exact("h100", problem).program_text}
