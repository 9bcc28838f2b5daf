"""Measuring bf16 without a GPU: requests and results carry the operand dtype (old records
read as f16), the worker's operand pool keeps each dtype's buffers apart, result CSVs and
replayed records keep it, `gemmforge ship` turns bf16 readings into bf16 rows beside the f16
ones, the quick tune times the f16 winners in bf16 and records a bf16 entry, and the
commands take --dtype (a bad value: one line, exit 2)."""
from __future__ import annotations

import pytest

from gemmforge.cli import main
from gemmforge.ir import parse
from gemmforge.ir.program import Arch, DType, Problem
from gemmforge.search.measure.records import BenchSettings, MeasureRequest, Result

WGMMA = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"
SIMT = "cuda_simt sm_90a 64x64x32 w2x2 s3 swpad col/4 pred k1 dp c1x1 nows direct"
BF16 = Problem(4096, 4096, 4096, "nt", "f32", "bf16")
F16 = Problem(4096, 4096, 4096, "nt")
H200 = "NVIDIA H200"


def test_requests_and_results_carry_the_dtype():
    request = MeasureRequest.make(parse(WGMMA), BF16, BenchSettings(), seed=3)
    assert request.dtype == "bf16" and request.problem() == BF16
    assert MeasureRequest.from_dict(request.to_dict()) == request
    result = Result.for_request(request, kernel_us=10.0, cublas_us=11.0)
    assert result.dtype == "bf16" and result.problem() == BF16
    assert Result.failure(request, "wrong", "x").dtype == "bf16"
    old = {k: v for k, v in request.to_dict().items() if k != "dtype"}  # written before
    assert MeasureRequest.from_dict(old).problem() == F16
    assert MeasureRequest.make(parse(WGMMA), F16).dtype == "f16"


def test_requests_of_two_dtypes_are_timed_apart():
    from gemmforge.search.measure.measure import _groups
    settings = BenchSettings()
    requests = [MeasureRequest.make(parse(WGMMA), p, settings) for p in (F16, BF16, F16, BF16)]
    assert sorted(_groups(requests)) == [[0, 2], [1, 3]]


def test_the_operand_pool_keeps_each_dtypes_buffers():
    torch = pytest.importorskip("torch")
    from gemmforge.search.measure.operands import OperandPool
    pool = OperandPool(device="cpu")
    small_f16, small_bf16 = Problem(64, 32, 16, "nt"), Problem(64, 32, 16, "nt", "f32", "bf16")
    bf = pool.take(small_bf16)
    assert {t.dtype for t in bf.values()} == {torch.bfloat16}
    assert bf["a"].shape == (64, 16) and bf["b_nk"].shape == (32, 16)
    f16 = pool.take(small_f16)
    assert {t.dtype for t in f16.values()} == {torch.float16} and len(pool.kept) == 2
    assert pool.take(small_bf16)["a"] is bf["a"]


def test_result_csvs_keep_the_dtype(tmp_path):
    from gemmforge.search.measure.report import best_per_shape, read_csv, write_csv
    bf = Result(WGMMA, 4096, 4096, 4096, "nt", kernel_us=10.0, cublas_us=11.0, device=H200,
                dtype="bf16")
    f16 = Result(WGMMA, 4096, 4096, 4096, "nt", kernel_us=10.0, cublas_us=12.0, device=H200)
    path = write_csv([bf, f16], "mixed", tmp_path)
    assert path.read_text().splitlines()[0].startswith("m,n,k,layout,acc,dtype,")
    assert [r.dtype for r in read_csv(path)] == ["bf16", "f16"]
    assert len(best_per_shape([bf, f16])) == 2  # one best per dtype
    old = tmp_path / "old.csv"
    old.write_text("m,n,k,layout,acc,device,program,status,kernel_us,cublas_us\n"
                   f"64,64,64,nn,f32,{H200},{WGMMA},ok,1.0,1.0\n")
    assert read_csv(old)[0].dtype == "f16"


