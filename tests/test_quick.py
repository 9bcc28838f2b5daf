"""search.tune.quick and `gemmforge tune --quick`: neighbourhood candidates (nearest shipped
programs, then the heuristic's), timed in one group on a replayed runner, the winner
recorded in the tuned database and then served as tuned-exact."""
from __future__ import annotations

import pytest

from gemmforge.cli import main
from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from gemmforge.policy.heuristic import HeuristicPolicy
from gemmforge.search.campaign.campaign_runners import ReplayGridRunner
from gemmforge.dispatch.choice import resolve, usable
from gemmforge.search.tune.database import TunedDatabase
from gemmforge.search.tune.quick import QUICK_BACKENDS, STUDY, neighbour_candidates, quick_tune
from gemmforge.search.measure.replay import ReplayRunner
from gemmforge.search.campaign.ship import ship
from gemmforge.search.measure.selection import selection_ratio

WGMMA = "cuda_wgmma sm_90a 128x192x64 w1x1 s5 sw128 row/4 pred k1 persistent c2x1 pingpong tma"
COOP = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop tma"
MMA = "cuda_mma sm_90a 128x128x32 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"
FAR = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 persistent c1x1 pingpong tma"
OLD = "cuda_mma sm_80 128x128x32 w2x2 s4 sw128 row/8 pred k1 dp c1x1 nows direct"
HEADER = "m,n,k,layout,acc,device,backend,program,status,kernel_us,cublas_us,speedup,rel_err\n"
H100 = "NVIDIA H100 80GB HBM3"
TARGET = Problem(4096, 4096, 3000)  # 1.0e11 FLOPs: the large class, picked under sustained load
MEDIUM = Problem(2048, 4096, 3000)  # below it: picked after another kernel
ROWS = [  # (m, n, k, program, speedup): distances to TARGET in the comments
    (4096, 4096, 2500, WGMMA, 1.00),   # 0.263: nearest
    (4096, 4096, 4096, WGMMA, 1.05),   # 0.449: the same program again
    (4096, 4096, 2048, COOP, 1.02),    # 0.551
    (4096, 4096, 2560, OLD, 1.10),     # 0.229, but an sm_80 program: not for sm_90a
    (4096, 4096, 1800, MMA, 1.01),     # 0.737 (a row under 1.0x would ship as cuBLAS)
    (8192, 8192, 8192, FAR, 1.03),     # 1.85: more than an octave away
]


@pytest.fixture
def shipped_file(tmp_path):
    """A shipped file of ROWS, all h100."""
    lines = [f"{m},{n},{k},nn,f32,{H100},{parse(p).backend},{p},ok,100,{100 * s},{s},2e-4\n"
             for m, n, k, p, s in ROWS]
    csv = tmp_path / "rows.csv"
    csv.write_text(HEADER + "".join(lines))
    out = tmp_path / "shipped.json"
    ship([csv], out, "test: measured", "h100")
    return out


def _heuristic(problem: Problem, per_backend: int, skip: list) -> list:
    """The heuristic's proposals neighbour_candidates should append after `skip`."""
    out = []
    for b in QUICK_BACKENDS:
        for p in HeuristicPolicy(b).propose(problem, Arch.SM90A, per_backend):
            if p not in skip + out and usable(p, problem):
                out.append(p)
    return out


def test_candidates_nearest_shipped_first_then_heuristic(shipped_file):
    got = neighbour_candidates(TARGET, Arch.SM90A, "h100", shipped_path=shipped_file)
    shipped = [parse(WGMMA), parse(COOP), parse(MMA)]  # distinct, by distance; OLD, FAR out
    assert got[:3] == shipped
    assert got[3:] == _heuristic(TARGET, 2, shipped) and len(got) > 3
    assert len({str(p) for p in got}) == len(got)
    assert all(check(p, TARGET) is None and p.arch == Arch.SM90A for p in got)
    assert {p.backend for p in got[3:]} == set(QUICK_BACKENDS)
    two = neighbour_candidates(TARGET, Arch.SM90A, "h100", 2, 1, shipped_path=shipped_file)
    assert two[:2] == shipped[:2] and two[2:] == _heuristic(TARGET, 1, shipped[:2])
    # the sibling class h200 reads h100's rows; a100 has none
    assert neighbour_candidates(TARGET, Arch.SM90A, "h200", shipped_path=shipped_file) == got


