"""Bad calls of the Python API: each raises one exception whose one-line message names the
argument and what is expected (tests/test_fault_api.py runs them; docs/errors.md lists
them under "Python API"). `call` gets the test's temporary folder."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable
from unittest import mock

PROGRAM = "cuda_mma sm_90a 16x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct"
TRITON = "triton sm_90a 128x128x64 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"


@dataclass(frozen=True)
class ApiRow:
    """A call that must raise `raises` (a class name) with a message holding `names`."""

    what: str
    call: Callable
    raises: str
    names: str


def _t(*shape, dtype="float16"):
    import torch
    return torch.zeros(shape, dtype=getattr(torch, dtype))


def _mm(a, b, **kw):
    import gemmforge
    return lambda tmp: gemmforge.matmul(a(), b(), **kw)


def _h(*shape):
    return lambda: _t(*shape)


def _without_torch(tmp):
    import gemmforge
    with mock.patch.dict(sys.modules, {"torch": None}):
        return gemmforge.matmul([[1.0]], [[1.0]])


def _matmul_rows() -> list[ApiRow]:
    a, b = _h(8, 16), _h(16, 4)
    rows = [
        ("acc='f16' on CPU tensors", _mm(a, b, acc="f16"), "OperandError", "a: expected a CUDA"),
        ("CPU tensors", _mm(a, b), "OperandError", "a: expected a CUDA tensor"),
        ("acc='f64'", _mm(a, b, acc="f64"), "OperandError", "acc"),
        ("acc=None", _mm(a, b, acc=None), "TypeError", "acc"),
        ("layout='xx'", _mm(a, b, layout="xx"), "OperandError", "layout"),
        ("layout=1", _mm(a, b, layout=1), "TypeError", "layout"),
        ("a a list", _mm(lambda: [[1.0]], b), "TypeError", "a: expected a torch.Tensor"),
        ("b None", _mm(a, lambda: None), "TypeError", "b: expected a torch.Tensor"),
        ("a 3-D", _mm(_h(2, 8, 16), b), "OperandError", "a: expected a 2-D"),
        ("b 1-D", _mm(a, _h(16)), "OperandError", "b: expected a 2-D"),
        ("a 0-D", _mm(_h(), b), "OperandError", "a: expected a 2-D"),
        ("a float32", _mm(lambda: _t(8, 16, dtype="float32"), b), "OperandError", "a: expected dtype"),
        ("b bfloat16 with a float16", _mm(a, lambda: _t(16, 4, dtype="bfloat16")),
         "OperandError", "b: expected a's dtype"),
        ("bfloat16 with acc='f16'", _mm(lambda: _t(8, 16, dtype="bfloat16"),
                                        lambda: _t(16, 4, dtype="bfloat16"), acc="f16"),
         "OperandError", "acc: bfloat16"),
        ("b int8", _mm(a, lambda: _t(16, 4, dtype="int8")), "OperandError", "b: expected dtype"),
        ("inner sizes differ (nn)", _mm(a, _h(12, 4)), "OperandError", "b: expected (k, n)"),
        ("inner sizes differ (nt)", _mm(a, _h(4, 12), layout="nt"), "OperandError",
         "b: expected (n, k)"),
        ("a with m = 0", _mm(_h(0, 16), b), "OperandError", "a: expected every dimension"),
        ("b with n = 0", _mm(a, _h(16, 0)), "OperandError", "b: expected every dimension"),
        ("out a list", _mm(a, b, out=[0]), "TypeError", "out: expected a torch.Tensor"),
        ("out of the wrong shape", _mm(a, b, out=_t(4, 8)), "OperandError", "out: expected"),
        ("out float32", _mm(a, b, out=_t(8, 4, dtype="float32")), "OperandError", "out:"),
        ("out strided", _mm(a, b, out=_t(4, 8).t()), "OperandError", "out: expected a contiguous"),
        ("without torch", _without_torch, "ModuleNotFoundError", "pip install 'gemmforge[torch]'"),
    ]
    return [ApiRow(f"matmul: {w}", c, r, n) for w, c, r, n in rows]


def _parse(text):
    def call(tmp):
        import gemmforge
        return gemmforge.parse(text)
    return call


def _problem(*args):
    def call(tmp):
        import gemmforge
        return gemmforge.Problem(*args)
    return call


def _evaluate(tmp):
    from gemmforge.ir import Problem
    from gemmforge.search.measure.env import evaluate
    with mock.patch("torch.cuda.is_available", lambda: False):
        return evaluate([PROGRAM], Problem(64, 64, 64))


def _compile_illegal(tmp):
    import gemmforge
    from gemmforge.ir.program import Problem
    return gemmforge.compile(gemmforge.parse(PROGRAM), Problem(1048576, 1048576, 16))


def _emit_triton(tmp):
    from gemmforge.emit import choose_program
    from gemmforge.ir import Arch, Problem, parse
    return choose_program(Problem(64, 64, 64), Arch.SM90A, parse(TRITON))


def _emit_over(tmp):
    from gemmforge.emit import emit
    from gemmforge.ir import Problem, parse
    program = parse(PROGRAM)
    emit(Problem(64, 64, 64), program, tmp)
    return emit(Problem(128, 64, 64), program, tmp)


def _resolve_rule(tmp):
    from gemmforge.ir import Arch, Problem
    from gemmforge.dispatch.choice import resolve
    return resolve(Problem(64, 64, 64), Arch.SM90A, "h100", rule="bogus")


def _from_json(text):
    def call(tmp):
        from gemmforge.ir.schema import from_json
        return from_json(text)
    return call


def _knob(name, value):
    def call(tmp):
        from gemmforge.compiler.knobs import knobs
        with mock.patch.dict("os.environ", {name: value}):
            return knobs()
    return call


def _shipped_text(tmp):
    from gemmforge.dispatch.shipped import read
    (tmp / "s.json").write_text("not json")
    return read(tmp / "s.json")


def _settings(**kw):
    def call(tmp):
        from gemmforge.search.tune.tuner import TuneSettings
        return TuneSettings(**kw)
    return call


def run(row: ApiRow, tmp) -> tuple[str, str]:
    """(exception class name, its message) of the row's call; ("", "") if it returned."""
    try:
        row.call(tmp)
    except Exception as e:  # every kind is what the row checks
        return type(e).__name__, str(e)
    return "", ""


