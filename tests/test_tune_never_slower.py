"""A tune never leaves a shape slower than before it: replayed on the CPU, for quick tunes
of model layer shapes. The program the resolver served before the tune (the incumbent)
competes in the tune's own group beside cuBLAS; afterwards the shape is served by the
group's winner where it read faster than cuBLAS, else by cuBLAS (dispatch.choice's cuBLAS
rule), so what serves reads at least max(the incumbent, cuBLAS) in that group. Also
`gemmforge tune --model`'s layer enumeration and its bad input."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gemmforge.cli import main  # noqa: E402
from gemmforge.dispatch.choice import resolve  # noqa: E402
from gemmforge.ir.program import Arch, Problem  # noqa: E402
from gemmforge.model_layers import linear_shapes, load_model, model_problems  # noqa: E402
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


def test_model_layers_from_a_module_function():
    model = load_model("torch.nn:Transformer")
    assert next(model.parameters()).device.type == "meta"  # nothing allocated
    assert linear_shapes(model) == [(512, 512), (512, 2048), (2048, 512)]
    problems = model_problems("torch.nn:Transformer", (1, 16, 77))
    assert len(problems) == 9 and {p.m for p in problems} == {1, 16, 128}
    assert {str(p.layout) for p in problems} == {"nt"}


def test_model_layers_from_a_transformers_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    config.save_pretrained(tmp_path)
    assert linear_shapes(load_model(str(tmp_path / "config.json"))) == [
        (128, 256), (256, 256), (256, 512), (512, 256), (1000, 256)]


@pytest.mark.parametrize("argv, message", [
    (["--model", "torch.nn:Transformer", "--shapes", "64x64x64"], "give one of them"),
    (["--tokens", "16", "--shapes", "64x64x64"], "--tokens needs --model"),
    (["--model", "torch.nn:Transformer", "--tokens", "0,16"], "--tokens: '0,16' is not"),
    (["--model", "torch.nn:NoSuchThing"], "can't import 'NoSuchThing'"),
    (["--model", "os:getcwd"], "returned str, not a torch.nn.Module"),
    ([], "give --shapes or --model"),
])
def test_tune_model_bad_input(capsys, argv, message):
    assert main(["tune", *argv, "--replay", "synthetic"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
