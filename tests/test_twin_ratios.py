"""benchmarks/twin_ratios.py: each program's per-shape speedup ratio to another in one CSV."""
import csv
import importlib.util
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("twin_ratios", ROOT / "benchmarks" / "twin_ratios.py")
twin_ratios = importlib.util.module_from_spec(spec)
spec.loader.exec_module(twin_ratios)

RESULTS = Path(__file__).resolve().parent / "data" / "streamk_even_h100_v15c.csv"
STREAMK = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 streamk c1x1 coop tma"
PERSISTENT = STREAMK.replace(" streamk ", " persistent ")


def speedups(program: str) -> dict[str, float]:
    rows = csv.DictReader(RESULTS.open())
    return {f"{r['m']}x{r['n']}x{r['k']}": float(r["speedup"]) for r in rows
            if r["program"] == program and r["status"] == "ok"}


def run(monkeypatch, capsys, *args) -> list[str]:
    monkeypatch.setattr("sys.argv", ["twin_ratios.py", str(RESULTS), *args])
    assert twin_ratios.main() == 0
    return capsys.readouterr().out.splitlines()


def test_stream_k_program_against_its_persistent_twin(monkeypatch, capsys):
    assert twin_ratios.twin_of(STREAMK, [PERSISTENT, STREAMK]) == PERSISTENT
    mine, twin = speedups(STREAMK), speedups(PERSISTENT)
    ratios = {s: mine[s] / twin[s] for s in mine}
    geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
    out = run(monkeypatch, capsys, "--against", "twin", "--per-shape")
    at = out.index(next(ln for ln in out if ln.endswith(f"{STREAMK}  ({PERSISTENT})")))
    assert out[at].split()[:4] == [f"{geo:.3f}", f"{min(ratios.values()):.3f}",
                                   f"{max(ratios.values()):.3f}", str(len(ratios))]
    shown = dict(ln.split() for ln in out[at + 1:at + 1 + len(ratios)])
    assert shown == {s: f"{r:.3f}" for s, r in ratios.items()}


def test_against_first_skips_the_first_itself(monkeypatch, capsys):
    out = run(monkeypatch, capsys, "--against", "first")
    first = next(csv.DictReader(RESULTS.open()))["program"]
    assert all(ln.endswith(f"({first})") for ln in out[1:])
    assert len(out) > 1 and not any(f"  {first}  (" in ln for ln in out)


def test_a_csv_with_nothing_measured_is_a_clear_error(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.csv"
    empty.write_text(RESULTS.read_text().splitlines()[0] + "\n")
    monkeypatch.setattr("sys.argv", ["twin_ratios.py", str(empty)])
    assert twin_ratios.main() == 2
    assert "no measured programs" in capsys.readouterr().err


def test_pairs_put_each_second_program_against_the_one_before(tmp_path, monkeypatch, capsys):
    listed = tmp_path / "pairs.txt"
    listed.write_text(f"# a probe\n{PERSISTENT}\n{STREAMK}\n")
    mine, twin = speedups(STREAMK), speedups(PERSISTENT)
    geo = math.exp(sum(math.log(mine[s] / twin[s]) for s in mine) / len(mine))
    out = run(monkeypatch, capsys, "--pairs", str(listed))
    assert len(out) == 2 and out[1].endswith(f"{STREAMK}  ({PERSISTENT})")
    assert out[1].split()[0] == f"{geo:.3f}"


def test_pairs_with_an_odd_count_is_a_clear_error(tmp_path, monkeypatch, capsys):
    listed = tmp_path / "odd.txt"
    listed.write_text(f"{PERSISTENT}\n{STREAMK}\n{PERSISTENT}\n")
    monkeypatch.setattr("sys.argv", ["twin_ratios.py", str(RESULTS), "--pairs", str(listed)])
    assert twin_ratios.main() == 2
    assert "3 programs, not pairs" in capsys.readouterr().err
