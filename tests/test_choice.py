"""search.choice: one resolver (tuned database > shipped file > heuristic) filtered by device
class, with a distance limit; search.devices; the shipped file inside the package."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from gemmforge.search.choice import MAX_DISTANCE, distance, resolve
from gemmforge.search.database import TunedDatabase
from gemmforge.search.devices import check_class, device_class, lookup_classes
from gemmforge.search.grid_report import geomean
from gemmforge.search.records import Result
from gemmforge.search.shipped import DEFAULT_PATH, read
from gemmforge.search.ship import ship

WGMMA = "cuda_wgmma sm_90a 128x192x64 w1x1 s5 sw128 row/4 pred k1 persistent c2x1 pingpong tma"
COOP = "cuda_wgmma sm_90a 128x256x64 w2x1 s4 sw128 row/8 pred k1 persistent c2x1 coop tma"
MMA = "cuda_mma sm_90a 128x128x32 w2x2 s3 sw128 row/8 pred k1 dp c1x1 nows direct"
HEADER = "m,n,k,layout,acc,device,backend,program,status,kernel_us,cublas_us,speedup,rel_err\n"
H100 = "NVIDIA H100 80GB HBM3"
SHAPES = Path(__file__).resolve().parents[1] / "benchmarks" / "shapes"
GEO_NN_H200 = 1.0532  # kernel-protocol geomean of the H200's 813 nn rows below 1e11, as shipped
GEO_NT_H200 = 1.0611  # and of its 160 nt rows (README, "Where it stands")


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
            "from gemmforge.search.choice import resolve\n"
            "c = resolve(Problem(8192, 8192, 8192), Arch.SM90A, 'h100')\n"
            "assert 'sqlalchemy' not in sys.modules or sys.modules['sqlalchemy'] is None\n"
            "print(c.provenance)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "shipped-exact"


def test_the_package_ships_the_large_class_confirmations():
    """187 shapes with 2mnk >= 1e11 per class, each program legal for its shape, each with
    its command; geomeans as benchmarks/README.md. H100: the large campaigns under sustained
    load of the eighteenth and nineteenth sessions (one reading a shape, two where both runs
    confirmed the winner), the twenty-third's raster twins and the twenty-fourth's big-tile
    multicast round and the twenty-fifth's 192-tile rounds (M or N = 12288); H200: the
    twenty-seventh session's campaign (its own twelfth-session program beside the H100's,
    one reading a shape). Every row has its sustained figures."""
    book = read(DEFAULT_PATH)
    for cls, readings, tool, expected in (
            ("h100", {1, 2}, "campaign --storage large_", 1.0241),
            ("h200", {1}, "campaign --storage .carry/h200/large_h200_s27.db", 1.0265)):
        rows = [r for r in book.rows if r.device_class == cls and r.problem.flops >= 1e11
                and str(r.problem.layout) == "nn"]
        assert len(rows) == 187 and len({r.problem for r in rows}) == 187
        assert all(r.readings in readings for r in rows)
        assert all(check(r.program, r.problem) is None for r in rows)
        assert all(tool in r.measured["command"] and r.measured["commit"] for r in rows)
        geo = geomean(r.speedup for r in rows)
        assert geo == pytest.approx(expected, abs=1e-4)
        assert all(r.figures.get("sustained_us") and r.figures.get("cublas_sustained_us")
                   for r in rows)


def test_the_package_ships_the_nt_sample_and_llm_layers_for_the_h100():
    """Layout nt (a linear layer's x @ W.t()): issue 20's sample and LLM-layer shapes from
    their campaigns' confirmations (benchmarks/README.md, small_medium.py), each legal."""
    from gemmforge.search.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows if r.device_class == "h100"
            and str(r.problem.layout) == "nt"}
    want = {*parse_shapes(f"@{SHAPES / 'small_medium_sample.txt'}", "nt", "f32"),
            *parse_shapes(f"@{SHAPES / 'llm_layers.txt'}", "nt", "f32")}
    assert set(rows) == want and len(want) == 160
    assert all(check(r.program, r.problem) is None for r in rows.values())
    assert all(r.measured["command"].startswith("gemmforge campaign") and r.measured["commit"]
               for r in rows.values())