def test_candidates_skip_programs_illegal_at_the_shape(shipped_file):
    ragged = Problem(4096, 4096, 2998)  # TMA can't read rows of 2998 halves
    assert check(parse(WGMMA), ragged) is not None and check(parse(MMA), ragged) is None
    got = neighbour_candidates(ragged, Arch.SM90A, "h100", shipped_path=shipped_file)
    assert got[0] == parse(MMA) and parse(WGMMA) not in got and parse(COOP) not in got
    assert all(check(p, ragged) is None for p in got)


@pytest.mark.parametrize("cls, problem", [
    ("h100", Problem(2048, 2048, 1024)),   # every shipped row more than an octave away
    ("a100", TARGET),                      # no rows of that class
    (None, TARGET),                        # no class at all
])
def test_candidates_heuristic_alone_without_shipped_neighbours(shipped_file, cls, problem):
    got = neighbour_candidates(problem, Arch.SM90A, cls, shipped_path=shipped_file)
    assert got == _heuristic(problem, 2, []) and got


class CountingRunner(ReplayGridRunner):
    """A replayed grid runner that keeps every group it was asked to time."""

    def __init__(self, device: str):
        super().__init__(ReplayRunner(None, device=device))
        self.groups = []

    def measure_groups(self, groups, settings, on_group, seed=0):
        self.groups += [(p, list(programs)) for p, programs in groups]
        super().measure_groups(groups, settings, on_group, seed)


