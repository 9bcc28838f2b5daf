"""benchmarks/bench_chunks.sh: a long bench list in chunks, packed into one archive after each
chunk, resumed from the chunks an earlier call brought back (DONE). Run with a stand-in
`gemmforge` on PATH (it writes one CSV row a shape and logs which chunks it was given) and an
empty device set-up."""
import csv
import io
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_chunks.sh"

STAND_IN = """#!/usr/bin/env python3
import sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
shapes = [s.strip() for s in open(value("--shapes")[1:]) if s.strip()]
name, folder = value("--name"), value("--report-dir")
with open(f"{folder}/{name}.csv", "w") as f:
    f.write("m,n,k,status\\n")
    for s in shapes:
        f.write(",".join(s.split("x")) + ",ok\\n")
open(sys.argv[0] + ".calls", "a").write(name + "\\n")
print(f"{len(shapes)}/{len(shapes)} measured ok")
"""


def setup(tmp_path: Path) -> tuple[Path, dict]:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "device_setup.sh").write_text("# nothing to set up here\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "gemmforge"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    (tmp_path / "shapes.txt").write_text("# five shapes\n" + "\n".join(
        f"{m}x64x64" for m in (64, 128, 256, 512, 1024)) + "\n\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out)}
    env.pop("DONE", None)
    return stand_in, env


def call(tmp_path, env, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {Path(m.name).name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def calls(stand_in: Path) -> list[str]:
    log = Path(str(stand_in) + ".calls")
    return log.read_text().split() if log.exists() else []


def test_chunks_pack_into_one_archive_and_join(tmp_path):
    stand_in, env = setup(tmp_path)
    done = call(tmp_path, env, "shapes.txt", "nn", "2", "ab", "--chosen")
    assert done.returncode == 0, done.stderr
    assert calls(stand_in) == ["ab_c00", "ab_c01", "ab_c02"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["ab.tgz"]
    files = archive(tmp_path / "out" / "ab.tgz")
    assert {"ab_c00.csv", "ab_c01.csv", "ab_c02.csv", "ab.csv", "ab_c00.log"} <= set(files)
    joined = list(csv.DictReader(io.StringIO(files["ab.csv"].decode())))
    assert [r["m"] for r in joined] == ["64", "128", "256", "512", "1024"]


def test_a_later_call_runs_only_the_chunks_not_brought_back(tmp_path):
    stand_in, env = setup(tmp_path)
    assert call(tmp_path, env, "shapes.txt", "nn", "2", "ab").returncode == 0
    done_dir = tmp_path / "carried"
    done_dir.mkdir()
    with tarfile.open(tmp_path / "out" / "ab.tgz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(done_dir, filter="data")
        else:
            tar.extractall(done_dir)
    (done_dir / "ab" / "ab_c01.csv").unlink()  # as if the first call ran out of time there
    Path(str(stand_in) + ".calls").unlink()
    again = call(tmp_path, {**env, "DONE": str(done_dir)}, "shapes.txt", "nn", "2", "ab")
    assert again.returncode == 0, again.stderr
    assert calls(stand_in) == ["ab_c01"]
    assert "ab_c00 done in an earlier call" in again.stdout
    joined = list(csv.DictReader(io.StringIO(archive(tmp_path / "out" / "ab.tgz")["ab.csv"].decode())))
    assert len(joined) == 5


def test_bad_arguments_say_so(tmp_path):
    _, env = setup(tmp_path)
    assert call(tmp_path, env, "shapes.txt", "nn").returncode == 2
    missing = call(tmp_path, env, "no_such_list.txt", "nn", "2", "ab")
    assert missing.returncode == 2 and "no list" in missing.stderr
