"""benchmarks/sustained_turns.py: the same programs under sustained turns of several lengths."""
import csv
import math

import pytest

from benchmark_scripts import load

turns = load("sustained_turns")

HOT = "cuda_wgmma sm_90a 192x128x64 w1x1 s5 sw128 row/8 pred k1 persistent c1x1 pingpong tma"
COOL = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop tma"
BENCH_FIELDS = ("m", "n", "k", "layout", "acc", "device", "program", "status", "kind",
                "kernel_us", "cublas_us", "sustained_us", "cublas_sustained_us")


def bench_row(program, ours_us, cublas_us, status="ok", shape=(8192, 8192, 12288)):
    m, n, k = shape
    return {"m": str(m), "n": str(n), "k": str(k), "layout": "nn", "acc": "f32", "device": "gpu",
            "program": program, "status": status, "kind": "" if status == "ok" else "runtime",
            "kernel_us": "100", "cublas_us": "100", "sustained_us": str(ours_us),
            "cublas_sustained_us": str(cublas_us)}


def write_bench(path, rows):
    """A bench CSV of `rows` (as gemmforge bench writes them); returns its path."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=BENCH_FIELDS)
        w.writeheader()
        w.writerows(rows)
    return path


def test_turn_lengths_parse_and_reject_bad_lists():
    assert turns.turn_lengths("0.25, 1") == [0.25, 1.0]
    for bad in ("1", "0.25,0.25", "0,1", "a,b", "-1,1"):
        with pytest.raises(SystemExit, match="--turns"):
            turns.turn_lengths(bad)


def test_summarize_means_each_turn_over_its_runs_and_skips_failures(tmp_path):
    short = turns.read_csv(write_bench(tmp_path / "short.csv", [bench_row(HOT, 100, 95),
                                                                 bench_row(HOT, 100, 97)]))
    long = turns.read_csv(write_bench(tmp_path / "long.csv", [
        bench_row(HOT, 100, 103), bench_row(HOT, 100, 50, status="failed"),
        bench_row(COOL, 100, 101)]))
    readings = [(0.25, r) for r in short] + [(1.0, r) for r in long]
    rows = turns.summarize(readings)
    got = {(r["program"], r["turn_s"]): (r["runs"], r["sustained_ratio"]) for r in rows}
    assert got == {(HOT, 0.25): (2, pytest.approx(0.96)), (HOT, 1.0): (1, pytest.approx(1.03)),
                   (COOL, 1.0): (1, pytest.approx(1.01))}
    hot_short = next(r for r in rows if r["program"] == HOT and r["turn_s"] == 0.25)
    geo = turns.by_program(rows + [dict(hot_short, m=4096, sustained_ratio=0.9)])
    assert geo[(HOT, 0.25)] == pytest.approx(math.sqrt(0.96 * 0.9))


def test_main_alternates_the_lengths_and_writes_the_summary(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_bench(cmd):
        turn = float(cmd[cmd.index("--sustained-seconds") + 1])
        name = cmd[cmd.index("--name") + 1]
        calls.append((turn, "--chosen" in cmd, cmd.count("--program")))
        write_bench(tmp_path / f"{name}.csv", [bench_row(HOT, 100, 90 if turn < 1 else 103)])

        class Done:
            returncode = 0
        return Done()

    monkeypatch.setattr(turns.subprocess, "run", fake_bench)
    assert turns.main(["--shapes", "8192x8192x12288", "--chosen", "--program", COOL,
                       "--turns", "0.25,1", "--repeats", "2", "--name", "t",
                       "--report-dir", str(tmp_path)]) == 0
    assert calls == [(0.25, True, 1), (1.0, True, 1), (0.25, True, 1), (1.0, True, 1)]
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["turn_s"], r["runs"], round(float(r["sustained_ratio"]), 3)) for r in rows] == [
        ("0.25", "2", 0.9), ("1.0", "2", 1.03)]
    assert "geomean sustained ratio by program and turn length" in capsys.readouterr().out


def test_main_needs_something_to_time(tmp_path):
    with pytest.raises(SystemExit, match="--program or --chosen"):
        turns.main(["--shapes", "64x64x64", "--report-dir", str(tmp_path)])
