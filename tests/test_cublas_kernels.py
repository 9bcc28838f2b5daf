"""backends.cuda_wgmma.cublas_names: cuBLAS's nvjet kernel names read as cuda_wgmma programs."""
import pytest

from gemmforge.backends.cuda_wgmma import cublas_names as kernels


@pytest.mark.parametrize("name, shape, program", [
    # 12288x128: cuBLAS's 64 (along its M, our N) by 192 (our M), pairs along our N
    ("nvjet_sm90_hsh_64x192_64x6_2x1_v_bz_NNN", (12288, 128, 12288),
     "192x64x64 w1x1 s6 sw128 row/8 pred k1 dp c1x2 coop direct"),
    # 128x12288: 192 along our N, 64 along our M, pairs along our M
    ("nvjet_sm90_hsh_192x64_64x6_1x2_h_bz_NNT", (128, 12288, 12288),
     "64x192x64 w1x1 s6 sw128 row/8 pred k1 dp c2x1 coop direct"),
    # split-K: 32 tiles of 128x128, so four slices make 128 CTAs
    ("nvjet_sm90_hsh_128x128_64x6_2x1_v_bz_splitK_NNT", (2048, 256, 16384),
     "128x128x64 w2x1 s6 sw128 row/8 pred k4 dp c1x2 coop direct"),
    # six stages of 128x256 do not fit in shared memory: four do
    ("nvjet_sm90_hsh_256x128_64x6_1x2_h_bz_coopA_NNT", (16384, 512, 4096),
     "128x256x64 w2x1 s4 sw128 row/8 pred k1 dp c2x1 coop direct"),
])
def test_a_kernel_name_reads_as_the_program_with_its_tile_and_cluster(name, shape, program):
    assert kernels.mirror(name, shape) == f"cuda_wgmma sm_90a {program}"


@pytest.mark.parametrize("name", [
    "nvjet_sm90_hsh_256x8_64x6_4x1_v_bz_NNT",   # an 8-row MMA tile on our M side: decode
    "void cublasLt::splitKreduce_kernel<32, 16, int, float>",
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64",
])
def test_names_our_kernels_cannot_mirror_give_none(name):
    assert kernels.mirror(name, (8, 6144, 4096)) is None
