"""benchmarks/hopper_large.py: how a confirmation picks its programs from earlier runs."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("hopper_large", ROOT / "benchmarks" / "hopper_large.py")
hopper_large = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hopper_large)
RESULTS = ROOT / "benchmarks" / "results"
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
