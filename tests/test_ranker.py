"""dispatch.ranker (the learned cost model) and the resolver's learned rule: the model file
walks like the trees it was written from, a missing or broken file falls back to the wave
rule, the rule serves only legal programs of allowed backends, and training works on a tiny
store."""
from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.dispatch import ranker
from gemmforge.dispatch.choice import MAX_DISTANCE, resolve
from shipped_helpers import shipped_file as _shipped

PINGPONG = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 persistent c1x1 pingpong tma"
TALL = "cuda_wgmma sm_90a 192x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 pingpong tma"
TRITON = "triton sm_90a 64x64x64 w1x4 s4 swnone row/8 pred k1 dp c1x1 nows direct pdl"
TRITON_TALL = "triton sm_90a 128x64x64 w1x4 s2 swnone row/8 pred k1 dp c1x1 nows direct pdl"
BM = ranker.FEATURES.index("log2_bm")


def _model(programs=(PINGPONG, TALL, TRITON, TRITON_TALL), shapes=500, layout="nn",
           leaves=(0, 1000, 2000)) -> dict:
    """A model file's content whose one tree scores a program by its tile's rows:
    bm 64 -> 0, 128 -> 1, 192 and more -> 2 (`leaves`, in units of leaf_scale)."""
    low, mid, high = leaves
    tree = [[BM, 6.5, 2], low, [BM, 7.5, 4], mid, high]
    return {"format": ranker.FORMAT, "device_class": "h100", "layout": layout,
            "features": list(ranker.FEATURES), "base": 0.5, "leaf_scale": 1e-3,
            "programs": {t: shapes for t in programs}, "trained": {"command": "test"},
            "trees": [tree]}


def test_the_trees_walk_to_their_leaves():
    model = ranker.from_json(_model())
    p = Problem(333, 6144, 4096)
    scores = model.scores([parse(t) for t in (TRITON, PINGPONG, TALL)], p, 132)
    assert scores.tolist() == [0.5, 1.5, 2.5]
    assert model.programs[TALL] == 500 and model.trained == {"command": "test"}


def test_a_file_of_another_format_or_feature_list_is_refused(tmp_path):
    with pytest.raises(ranker.ModelError, match="not a gemmforge-ranker/1"):
        ranker.from_json({"format": "other"})
    with pytest.raises(ranker.ModelError, match="features"):
        ranker.from_json({**_model(), "features": ["log2_m"]})
    with pytest.raises(ranker.ModelError, match="bad tree"):
        ranker.from_json({**_model(), "trees": [[[99, 0.0, 2], 0, 0]]})
    with pytest.raises(ranker.ModelError, match="bad tree"):
        ranker.from_json({**_model(), "trees": [[[0, 0.0, 0], 0, 0]]})
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert ranker.load(broken) is None and ranker.load(tmp_path / "absent.json") is None
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_model()))
    assert ranker.load(good).device_class == "h100"


@pytest.fixture
def book(tmp_path):
    # neighbours of 333x6144x4096: the nearest (320) ships PINGPONG, the others one each
    return _shipped(tmp_path, [(320, 6144, 4096, PINGPONG, 60.0),
                               (512, 6144, 4096, TALL, 70.0),
                               (256, 6144, 4096, TRITON, 90.0),
                               (256, 6144, 8192, TRITON_TALL, 150.0)])


def test_the_learned_rule_serves_the_model_s_first_choice(book):
    kw = dict(shipped_path=book, use_tuned=False)
    model = ranker.from_json(_model())
    chosen = resolve(Problem(333, 6144, 4096), Arch.SM90A, "h100", rule="learned",
                     model=model, **kw)
    assert str(chosen.program) == TALL and chosen.ranked == 4
    assert chosen.provenance == "shipped-nearest"
    assert chosen.measured == Problem(512, 6144, 4096)
    assert "the learned model's first usable of 4 shipped programs" in chosen.line()
    again = resolve(Problem(333, 6144, 4096), Arch.SM90A, "h100", rule="learned",
                    model=model, **kw)
    assert again == chosen  # deterministic
    # an exact row is served as it is, the model not asked
    exact = resolve(Problem(320, 6144, 4096), Arch.SM90A, "h100", rule="learned",
                    model=model, **kw)
    assert str(exact.program) == PINGPONG and exact.ranked is None


