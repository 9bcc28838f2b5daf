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


def test_the_summary_compares_the_turns_after_the_first():
    import json
    import statistics
    spec = importlib.util.spec_from_file_location("clock_under_load", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs = [json.loads((ROOT / "benchmarks" / "results" / f"clock_{s}_h100_v17.json").read_text())
            for s in ("8192", "12288")]
    text = mod.summary(runs)

    def ratio(run):
        med = {who: statistics.median(t["tflops"] for t in run["turns"]
                                      if t["who"] == who and t["turn"] > 0)
               for who in ("ours", "cublas")}
        return med["ours"] / med["cublas"]
    for run in runs:
        assert f"{ratio(run):6.3f}  {run['program']}" in text
    geo = (ratio(runs[0]) * ratio(runs[1])) ** 0.5
    assert text.splitlines()[-1] == (f"2 shapes under load: geomean {geo:.3f}, "
                                     f"min {min(map(ratio, runs)):.3f}")


def test_winners_shapes_must_be_in_the_csv():
    csv_path = ROOT / "benchmarks" / "results" / "hopper_population_h100_v17_confirm_a.csv"
    done = run("--winners", str(csv_path), "--shapes", "8192x8192x8192,7x7x7")
    assert done.returncode == 2 and "7x7x7" in done.stderr and "8192x8192x8192" not in done.stderr.split(":")[-1]
    done = run("--program", PROGRAM, "--shapes", "8192x8192x8192,8192x8192")
    assert done.returncode == 2 and "MxNxK" in done.stderr


def test_a_shape_that_fails_leaves_the_others_on_file(tmp_path, monkeypatch, capsys):
    import json
    spec = importlib.util.spec_from_file_location("clock_under_load", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    done = json.loads((ROOT / "benchmarks" / "results" / "clock_8192_h100_v17.json").read_text())

    def fake(problem, program, args):
        if problem.shape == "4096x4096x4096":
            raise SystemExit(f"{program} at {problem.shape}: relative error 1.0e+00, not timed")
        return {**done, "shape": problem.shape}
    monkeypatch.setattr(mod, "measure", fake)
    monkeypatch.setattr(mod, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["clock_under_load.py", "--program", PROGRAM, "--shapes",
                                      "8192x8192x8192,4096x4096x4096,12288x12288x12288",
                                      "--name", "t"])
    assert mod.main() == 1
    kept = json.loads((tmp_path / "t.json").read_text())
    assert [r["shape"] for r in kept] == ["8192x8192x8192", "12288x12288x12288", "4096x4096x4096"]
    assert "relative error" in kept[2]["error"] and "turns" not in kept[2]
    out = capsys.readouterr().out
    assert "4096x4096x4096: not timed" in out and "2 shapes under load" in out
