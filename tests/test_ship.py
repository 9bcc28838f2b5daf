"""`gemmforge ship`: the shipped file from confirmation CSVs: the best median per shape,
gate refusals, merging, one line and an exit code for bad input."""
from __future__ import annotations

import json

import pytest

from gemmforge.cli import main
from gemmforge.ir.program import Problem
from gemmforge.dispatch.shipped import FORMAT, read
from gemmforge.search.campaign.ship import ship

A = "cuda_wgmma sm_90a 128x192x64 w1x1 s5 sw128 row/4 pred k1 persistent c2x1 pingpong tma"
B = "cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/4 pred k1 persistent c1x1 pingpong tma"
H100 = "NVIDIA H100 80GB HBM3"
HEADER = "m,n,k,layout,acc,device,program,status,kernel_us,cublas_us,speedup,rel_err,regate\n"


def _csv(path, rows):
    path.write_text(HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def _row(program, kernel_us, speedup, device=H100, status="ok", rel_err=2e-4, regate="",
         shape=(4096, 4096, 4096)):
    return (*shape, "nn", "f32", device, program, status, kernel_us, kernel_us * speedup,
            speedup, rel_err, regate)


def test_best_median_over_readings(tmp_path):
    """A wins one reading by a lot, B two of three: B's median is higher, so B ships with
    the medians of its own three readings."""
    files = [_csv(tmp_path / f"{x}.csv", [_row(A, 100, a), _row(B, 100, b)])
             for x, a, b in (("a", 1.20, 1.04), ("b", 1.00, 1.05), ("c", 1.01, 1.03))]
    out = tmp_path / "shipped.json"
    rows, refused = ship(files, out, "python3 measure.py", "h100")
    assert not refused and len(rows) == 1
    (row,) = read(out).rows
    assert row.program_text == B and row.readings == 3 and row.device_class == "h100"
    assert row.speedup == pytest.approx(1.04) and row.figures["min_speedup"] == pytest.approx(1.03)
    assert row.figures["kernel_us"] == pytest.approx(100) and row.figures["cold_us"] is None
    assert row.measured["command"] == "python3 measure.py"
    assert row.measured["devices"] == [H100] and row.measured["date"]
    assert json.loads(out.read_text())["format"] == FORMAT


@pytest.mark.parametrize("bad, reason", [
    (dict(status="failed"), "status failed"),
    (dict(rel_err=0.5), "rel_err over the gate's tolerance"),
    (dict(regate="false"), "regate not passed"),
    (dict(device="replay"), "not measured on a GPU"),
    (dict(device="NVIDIA H200"), "device class h200, not h100"),
    (dict(shape=(4096, 4096, 4095)), "program illegal here"),
])
def test_refuses_rows_that_did_not_pass(tmp_path, bad, reason):
    rows = [_row(A, 90, 1.5, **bad), _row(B, 100, 1.0)]
    shipped, refused = ship([_csv(tmp_path / "a.csv", rows)], tmp_path / "s.json", "c", "h100")
    assert [r.program_text for r in shipped] == [B]
    assert list(refused) and list(refused)[0].startswith(reason)


def test_merge_keeps_other_keys_and_replaces_the_shipped_ones(tmp_path):
    out = tmp_path / "shipped.json"
    small = (1024, 1024, 1024)
    ship([_csv(tmp_path / "a.csv", [_row(A, 100, 1.1), _row(A, 10, 1.2, shape=small)])], out, "first")
    ship([_csv(tmp_path / "b.csv", [_row(B, 100, 1.05)])], out, "second")
    ship([_csv(tmp_path / "c.csv", [_row(B, 100, 1.07, device="NVIDIA H200")])], out, "third")
    book = read(out)
    assert sorted((r.device_class, r.problem.m, r.program_text, r.measured["command"])
                  for r in book.rows) == [("h100", 1024, A, "first"), ("h100", 4096, B, "second"),
                                          ("h200", 4096, B, "third")]
    assert book.exact("h100", Problem(1024, 1024, 1024)).speedup == pytest.approx(1.2)
    assert len(json.loads(out.read_text())["measurements"]) == 3


def test_shape_classes_leave_the_other_classes_rows_as_shipped(tmp_path):
    """A round that also re-timed large rows ships only its own classes' rows; the large
    row keeps the program and provenance of the round that confirmed it."""
    out = tmp_path / "s.json"
    large, medium = (8192, 8192, 4096), (2048, 2048, 1024)
    ship([_csv(tmp_path / "a.csv", [_row(A, 100, 1.1, shape=large)])], out, "large round")
    rows = [_row(B, 100, 1.2, shape=large), _row(B, 10, 1.3, shape=medium)]
    shipped, refused = ship([_csv(tmp_path / "b.csv", rows)], out, "medium round", "h100",
                            frozenset({"small", "medium"}))
    assert [r.problem for r in shipped] == [Problem(*medium)]
    assert refused == {"shape class large, not in medium,small": 1}
    by_shape = {r.problem: r for r in read(out).rows}
    assert by_shape[Problem(*large)].program_text == A
    assert by_shape[Problem(*large)].measured["command"] == "large round"
    assert by_shape[Problem(*medium)].measured["command"] == "medium round"


def test_cli(tmp_path, capsys):
    src = _csv(tmp_path / "a.csv", [_row(A, 100, 1.1)])
    out = tmp_path / "s.json"
    assert main(["ship", "--from", str(src), "--device-class", "h100", "--command", "m",
                 "--out", str(out)]) == 0
    assert "shipped 1 shape(s) (h100: 1)" in capsys.readouterr().out
    assert main(["ship", "--from", str(tmp_path / "missing.csv"), "--command", "m"]) == 2
    assert "--from: no such file" in capsys.readouterr().err
    assert main(["ship", "--from", str(src), "--device-class", "replay", "--command", "m"]) == 2
    assert main(["ship", "--from", str(src), "--command", " "]) == 2
    assert main(["ship", "--from", str(src), "--shape-classes", "medium,huge", "--command", "m"]) == 2
    assert "--shape-classes: huge" in capsys.readouterr().err
    failed = _csv(tmp_path / "f.csv", [_row(A, 100, 1.1, status="failed")])
    assert main(["ship", "--from", str(failed), "--command", "m", "--out", str(out)]) == 1
    assert "refused 1 row(s): status failed" in capsys.readouterr().out


def test_sustained_figures_pick_where_every_reading_has_them(tmp_path):
    """A leads in short windows, B under sustained load: with sustained columns B ships."""
    header = HEADER.strip() + ",sustained_us,cublas_sustained_us\n"
    rows = [_row(A, 100, 1.06) + (110, 108), _row(B, 100, 1.03) + (105, 107)]
    path = tmp_path / "a.csv"
    path.write_text(header + "".join(",".join(map(str, r)) + "\n" for r in rows))
    (row,), _ = ship([path], tmp_path / "s.json", "c", "h100")
    assert row.program_text == B and row.figures["sustained_us"] == pytest.approx(105)
    assert row.speedup == pytest.approx(1.03)


def test_shapes_leave_the_other_shapes_rows_as_shipped(tmp_path, capsys):
    """--shapes: a round whose changes were confirmed at some shapes only ships those; the
    rest keep the program and provenance they had."""
    out = tmp_path / "s.json"
    kept, confirmed = (2048, 2048, 1024), (4096, 4096, 4096)
    ship([_csv(tmp_path / "a.csv", [_row(A, 10, 1.1, shape=kept), _row(A, 100, 1.1, shape=confirmed)])],
         out, "first round")
    later = _csv(tmp_path / "b.csv", [_row(B, 10, 1.3, shape=kept), _row(B, 100, 1.2, shape=confirmed)])
    assert main(["ship", "--from", str(later), "--shapes", "4096x4096x4096", "--command", "later",
                 "--out", str(out)]) == 0
    assert "refused 1 row(s): shape not in --shapes" in capsys.readouterr().out
    by_shape = {r.problem: r for r in read(out).rows}
    assert (by_shape[Problem(*kept)].program_text, by_shape[Problem(*kept)].measured["command"]) == (A, "first round")
    assert (by_shape[Problem(*confirmed)].program_text,
            by_shape[Problem(*confirmed)].measured["command"]) == (B, "later")
    assert main(["ship", "--from", str(later), "--shapes", "@" + str(tmp_path / "none.txt"),
                 "--command", "m", "--out", str(out)]) == 2
    assert "--shapes: no such file" in capsys.readouterr().err


def test_rank_by_after_picks_the_best_after_another_kernel(tmp_path, capsys):
    """--rank-by after: each shape's program is the one with the best median ratio after
    another kernel (after_us), not back to back; its figures keep both; rows without after
    figures are refused."""
    header = "m,n,k,layout,acc,device,program,status,kernel_us,cublas_us,after_us,cublas_after_us\n"
    pdl, plain = A + " pdl", A
    rows = [(pdl, 4.0, 5.0, 5.2, 5.0), (plain, 4.6, 5.0, 4.8, 5.0), (B, 5.0, 5.0, "", "")]
    src = tmp_path / "after.csv"
    src.write_text(header + "".join(
        f"4096,4096,4096,nn,f32,{H100},{p},ok,{k},{cb},{a},{ca}\n" for p, k, cb, a, ca in rows))
    out = tmp_path / "s.json"
    shipped, refused = ship([src], out, "kernel")
    assert [r.program_text for r in shipped] == [pdl]  # back to back: 1.25x against 1.09x
    shipped, refused = ship([src], out, "after", rank_by="after")
    (row,) = shipped
    assert row.program_text == plain and refused == {"no after_us and cublas_after_us to rank by": 1}
    assert row.figures["after_us"] == 4.8 and row.figures["cublas_after_us"] == 5.0
    assert row.figures["speedup"] == pytest.approx(5.0 / 4.6)
    assert read(out).rows[0].figures["after_us"] == 4.8  # written and read back
    with pytest.raises(ValueError):
        ship([src], out, "x", rank_by="sustained")
    assert main(["ship", "--from", str(src), "--rank-by", "after", "--command", "m", "--out",
                 str(out)]) == 0
    assert "refused 1 row(s): no after_us" in capsys.readouterr().out


def test_auto_ranks_by_the_after_protocol_where_every_reading_has_it(tmp_path):
    """The default (auto): after another kernel where every reading of the shape measured it,
    so a pdl program's overlap of its own previous launch does not pick it; "kernel" keeps
    the back-to-back ranking; one reading without after figures puts the shape back on it."""
    header = "m,n,k,layout,acc,device,program,status,kernel_us,cublas_us,after_us,cublas_after_us\n"
    pdl, plain = A + " pdl", A

    def source(name, rows):
        path = tmp_path / name
        path.write_text(header + "".join(
            f"4096,4096,4096,nn,f32,{H100},{p},ok,{k},{cb},{a},{ca}\n" for p, k, cb, a, ca in rows))
        return path
    both = source("both.csv", [(pdl, 4.0, 5.0, 5.2, 5.0), (plain, 4.6, 5.0, 4.8, 5.0)])
    out = tmp_path / "s.json"
    assert [r.program_text for r in ship([both], out, "auto")[0]] == [plain]
    assert [r.program_text for r in ship([both], out, "kernel", rank_by="kernel")[0]] == [pdl]
    partly = source("partly.csv", [(plain, 4.7, 5.0, "", "")])
    assert [r.program_text for r in ship([both, partly], out, "auto")[0]] == [pdl]


def test_a_shape_cublas_wins_ships_as_cublas_and_the_runtime_calls_cublas(tmp_path):
    """Where even the best program reads slower than cuBLAS, the row's program is `cublas`:
    matmul's resolver (cublas="slower") and patch's (cublas="unmeasured") serve cuBLAS there,
    the rows around it are kept, and a later ship of the same file keeps the cuBLAS row."""
    from gemmforge.dispatch.choice import resolve
    from gemmforge.dispatch.shipped import CUBLAS
    from gemmforge.ir.program import Arch
    slow = _csv(tmp_path / "slow.csv", [_row(A, 100, 0.95), _row(B, 100, 0.97),
                                        _row(A, 100, 1.10, shape=(2048, 4096, 4096))])
    out = tmp_path / "shipped.json"
    ship([slow], out, "python3 measure.py", "h100")
    book = read(out)
    (won,) = book.cublas_rows
    assert won.program_text == CUBLAS and won.problem == Problem(4096, 4096, 4096)
    assert won.speedup == pytest.approx(0.97)  # the best program's evidence stays
    assert [r.program_text for r in book.rows] == [A]
    for rule in ("slower", "unmeasured"):
        choice = resolve(Problem(4096, 4096, 4096), Arch.SM90A, "h100", shipped_path=out,
                         use_tuned=False, cublas=rule)
        assert choice.cublas and "won this shape" in choice.line()
        other = resolve(Problem(2048, 4096, 4096), Arch.SM90A, "h100", shipped_path=out,
                        use_tuned=False, cublas=rule)
        assert str(other.program) == A
    never = resolve(Problem(4096, 4096, 4096), Arch.SM90A, "h100", shipped_path=out,
                    use_tuned=False)
    assert not never.cublas  # emit and bench still get a program
    ship([_csv(tmp_path / "other.csv", [_row(B, 100, 1.2, shape=(1024, 4096, 4096))])], out,
         "python3 measure.py", "h100")
    assert [r.problem for r in read(out).cublas_rows] == [Problem(4096, 4096, 4096)]