def test_quick_tune_records_the_best_of_one_group(shipped_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    db, runner = TunedDatabase(url), CountingRunner(H100)
    other = Problem(4096, 4096, 3500)
    outcomes = quick_tune(runner, [TARGET, other], db, "gemmforge tune --quick test",
                          shipped_path=shipped_file)
    assert [g[0] for g in runner.groups] == [TARGET, other]  # one group per shape
    for o, (_, programs) in zip(outcomes, runner.groups):
        assert o.candidates == programs == [str(p) for p in neighbour_candidates(
            o.problem, Arch.SM90A, "h100", shipped_path=shipped_file)]
        # the best by the ratio a confirmation picks by (sustained for this large shape)
        ratios = [selection_ratio(o.problem, r) for r in o.results if r.ok]
        assert selection_ratio(o.problem, o.best) == max(ratios) and o.recorded
        entry = db.best(H100, o.problem)
        assert (str(entry.program), entry.study) == (o.best.program, STUDY)
        assert entry.command == "gemmforge tune --quick test"
        # the entry serves matmul where it reads faster than cuBLAS, else cuBLAS does
        assert entry.ratio == selection_ratio(o.problem, o.best)
        was = resolve(o.problem, Arch.SM90A, "h100", shipped_path=shipped_file, use_tuned=False,
                      cublas="slower").provenance  # a neighbour's, or cuBLAS where it reads slower
        assert was in ("shipped-nearest", "cublas")
        assert (o.before, o.after) == (was, "tuned-exact" if entry.ratio >= 1.0 else "cublas")
        served = resolve(o.problem, Arch.SM90A, "h100", tuned_url=url,
                         shipped_path=shipped_file)
        assert served.program == entry.program and served.provenance == "tuned-exact"
    db.close()


def test_quick_tune_replayed_device_serves_no_gpu(shipped_file, tmp_path):
    db = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    [o] = quick_tune(CountingRunner("replay"), [TARGET], db, shipped_path=shipped_file)
    assert o.recorded and db.best("replay", TARGET) is not None
    assert (o.before, o.after) == ("heuristic", "heuristic")  # no class: nothing served
    assert o.candidates[0] == WGMMA  # neighbours still come from the h100 rows
    db.close()


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_quick_tune_then_tuned_exact(capsys, tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    argv = ("tune", "--quick", "--shapes", "600x14336x4096", "--replay", "synthetic",
            "--replay-device", H100, "--storage", url, "--report-dir", str(tmp_path))
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    entry = TunedDatabase(url).best(H100, Problem(600, 14336, 4096))
    now = "tuned-exact" if entry.ratio >= 1.0 else "cublas"  # cuBLAS where it still leads
    assert f"shipped-nearest -> {now}" in out and "1 of 1 shapes measured ok, 1 recorded" in out
    winner = [line for line in out.splitlines() if line.startswith(" *")]
    assert len(winner) == 1
    assert winner[0].split()[-len(str(entry.program).split()):] == str(entry.program).split()
    assert entry.command.startswith("gemmforge tune --quick")
    served = resolve(Problem(600, 14336, 4096), Arch.SM90A, "h100", tuned_url=url)
    assert served.provenance == "tuned-exact" and served.program == entry.program
    code, out, _ = _run(capsys, *argv)  # the same readings again: the stored row competed, won
    assert code == 0 and f"{now} -> {now}" in out and "1 recorded" in out
    assert TunedDatabase(url).best(H100, Problem(600, 14336, 4096)).program == entry.program


@pytest.mark.parametrize("argv, message", [
    (("--shapes", "77x4096x40z96", "--replay", "synthetic"), "--shapes: '77x4096x40z96'"),
    (("--shapes", "nonsense:3", "--replay", "synthetic"), "--shapes"),
    (("--shapes", "77x4096x4096", "--replay", "synthetic", "--storage", ":memory:"),
     "--storage :memory:"),
    (("--shapes", "77x4096x4096", "--replay", "synthetic", "--backends", "nope"),
     "--backends: 'nope'"),
])
def test_cli_quick_bad_input(capsys, argv, message):
    code, out, err = _run(capsys, "tune", "--quick", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_cli_quick_without_gpu_or_replay(capsys, tmp_path, monkeypatch):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the quick tune would run on it")
    db = tmp_path / "tuning.db"
    monkeypatch.setenv("GEMMFORGE_TUNE_DB", f"sqlite:///{db}")
    for _ in range(2):  # the refusal leaves no empty database behind to refuse the next run
        code, out, err = _run(capsys, "tune", "--quick", "--shapes", "77x4096x4096")
        assert code == 2 and "needs a CUDA GPU" in err and "--replay synthetic" in err
        assert "Traceback" not in err and not db.exists()


class AfterRunner(CountingRunner):
    """Answers each group with made-up figures: the first program fastest back to back (as a
    pdl program reads), the last fastest after another kernel."""

    def measure_groups(self, groups, settings, on_group, seed=0):
        from gemmforge.search.measure.records import Result
        assert "after" in settings.protocols  # timed as a campaign's confirmation is
        for p, programs in groups:
            last = len(programs) - 1
            on_group(p, [Result(text, p.m, p.n, p.k, device=self.device,
                                kernel_us=8.0 if i == 0 else 10.0, cublas_us=10.0,
                                cold_us=10.0, cublas_cold_us=10.0,
                                after_us=9.0 if i == last else 11.0, cublas_after_us=10.0)
                         for i, text in enumerate(programs)])


def test_quick_tune_picks_after_another_kernel_where_measured(shipped_file, tmp_path):
    db = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    [o] = quick_tune(AfterRunner(H100), [MEDIUM], db, shipped_path=shipped_file)
    assert len(o.candidates) > 1 and o.best.program == o.candidates[-1]
    assert o.best.after_speedup == pytest.approx(10 / 9)
    db.close()


def test_quick_lines_show_the_after_figure_that_picked(shipped_file, tmp_path):
    from gemmforge.cli.quick import _lines
    db = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    [o] = quick_tune(AfterRunner(H100), [MEDIUM], db, shipped_path=shipped_file)
    lines = _lines(o)
    assert lines[1].split()[:2] == ["1.250x,", "0.909x"]  # back to back, then after
    assert lines[-2].startswith(" *") and "1.111x after" in lines[-2]
    assert "(1.111x after another kernel, which picks it)" in lines[-1]
    db.close()
