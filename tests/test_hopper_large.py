"""benchmarks/hopper_large.py: how a confirmation picks its programs from earlier runs."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("hopper_large", ROOT / "benchmarks" / "hopper_large.py")
hopper_large = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hopper_large)
RESULTS = Path(__file__).resolve().parent / "data"  # small copies of earlier runs
SHAPE = "1024x16384x16384"


def test_earlier_winners_join_a_shortlist_the_sweeps_left_them_out_of():
    sweeps = [hopper_large.read_csv(RESULTS / f"hopper_large_h100_v14{s}.csv") for s in ("", "b")]
    winners = hopper_large.best_over_runs(sweeps, 5)
    earlier = hopper_large.read_csv(RESULTS / "hopper_large_h100_v13_confirm_a.csv")
    (confirmed,) = hopper_large.best_over_runs([earlier])[SHAPE]
    assert len(winners[SHAPE]) == 5 and confirmed not in winners[SHAPE]
    before = {shape: list(programs) for shape, programs in winners.items()}
    hopper_large.add_earlier_winners(winners, [earlier, earlier])
    assert winners[SHAPE] == before[SHAPE] + [confirmed]  # once, after the sweeps' own
    assert all(len(winners[s]) - len(before[s]) <= 1 for s in winners)
    assert set(winners) == set(before)


def test_every_big_grid_shape_once_with_8192_cubed_first():
    big = hopper_large.big_shapes()
    assert big[0] == hopper_large.BIG and len(big) == len(set(big)) == 187
    assert all(2 * m * n * k >= 1e11 for m, n, k in (map(int, s.split("x")) for s in big))
    assert set(hopper_large.shapes(20, 4)) <= set(big)


def test_parts_share_the_shapes_out_once_each():
    big = hopper_large.big_shapes()
    parts = [hopper_large.part(big, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(s for p in parts for s in p) == sorted(big)
    assert [len(p) for p in parts] == [63, 62, 62]
    for bad in ("0/3", "4/3", "2", "a/b"):
        try:
            hopper_large.part(big, bad)
        except ValueError as e:
            assert "--part" in str(e)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_the_parts_of_one_sweep_pick_winners_as_one_run():
    sweep = hopper_large.read_csv(RESULTS / "hopper_large_h100_v14.csv")
    shapes = sorted({f"{r.m}x{r.n}x{r.k}" for r in sweep})
    halves = [[r for r in sweep if f"{r.m}x{r.n}x{r.k}" in shapes[i::2]] for i in (0, 1)]
    assert hopper_large.best_over_runs(halves, 3) == hopper_large.best_over_runs([sweep], 3)
    # a program missing from one of two runs at a shape is still left out there
    other = hopper_large.read_csv(RESULTS / "hopper_large_h100_v14b.csv")
    both = hopper_large.best_over_runs([sweep, other], 50)
    in_both = {(f"{r.m}x{r.n}x{r.k}", r.program) for r in other if r.ok}
    assert all((shape, p) in in_both for shape, ps in both.items() for p in ps)


def test_a_report_takes_per_shape_medians_of_each_runs_best():
    import math
    import statistics
    names = [f"hopper_large_h100_v16b_confirm_{x}" for x in "abc"]
    runs = [hopper_large.read_csv(RESULTS / f"{n}.csv") for n in names]
    text = hopper_large.report(runs, names)
    best = [{f"{r.m}x{r.n}x{r.k}": r.speedup for r in run if r.ok} for run in runs]
    medians = {s: statistics.median(b[s] for b in best) for s in best[0]}
    expected = math.exp(statistics.fmean(map(math.log, medians.values())))
    assert f"21 shapes: geomean of the medians {expected:.4f}" in text
    assert f"min {min(medians.values()):.3f}" in text.splitlines()[-1]
    first = text.splitlines()[1].split()
    assert first[0] == names[0] and first[1] == "21"
    assert math.isclose(float(first[2]), math.exp(statistics.fmean(map(math.log, best[0].values()))),
                        abs_tol=1e-4)
    # the rows run from the lowest median up
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(tuple("123456789"))
            and "x" in line.split()[0]]
    assert [float(r[1]) for r in rows] == sorted(float(r[1]) for r in rows)
