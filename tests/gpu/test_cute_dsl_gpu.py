"""GPU tier for cute_dsl: every suite program computes the right answer (GPU machine).

The GPU machine has no CuTe DSL wheel, so kernels come from prebuilt artifacts: build them
here with `python scripts/prebuild_cute_dsl.py` (into .carry/cache), carry that folder, and
these tests find them by their cache key. Where the DSL is installed they build normally.

Fresh random normal inputs per test, the output NaN-filled first, every element compared
with an fp32 reference by relative Frobenius error; an exact check with {0,1} inputs.
"""
from pathlib import Path

import pytest

from gemmforge.compiler.values import BuildError
from gemmforge.backends.cute_dsl import suite, toolchain
from gemmforge.backends.cute_dsl.plan import problem_align
from gemmforge.backends import pipeline
from gemmforge.compiler.artifacts import ArtifactCache
from gemmforge.ir import Problem, parse
from .correctness import assert_matches_reference

pytestmark = pytest.mark.gpu

PREBUILT = Path(__file__).resolve().parents[2] / ".carry" / "cache"
CASES = suite.cases()




class Kernels:
    """Kernels by (program, layout, acc, alignment class), built or found once."""

    def __init__(self):
        self.dsl_missing = toolchain.missing()
        self.cache = ArtifactCache(PREBUILT) if self.dsl_missing else None
        self.target = pipeline.current_target()
        self._loaded = {}

    def get(self, text: str, problem: Problem):
        key = (text, problem.layout, problem.acc, problem_align(problem))
        if key not in self._loaded:
            try:
                artifact = pipeline.compile(parse(text), problem, self.target, self.cache)
            except BuildError as e:
                if not self.dsl_missing:
                    raise
                pytest.skip(f"no prebuilt artifact in {PREBUILT} and the CuTe DSL is not "
                            f"importable ({self.dsl_missing}); run scripts/prebuild_cute_dsl.py "
                            f"where it is: {str(e).splitlines()[0]}")
            self._loaded[key] = pipeline.load(artifact)
        return self._loaded[key]


@pytest.fixture(scope="session")
def kernels():
    return Kernels()




@pytest.mark.parametrize("text, problem", CASES, ids=[f"{p}|{t}" for t, p in CASES])
def test_matches_fp32_reference(kernels, text, problem):
    assert_matches_reference(kernels.get(text, problem), problem.m, problem.n, problem.k,
                             problem.layout.value, problem.acc.value)


@pytest.mark.parametrize("text", [suite.PROGRAMS[0], suite.PROGRAMS[3]])
def test_exact_on_binary_inputs(kernels, text):
    """{0,1} inputs with k <= 2048: every partial sum is an integer fp16 holds exactly."""
    import torch
    m, n, k = 200, 136, 520
    for layout in ("nn", "nt"):
        kernel = kernels.get(text, Problem(m, n, k, layout, "f32"))
        a = torch.randint(0, 2, (m, k), device="cuda").half()
        b = torch.randint(0, 2, (k, n), device="cuda").half()
        out = kernel(a, b if layout == "nn" else b.t().contiguous())
        assert torch.equal(out.float(), a.float() @ b.float())


def test_unaligned_sizes_are_refused(kernels):
    """An artifact of the 8-element class refuses n or k off that class at launch."""
    import torch
    kernel = kernels.get(suite.PROGRAMS[0], Problem(256, 256, 256, "nt", "f32"))
    a = torch.randn(64, 60, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 60, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="cudaError 1"):
        kernel(a, b)
