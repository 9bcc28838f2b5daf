"""search.campaign.shipped_table: the shipped file's results table, and README's copy of it."""
from pathlib import Path

import pytest

from gemmforge.search.campaign import shipped_table as summary
from gemmforge.dispatch.shipped import DEFAULT_PATH

README = Path(__file__).resolve().parents[1] / "README.md"


def test_summary_per_class_and_layout():
    row = dict(layout="nn", m=64, n=64, k=64, cold_us=2.0, cublas_cold_us=2.2)
    rows = [dict(row, device_class="h200", speedup=1.2), dict(row, device_class="h200", speedup=0.9),
            dict(row, device_class="h200", speedup=1.0, m=8192, n=8192, k=8192, cold_us=None,
                 after_us=4.0, cublas_after_us=4.2)]
    (line,) = summary.summary(rows)
    assert line["rows"] == 3 and line["under"] == 1 and line["cold_rows"] == 2
    assert line["warm"] == pytest.approx((1.2 * 0.9 * 1.0) ** (1 / 3))
    assert line["cold"] == pytest.approx(1.1) and line["large_rows"] == 1 and line["large_warm"] == 1.0
    assert line["after_rows"] == 1 and line["after"] == pytest.approx(1.05)


def test_bf16_rows_get_their_own_line():
    row = dict(layout="nt", m=64, n=64, k=64, device_class="h200")
    lines = summary.summary([dict(row, speedup=1.2), dict(row, speedup=0.8, dtype="bf16")])
    assert [(s["layout"], s["warm"]) for s in lines] == [("nt", 1.2), ("nt bf16", 0.8)]


def test_readme_table_is_the_one_the_shipped_file_makes():
    """README's results table is generated: after a re-tune, rewrite it with
    `python3 benchmarks/shipped_summary.py --readme README.md`."""
    assert summary.between_markers(README.read_text()) == summary.shipped_table(DEFAULT_PATH)


def test_the_table_is_rewritten_between_the_markers_only():
    begin, end = summary.MARKERS
    text = f"intro\n{begin}\n| old |\n{end}\nafter\n"
    new = summary.with_table(text, ["| a |", "| b |"])
    assert new == f"intro\n{begin}\n| a |\n| b |\n{end}\nafter\n"
    assert summary.between_markers(new) == ["| a |", "| b |"]
    with pytest.raises(ValueError, match="results table"):
        summary.with_table("no markers here", ["| a |"])


def test_table_rows_say_where_a_protocol_covers_fewer_rows():
    line = dict(device="h200", layout="nn", rows=3, warm=1.1, cold=1.05, cold_rows=2,
                after=float("nan"), after_rows=0, under=1, large_rows=0, large_warm=float("nan"))
    (row,) = summary.table([line])[2:]
    assert row == "| h200 | nn | 3 | 1.100x | 1.050x (2 rows) | - | 1 | - |"
