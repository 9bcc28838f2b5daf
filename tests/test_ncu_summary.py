"""benchmarks/ncu_summary.py, run as its users run it (a subprocess): the table it makes
from an ncu_tensor_pipe.sh log."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ncu_summary.py"


def _table(tmp_path, text: str) -> list[str]:
    log = tmp_path / "ncu.log"
    log.write_text(text)
    done = subprocess.run([sys.executable, str(SCRIPT), str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()

LOG = """metrics: sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,...
== 1024x8192x16384 cublas (rc 0)
  dram__bytes_read.sum = 427,904,512   [nvjet_sm90_hsh_256x128]
  dram__bytes_write.sum = 16,000,000
  gpu__time_duration.sum = 345,504
  sm__cycles_elapsed.avg.per_second = 1,567,081,054.71
  sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active = 98.23
== 1024x8192x16384 gemmforge (rc 0) cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 persistent c1x1 pingpong tma
  dram__bytes_read.sum = 411,084,544
  dram__bytes_write.sum = 17,000,000
  gpu__time_duration.sum = 353,248
  sm__cycles_elapsed.avg.per_second = 1,526,182,995.82
  sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active = 98.59
== 2048x16384x4096 cublas (rc 1)
== 2048x16384x4096 gemmforge (rc 1) cuda_wgmma sm_90a 128x128x64 w1x1 s6 sw128 row/8 pred k1 persistent c1x1 pingpong tma
"""


def test_pairs_each_kernel_with_the_cublas_run_before_it(tmp_path):
    rows = _table(tmp_path, LOG)
    assert [row.split(" | ")[0] for row in rows[2:]] == ["| 1024x8192x16384", "| 2048x16384x4096"]
    assert rows[2] == ("| 1024x8192x16384 | cuda_wgmma sm_90a 128x128x64 c1x1 pingpong tma | "
                       "98.2 / 98.6 | 1.567 / 1.526 | 0.44 / 0.43 | 346 / 353 |")
    assert "(missing counters)" in rows[3]  # a failed profile is shown, not dropped


def test_missing_log_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.log")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no such log" in done.stderr


def test_coalescer_columns_where_the_log_has_its_counters(tmp_path):
    lrc = {"cublas": ("33,554,432", "12,053,024", "21,508,442"),
           "gemmforge": ("50,331,648", "21,906,160", "28,433,060")}
    lines = []
    for block in LOG.split("== ")[1:3]:
        who = block.split()[1]
        asked, merged, l2 = lrc[who]
        lines += ["== " + block.rstrip("\n"),
                  f"  lrc__request_sectors_op_read_coalescable.sum = {asked}",
                  "  lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum = "
                  + merged,
                  f"  lrc__lts2lrc_sectors_op_read.sum = {l2}"]
    rows = _table(tmp_path, "\n".join(lines))
    assert rows[0].endswith("| reads merged % | L2 read G sectors |")
    assert rows[2].endswith("| 346 / 353 | 36 / 44 | 0.022 / 0.028 |")
    plain = _table(tmp_path, LOG)
    assert "merged" not in plain[0]  # logs without those counters keep the old table


def test_a_log_of_ours_alone_shows_a_dash_for_cublas(tmp_path):
    """NCU_WHO=gemmforge profiles our kernels only: their figures, '-' where cuBLAS's go."""
    ours = "\n".join(LOG.split("== ")[2].rstrip("\n").splitlines())
    rows = _table(tmp_path, "== " + ours)
    assert rows[2] == ("| 1024x8192x16384 | cuda_wgmma sm_90a 128x128x64 c1x1 pingpong tma | "
                       "- / 98.6 | - / 1.526 | - / 0.43 | - / 353 |")
