"""dispatch.choice: one resolver (tuned database > shipped file > heuristic) filtered by device
class, with a distance limit; dispatch.devices (the package's shipped file itself:
test_shipped_file.py)."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from gemmforge.dispatch.choice import MAX_DISTANCE, distance, resolve
from gemmforge.search.tune.database import TunedDatabase
from gemmforge.dispatch.devices import check_class, device_class, lookup_classes
from gemmforge.search.measure.records import Result
from gemmforge.dispatch.shipped import DEFAULT_PATH, read, text
from gemmforge.search.campaign.ship import ship

WGMMA = "cuda_wgmma sm_90a 128x192x64 w1x1 s5 sw128 row/4 pred k1 persistent c2x1 pingpong tma"
COOP = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop tma"
MMA = "cuda_mma sm_90a 128x128x32 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"
HEADER = "m,n,k,layout,acc,device,backend,program,status,kernel_us,cublas_us,speedup,rel_err\n"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("name, cls", [
    (H100, "h100"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"), ("H200", "h200"),
    ("replay", None), ("synthetic (replay)", None), ("", None), (None, None), ("cuda:0", None),
])
def test_device_class(name, cls):
    assert device_class(name) == cls


def test_lookup_classes_and_check_class():
    assert lookup_classes("h200") == ("h200", "h100")
    assert lookup_classes("a100") == ("a100",)
    assert check_class(" H100 ") == "h100"
    for bad in ("", "replay", "h 100"):
        with pytest.raises(ValueError, match="device class"):
            check_class(bad)


def _csv(path, rows):
    path.write_text(HEADER + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.fixture
def shipped_file(tmp_path):
    """A shipped file with 4096^3 and 1024x1024x8192 on h100, 4096^3 on a100 (sm_80 program)."""
    rows = [(4096, 4096, 4096, "nn", "f32", H100, "cuda_wgmma", WGMMA, "ok", 100, 105, 1.05, 2e-4),
            (1024, 1024, 8192, "nn", "f32", H100, "cuda_wgmma", COOP, "ok", 50, 51, 1.02, 2e-4)]
    out = tmp_path / "shipped.json"
    ship([_csv(tmp_path / "a.csv", rows)], out, "test: measured", "h100")
    return out


def test_shipped_exact_nearest_and_refused(shipped_file):
    exact = resolve(Problem(4096, 4096, 4096), Arch.SM90A, "h100", shipped_path=shipped_file,
                    use_tuned=False)
    assert (exact.provenance, str(exact.program), exact.distance) == ("shipped-exact", WGMMA, 0.0)
    assert exact.speedup == pytest.approx(1.05) and exact.command == "test: measured"
    assert "shipped-exact (h100, 1.050x cuBLAS measured)" in exact.line()
    near = resolve(Problem(4000, 4104, 4096), Arch.SM90A, "h100", shipped_path=shipped_file,
                   use_tuned=False)
    assert near.provenance == "shipped-nearest" and near.measured == Problem(4096, 4096, 4096)
    assert 0 < near.distance < 0.05 and "distance 0.0" in near.line()
    # one octave in every dimension: sqrt(3) > MAX_DISTANCE, refused -> heuristic (the wave
    # and nearest rules; the learned rule ranks the shipped programs there: below)
    far = resolve(Problem(2048, 2048, 2048), Arch.SM90A, "h100", shipped_path=shipped_file,
                  use_tuned=False, rule="waves")
    assert far.provenance == "heuristic" and far.distance is None
    assert distance(Problem(2048, 2048, 2048), Problem(4096, 4096, 4096)) > MAX_DISTANCE
    assert far.line().startswith("program: heuristic")


def test_shipped_filters_by_class_arch_and_legality(shipped_file):
    p = Problem(4096, 4096, 4096)
    assert resolve(p, Arch.SM90A, "a100", shipped_path=shipped_file,
                   use_tuned=False).provenance == "heuristic"
    assert resolve(p, Arch.SM90A, None, shipped_path=shipped_file,
                   use_tuned=False).provenance == "heuristic"
    sibling = resolve(p, Arch.SM90A, "h200", shipped_path=shipped_file, use_tuned=False)
    assert sibling.provenance == "shipped-exact" and sibling.device_class == "h100"
    assert resolve(p, Arch.SM80, "h100", shipped_path=shipped_file,
                   use_tuned=False).provenance == "heuristic"
    # k = 8190: TMA can't read rows of 8190 halves, so 1024x1024x8192's program is illegal
    ragged = Problem(1024, 1024, 8190)
    assert check(parse(COOP), ragged) is not None
    assert resolve(ragged, Arch.SM90A, "h100", shipped_path=shipped_file,
                   use_tuned=False).provenance == "heuristic"


def _result(program, p, kernel_us, device):
    return Result(program, p.m, p.n, p.k, str(p.layout), str(p.acc), kernel_us=kernel_us,
                  cublas_us=10.0, device=device)


def test_tuned_database_first_by_class_never_replayed(shipped_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    db = TunedDatabase(url)
    p, q = Problem(4096, 4096, 4096), Problem(4096, 4096, 4000)
    db.record("replay", p, _result(MMA, p, 1.0, "replay"))  # a synthetic 10x: never chosen
    db.record("NVIDIA A100-SXM4-80GB", q, _result(MMA, q, 2.0, "A100"))
    db.close()
    kw = dict(shipped_path=shipped_file, tuned_url=url)
    assert resolve(p, Arch.SM90A, "h100", **kw).provenance == "shipped-exact"
    assert resolve(q, Arch.SM90A, "h100", **kw).provenance == "shipped-nearest"
    db = TunedDatabase(url)
    db.record(H100, q, _result(MMA, q, 9.0, H100), command="gemmforge tune --shapes q")
    db.close()
    tuned = resolve(q, Arch.SM90A, "h100", **kw)
    assert (tuned.provenance, str(tuned.program)) == ("tuned-exact", MMA)
    assert tuned.command == "gemmforge tune --shapes q" and tuned.device_class == "h100"
    # at p, the shipped exact row beats the tuned neighbour; near q, the tuned row is nearer
    assert resolve(p, Arch.SM90A, "h100", **kw).provenance == "shipped-exact"
    assert resolve(Problem(4096, 4096, 4001), Arch.SM90A, "h100", **kw).provenance == "tuned-nearest"
    db = TunedDatabase(url)
    db.record(H100, p, _result(MMA, p, 9.5, H100))
    db.close()
    assert resolve(p, Arch.SM90A, "h100", **kw).provenance == "tuned-exact"


def test_runtime_path_needs_neither_optuna_nor_sqlalchemy():
    code = ("import sys; sys.modules['sqlalchemy'] = None; sys.modules['optuna'] = None\n"
            "from gemmforge.ir.program import Arch, Problem\n"
            "from gemmforge.dispatch.choice import resolve\n"
            "c = resolve(Problem(8192, 8192, 8192), Arch.SM90A, 'h100')\n"
            "assert 'sqlalchemy' not in sys.modules or sys.modules['sqlalchemy'] is None\n"
            "print(c.provenance)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "shipped-exact"


def _shipped_h100(problem: Problem) -> str:
    """The program the package ships for `problem` (layout nn) on the H100."""
    return next(r.program_text for r in read(DEFAULT_PATH).rows
                if r.device_class == "h100" and r.problem == problem)


def test_bench_chosen_prints_where_each_program_came_from(capsys):
    from gemmforge.cli.bench import _chosen

    class Runner:
        def info(self):
            return {"device": H100, "sm": 90}

    big, tiny = Problem(8192, 8192, 8192), Problem(1, 4096, 4096)
    chosen = _chosen([big, tiny], Arch.SM90A, Runner())
    out = capsys.readouterr().out
    assert str(chosen[big]) == _shipped_h100(big) and "program: shipped-exact (h100" in out
    assert "program: heuristic" in out and f"{tiny}: {chosen[tiny]}" in out


def test_emit_prints_the_source(tmp_path, capsys):
    from gemmforge.cli import main
    assert main(["emit", "--shape", "8192x8192x8192", "--arch", "sm_90a", "-o", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == _shipped_h100(Problem(8192, 8192, 8192))
    assert "program: shipped-exact (h100" in err
    assert main(["emit", "--shape", "8192x8192x8192", "--arch", "sm_90a", "--device-class",
                 "a100", "-o", str(tmp_path)]) == 0
    assert "program: heuristic" in capsys.readouterr().err
    assert main(["emit", "--shape", "64x64x64", "--arch", "sm_90a", "--device-class", "replay",
                 "-o", str(tmp_path)]) == 2


def test_a_replayed_tune_never_chooses_a_real_kernel(tmp_path, capsys):
    """gemmforge tune --replay synthetic records its winners (device "replay") in the tuned
    database; emit and resolve skip them, near or far (issue 23)."""
    from gemmforge.cli import main
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["tune", "--shapes", "4096x4096x4096,64x64x64", "--budget", "4", "--batch", "2",
                 "--quiet", "--replay", "synthetic", "--report", "", "--storage", url]) == 0
    db = TunedDatabase(url)
    assert {e.device for e in db.entries()} == {"replay"}
    db.close()
    for p in (Problem(4096, 4096, 4096), Problem(4099, 4096, 4096), Problem(64, 64, 64)):
        choice = resolve(p, Arch.SM90A, "h100", tuned_url=url)
        assert choice.source != "tuned"
    capsys.readouterr()


def test_a_shipped_program_whose_backend_cannot_build_here_is_skipped(monkeypatch, tmp_path):
    """A shipped cute_cpp winner (the H200's large class shipped three until the
    twenty-seventh session) needs the CUTLASS headers: without them the resolver serves a
    neighbour's program (or the heuristic's), never a build that fails."""
    import json
    from gemmforge.backends.cute_cpp import cutlass
    cute = "cute_cpp sm_90a 256x128x64 w1x2 s4 swnone col/8 pred k1 persistent c1x1 coop tma"
    problem = Problem(1024, 4096, 12288)
    assert check(parse(cute), problem) is None
    book = json.loads(text(DEFAULT_PATH))
    row = next(r for r in book["rows"] if r["device_class"] == "h200"
               and (r["m"], r["n"], r["k"]) == (1024, 4096, 12288))
    row["program"] = cute
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps(book))
    monkeypatch.setattr(cutlass, "missing_reason", lambda: "the CUTLASS headers are not found")
    choice = resolve(problem, Arch.SM90A, "h200", use_tuned=False, shipped_path=path)
    assert choice.program.backend != "cute_cpp"
    monkeypatch.setattr(cutlass, "missing_reason", lambda: None)
    choice = resolve(problem, Arch.SM90A, "h200", use_tuned=False, shipped_path=path)
    assert str(choice.program) == cute and choice.distance == 0.0


def test_gemmforge_pdl_0_takes_pdl_off_the_program_chosen(monkeypatch):
    """GEMMFORGE_PDL=0: the resolved program runs without programmatic dependent launch (it
    pays only where the kernel before it lets it start early), and the line says so."""
    from gemmforge.dispatch.choice import resolve
    problem = Problem(64, 64, 64)
    shipped = resolve(problem, Arch.SM90A, "h100")
    assert shipped.program.pdl and not shipped.pdl_dropped
    monkeypatch.setenv("GEMMFORGE_PDL", "0")
    off = resolve(problem, Arch.SM90A, "h100")
    assert off.program == replace(shipped.program, pdl=False) and off.pdl_dropped
    assert check(off.program, problem) is None
    assert "measured with pdl" in off.line() and "pdl off (GEMMFORGE_PDL=0)" in off.line()
    heuristic = resolve(Problem(77, 4096, 4096), Arch.SM90A, None)  # no class: the heuristic's
    assert heuristic.source == "heuristic" and heuristic.pdl_dropped and not heuristic.program.pdl
    assert heuristic.line().endswith("; pdl off (GEMMFORGE_PDL=0))")
    monkeypatch.setenv("GEMMFORGE_PDL", "1")
    assert resolve(problem, Arch.SM90A, "h100") == shipped
