"""cuda_wgmma's small-problem forms without a GPU: operand swap (the kernel computes C^T, so
the token side M sits on wgmma's narrow N side in steps of 8), deep rings, and split-K
reduced inside the kernel; verify's reasons, the lowered source, and a real sm_90a build."""
import re
import subprocess

import pytest

from gemmforge.backends import registry
from gemmforge.backends.cuda_wgmma.context import kernel_problem, kernel_view, make_context
from gemmforge.compiler import nvcc
from gemmforge.emit import emit
from gemmforge.ir import Arch, Problem, check, parse

SWAP = "cuda_wgmma sm_90a 16x64x64 w1x1 s12 sw128 row/8 pred k1 dp c1x1 coop direct swap"
SWAP_SPLIT = "cuda_wgmma sm_90a 8x128x64 w1x1 s8 sw128 row/8 pred k4i dp c1x1 coop direct swap"
IN_KERNEL = "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k4i dp c1x1 coop direct"
LLM = Problem(16, 4096, 4096, "nt", "f32")


def lowered(text: str, problem: Problem) -> str:
    return registry.get("cuda_wgmma").lower(parse(text), problem).text


def test_swap_puts_the_problems_n_on_wgmmas_m_side():
    program = parse("cuda_wgmma sm_90a 40x128x64 w1x2 s8 sw128 row/8 pred k1 dp c2x1 coop direct swap")
    view = kernel_view(program)
    assert (view.tile.bm, view.tile.bn) == (128, 40)
    assert (view.warps.wm, view.warps.wn) == (2, 1)
    assert (view.cluster.cm, view.cluster.cn) == (1, 2)
    assert kernel_problem(program, LLM) == Problem(4096, 16, 4096, "nt", "f32")
    ctx = make_context(program, LLM)
    assert (ctx.bm, ctx.bn, ctx.wg_m, ctx.wg_n) == (128, 40, 64, 40) and ctx.swap_ab


@pytest.mark.parametrize("text, problem", [
    (SWAP, LLM), (SWAP_SPLIT, LLM), (SWAP, Problem(1, 4096, 4096, "nt", "f16")),
    (IN_KERNEL, LLM), (IN_KERNEL, Problem(128, 128, 16384, "nn", "f32")),
    ("cuda_wgmma sm_90a 40x128x64 w1x1 s10 sw128 row/8 padop k2 dp c1x1 coop direct swap", LLM),
])
def test_accepts(text, problem):
    assert check(parse(text), problem) is None


@pytest.mark.parametrize("text, problem, says", [
    (SWAP, Problem(16, 4096, 4096, "nn", "f32"), "needs layout nt"),
    (SWAP.replace("direct", "tma"), LLM, "written transposed"),
    (SWAP.replace("16x64x64", "16x40x64"), LLM, "puts tile.bn on the MMA's M side"),
    ("cuda_wgmma sm_90a 40x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct", LLM,
     "tile.bm: 40 is not a multiple of warps.wm x wgmma.mma_async M"),
    (SWAP.replace("s12", "s16").replace("16x64x64", "16x256x64"), LLM, "shared memory"),
])
def test_declines_with_a_reason(text, problem, says):
    reason = check(parse(text), problem)
    assert reason and says in reason, reason


def test_swapped_source_stores_c_transposed():
    text = lowered(SWAP, LLM)
    for needle in ["constexpr bool kSwapAB = true;", "std::swap(A, B);", "std::swap(M, N);",
                   "kSwapAB ? M : N", "p[a.ldc] = __float2half(v1);",
                   "constexpr int kBM = 64, kBN = 16, kBK = 64;", "constexpr int kStages = 12;"]:
        assert needle in text, needle
    assert "constexpr bool kSwapAB = false;" in lowered(IN_KERNEL, LLM)


