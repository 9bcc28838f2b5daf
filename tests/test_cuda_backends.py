"""The cuda family: lowered sources say what the program says, and real nvcc compiles
of emitted files succeed for sm_80 and sm_90a over all three paths (no GPU needed)."""
import pytest

from gemmforge.backends import registry
from gemmforge.compiler.values import Target
from gemmforge.compiler import nvcc
from gemmforge.emit import emit
from gemmforge.ir import Problem, parse

PATHS = {
    "cuda_simt": "cuda_simt {arch} 64x64x32 w2x2 s3 swpad col/4 pred k1 dp c1x1 nows direct",
    "cuda_wmma": "cuda_wmma {arch} 64x128x32 w2x2 s3 swpad row/8 padop k2 dp c1x1 nows direct",
    "cuda_mma": "cuda_mma {arch} 128x128x32 w2x2 s4 sw128 row/8 pred k3a dp c1x1 nows direct",
}


def program(backend, arch="sm_80"):
    return parse(PATHS[backend].format(arch=arch))


@pytest.mark.parametrize("backend", PATHS)
def test_lowered_source_carries_the_program(backend):
    p = program(backend)
    src = registry.get(backend).lower(p, Problem(1000, 4096, 333, "nt", "f16"))
    text = src.text
    assert f"// program: {p}" in text
    assert f"__global__ void __launch_bounds__(kThreads) {p.name}(GemmArgs args)" in text
    assert "constexpr bool kLayoutNT = true;" in text
    assert "constexpr bool kAccF16 = true;" in text
    assert f"constexpr int kStages = {p.stages};" in text
    assert f"constexpr int kSplitK = {p.split_k.slices};" in text
    assert 'extern "C" int gemmforge_launch(' in text
    assert "-gencode=arch=compute_80,code=sm_80" in text


def test_instruction_paths_differ():
    texts = {b: registry.get(b).lower(program(b), Problem(64, 64, 64)).text for b in PATHS}
    assert "fmaf(" in texts["cuda_simt"] and "wmma::mma_sync" not in texts["cuda_simt"]
    assert "wmma::mma_sync" in texts["cuda_wmma"]
    assert "mma.sync.aligned.m16n8k16" in texts["cuda_mma"] and "ldmatrix" in texts["cuda_mma"]


def test_lowering_is_deterministic():
    p, pr = program("cuda_mma"), Problem(17, 33, 65)
    be = registry.get("cuda_mma")
    assert be.lower(p, pr).files == be.lower(p, pr).files


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("backend", PATHS)
@pytest.mark.parametrize("layout, acc", [("nn", "f32"), ("nt", "f16")])
def test_emitted_file_compiles(tmp_path, backend, arch, layout, acc):
    """The standalone file builds with plain nvcc (self-test main included) and the
    binary holds the instruction the program promises."""
    p = program(backend, arch)
    cu = emit(Problem(1000, 4096, 333, layout, acc), p, tmp_path)
    exe = tmp_path / "selftest"
    nvcc.compile_cuda(cu, exe, [*nvcc.gencode(p.arch), "-DGEMMFORGE_STANDALONE_MAIN"],
                      shared=False)
    assert exe.stat().st_size > 0
    if backend == "cuda_mma" and arch == "sm_90a":
        sass = nvcc.disassemble(exe)
        if nvcc.cuobjdump():
            assert "HMMA.16816" in sass and "LDSM" in sass and "LDGSTS" in sass


@pytest.mark.nvcc
def test_build_for_hopper_device_runs_sm80_program_as_sm90(tmp_path):
    p = program("cuda_simt")
    be = registry.get("cuda_simt")
    art = be.build(be.lower(p, Problem(64, 64, 64)), Target(90), tmp_path)
    assert art.kind == "cuda_so" and art.path.exists()
    if nvcc.cuobjdump():
        assert "sm_90" in nvcc.disassemble(art.path, "--list-elf")
