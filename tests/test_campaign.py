"""gemmforge.search.campaign.campaign on the replay runner: the passes, the store, selection under
load, the re-gate, time limits, and a campaign killed at random moments that resumes with
nothing recorded lost or measured again."""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from gemmforge.search.measure.selection import selection_ratio
from gemmforge.search.measure.campaign_store import CampaignStore
from gemmforge.search.campaign.portfolio import Portfolio, read_programs
from gemmforge.search.measure.shapes import shape_class
from gemmforge.search.measure.records import Result
from gemmforge.search.measure.shapes import parse_shapes
from campaign_helpers import LARGE_LIST, ROOT, SHAPES, campaign, settings

ARCHS = (Arch.SM90A, Arch.SM80)


def _rows(db) -> list[tuple]:
    store = CampaignStore(db)
    try:
        return store.rows()
    finally:
        store.close()


def test_shape_classes_and_the_portfolio_filter():
    assert shape_class(Problem(64, 64, 64)) == "small"
    assert shape_class(Problem(1024, 1024, 1024)) == "medium"
    assert shape_class(Problem(4096, 4096, 4096)) == "large"
    portfolio = settings().portfolio
    large, small = Problem(4096, 4096, 8192), Problem(64, 64, 64)
    listed = read_programs(LARGE_LIST)
    got = portfolio.programs_for(large, ARCHS)
    assert len(got) == portfolio.per_shape and set(got) & set(listed)
    got_small = portfolio.programs_for(small, ARCHS)
    assert not set(got_small) & set(listed)  # a large-class list stays in its class
    for problem, programs in ((large, got), (small, got_small)):
        assert len(set(programs)) == len(programs)
        assert all(check(parse(p), problem) is None for p in programs)
    with pytest.raises(ValueError, match="class"):
        Portfolio(lists=(("huge", str(LARGE_LIST)),))


def test_store_records_once_and_a_round_with_its_done_mark(tmp_path):
    store = CampaignStore(tmp_path / "c.db")
    p = Problem(64, 64, 64)
    store.plan(p, "portfolio", ["a", "b"])
    store.plan(p, "portfolio", ["b", "c"])
    assert store.planned(p, "portfolio") == ["a", "b", "c"]
    first = Result("a", 64, 64, 64, kernel_us=2.0, cublas_us=2.0)
    assert store.record(p, "portfolio", [first]) == 1
    assert store.record(p, "portfolio", [Result("a", 64, 64, 64, kernel_us=1.0)]) == 0
    assert store.results(p, "portfolio")[0].kernel_us == 2.0  # never replaced
    assert store.pending(p, "portfolio") == ["b", "c"]
    assert store.last_round(p, "confirm") is None
    store.record(p, "confirm", [first], round_=1, done=True)
    assert store.last_round(p, "confirm") == 1 and store.is_done(p, "confirm", 1)


def test_a_campaign_runs_every_pass_and_a_second_run_measures_nothing(tmp_path):
    db, bad = tmp_path / "c.db", tmp_path / "violations.jsonl"
    c = campaign(db, bad)
    summary = c.run()
    shapes = len(SHAPES.split(","))
    assert summary["stopped"] is None and summary["confirmed"] == shapes
    assert summary["portfolio_pending"] == 0 and summary["eta_s"] == 0
    rows = _rows(db)
    assert len(rows) == len(set(rows))
    planned = sum(len(c.store.planned(p, "portfolio")) for p in c.problems)
    assert summary["measurements"]["portfolio"] == planned
    weak = c.weak()
    assert weak and summary["measurements"]["search"] == 2 * len(weak)
    assert all(c.store.is_done(p, "search") for p in weak)
    again = campaign(db, bad).run()
    assert _rows(db) == rows and again["this_run"] == {}
    assert not bad.exists()


def test_the_large_class_is_won_under_sustained_load(tmp_path):
    c = campaign(tmp_path / "c.db", tmp_path / "v.jsonl")
    c.run()
    large = [p for p in c.problems if shape_class(p) == "large"]
    assert large
    for p in c.problems:
        last = c.store.results(p, "confirm", c.store.last_round(p, "confirm"))
        winner = c.winner(p)
        assert winner.program == max(last, key=lambda r: selection_ratio(p, r)).program
        if p in large:
            assert all(r.sustained_us and r.cublas_sustained_us for r in last)
            assert winner.sustained_speedup == max(r.sustained_speedup for r in last)
        else:
            assert all(r.sustained_us is None for r in last)