def _other_rows() -> list[ApiRow]:
    rows = [
        ("parse: garbage", _parse("garbage"), "IRError", ""),
        ("parse: a cut-short program", _parse("cuda_mma sm_90a"), "IRError", ""),
        ("parse: a 7-row tile", _parse(PROGRAM.replace("16x16x16", "7x16x16")), "IRError", "tile"),
        ("parse: 0 stages", _parse(PROGRAM.replace(" s2 ", " s0 ")), "IRError", "stages"),
        ("Problem: m = 0", _problem(0, 64, 64), "IRError", "m"),
        ("Problem: n = -1", _problem(64, -1, 64), "IRError", "n"),
        ("Problem: k = 2^40", _problem(64, 64, 2 ** 40), "IRError", "k"),
        ("Problem: layout 'xx'", _problem(64, 64, 64, "xx"), "IRError", "layout"),
        ("Problem: acc 'f64'", _problem(64, 64, 64, "nn", "f64"), "IRError", "acc"),
        ("evaluate without a GPU", _evaluate, "NoGPUError", "needs a CUDA GPU"),
        ("compile: a 2^32-CTA grid", _compile_illegal, "VerifyError", "CTAs"),
        ("emit: a triton program", _emit_triton, "VerifyError", "triton can't emit"),
        ("emit: over another file of the name", _emit_over, "UsageError", "--force"),
        ("resolve: rule 'bogus'", _resolve_rule, "ValueError", "rule"),
        ("from_json: {}", _from_json("{}"), "IRError", ""),
        ("from_json: version 99", _from_json('{"version": 99}'), "IRError", "program JSON"),
        ("from_json: not JSON", _from_json("{"), "IRError", ""),
        ("knobs: GEMMFORGE_PDL=abc", _knob("GEMMFORGE_PDL", "abc"), "KnobError", "GEMMFORGE_PDL"),
        ("knobs: GEMMFORGE_TORCH_OP=abc", _knob("GEMMFORGE_TORCH_OP", "abc"), "KnobError",
         "GEMMFORGE_TORCH_OP"),
        ("knobs: GEMMFORGE_SHIPPED missing", _knob("GEMMFORGE_SHIPPED", "/nonexistent.json"),
         "KnobError", "GEMMFORGE_SHIPPED"),
        ("knobs: GEMMFORGE_TUNE_DB=foo", _knob("GEMMFORGE_TUNE_DB", "foo"), "KnobError",
         "GEMMFORGE_TUNE_DB"),
        ("shipped.read: not JSON", _shipped_text, "ShippedError", "shipped file"),
        ("TuneSettings: batch 0", _settings(batch=0), "ValueError", "batch"),
        ("TuneSettings: confirm -1", _settings(confirm=-1), "ValueError", "confirm"),
    ]
    return [ApiRow(w, c, r, n) for w, c, r, n in rows]


ROWS = [*_matmul_rows(), *_other_rows()]