def test_replayed_records_answer_their_own_dtype_only():
    from gemmforge.search.measure.replay import ReplayRunner
    recorded = Result(WGMMA, 4096, 4096, 4096, "nt", kernel_us=10.0, cublas_us=11.0)
    runner = ReplayRunner([recorded], synthetic=False)
    assert runner.answer(parse(WGMMA), F16) is recorded
    miss = runner.answer(parse(WGMMA), BF16)
    assert miss.kind == "runtime" and "no recorded result" in miss.message and miss.dtype == "bf16"
    synthetic = ReplayRunner(None).answer(parse(WGMMA), BF16)
    assert synthetic.ok and synthetic.dtype == "bf16"
    refused = ReplayRunner(None).answer(parse(SIMT), BF16)
    assert refused.kind == "invalid" and "computes f16 operands, not bf16" in refused.message


def test_ship_writes_bf16_rows_beside_f16_ones(tmp_path):
    from gemmforge.dispatch.shipped import read
    from gemmforge.search.campaign.ship import ship
    other = WGMMA.replace("s4", "s3")
    csv = tmp_path / "confirm.csv"
    header = "m,n,k,layout,acc,dtype,device,program,status,kernel_us,cublas_us,speedup,rel_err\n"
    rows = [f"4096,4096,4096,nt,f32,bf16,{H200},{WGMMA},ok,200,206,1.03,4e-3\n",
            f"4096,4096,4096,nt,f32,bf16,{H200},{other},ok,200,198,0.99,4e-3\n",
            f"4096,4096,4096,nt,f32,,{H200},{other},ok,200,210,1.05,2e-4\n"]
    csv.write_text(header + "".join(rows))
    out = tmp_path / "shipped.json"
    shipped, refused = ship([csv], out, "gemmforge bench --dtype bf16 ...", "h200")
    assert not refused and len(shipped) == 2
    book = read(out)
    assert book.exact("h200", BF16).program_text == WGMMA
    assert book.exact("h200", F16).program_text == other
    assert '"dtype": "bf16"' in out.read_text() and out.read_text().count('"dtype"') == 1
    again = tmp_path / "again.csv"  # a later bf16 run replaces the bf16 row, not the f16 one
    again.write_text(header + rows[1].replace("198,0.99", "214,1.07"))
    ship([again], out, "gemmforge bench --dtype bf16 ...", "h200")
    book = read(out)
    assert book.exact("h200", BF16).program_text == other
    assert book.exact("h200", F16).program_text == other and len(book.rows) == 2


def test_quick_tune_times_the_f16_winners_in_bf16(tmp_path):
    """A bf16 shape with only f16 shipped rows: their programs are candidates (timed in
    bf16), the winner becomes a bf16 entry and the f16 entry is left alone."""
    from gemmforge.search.campaign.campaign_runners import ReplayGridRunner
    from gemmforge.search.campaign.ship import ship
    from gemmforge.search.measure.replay import ReplayRunner
    from gemmforge.search.tune.database import TunedDatabase
    from gemmforge.search.tune.quick import neighbour_candidates, quick_tune
    csv = tmp_path / "f16.csv"
    csv.write_text("m,n,k,layout,acc,device,program,status,kernel_us,cublas_us,speedup\n"
                   f"4096,4096,4096,nt,f32,{H200},{WGMMA},ok,200,210,1.05\n")
    shipped = tmp_path / "shipped.json"
    ship([csv], shipped, "test", "h200")
    near = Problem(4000, 4096, 4096, "nt", "f32", "bf16")
    programs = neighbour_candidates(near, Arch.SM90A, "h200", shipped_path=shipped)
    assert programs[0] == parse(WGMMA)
    db = TunedDatabase(f"sqlite:///{tmp_path / 'tuned.db'}")
    try:
        f16_entry = Result(WGMMA, 4000, 4096, 4096, "nt", kernel_us=1.0, cublas_us=2.0)
        db.record(H200, Problem(4000, 4096, 4096, "nt"), f16_entry)
        runner = ReplayGridRunner(ReplayRunner(None, device=H200))
        [o] = quick_tune(runner, [near], db, "gemmforge tune --quick --dtype bf16",
                         shipped_path=shipped)
        assert o.before == "heuristic" and WGMMA in o.candidates
        assert {r.dtype for r in o.results} == {"bf16"}
        entry = db.best(H200, near)
        assert entry is not None and entry.problem.dtype == DType.BF16
        assert db.best(H200, Problem(4000, 4096, 4096, "nt")).speedup == pytest.approx(2.0)
    finally:
        db.close()