def test_the_package_ships_every_grid_shape_for_the_h100():
    """The 813 shapes below 1e11 from the grid campaign's confirmations (benchmarks/README.md,
    grid_h100), the large class from hopper_large.py's: one legal program per grid shape."""
    from gemmforge.search.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows if r.device_class == "h100"}
    grid = parse_shapes("grid")
    assert set(grid) <= set(rows)
    below = [rows[p] for p in grid if p.flops < 1e11]
    assert len(below) == 813 and all(check(r.program, r.problem) is None for r in below)
    assert all(r.measured["command"].startswith("gemmforge campaign") and r.measured["commit"]
               and r.figures.get("cold_us") and r.figures.get("call_us") for r in below)


def test_the_package_ships_every_grid_shape_for_the_h200():
    """The H200's 813 shapes below 1e11 from its own campaign's confirmations (twenty-eighth
    session: each shape's H100 program, its twins and the heuristic's proposals timed on an
    H200; benchmarks/README.md, grid_h200), those from 1e8 re-chosen in the thirtieth's
    wave-fit round (wave_fit_h200_s30), those with K <= 512 and M x N >= 2^23 in the
    thirty-first's output-bound round (output_bound_h200_s31) and those with K >= 4096 and
    M x N <= 2^21 in the thirty-second's long-K split round (long_k_split_h200_s32), then those
    with a narrow side in its streaming round (stream_h200_s32), 14 of the rows under 1.0x in
    the cuBLAS-mirror round (cublas_mirror_nn_h200_s32, shipped in the thirty-third at the
    shapes two fresh pairs confirmed), its large class from the twenty-seventh's; then every
    row below 1e11 whose program had pdl, ranked after another kernel in the thirty-fourth
    (pdl_after_nn_h200_s34); then the thirty-fifth's campaign round at the rows under 1.0x
    (under_after_nn_h200_s35), and the rest of the thirty-fourth's rows re-timed as shipped for
    their call figures (calls_nn_h200_s35): one legal program per grid shape, each with the
    command that measured it on an H200."""
    from gemmforge.search.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows
            if r.device_class == "h200" and str(r.problem.layout) == "nn"}
    grid = parse_shapes("grid")
    assert set(rows) == set(grid)
    below = [rows[p] for p in grid if p.flops < 1e11]
    assert len(below) == 813 and all(check(r.program, r.problem) is None for r in below)
    bound = set(parse_shapes(f"@{SHAPES / 'output_bound_nn_h200.txt'}"))
    assert sum(r.problem in bound for r in below) == 117
    long_k = set(parse_shapes(f"@{SHAPES / 'long_k_split_nn_h200.txt'}"))
    assert len(long_k) == 152 and long_k < {r.problem for r in below} and not long_k & bound
    stream = set(parse_shapes(f"@{SHAPES / 'stream_nn_h200.txt'}"))
    assert len(stream) == 105 and stream < {r.problem for r in below} and not stream & bound
    mirror = set(parse_shapes(f"@{SHAPES / 'cublas_mirror_confirmed_nn_h200.txt'}"))
    assert len(mirror) == 14 and mirror < {r.problem for r in below} and not mirror & bound
    after, under, no_call = _pdl_after_shapes("nn"), *_s35_shapes("nn")
    assert len(after) == 684 and after < {r.problem for r in below}
    assert (len(under), len(no_call)) == (280, 446) and after <= under | no_call
    for r in below:
        if r.problem in under | no_call:
            assert ("under_after_{nn,nt}_h200" if r.problem in under else
                    "no_call_{nn,nt}_h200") in r.measured["command"] and r.measured["commit"]
            assert all(r.figures.get(f) for f in ("after_us", "cold_us", "call_us"))
            continue
        store = ("output_bound_" if r.problem in bound else
                 "cublas_mirror_" if r.problem in mirror else
                 "stream_" if r.problem in stream else
                 "long_k_split_" if r.problem in long_k else
                 "wave_fit_" if r.problem.flops >= 1e8 else "grid_h200_s28.db")
        assert f".carry/h200/{store}" in r.measured["command"] and r.measured["commit"]
        assert r.figures.get("cold_us") and r.figures.get("call_us")
    assert all(r.measured["devices"] == ["NVIDIA H200"] for r in rows.values())
    geo = geomean(r.speedup for r in below)
    assert geo == pytest.approx(GEO_NN_H200, abs=1e-4)


