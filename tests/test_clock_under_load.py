"""benchmarks/clock_under_load.py: what runs without a GPU (arguments, the pipe's constant)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "clock_under_load.py"
PROGRAM = "cuda_wgmma sm_90a 128x192x64 w1x1 s5 sw128 row/4 pred k1 persistent c2x1 pingpong tma"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def test_the_pipes_flops_per_cycle_give_the_h100s_published_peak():
    spec = importlib.util.spec_from_file_location("clock_under_load", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert abs(132 * mod.FLOP_PER_SM_CYCLE * 1.83e9 / 989.4e12 - 1) < 1e-3


def test_bad_arguments_stop_before_any_gpu_work():
    for args, says in [(("--program", PROGRAM, "--turns", "0"), "--turns"),
                       (("--program", PROGRAM.replace("c2x1", "c9x1")), "cluster.cm"),
                       (("--program", PROGRAM, "--shape", "8192x8192"), "MxNxK"),
                       (("--program", PROGRAM.replace("128x192x64", "128x192x48")), "tile.bk")]:
        done = run(*args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr[-300:])


def test_cublas_kernels_sustains_with_the_same_sampler_and_rate():
    spec = importlib.util.spec_from_file_location("cublas_kernels",
                                                  ROOT / "benchmarks" / "cublas_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.FLOP_PER_CLOCK * 1.83e9 / 1e12 == pytest.approx(989.4, rel=1e-3)
    assert mod.parse_shape("8192X4096x1024") == (8192, 4096, 1024)
    with pytest.raises(SystemExit, match="write MxNxK"):
        mod.parse_shape("8192x8192")