def test_an_h200_s_own_rows_are_ranked_by_the_h100_s_model(tmp_path):
    # the same neighbours as `book`, shipped as an H200's rows: the H100's model ranks them
    rows = [(320, 6144, 4096, PINGPONG, 60.0), (512, 6144, 4096, TALL, 70.0),
            (256, 6144, 4096, TRITON, 90.0), (256, 6144, 8192, TRITON_TALL, 150.0)]
    h200 = _shipped(tmp_path, rows, device="NVIDIA H200")
    kw = dict(shipped_path=h200, use_tuned=False)
    p = Problem(333, 6144, 4096)
    waves = resolve(p, Arch.SM90A, "h200", rule="waves", **kw)
    short = _model(leaves=(2000, 1000, 0))  # prefers 64-row tiles, unlike the wave rule
    chosen = resolve(p, Arch.SM90A, "h200", rule="learned", model=ranker.from_json(short), **kw)
    assert str(waves.program) == TALL and waves.device_class == "h200"
    assert str(chosen.program) == TRITON and chosen.ranked == 4
    assert chosen.device_class == "h200" and chosen.measured == Problem(256, 6144, 4096)
    # a model of a class that is no sibling (an A100's) is not used: the wave rule's pick
    a100 = ranker.from_json({**short, "device_class": "a100"})
    assert resolve(p, Arch.SM90A, "h200", rule="learned", model=a100, **kw) == waves


def test_a_sibling_s_rows_do_not_compete_with_the_own_class_s_off_the_grid(tmp_path):
    # an H200's row at 320 ran in 20 us (its memory is faster): on an H100 the wave rule and
    # the learned rule pick among the H100's own rows; on an H200 among the H200's
    _shipped(tmp_path, [(320, 6144, 4096, PINGPONG, 60.0), (512, 6144, 4096, TALL, 70.0)])
    both = _shipped(tmp_path, [(320, 6144, 4096, TRITON, 20.0)], device="NVIDIA H200")
    p = Problem(333, 6144, 4096)
    kw = dict(shipped_path=both, use_tuned=False)
    for rule in ("waves", "learned"):
        h100 = resolve(p, Arch.SM90A, "h100", rule=rule, model=ranker.from_json(_model()), **kw)
        assert h100.device_class == "h100" and str(h100.program) in (PINGPONG, TALL)
        h200 = resolve(p, Arch.SM90A, "h200", rule=rule, model=ranker.from_json(_model()), **kw)
        assert h200.device_class == "h200" and str(h200.program) == TRITON


def test_the_learned_rule_ranks_only_legal_programs_of_allowed_backends(book):
    kw = dict(shipped_path=book, use_tuned=False, rule="learned",
              model=ranker.from_json(_model()))
    # k = 4099: TMA's 16-byte rows fail, so neither wgmma program is legal
    ragged = resolve(Problem(333, 6144, 4099), Arch.SM90A, "h100", **kw)
    assert str(ragged.program) == TRITON_TALL and ragged.ranked == 4
    no_triton = resolve(Problem(333, 6144, 4096), Arch.SM90A, "h100",
                        exclude=frozenset({"cuda_wgmma"}), **kw)
    assert no_triton.program.backend == "triton" and no_triton.ranked == 2
    # programs the model saw at too few shapes are not ranked (the wave rule's pick is)
    rare = ranker.from_json(_model(shapes=3))
    waves = resolve(Problem(333, 6144, 4096), Arch.SM90A, "h100", shipped_path=book,
                    use_tuned=False, rule="waves")
    assert resolve(Problem(333, 6144, 4096), Arch.SM90A, "h100", shipped_path=book,
                   use_tuned=False, rule="learned", model=rare).program == waves.program


BOX = {"m": [16, 4096], "n": [1024, 32768], "k": [1024, 32768]}


def test_with_no_neighbour_in_reach_the_learned_rule_ranks_the_shipped_programs_it_covers(book):
    # 40x24576x4096: more than an octave from every row of `book` (the wave rule: heuristic)
    p = Problem(40, 24576, 4096)
    kw = dict(shipped_path=book, use_tuned=False)
    heuristic = resolve(p, Arch.SM90A, "h100", rule="waves", **kw)
    assert heuristic.provenance == "heuristic"
    covering = ranker.from_json({**_model(), "trained": {"command": "test", "box": BOX}})
    assert covering.covers(p) and not covering.covers(Problem(8, 24576, 4096))
    far = resolve(p, Arch.SM90A, "h100", rule="learned", model=covering, **kw)
    assert str(far.program) == TALL and far.provenance == "shipped-nearest"
    assert far.distance > MAX_DISTANCE and far.measured == Problem(512, 6144, 4096)
    assert far.ranked == 4 and "first usable of 4 shipped programs" in far.line()
    # an H200 has no model of its own: its sibling class's model ranks that class's rows
    assert resolve(p, Arch.SM90A, "h200", rule="learned", model=covering, **kw) == far
    # outside the model's training shapes, a file without a box, or no device class: the
    # heuristic's program, as before
    for q, model, cls in [(Problem(8, 24576, 4096), covering, "h100"),
                          (p, ranker.from_json(_model()), "h100"), (p, covering, None)]:
        served = resolve(q, Arch.SM90A, cls, rule="learned", model=model, **kw)
        assert served == resolve(q, Arch.SM90A, cls, rule="waves", **kw)
        assert served.provenance == "heuristic"
    # a backend the caller excludes is never served, a far pick included
    no_wgmma = resolve(p, Arch.SM90A, "h100", rule="learned", model=covering,
                       exclude=frozenset({"cuda_wgmma"}), **kw)
    assert no_wgmma.program.backend == "triton" and no_wgmma.ranked == 2


