"""A tune never leaves a shape slower than before it: replayed on the CPU, for quick tunes
of model layer shapes. The program the resolver served before the tune (the incumbent)
competes in the tune's own group beside cuBLAS; afterwards the shape is served by the
group's winner where it read faster than cuBLAS, else by cuBLAS (dispatch.choice's cuBLAS
rule), so what serves reads at least max(the incumbent, cuBLAS) in that group. The same for a
study tune (`gemmforge tune --shapes ... --budget N`), whose confirmation times the incumbent
beside its own best, and for `gemmforge tune --model`, a quick tune then a study per shape.
(tests/test_model_layers.py: what `--model` enumerates.)"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gemmforge.cli import main  # noqa: E402
from gemmforge.dispatch.choice import resolve  # noqa: E402
from gemmforge.ir.program import Arch, Problem  # noqa: E402
from gemmforge.search.campaign.campaign_runners import ReplayGridRunner  # noqa: E402
from gemmforge.search.measure.replay import ReplayRunner  # noqa: E402
from gemmforge.search.measure.selection import selection_ratio  # noqa: E402
from gemmforge.search.tune.database import TunedDatabase  # noqa: E402
from gemmforge.search.tune.quick import quick_tune  # noqa: E402

H200 = "NVIDIA H200"
# Llama-class layers at decode and prefill token counts: shipped rows exist at some (the
# incumbent is an exact row), neighbours serve the others
SHAPES = [Problem(m, n, k, "nt") for m in (1, 16, 64, 256) for n, k in
          ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336))]


def test_a_quick_tune_never_serves_a_shape_slower_than_before(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    db = TunedDatabase(url)
    runner = ReplayGridRunner(ReplayRunner(None, device=H200))
    before = {p: resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower") for p in SHAPES}
    outcomes = quick_tune(runner, SHAPES, db, "gemmforge tune --model test")
    checked = 0
    for o in outcomes:
        incumbent = before[o.problem]
        by_text = dict(zip(o.candidates, o.results))
        if not incumbent.cublas:
            assert str(incumbent.program) in o.candidates  # the incumbent competed
        incumbent_ratio = (1.0 if incumbent.cublas
                           else selection_ratio(o.problem, by_text[str(incumbent.program)]))
        served = resolve(o.problem, Arch.SM90A, "h200", tuned_url=url, cublas="slower")
        served_ratio = (1.0 if served.cublas
                        else selection_ratio(o.problem, by_text[str(served.program)]))
        assert served_ratio >= incumbent_ratio, (o.problem, served.line(), incumbent.line())
        assert served.cublas or served_ratio >= 1.0
        checked += 1
    assert checked == len(SHAPES)
    db.close()


STUDY_SHAPES = [Problem(m, n, k, "nt") for m in (16, 256) for n, k in
                ((4096, 4096), (1024, 4096), (14336, 4096))]


def test_a_study_tune_never_serves_a_shape_slower_than_before(tmp_path):
    """A study's confirmation times the resolver's incumbent beside its own best and cuBLAS
    (the replay answers each program deterministically, so every reading of a program is
    the confirmation's); the winner is recorded, and where cuBLAS wins the record says so."""
    from gemmforge.policy.heuristic import HeuristicPolicy
    from gemmforge.search.measure.replay import synthetic_result
    from gemmforge.search.tune.tuner import Budget, Tuner, TuneSettings
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    db = TunedDatabase(url)
    before = {p: resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower")
              for p in STUDY_SHAPES}
    tuner = Tuner(ReplayRunner(None, device=H200, archs=("sm_90a",)), HeuristicPolicy(),
                  f"sqlite:///{tmp_path / 'studies.db'}",
                  TuneSettings(budget=Budget(6), batch=6, seed=0, heartbeat_s=1, grace_s=2),
                  database=db)
    for p in STUDY_SHAPES:
        outcome = tuner.tune(p)
        confirmed = tuner.study(p).user_attrs["confirmed"]
        incumbent = before[p]
        if not incumbent.cublas:
            assert str(incumbent.program) in confirmed["programs"]  # the incumbent competed
        ratio = lambda c: 1.0 if c.cublas else synthetic_result(c.program, p).speedup  # noqa: E731
        served = resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower")
        assert ratio(served) >= ratio(incumbent), (p, served.line(), incumbent.line())
        assert served.cublas or ratio(served) >= 1.0
        assert str(db.best(H200, p).program) == outcome.best.program  # only the winner
        assert served.cublas == (outcome.best_ratio < 1.0)  # cuBLAS won: cuBLAS serves
    db.close()


def test_tune_model_never_serves_a_layer_slower_than_before(tmp_path, capsys):
    """`gemmforge tune --model` on a Qwen2-7B config.json, replayed as an H200: the quick
    tune then the study at every layer shape; each is served at least as fast as before
    (the synthetic replay reads a program the same every time it is timed)."""
    from pathlib import Path
    from gemmforge.search.measure.replay import synthetic_result
    config = Path(__file__).parent / "data" / "model_configs" / "qwen2-7b.json"
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    problems = [Problem(16, n, k, "nt") for n, k in
                ((512, 3584), (3584, 3584), (3584, 18944), (18944, 3584), (152064, 3584))]
    before = {p: resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower") for p in problems}
    assert main(["tune", "--model", str(config), "--tokens", "9", "--budget", "4", "--batch", "4",
                 "--replay", "synthetic", "--replay-device", H200, "--storage", url,
                 "--report", "", "--quiet", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "5 layer shapes n x k (512x3584 bias, 3584x3584 bias, 3584x18944" in out
    ratio = lambda c, p: 1.0 if c.cublas else synthetic_result(c.program, p).speedup  # noqa: E731
    db = TunedDatabase(url)
    for p in problems:
        served = resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower")
        assert db.best(H200, p) is not None and served.source in ("tuned", "cublas")
        assert ratio(served, p) >= ratio(before[p], p), (p, served.line(), before[p].line())
    db.close()


def test_tune_shapes_never_serves_a_shape_slower_than_before(tmp_path):
    """`gemmforge tune --shapes ... --budget N` replayed as an H200 (the study alone: no quick
    tune first): every shape served at least as fast as before, cuBLAS where it won."""
    from gemmforge.search.measure.replay import synthetic_result
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    before = {p: resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower")
              for p in STUDY_SHAPES}
    shapes = ",".join(f"{p.m}x{p.n}x{p.k}" for p in STUDY_SHAPES)
    assert main(["tune", "--shapes", shapes, "--layout", "nt", "--budget", "6", "--batch", "6",
                 "--replay", "synthetic", "--replay-device", H200, "--storage", url,
                 "--report", "", "--quiet", "--seed", "0"]) == 0
    ratio = lambda c, p: 1.0 if c.cublas else synthetic_result(c.program, p).speedup  # noqa: E731
    for p in STUDY_SHAPES:
        served = resolve(p, Arch.SM90A, "h200", tuned_url=url, cublas="slower")
        assert ratio(served, p) >= ratio(before[p], p), (p, served.line(), before[p].line())