def test_a_program_that_fails_the_regate_is_never_the_winner(tmp_path):
    db, bad = tmp_path / "c.db", tmp_path / "v.jsonl"
    first = campaign(db, bad, shapes="1024x4096x64")
    first.run()
    p = first.problems[0]
    champion = first.winner(p).program
    c = campaign(tmp_path / "d.db", bad, shapes="1024x4096x64", wrong=[champion])
    c.run()
    assert c.winner(p).program != champion
    assert champion not in [r.program for r in c.measured_best(p)]
    assert champion not in c.contenders(p)


def test_max_seconds_ends_cleanly_and_the_rest_resumes(tmp_path):
    db, bad = tmp_path / "c.db", tmp_path / "v.jsonl"
    whole = campaign(tmp_path / "whole.db", bad, search_budget=0)
    whole.run()
    runs, summary = 0, {"stopped": "not yet"}
    while summary["stopped"] and runs < 40:
        summary = campaign(db, bad, delay_s=0.03, search_budget=0).run(max_seconds=0.8)
        runs += 1
    assert runs >= 3 and summary["stopped"] is None
    assert sorted(_rows(db)) == sorted(_rows(tmp_path / "whole.db"))
    assert not bad.exists()


def test_a_killed_campaign_resumes_with_nothing_lost_or_measured_twice(tmp_path):
    """SIGKILL at random moments; each run resumes from the file. At the end every planned
    measurement is recorded exactly once, as in a run never killed, and no run was ever
    asked to measure what the file already held."""
    db, bad = tmp_path / "c.db", tmp_path / "v.jsonl"
    rng, kills = random.Random(7), 0
    helper = ROOT / "tests" / "campaign_helpers.py"
    for attempt in range(30):
        proc = subprocess.Popen([sys.executable, str(helper), str(db), str(bad), "0.04"],
                                cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if attempt < 6:
            time.sleep(rng.uniform(1.0, 3.0))  # a whole run works ~6 s: >= 3 kills land
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        out, err = proc.communicate(timeout=600)
        if proc.returncode == 0:
            summary = json.loads(out.strip().splitlines()[-1])
            if summary["stopped"] is None and summary["confirmed"] == len(SHAPES.split(",")):
                break
    else:
        pytest.fail(f"the campaign never finished: {err[-2000:]}")
    assert kills >= 3
    assert not bad.exists(), bad.read_text()
    rows = _rows(db)
    assert len(rows) == len(set(rows))
    whole = campaign(tmp_path / "whole.db", tmp_path / "w.jsonl")
    whole.run()
    ref = _rows(tmp_path / "whole.db")
    portfolio = sorted(r for r in rows if r[1] == "portfolio")
    assert portfolio == sorted(r for r in ref if r[1] == "portfolio")
    searched = Counter(r[0] for r in rows if r[1] == "search")
    assert searched == Counter(r[0] for r in ref if r[1] == "search")
    c = campaign(db, bad)
    assert all(c.winner(p) is not None for p in c.problems)


def test_cli_campaign_replayed_status_and_report(tmp_path, capsys):
    from gemmforge.cli import main
    db = tmp_path / "c.db"
    args = ["campaign", "--storage", str(db), "--shapes", "64x64x64,4096x4096x8192",
            "--replay", "synthetic", "--search-budget", "0", "--per-backend", "2",
            "--quiet"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["confirmed"] == 2 and summary["this_run"]["portfolio"]["candidates"] > 0
    assert main(["campaign", "--storage", str(db), "--status"]) == 0  # options from the file
    assert json.loads(capsys.readouterr().out)["shapes"] == 2
    assert main(["campaign", "--storage", str(db), "--report", "grid_t",
                 "--report-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| 1e11 |" in out and (tmp_path / "grid_t.png").exists()
    import csv
    with (tmp_path / "grid_t.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [r["regate"] for r in table] == ["ok", "ok"]
    assert table[1]["selected_by"] == "sustained" and table[1]["cuda_l2_offline_vs_torch"]
    with (tmp_path / "grid_t_decades.csv").open() as f:
        decades = list(csv.DictReader(f))
    assert [d["decade"] for d in decades] == ["1e5", "1e11", "all"]
    assert main(["campaign", "--storage", str(db), "--passes", "nope"]) == 2


def test_report_of_the_shipped_file_alone(tmp_path, capsys):
    """--shipped-only: every grid shape's row from the shipped file (its median ratio), none
    from the store, which names the device class; a store with no class is refused."""
    import csv
    from gemmforge.cli import main
    from gemmforge.search.measure.shapes import parse_shapes
    from gemmforge.dispatch.shipped import shipped
    db = tmp_path / "c.db"
    assert main(["campaign", "--storage", str(db), "--shapes", "64x64x64", "--replay",
                 "synthetic", "--search-budget", "0", "--per-backend", "2", "--quiet"]) == 0
    capsys.readouterr()
    report = ["campaign", "--storage", str(db), "--report", "g", "--report-dir", str(tmp_path),
              "--shipped-only"]
    assert main(report) == 2  # device "replay": no class to read the shipped file for
    assert "no device class" in capsys.readouterr().err
    with CampaignStore(db).lock() as store:
        store.put("device", "NVIDIA H100 80GB HBM3")
    assert main(report) == 0
    with (tmp_path / "g.csv").open() as f:
        table = {(int(r["m"]), int(r["n"]), int(r["k"])): r for r in csv.DictReader(f)}
    grid = parse_shapes("grid")
    assert len(table) == len(grid) == 1000
    assert {r["source"] for r in table.values()} == {"shipped"}
    for p in grid[::97]:
        row, shipped_row = table[(p.m, p.n, p.k)], shipped().exact("h100", p)
        assert row["program"] == shipped_row.program_text
        assert float(row["speedup"]) == pytest.approx(shipped_row.speedup)


def test_one_campaign_per_store(tmp_path):
    with CampaignStore(tmp_path / "c.db").lock():
        with pytest.raises(RuntimeError, match="another campaign"):
            with CampaignStore(tmp_path / "c.db").lock():
                pass
    with CampaignStore(tmp_path / "c.db").lock():  # released with its holder
        pass


def test_grid_shapes_by_flop_class():
    from gemmforge.ir.program import IRError
    from gemmforge.search.measure.shapes import shape_class
    from gemmforge.search.measure.shapes import parse_shapes
    below = parse_shapes("grid:small,medium", "nt")
    large = parse_shapes("grid:large")
    assert len(below) + len(large) == 1000 and len(large) == 187
    assert {shape_class(p) for p in below} == {"small", "medium"}
    assert all(str(p.layout) == "nt" for p in below)
    with pytest.raises(IRError, match="unknown class tiny"):
        parse_shapes("grid:tiny")


def test_planning_many_shapes_in_processes_gives_the_same_plan(monkeypatch):
    from gemmforge.search.campaign import portfolio as module
    from gemmforge.search.measure.shapes import parse_shapes
    problems = parse_shapes("64x64x64,1024x4096x64,4096x4096x8192")
    alone = [settings().portfolio.programs_for(p, ARCHS) for p in problems]
    monkeypatch.setattr(module, "PARALLEL_PLAN", 2)
    assert settings().portfolio.plan(problems, ARCHS) == alone


def test_report_fills_grid_shapes_from_the_shipped_file():
    from gemmforge.search.campaign.grid_report import shipped_rows
    from gemmforge.search.measure.shapes import parse_shapes
    from gemmforge.search.campaign.ship import refusal
    from gemmforge.dispatch.shipped import shipped
    large = parse_shapes("grid:large")
    rows = shipped_rows(large + parse_shapes("77x6144x4096"), "h100", "NVIDIA H100 80GB HBM3")
    assert len(rows) == sum(shipped().exact("h100", p) is not None for p in large) > 100
    result, extra = rows[0]
    row = shipped().exact("h100", large[0])
    assert result.program == row.program_text
    assert result.speedup == pytest.approx(row.speedup)  # the median of readings, as shipped
    assert extra["source"] == "shipped" and extra["command"] == row.measured["command"]
    as_csv = {**vars(result), **extra}
    assert refusal({k: "" if v is None else str(v) for k, v in as_csv.items()},
                   "h100") == "regate not passed"


def _round(programs, cublas_us, kernel_us):
    return [Result(p, 1024, 4096, 64, kernel_us=k, cublas_us=cublas_us, cold_us=k,
                   cublas_cold_us=cublas_us) for p, k in zip(programs, kernel_us)]


def test_disturbed_rounds_are_told_by_their_cublas_reading():
    from gemmforge.search.measure.selection import DISTURBED, disturbed
    calm, busy = _round("ab", 3.6, (3.3, 3.4)), _round("ab", 3.6 * DISTURBED * 1.1, (7.8, 90.0))
    assert disturbed({1: calm, 2: busy, 3: calm}) == {2}
    assert disturbed({1: busy, 2: calm}) == {1}
    assert disturbed({1: busy}) == set()  # one reading: nothing to compare with
    assert disturbed({1: calm, 2: _round("ab", 3.6 * DISTURBED * 0.9, (3.3, 3.4))}) == set()


def test_a_disturbed_confirmation_neither_picks_the_winner_nor_repeats_forever(tmp_path):
    c = campaign(tmp_path / "c.db", tmp_path / "v.jsonl", shapes="1024x4096x64")
    c.run()
    p = c.problems[0]
    champion = c.winner(p)
    last = c.store.last_round(p, "confirm")
    programs = c.contenders(p)
    assert champion is not None and champion.program in programs and len(programs) >= 2
    other = next(q for q in programs if q != champion.program)
    # a round on a disturbed GPU: cuBLAS 5x slower, and the ranking turned over
    slow = [Result(q, p.m, p.n, p.k, kernel_us=5.0 if q == other else 50.0,
                   cublas_us=5 * champion.cublas_us, cold_us=5.0 if q == other else 50.0,
                   cublas_cold_us=5 * champion.cublas_us) for q in programs]
    c.store.record(p, "confirm", slow, round_=last + 1, done=True)
    assert c.winner(p).program == champion.program  # the disturbed round is passed over
    assert c.needs_confirmation(p, set()) == programs  # measured once more
    c.store.record(p, "confirm", slow, round_=last + 2, done=True)
    assert c.needs_confirmation(p, set()) == []  # twice disturbed: no endless retries
    assert c.winner(p).program == champion.program


def test_a_group_whose_cublas_read_slow_does_not_outrank_a_calm_one():
    """4096x64x4096 on an H100: programs timed beside a cuBLAS reading of 13.1 us read
    1.03-1.04x; one timed beside 9.5 us read 0.98x, and was the faster kernel."""
    from gemmforge.search.measure.selection import comparable_speedup
    slow_group = Result("old", 4096, 64, 4096, kernel_us=12.6, cublas_us=13.1)
    calm_group = Result("new", 4096, 64, 4096, kernel_us=9.7, cublas_us=9.5)
    figure = comparable_speedup([slow_group, calm_group])
    assert slow_group.speedup > calm_group.speedup
    assert figure(calm_group) == calm_group.speedup
    assert figure(calm_group) > figure(slow_group) == 9.5 / 12.6
    # readings within SAME_CUBLAS of each other are compared by their ratios as they are
    near = Result("near", 4096, 64, 4096, kernel_us=10.0, cublas_us=10.5)
    assert comparable_speedup([near, calm_group])(near) == near.speedup


def test_portfolio_readings_rank_after_another_kernel_below_the_large_class():
    """A pdl program leads back to back by overlapping its own launches; after another kernel
    its twin leads, and that is what the confirmation picks by, so the twin must reach it."""
    from gemmforge.search.measure.selection import comparable_speedup, ranking_protocol
    small = Problem(512, 512, 512)

    def read(name, kernel_us, after_us, cublas_after_us=4.0):
        return Result(name, 512, 512, 512, kernel_us=kernel_us, cublas_us=4.0,
                      after_us=after_us, cublas_after_us=cublas_after_us)
    pdl, twin = read("pdl", 3.0, 4.2), read("twin", 3.8, 3.6)
    assert ranking_protocol(small, [pdl, twin]) == "after"
    figure = comparable_speedup([pdl, twin], "after")
    assert figure(twin) > figure(pdl) and figure(twin) == twin.after_speedup
    # a group whose cuBLAS read slow after the add: its program against the fastest reading
    slow = read("slow", 3.8, 3.9, cublas_after_us=6.0)
    assert comparable_speedup([slow, twin], "after")(slow) == 4.0 / 3.9
    # one reading without after figures, or the large class: the kernel protocol ranks
    assert ranking_protocol(small, [pdl, Result("old", 512, 512, 512, kernel_us=3.0,
                                                 cublas_us=4.0)]) == "kernel"
    assert ranking_protocol(Problem(8192, 8192, 8192), [pdl, twin]) == "kernel"
    assert comparable_speedup([pdl, twin])(pdl) == pdl.speedup


def test_reconfirm_confirms_every_shape_once_more_and_resumes(tmp_path):
    """After the timing protocol changes, every shape is confirmed once more: a later run
    naming the same reason resumes (nothing twice), and then the campaign is through."""
    db, bad = tmp_path / "c.db", tmp_path / "v.jsonl"
    c = campaign(db, bad)
    c.run()
    before = {p: c.store.last_round(p, "confirm") for p in c.problems}
    assert c.reconfirm("cold rotated") == len(c.problems)
    weak = set(c.weak())
    assert all(c.needs_confirmation(p, weak) for p in c.problems)
    first = c.problems[0]
    again = campaign(db, bad)
    assert again.reconfirm("cold rotated") == 0  # resumed, not marked again
    summary = again.run(passes=("confirm",))
    assert summary["this_run"]["confirm"]["candidates"] > 0
    assert {p: again.store.last_round(p, "confirm") for p in again.problems} == {
        p: r + 1 for p, r in before.items()}
    assert again.winner(first) is not None
    assert campaign(db, bad).run(passes=("confirm",))["this_run"] == {}
    assert not bad.exists()