def test_a_box_that_does_not_read_covers_nothing():
    for box in ({"m": [16, 4096]}, {"m": "x", "n": [1, 2], "k": [1, 2]}, [1, 2]):
        model = ranker.from_json({**_model(), "trained": {"box": box}})
        assert not model.covers(Problem(64, 64, 64))


def test_without_a_model_file_the_learned_rule_is_the_wave_rule(book, tmp_path, monkeypatch):
    monkeypatch.setattr(ranker, "DEFAULT_PATH", tmp_path / "absent.json")
    p = Problem(333, 6144, 4096)
    learned = resolve(p, Arch.SM90A, "h100", shipped_path=book, use_tuned=False,
                      rule="learned")
    waves = resolve(p, Arch.SM90A, "h100", shipped_path=book, use_tuned=False, rule="waves")
    assert learned == waves
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "gemmforge-ranker/1", "features": []}')
    monkeypatch.setattr(ranker, "DEFAULT_PATH", broken)
    assert resolve(p, Arch.SM90A, "h100", shipped_path=book, use_tuned=False,
                   rule="learned") == waves
    # a model of another class or layout is not used either
    other = ranker.from_json({**_model(), "device_class": "a100"})
    assert resolve(p, Arch.SM90A, "h100", shipped_path=book, use_tuned=False,
                   rule="learned", model=other) == waves


def test_each_layout_s_shapes_are_ranked_by_that_layout_s_model_file(tmp_path, monkeypatch):
    # nn's model prefers tall tiles, nt's short ones; a layout without a file: the wave rule
    book = _shipped(tmp_path, [(320, 6144, 4096, PINGPONG, 60.0),
                               (512, 6144, 4096, TALL, 70.0),
                               (256, 6144, 4096, TRITON, 90.0)], layouts=("nn", "nt"))
    monkeypatch.setattr(ranker, "DEFAULT_PATH", tmp_path / "ranker_h100.json")
    assert ranker.default_path("nt") == tmp_path / "ranker_h100_nt.json"
    ranker.default_path().write_text(json.dumps(_model()))
    ranker.default_path("nt").write_text(json.dumps(_model(layout="nt", leaves=(2000, 1000, 0))))
    assert ranker.load(layout="nt").layout == "nt" and ranker.load().layout == "nn"

    def served(layout, rule="learned"):
        return resolve(Problem(333, 6144, 4096, layout), Arch.SM90A, "h100", rule=rule,
                       shipped_path=book, use_tuned=False)
    assert str(served("nn").program) == TALL and served("nn").ranked == 3
    assert str(served("nt").program) == TRITON and served("nt").ranked == 3
    ranker.default_path("nt").unlink()
    assert ranker.load(layout="nt") is None
    assert served("nt") == served("nt", "waves") and served("nt").ranked is None
    assert served("nn").ranked == 3


def test_a_small_model_ranks_programs_seen_at_an_eighth_of_its_shapes():
    from gemmforge.dispatch.choice import MIN_TRAINED_SHAPES, min_trained_shapes
    assert min_trained_shapes(None) == MIN_TRAINED_SHAPES == min_trained_shapes(813)
    assert min_trained_shapes(160) == 20 and min_trained_shapes(128) == 16


def _store(path, rows):
    from gemmforge.search.measure.campaign_store import SCHEMA
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    texts = sorted({t for _, t, _ in rows})
    con.executemany("INSERT INTO programs VALUES (?, ?)", list(enumerate(texts, 1)))
    con.executemany("INSERT INTO measurements (problem, pass, round, program, status, speedup, "
                    "result, at) VALUES (?, 'portfolio', 0, ?, 'ok', ?, '{}', 0)",
                    [(shape, texts.index(t) + 1, r) for shape, t, r in rows])
    con.commit()
    con.close()