def test_the_package_ships_the_nt_shapes_for_the_h200():
    """Layout nt: the H200's own rows at the H100's 160 nt shapes (twenty-ninth session: each
    shape's H100 program, its twins, the heuristic's proposals and the skinny list timed on an
    H200; benchmarks/README.md, nt_h200_s29; then a search round at the 31 under 1.0x,
    nt_weak_h200_s29; those from 1e8 to 1e11 re-chosen in the thirtieth's wave-fit round,
    wave_fit_h200_s30, the nine with K <= 512 and M x N >= 2^23 in the thirty-first's
    output-bound round, the 32 with K >= 4096 and M x N <= 2^21 in the thirty-second's
    long-K split round and the 20 with a narrow side in its streaming round), each legal, the
    large ones chosen under load; the 120 below 1e11 whose program had pdl ranked after another
    kernel in the thirty-fourth session; the thirty-fifth's round at the 44 under 1.0x and the
    call figures of the rest, as for nn)."""
    from gemmforge.search.shapes import parse_shapes
    book = read(DEFAULT_PATH)
    rows = {r.problem: r for r in book.rows
            if r.device_class == "h200" and str(r.problem.layout) == "nt"}
    h100 = {r.problem for r in book.rows
            if r.device_class == "h100" and str(r.problem.layout) == "nt"}
    assert set(rows) == h100 == set(parse_shapes(f"@{SHAPES / 'nt_shipped.txt'}", "nt", "f32"))
    assert all(check(r.program, r.problem) is None for r in rows.values())
    weak = set(parse_shapes(f"@{SHAPES / 'nt_weak_h200.txt'}", "nt", "f32"))
    assert len(weak) == 31 and weak < set(rows)
    bound = {p for p in parse_shapes(f"@{SHAPES / 'output_bound_nt_h200.txt'}", "nt", "f32")
             if p.flops < 1e11}
    assert len(bound) == 9 and bound < set(rows)
    long_k = set(parse_shapes(f"@{SHAPES / 'long_k_split_nt_h200.txt'}", "nt", "f32"))
    assert len(long_k) == 32 and long_k < set(rows) and not long_k & bound
    stream = set(parse_shapes(f"@{SHAPES / 'stream_nt_h200.txt'}", "nt", "f32"))
    assert len(stream) == 20 and stream < set(rows) and not stream & bound
    after, under, no_call = _pdl_after_shapes("nt"), *_s35_shapes("nt")
    assert len(after) == 120 and after < set(rows)
    assert (len(under), len(no_call)) == (44, 91) and after <= under | no_call
    for problem, r in rows.items():
        if problem in under | no_call:
            assert ("under_after_{nn,nt}_h200" if problem in under else
                    "no_call_{nn,nt}_h200") in r.measured["command"] and r.measured["commit"]
            assert all(r.figures.get(f) for f in ("after_us", "cold_us", "call_us"))
            continue
        store = ("output_bound_" if problem in bound else
                 "stream_" if problem in stream else
                 "long_k_split_" if problem in long_k else
                 "wave_fit_" if 1e8 <= problem.flops < 1e11 else
                 "nt_weak_h200_s29.db" if problem in weak else "nt_h200_s29.db")
        assert f".carry/h200/{store}" in r.measured["command"] and r.measured["commit"]
        assert r.measured["devices"] == ["NVIDIA H200"] and r.figures.get("cold_us")
    large = [r for r in rows.values() if r.problem.flops >= 1e11]
    assert len(large) == 7 and all(r.figures.get("sustained_us") for r in large)
    geo = geomean(r.speedup for r in rows.values())
    assert geo == pytest.approx(GEO_NT_H200, abs=1e-4)


def _s35_shapes(layout: str) -> tuple[set, set]:
    """The H200 rows of `layout` the thirty-fifth session's round re-chose (those under 1.0x
    after another kernel, and under 1.0x warm without an after figure), and those it re-timed
    as shipped for their call figures."""
    from gemmforge.search.shapes import parse_shapes
    return tuple(set(parse_shapes(f"@{SHAPES / f'{name}_{layout}_h200.txt'}", layout, "f32"))
                 for name in ("under_after", "no_call"))


def _pdl_after_shapes(layout: str) -> set:
    """The H200 rows of `layout` the thirty-fourth session ranked after another kernel."""
    from gemmforge.search.shapes import parse_shapes
    return {p for name in ("pdl_small", "pdl_rest")
            for p in parse_shapes(f"@{SHAPES / f'{name}_{layout}_h200.txt'}", layout, "f32")}


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
    book = json.loads(DEFAULT_PATH.read_text())
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
    from gemmforge.search.choice import resolve
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