def test_in_kernel_split_k_has_no_reduce_launch_and_no_memset():
    text = lowered(IN_KERNEL, LLM)
    for needle in ["constexpr bool kInKernelReduce = true;", "splitk_arrive(args, w, place",
                   "atomicAdd(counter, 1)", "atomicExch(counter, 0)",
                   "if (kSplitK > 1 && !kInKernelReduce && !kClusterReduce)", "splitk_counters("]:
        assert needle in text, needle
    plain = lowered(IN_KERNEL.replace("k4i", "k4"), LLM)
    assert "constexpr bool kInKernelReduce = false;" in plain and "splitk_arrive" not in plain


CLUSTER_K = "cuda_wgmma sm_90a 8x64x256 w1x1 s5 sw128 row/8 pred k4c dp c1x1 coop direct swap pdl"


def test_cluster_split_k_sums_through_distributed_shared_memory():
    """split_k kSc: a tile's slices are one cluster of that many CTAs, consecutive units;
    ranks above 0 leave their accumulators in shared memory, rank 0 adds them through mapa
    and ld.shared::cluster between two cluster barriers; no workspace, counters or reduce
    kernel, and the producer warpgroup takes both barriers too."""
    program = parse(CLUSTER_K)
    ctx = make_context(program, LLM)
    assert ctx.cluster_k == 4 and ctx.red_bytes == 64 // 64 * 4 * 128 * 4  # 1 m64 block, 8 cols
    text = lowered(CLUSTER_K, LLM)
    for needle in ["constexpr int kClusterK = 4;", "cluster_reduce(r, c, acc)",
                   "ld.shared::cluster.b32", "cluster_map(mine, s)",
                   "const int slice = kClusterReduce ? u % kClusterK : a.tiles.div(u);",
                   "attrs[n].val.clusterDim.x = kLaunchCluster;",
                   "if (kSplitK > 1 && !kInKernelReduce && !kClusterReduce)"]:
        assert needle in text, needle
    roles = text[text.index("void play_roles("):]  # the CTA's work after its set-up
    producer = roles[roles.index("loads.drain(r);"):roles.index("setmaxnreg_inc")]
    assert producer.count("cluster_sync();") == 2
    assert "cluster_reduce(r, c, acc)" not in lowered(IN_KERNEL, LLM)
    assert make_context(parse(CLUSTER_K.replace("k4c", "k1")), LLM).red_bytes == 0


@pytest.mark.parametrize("text, problem, says", [
    (CLUSTER_K.replace("k4c", "k16c"), LLM, "at most 8 slices"),
    (CLUSTER_K.replace("c1x1", "c2x1"), LLM, "use cluster c1x1 with it"),
    (CLUSTER_K.replace(" dp ", " persistent "), LLM, "use schedule dp"),
    ("cuda_wgmma sm_90a 128x128x64 w1x1 s3 sw128 row/8 pred k2c dp c1x1 pingpong direct",
     Problem(256, 256, 8192, "nn", "f32"), "not pingpong"),
    ("triton sm_90a 64x64x128 w1x4 s4 swnone row/8 pred k2c dp c1x1 nows direct", LLM,
     "triton reduces split-K slices by atomic, inkernel, workspace"),
    ("cuda_mma sm_80 128x128x32 w2x2 s3 swnone row/1 pred k2c dp c1x1 nows direct", LLM,
     "split_k: split-K slices summed through a cluster need sm_90a"),
])
def test_cluster_split_k_declines_with_a_reason(text, problem, says):
    reason = check(parse(text), problem)
    assert reason and says in reason, reason


