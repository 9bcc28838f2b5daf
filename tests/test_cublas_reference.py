"""benchmarks/cublas_reference.py: our cuBLAS readings and kernel times against the H200
reference file, per FLOP decade."""
import pytest

from benchmark_scripts import load
from gemmforge.search.measure.records import Result

reference = load("cublas_reference")


def test_each_grid_shape_s_best_program_against_the_reference_file():
    # 64x64x64: the file's best of nn (2.065) and tn (2.064) is 2.064 us
    best = Result("a", 64, 64, 64, kernel_us=1.032, cublas_us=4.128)
    slower = Result("b", 64, 64, 64, kernel_us=4.128, cublas_us=4.128)
    off_grid = Result("a", 65, 64, 64, kernel_us=1.0, cublas_us=1.0)
    got = reference.ratios([slower, best, off_grid])
    assert set(got) == {"1e5", "all"} and len(got["all"]) == 1
    ours_over_ref, ref_over_kernel = got["1e5"][0]
    assert ours_over_ref == pytest.approx(2.0) and ref_over_kernel == pytest.approx(2.0)
    assert reference.ratios([off_grid]) == {}


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        reference.main([str(tmp_path / "absent.csv")])
