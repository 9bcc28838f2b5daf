"""benchmarks/recheck_compare.py: two fresh re-timings of the large winners side by side."""
import csv
import math
import statistics

import pytest

from benchmark_scripts import load

recheck = load("recheck_compare")

FIELDS = ("m", "n", "k", "layout", "acc", "device", "program", "status", "sustained_us",
          "cublas_sustained_us")


def write(path, rows):
    """A report CSV whose sustained ratio (cuBLAS / ours) is `ratio` at each shape."""
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for (m, n, k), program, ratio in rows:
            w.writerow({"m": m, "n": n, "k": k, "layout": "nn", "acc": "f32", "device": "gpu",
                        "program": program, "status": "ok", "sustained_us": 100.0,
                        "cublas_sustained_us": 100.0 * ratio})
    return path


def test_offset_from_unchanged_programs_and_movement_beyond_it(tmp_path):
    old = write(tmp_path / "old.csv", [((1, 1, 1), "A", 1.02), ((2, 2, 2), "B", 1.00),
                                       ((3, 3, 3), "C", 0.98)])
    new = write(tmp_path / "new.csv", [((1, 1, 1), "A", 1.01), ((2, 2, 2), "B", 0.99),
                                       ((3, 3, 3), "D", 1.01)])
    c = recheck.compare(recheck.read(old, "sustained_speedup"), recheck.read(new, "sustained_speedup"))
    offset = math.sqrt(1.01 / 1.02 * 0.99 / 1.00)
    assert (c["unchanged"], c["changed"]) == (2, 1)
    assert c["offset"] == pytest.approx(offset)
    assert c["beyond_offset"] == pytest.approx(1.01 / 0.98 / offset)
    both = (math.sqrt(1.02 * 1.01) * math.sqrt(1.00 * 0.99) * 1.01) ** (1 / 3)
    assert c["two_calls"] == pytest.approx(both)


def test_main_prints_the_figures_and_rejects_missing_files(tmp_path, capsys):
    a = write(tmp_path / "a.csv", [((1, 1, 1), "A", 1.0)])
    b = write(tmp_path / "b.csv", [((1, 1, 1), "A", 1.1)])
    assert recheck.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 programs in both calls: 1.1000" in out
    assert "none changed in between" in out and "nan" not in out
    c = write(tmp_path / "c.csv", [((1, 1, 1), "B", 1.0)])
    assert recheck.main([str(a), str(c)]) == 0
    out = capsys.readouterr().out
    assert "no program in both calls" in out and "1 changed in between: 1.0000\n" in out
    assert "nan" not in out
    with pytest.raises(SystemExit, match="no such file"):
        recheck.main([str(a), str(tmp_path / "missing.csv")])
    with pytest.raises(SystemExit, match="no ok rows"):
        recheck.main([str(a), str(b), "--column", "speedup"])


def test_agreement_shape_by_shape_on_the_unchanged_programs(tmp_path, capsys):
    rows = [((1, 1, 1), "A", 1.00), ((2, 2, 2), "B", 1.04), ((3, 3, 3), "C", 0.96)]
    old = write(tmp_path / "old.csv", rows)
    new = write(tmp_path / "new.csv", [(s, p, r * 1.01) for s, p, r in rows[:2]]
                + [((3, 3, 3), "C", 1.04)])
    c = recheck.compare(recheck.read(old, "sustained_speedup"), recheck.read(new, "sustained_speedup"))
    a = [math.log(r) for _, _, r in rows]
    b = [math.log(1.01), math.log(1.04 * 1.01), math.log(1.04)]
    assert c["correlation"] == pytest.approx(statistics.correlation(a, b))
    assert c["difference_sd"] == pytest.approx(statistics.stdev(y - x for x, y in zip(a, b)))
    # a constant offset agrees perfectly: correlation 1, no spread
    same = recheck.agreement([0.0, 0.1, -0.1], [0.02, 0.12, -0.08])
    assert same["correlation"] == pytest.approx(1.0) and same["difference_sd"] == pytest.approx(0.0)
    assert recheck.agreement([0.1], [0.2]) == {"correlation": None, "difference_sd": None}
    flat = recheck.agreement([0.1, 0.1], [0.2, 0.3])
    assert flat["correlation"] is None and flat["difference_sd"] > 0
    assert recheck.main([str(old), str(new)]) == 0
    assert "3 programs in both calls" in capsys.readouterr().out