@pytest.mark.nvcc
@pytest.mark.parametrize("text, problem, hgmma", [
    (CLUSTER_K, LLM, "HGMMA.64x8x16.F32"),
    (CLUSTER_K.replace("k4c", "k2c").replace(" swap pdl", "").replace("8x64x256", "64x64x128")
     .replace("s5", "s6"), Problem(4096, 64, 4096, "nn", "f16"), "HGMMA.64x64x16.F16"),
    (SWAP_SPLIT, LLM, "HGMMA.64x8x16.F32"),
    (SWAP, Problem(16, 4096, 4096, "nt", "f16"), "HGMMA.64x16x16.F16"),
    (IN_KERNEL, Problem(128, 128, 16384, "nn", "f32"), "HGMMA.64x64x16.F32"),
])
def test_builds_for_sm90a_without_spills(tmp_path, text, problem, hgmma):
    """The emitted file builds for sm_90a with no spills; the SASS holds the narrow wgmma."""
    cu = emit(problem, parse(text), tmp_path)
    exe = tmp_path / "selftest"
    cmd = [nvcc.knobs().nvcc, *nvcc.BASE_FLAGS, *nvcc.gencode(Arch.SM90A), "-Xptxas", "-v",
           "-DGEMMFORGE_STANDALONE_MAIN", "-o", str(exe), str(cu)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    kernel = done.stderr[done.stderr.index("gf_cuda_wgmma"):]
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", kernel)
    if nvcc.cuobjdump():
        assert hgmma in nvcc.disassemble(exe)


PDL = "cuda_wgmma sm_90a 64x64x64 w1x1 s8 sw128 row/8 pred k1 dp c1x1 coop direct pdl"


def test_pdl_waits_before_global_memory_and_launches_with_the_attribute():
    """pdl: after its set-up every role waits for the previous kernel's memory and signals
    its dependents before it loads or consumes; the producer thread walks to its first unit
    before that wait (the walk overlaps the previous kernel's tail); the kernel is launched by
    cudaLaunchKernelEx with programmatic stream serialization. Without pdl the wait compiles
    to nothing and the launch has no attribute."""
    text = lowered(PDL, Problem(64, 512, 1024))
    assert "constexpr bool kPdl = true;" in text
    waits = text[text.index("void await_previous_kernel()"):text.index("void play_roles(")]
    assert "if constexpr (kPdl)" in waits
    assert waits.index("griddepcontrol.wait;") < waits.index("griddepcontrol.launch_dependents;")
    roles = text[text.index("void play_roles("):text.index("__global__ void")]
    assert roles.index("loads.start(args);") < roles.index("await_previous_kernel();") < roles.index(
        "loads.issue_next(")
    consumers = [i for i in range(len(roles)) if roles.startswith("consume(args", i)]
    assert len(consumers) == 2  # with and without a producer warpgroup
    for at in consumers:
        assert roles.rindex("await_previous_kernel();", 0, at) > roles.rfind("}", 0, at)
    body = text[text.index("__global__ void"):]
    assert body.index("mbar_fence_init();") < body.index("play_roles(")
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" in text
    assert "Launch launch(clusters * kClusterSize, s, kPdl);" in text
    plain = lowered(PDL.removesuffix(" pdl"), Problem(64, 512, 1024))
    assert "constexpr bool kPdl = false;" in plain


@pytest.mark.parametrize("text, says", [
    ("cute_cpp sm_90a 128x128x64 w1x1 s4 swnone col/1 pred k1 dp c1x1 nows direct pdl",
     "pdl: cute_cpp"),
    ("cuda_mma sm_80 128x128x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct pdl",
     "pdl: programmatic dependent launches (griddepcontrol) need sm_90a"),
])
def test_pdl_is_declined_where_it_is_not_lowered(text, says):
    reason = check(parse(text), Problem(64, 512, 1024))
    assert reason and reason.startswith(says), reason


@pytest.mark.nvcc
def test_pdl_builds_for_sm90a_with_griddepcontrol(tmp_path):
    cu = emit(Problem(64, 512, 1024), parse(PDL), tmp_path)
    exe = tmp_path / "selftest"
    cmd = [nvcc.knobs().nvcc, *nvcc.BASE_FLAGS, *nvcc.gencode(Arch.SM90A), "-Xptxas", "-v",
           "-DGEMMFORGE_STANDALONE_MAIN", "-o", str(exe), str(cu)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    if nvcc.cuobjdump():
        sass = nvcc.disassemble(exe)
        # griddepcontrol.wait assembles to ACQBULK, launch_dependents to PREEXIT
        assert "ACQBULK" in sass and "PREEXIT" in sass
