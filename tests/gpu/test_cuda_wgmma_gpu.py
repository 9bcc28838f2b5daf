"""GPU tier for cuda_wgmma (an H100/H200) beyond the conformance suite, which checks every
program's answers (test_conformance_gpu.py): stream-K splits that share tiles, cached
tensor maps, C at an odd offset, refusals, a standalone file. The programs
(conformance.CUDA_WGMMA) cover: one consumer without a producer warpgroup (nows), cooperative consumers
with a setmaxnreg producer, split along M and along N, four consumers, persistent grids,
split-K through the workspace and with atomics, bk 128, operand padding, clusters with
TMA multicast (2x1, and 2x2 over ragged edges; layout nn where a warpgroup owns 64
columns), ping-pong consumers (with split-K units of
unequal length, and in a cluster), the tma epilogue (C through shared memory and TMA stores;
C that TMA can't write falls back to direct stores; one C box per consumer beside five
stages), 192-row tiles, the large class's 256x192 and 192x256 tiles (multicast, stream-K),
and stream-K (the tiles past the last whole wave split into a
head for their owner and a tail in 1-3 parts for the spare CTAs: fewer tiles than CTAs,
more, several parts per spare; shapes where the launcher shares nothing take the
persistent path).

    python3 -m pytest -m gpu tests/gpu/test_cuda_wgmma_gpu.py -q -x
    python3 -m pytest -m gpu tests/gpu/test_cuda_wgmma_gpu.py -q -k c2x   # some programs only
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gemmforge.backends import pipeline
from gemmforge.emit import build_selftest, emit
from gemmforge.ir import Problem, check, parse
from .conformance import CUDA_WGMMA
from .correctness import assert_matches_reference, operands

pytestmark = pytest.mark.gpu

PROGRAMS = CUDA_WGMMA  # the conformance suite's programs for this backend
KINDS = [("nn", "f32"), ("nt", "f32"), ("nn", "f16"), ("nt", "f16")]
# Stream-K programs with shapes whose tiles they split on a 132-SM GPU (the launcher's
# rules: the last wave at least a quarter full, a saving of at least 1 %, at most 8 parts per
# spare CTA), ragged: 128x128
# tiles: 192 tiles (60 split, each tail in one part), 176 (44 split, tails in 2 parts) and
# 165 (33, in 3 parts); 128x256: fewer tiles than CTAs; 64x128: 352 and 330 tiles.
# The cooperative 256x192 and 192x256 stream-K tiles: 64 and 66 tiles (fewer than CTAs, each
# tail in one part), then 231 and 224 (99 and 92 split, three tails per spare CTA).
BIG_STREAMK = [t for t in PROGRAMS if " streamk " in t and t.split()[2] in ("256x192x64", "192x256x64")]
STREAMK_CASES = [(PROGRAMS[16], (2000, 1496, 3000)), (PROGRAMS[16], (1000, 2800, 2000)),
                 (PROGRAMS[16], (1900, 1400, 2048)), (PROGRAMS[17], (2000, 1496, 3000)),
                 (PROGRAMS[17], (1000, 2800, 2000)), (PROGRAMS[18], (1000, 2800, 2000)),
                 (PROGRAMS[18], (1900, 1400, 2048)),
                 *((t, s) for t in BIG_STREAMK for s in ((2000, 1496, 3000), (2600, 4000, 4096)))]


@pytest.fixture(scope="session")
def kernels(request):
    """Every (program, layout, acc) the selected tests use, built once, in parallel (verified
    for an aligned shape; a kind verify refuses, such as a swapped program's nn, is left
    out). Building only what `-k` selected keeps a split run cheap."""
    target = pipeline.current_target()
    wanted = {item.callspec.params["text"] for item in request.session.items
              if hasattr(item, "callspec") and "text" in item.callspec.params}
    wanted |= {PROGRAMS[0], PROGRAMS[2]}  # the programs of the tests without a `text` parameter
    jobs = [(text, lay, acc) for text in PROGRAMS if text in wanted for lay, acc in KINDS
            if check(parse(text), Problem(256, 256, 256, lay, acc)) is None]

    def build(job):
        text, lay, acc = job
        return job, pipeline.compile(parse(text), Problem(256, 256, 256, lay, acc), target)
    with ThreadPoolExecutor(16) as pool:
        return {job: pipeline.load(art) for job, art in pool.map(build, jobs)}


@pytest.mark.parametrize("layout, acc", KINDS)
@pytest.mark.parametrize("text, shape", STREAMK_CASES,
                         ids=[f"{t.split()[2]}-{t.split()[3]}-{'x'.join(map(str, s))}" for t, s in STREAMK_CASES])
def test_stream_k_heads_and_tails_add_up(kernels, text, shape, layout, acc):
    """Shapes the launcher does split (its workspace holds tail slots), every element right."""
    kernel = kernels[(text, layout, acc)]
    # rows 16-byte aligned: no padded operand copies, so any workspace is stream-K's
    assert kernel.workspace_bytes(*shape) > 0, "the launcher shared no tiles here"
    assert_matches_reference(kernel, *shape, layout, acc)


def test_repeated_launches_reuse_cached_tensor_maps(kernels):
    """Same pointers and shape twice (a cache hit), then new buffers: both right."""
    import torch
    kernel = kernels[(PROGRAMS[2], "nt", "f32")]
    for _ in range(2):
        a, b, b_arg = operands(512, 384, 256, "nt")
        for _ in range(2):
            out = kernel(a, b_arg)
            ref = a.float() @ b.float()
            assert (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)).item() < 5e-3


@pytest.mark.parametrize("text", [PROGRAMS[2], *(t for t in PROGRAMS if t.endswith(" tma"))])
def test_c_at_an_odd_element_offset_is_written(kernels, text):
    """C one element past a 16-byte boundary (an `out=` view): TMA can't store it and half2
    stores would be misaligned, so the launch stores it directly, element pairs split; every
    element written, the neighbours of C untouched."""
    import torch
    m, n, k = 300, 264, 192
    a, b, b_arg = operands(m, n, k, "nt")
    buffer = torch.full((m * n + 2,), float("nan"), device="cuda", dtype=torch.float16)
    out = buffer[1:1 + m * n].view(m, n)
    kernels[(text, "nt", "f32")](a, b_arg, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(buffer[0]) and torch.isnan(buffer[-1])
    assert not torch.isnan(out).any()
    ref = a.float() @ b.float()
    assert (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)).item() < 5e-3


def test_predicate_refuses_unaligned(kernels):
    """A predicate program can't read k % 8 != 0 rows through TMA: the launch says so."""
    a, _, b_arg = operands(64, 64, 65, "nt")
    with pytest.raises(RuntimeError, match="cudaErrorInvalidValue"):
        kernels[(PROGRAMS[0], "nt", "f32")](a, b_arg)


@pytest.mark.parametrize("text, layout, acc", [(PROGRAMS[1], "nn", "f32"),
                                               (PROGRAMS[3], "nt", "f16"),
                                               (PROGRAMS[10], "nn", "f32"),
                                               (PROGRAMS[16], "nn", "f32")])
def test_standalone_file_passes_its_own_check(tmp_path, text, layout, acc):
    """An emitted .cu, built with plain nvcc (no torch, no gemmforge), passes its main()
    (stream-K's also at a shape its launcher splits: the workspace comes from main())."""
    program = parse(text)
    cu = emit(Problem(1000, 4096, 336, layout, acc), program, tmp_path)
    exe = build_selftest(cu, program)
    shapes = [[], ["4096", "64", "8192"]] + ([["17", "33", "65"]] if " padop " in text else [])
    shapes += [[str(x) for x in STREAMK_CASES[0][1]]] if " streamk " in text else []
    for args in shapes:
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "PASS" in done.stdout