def test_tune_quick_dtype_bf16_replayed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    assert main(["tune", "--quick", "--shapes", "77x4096x4096", "--layout", "nt", "--dtype",
                 "bf16", "--replay", "synthetic", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "77x4096x4096 nt f32 bf16: " in out and "1 recorded" in out


@pytest.mark.parametrize("command", [
    ["bench", "--shapes", "64x64x64", "--backends", "triton"],
    ["tune", "--quick", "--shapes", "64x64x64", "--replay", "synthetic"],
    ["tune", "--shapes", "64x64x64", "--replay", "synthetic", "--budget", "2"],
])
@pytest.mark.parametrize("bad, says", [
    (["--dtype", "bf17"], "--dtype: 'bf17' is not one of f16, bf16"),
    (["--dtype", "bf16", "--acc", "f16"], "--acc: f16 accumulation is for f16 operands"),
])
def test_bad_dtype_arguments_exit_2_with_one_line(capsys, command, bad, says):
    assert main([*command, *bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]



def test_check_shipped_moves_f16_rows_to_bf16_and_splits_them(tmp_path):
    from gemmforge.dispatch.shipped import read
    from gemmforge.search.campaign.ship import ship
    from gemmforge.search.campaign import shipped_check as check
    csv = tmp_path / "rows.csv"
    csv.write_text("m,n,k,layout,acc,dtype,device,program,status,kernel_us,cublas_us,speedup\n"
                   f"4096,4096,4096,nt,f32,,{H200},{WGMMA},ok,200,210,1.05\n"
                   f"64,64,64,nt,f32,,{H200},{SIMT},ok,2,3,1.5\n"
                   f"1024,1024,1024,nt,f32,bf16,{H200},{WGMMA},ok,20,21,1.05\n")
    ship([csv], tmp_path / "s.json", "test", "h200")
    rows = read(tmp_path / "s.json").rows
    assert check.rows_in_dtype(rows, None) == (rows, 0)
    moved, skipped = check.rows_in_dtype(rows, "bf16")
    assert [r.problem for r in moved] == [BF16] and skipped == 1  # cuda_simt has no bf16
    assert check.interleaved_part(list(range(7)), "2/3") == [1, 4]
    for bad in ("0/2", "3/2", "x"):
        with pytest.raises(ValueError, match="--part"):
            check.interleaved_part(rows, bad)


def test_model_forward_refuses_a_bad_dtype():
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "model_forward.py"
    done = subprocess.run([sys.executable, str(script), "--dtype", "bf17"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert line.startswith("model_forward: unknown or bad: --dtype 'bf17' (")
    assert line.endswith("dtype: f16 or bf16)")


def test_check_shipped_lists_the_shapes_behind_cublas(tmp_path):
    """By the ratio a confirmation picks by: after another kernel where measured."""
    from gemmforge.search.campaign import shipped_check as check
    ahead = Result(WGMMA, 256, 512, 1024, "nt", kernel_us=10.0, cublas_us=9.0, after_us=10.0,
                   cublas_after_us=11.0, dtype="bf16")  # behind back to back, ahead after
    behind = Result(WGMMA, 512, 512, 1024, "nt", kernel_us=10.0, cublas_us=11.0, after_us=10.0,
                    cublas_after_us=9.0, dtype="bf16")
    nn = Result(WGMMA, 64, 64, 64, "nn", kernel_us=10.0, cublas_us=9.0, dtype="bf16")
    failed = Result(WGMMA, 128, 64, 64, "nn", status="failed", kind="wrong", dtype="bf16")
    paths = check.write_behind([ahead, behind, nn, failed], "c", tmp_path)
    assert [p.name for p in paths] == ["c_behind_nn.txt", "c_behind_nt.txt"]
    assert paths[0].read_text() == "64x64x64\n" and paths[1].read_text() == "512x512x1024\n"
    assert check.check_settings(BF16, True) is check.SUSTAINED_BENCH  # the large class
    assert check.check_settings(Problem(77, 4096, 4096, "nt", "f32", "bf16"), True) is check.CONFIRM_BENCH
    assert check.check_settings(BF16, False) is check.CHECK_BENCH