def test_training_on_a_tiny_store_writes_a_model_that_ranks_like_it(tmp_path):
    pytest.importorskip("sklearn")
    from gemmforge.search.learn import ranker_train
    # synthetic readings: the wide tile wins where m is large, the small one where it is not
    rows = []
    for m in (64, 96, 128, 192, 512, 768, 1024, 2048):
        for n in (1024, 2048, 4096):
            for k in (512, 1024, 4096):
                shape = f"{m}x{n}x{k} nn f32"
                rows += [(shape, TALL, 1.2 if m >= 512 else 0.4),
                         (shape, TRITON, 0.9), (shape, PINGPONG, 0.6)]
    store = tmp_path / "store.db"
    _store(store, rows)
    out = tmp_path / "ranker.json"
    assert ranker_train.main(["--store", str(store), "--out", str(out), "--folds", "2",
                              "--seed", "0", "--trees", "60"]) == 0
    model = ranker.read(out)
    assert model.programs == {PINGPONG: 72, TALL: 72, TRITON: 72}
    assert model.trained["command"].startswith("python3 -m gemmforge.search.learn.ranker_train")
    assert model.trained["validation"]["folds"] == 2
    assert model.trained["box"] == {"m": [64, 2048], "n": [1024, 4096], "k": [512, 4096]}
    assert model.covers(Problem(80, 4096, 2048)) and not model.covers(Problem(32, 4096, 2048))
    programs = [parse(t) for t in (TALL, TRITON, PINGPONG)]
    big, small = model.scores(programs, Problem(1500, 4096, 2048), 132), \
        model.scores(programs, Problem(80, 4096, 2048), 132)
    assert int(np.argmax(big)) == 0 and int(np.argmax(small)) != 0  # TALL wins at large m only
    again = tmp_path / "again.json"
    ranker_train.main(["--store", str(store), "--out", str(again), "--folds", "1",
                       "--trees", "60"])
    assert json.loads(again.read_text())["trees"] == json.loads(out.read_text())["trees"]


def test_a_threshold_equal_to_a_row_s_value_is_written_to_send_that_row_left():
    from gemmforge.search.learn.ranker_train import short_threshold
    value = -2.6646096453060752  # 7 digits round it down, past the row: it would go right
    written = short_threshold(value, np.array([value - 1, value, value + 1e-3]))
    assert value <= written < value + 1e-3 and written == -2.6646096
    assert short_threshold(0.123456789, np.array([0.1, 0.2])) == 0.1234568


def test_the_package_s_nt_model_loads_and_ranks():
    model = ranker.load(layout="nt")
    assert model is not None and model.device_class == "h100" and model.layout == "nt"
    assert model.trained["store"].startswith("small_nt_h100.db + llm_nt_h100.db + ragged_nt")
    assert model.covers(Problem(1, 4096, 4096, "nt"))  # the LLM store's decode steps
    programs = [parse(t) for t in sorted(model.programs)[:8]]
    scores = model.scores(programs, Problem(77, 4096, 4096, "nt"), 132)
    assert scores.shape == (8,) and np.isfinite(scores).all()
    chosen = resolve(Problem(77, 4096, 4096, "nt"), Arch.SM90A, "h100", use_tuned=False)
    assert chosen.provenance == "shipped-nearest" and chosen.ranked is not None


def test_the_package_s_model_serves_the_default_rule_with_numpy_alone():
    import subprocess
    import sys
    model = ranker.load()
    assert model is not None and model.device_class == "h100" and model.layout == "nn"
    assert model.trained["command"].startswith("python3 -m gemmforge.search.learn.ranker_train")
    # trained on the grid and the random shapes off it: m from 17, n and k up to 32256
    assert model.covers(Problem(77, 24576, 4096)) and not model.covers(Problem(8, 4096, 4096))
    code = ("import sys\n"
            "for name in ('sklearn', 'torch', 'optuna', 'sqlalchemy'): sys.modules[name] = None\n"
            "from gemmforge.ir.program import Arch, Problem\n"
            "from gemmforge.dispatch.choice import DEFAULT_RULE, resolve\n"
            "c = resolve(Problem(77, 4096, 4096), Arch.SM90A, 'h100', use_tuned=False)\n"
            "print(DEFAULT_RULE, c.provenance, c.ranked is not None)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["learned", "shipped-nearest", "True"]


def test_a_gzipped_model_file_reads_as_its_json_and_names_its_layout_s_sibling(tmp_path, monkeypatch):
    """The package keeps its models gzipped (ranker_h100.json.gz, ranker_h100_nt.json.gz)."""
    import gzip
    monkeypatch.setattr(ranker, "DEFAULT_PATH", tmp_path / "ranker_h100.json.gz")
    assert ranker.default_path("nt") == tmp_path / "ranker_h100_nt.json.gz"
    ranker.default_path("nt").write_bytes(gzip.compress(json.dumps(_model(layout="nt")).encode()))
    assert ranker.load(layout="nt").layout == "nt"
    torn = tmp_path / "torn.json.gz"
    torn.write_bytes(gzip.compress(b'{"format": 1}')[:-6])
    assert ranker.load(torn) is None


def test_the_package_s_model_files_load():
    assert ranker.load().layout == "nn" and ranker.load(layout="nt").layout == "nt"
