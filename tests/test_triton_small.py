"""The triton backend's small-problem values on a machine with no GPU: swap_ab (C^T = B^T A^T
stored transposed), 16-row token-side tiles, deep rings (up to 16 stages) and split-K
reduced inside the kernel (per-tile counters the last slice resets). verify's verdicts,
the plan (one kernel, counters, no memset), the arithmetic under Triton's interpreter at
M in {1, 7, 16, 77} with odd N and K, both layouts and both accumulators (each program
run twice over the same counters, which must come back to zero), and real ahead-of-time
compiles for sm_80 and sm_90a."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import Target
from gemmforge.backends.triton.plan import make_plan
from gemmforge.ir import Problem, VerifyError, check, parse, verify
from gemmforge.ir.space import variant
from gemmforge.ir.program import Arch
from test_triton_backend import HAVE_TRITON, build, interpret

needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton is not importable")

SWAP90 = "triton sm_90a 16x64x64 w1x4 s8 swnone row/1 pred k1 dp c1x1 nows direct swap"

# (program, (m, n, k)): the token side M at 1, 7, 16 and 77; N and K odd where the
# epilogue allows (TMA needs n and k multiples of 8)
INTERPRETED = [
    ("triton sm_80 16x32x16 w1x1 s4 swnone row/1 pred k1 dp c1x1 nows direct swap", (1, 33, 65)),
    ("triton sm_80 16x32x16 w1x1 s12 swnone row/1 pred k4i dp c1x1 nows direct swap",
     (7, 45, 131)),
    ("triton sm_80 16x16x16 w1x1 s2 swnone row/2 pred k3i persistent c1x1 nows direct",
     (16, 33, 97)),
    ("triton sm_80 32x16x16 w1x1 s2 swnone col/1 pred k2a dp c1x1 nows direct swap", (77, 51, 63)),
    ("triton sm_80 32x32x16 w1x1 s2 swnone row/1 pred k5 dp c1x1 nows direct swap", (77, 31, 77)),
    ("triton sm_90a 16x64x16 w1x4 s16 swnone row/1 pred k4i dp c1x1 nows direct swap",
     (7, 71, 99)),
    ("triton sm_90a 16x64x16 w1x4 s3 swnone row/1 pred k2i persistent c1x1 nows tma swap",
     (16, 96, 80)),
    ("triton sm_90a 32x64x16 w1x4 s3 swnone row/1 pred k1 dp c1x1 nows tma swap", (77, 72, 40)),
]
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]


@pytest.mark.parametrize("text", [
    SWAP90,
    SWAP90.replace("k1", "k8i").replace("s8", "s16"),
    SWAP90.replace("16x64x64", "32x128x64").replace("direct", "tma"),
    "triton sm_80 16x16x32 w1x1 s16 swnone row/1 pred k4i persistent c1x1 nows direct",
])
def test_accepts_the_small_problem_values(text):
    assert check(parse(text), Problem(77, 4096, 4096)) is None


@pytest.mark.parametrize("text, message", [
    (SWAP90.replace("16x64x64 w1x4", "32x32x64 w2x2"),
     "tile.bn: sm_90a needs a multiple of 64 for wgmma (swap_ab puts it on the wgmma M side)"),
    (SWAP90.replace("16x64x64", "16x32x64"), "tile.bn: 32 is not a multiple of warps.wn x "),
    (SWAP90.replace(" swap", ""), "tile.bm: sm_90a needs a multiple of 64 for wgmma, got 16"),
    (SWAP90.replace("16x64x64", "40x64x64"), "tile: 40x64: triton takes powers of two only"),
    (SWAP90.replace("16x64x64", "8x64x64"), "tile.bm: 8 is not a multiple of warps.wm x "),
    (SWAP90.replace("s8", "s16").replace("16x64x64", "16x256x128"),
     "stages: 16 stages of 16x256x128 need"),
])
def test_refuses_what_it_cannot_build(text, message):
    with pytest.raises(VerifyError) as e:
        verify(parse(text), Problem(77, 4096, 4096))
    assert message in str(e.value)


def test_in_kernel_split_k_is_one_kernel_with_self_resetting_counters():
    program = parse(SWAP90.replace("k1", "k4i"))
    plan = make_plan(program, Problem(77, 4096, 4096))
    assert [k.role for k in plan.kernels] == ["gemm"]
    assert plan.counters and plan.counter_bytes(77, 4096) == 5 * 64 * 4
    assert plan.workspace_bytes(77, 4096, 4096) == 4 * 77 * 4096 * 4
    assert plan.kernels[0].signature["cnt_ptr"] == "*i32"
    assert not make_plan(parse(SWAP90), Problem(77, 4096, 4096)).counters
    assert make_plan(program, Problem(1, 64, 64)).as_json()["counters"] is True


def test_lowered_swap_transposes_the_product_and_the_store():
    program, problem = parse(SWAP90.replace("k1", "k2i")), Problem(7, 99, 65, "nt")
    text = registry.get("triton").lower(program, problem).text
    assert "tl.dot(b, tl.trans(a), acc" in text
    assert "tl.zeros((BLOCK_N, BLOCK_M)" in text
    assert "rows.to(tl.int64)[None, :] * N + cols[:, None]" in text
    assert "tl.atomic_add(counter, 1, sem=\"acq_rel\"" in text and "_reduce(" not in text


def test_the_space_searches_the_new_values():
    triton = variant("triton", Arch.SM90A)
    assert triton.choices("swap_ab") == (False, True)
    assert "inkernel" in triton.choices("split_k.reduction")
    assert max(triton.choices("stages")) == 16
    mma = variant("cuda_mma", Arch.SM90A)  # declares none of them
    assert mma.choices("swap_ab") == (False,) and max(mma.choices("stages")) == 8
    assert "inkernel" not in mma.choices("split_k.reduction")


def interpret_all(out: str) -> None:
    """Subprocess entry (TRITON_INTERPRET=1 must be set before triton is imported)."""
    results = {}
    for i, (text, shape) in enumerate(INTERPRETED):
        for layout, acc in KINDS:
            folder = Path(out) / f"{i}-{layout}-{acc}"
            folder.mkdir()
            results[folder.name] = interpret(text, Problem(*shape, layout, acc), folder,
                                             repeats=2)
    (Path(out) / "results.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("interpreted_small")
    code = f"from test_triton_small import interpret_all; interpret_all({str(out)!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent,
                          capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "results.json").read_text())


@needs_triton
@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("case", range(len(INTERPRETED)), ids=[
    "-".join(t.split()[i] for i in (1, 2, 4, 8, 9, 12)) + f"-m{shape[0]}"
    for t, shape in INTERPRETED])
def test_interpreted_small_kernels_match_reference(interpreted, case, layout, acc):
    err = interpreted[f"{case}-{layout}-{acc}"]
    assert not math.isnan(err), "unwritten (NaN) outputs"
    assert err < 5e-3, f"relative error {err:.2e}"


@needs_triton
@pytest.mark.parametrize("text, problem, target, present, absent", [
    (SWAP90, Problem(1, 4096, 4096, "nn"), Target(), ["wgmma.mma_async"], ["mma.sync"]),
    (SWAP90.replace("k1", "k8i").replace("s8", "s16"), Problem(7, 4095, 4097, "nt", "f16"),
     Target(90), ["wgmma.mma_async", "atom.", "acq_rel"], ["mma.sync"]),
    (SWAP90.replace("16x64x64", "32x128x64").replace("direct", "tma").replace("k1", "k2i"),
     Problem(77, 4096, 4096, "nn"), Target(), ["wgmma.mma_async", "cp.async.bulk.tensor",
                                               "acq_rel"], ["mma.sync"]),
    ("triton sm_80 16x32x32 w1x1 s6 swnone row/1 pred k3i dp c1x1 nows direct swap",
     Problem(16, 333, 1000, "nt"), Target(), ["mma.sync.aligned", "atom."], ["wgmma"]),
], ids=["sm90a-swap-m1", "sm90a-inkernel-16-stages", "sm90a-tma-swap-inkernel",
        "sm80-swap-inkernel"])
def test_aot_compile_of_the_small_values(tmp_path, text, problem, target, present, absent):
    artifact, ptx = build(registry.get("triton"), text, problem, tmp_path, target)
    for needle in present:
        assert needle in ptx, needle
    for needle in absent:
        assert needle not in ptx, needle
    assert len(artifact.meta["kernels"]) == 1
