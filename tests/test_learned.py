"""policy.learned: training on replayed rewards improves the mean reward of its proposals
on shapes it never trained on; observing results steers the next proposals (edits of the
best, nothing measured twice); proposals are legal and distinct; checkpoints restore it;
the lineage search climbs."""
from __future__ import annotations

import random

import pytest
import torch

from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.space import variant
from gemmforge.ir.text import parse
from gemmforge.ir.verify import check
from gemmforge.policy.learned import LearnedPolicy
from gemmforge.policy.learned_search import ShapeSearch, apply, edits, heuristic_seeds
from gemmforge.search.measure.shapes import GRID
from gemmforge.search.measure.env import reward
from gemmforge.search.measure.replay import ReplayRunner

SHAPES = [tuple(map(int, s.split("x"))) for s in GRID.read_text().split()]
BACKENDS = ("cuda_mma", "triton", "cuda_simt")


def _split(seed: int = 0, train: int = 32, held: int = 12):
    shapes = list(SHAPES)
    random.Random(seed).shuffle(shapes)
    return [Problem(*s) for s in shapes[:train]], [Problem(*s) for s in shapes[train:train + held]]


def _mean_reward(policy, problems, runner, n: int = 4) -> float:
    rewards = []
    for p in problems:
        rewards += [reward(r) for r in runner.evaluate(policy.propose(p, Arch.SM90A, n), p)]
    return sum(rewards) / len(rewards)


@pytest.fixture(scope="module")
def trained():
    train, held = _split()
    runner = ReplayRunner(archs=("sm_90a",))
    policy = LearnedPolicy(archs=(Arch.SM90A,), backends=BACKENDS, seed=0, update_every=None,
                           distill_steps=100)
    before = _mean_reward(policy, held, runner)
    history = policy.train(train, runner, steps=40, group=16, shapes_per_step=8)
    return policy, before, _mean_reward(policy, held, runner), history, held


def test_training_improves_held_out_reward(trained):
    _, before, after, history, _ = trained
    assert after > before + 0.5, (before, after)   # log units: > 1.6x faster on average
    assert sum(history[-5:]) / 5 > sum(history[:5]) / 5 + 1.0


def test_proposals_are_legal_distinct_and_for_unseen_shapes(trained):
    policy, *_, held = trained
    unseen = Problem(1000, 3000, 333)
    for p in (unseen, held[0]):
        programs = policy.propose(p, Arch.SM90A, 8)
        assert len(programs) == 8 == len(set(programs))
        assert all(check(x, p) is None and x.arch == Arch.SM90A for x in programs)


def test_observed_results_steer_the_next_proposals(trained):
    policy, *_, held = trained
    problem, runner = held[2], ReplayRunner(archs=("sm_90a",))
    first = policy.propose(problem, Arch.SM90A, 4)
    results = runner.evaluate(first, problem)
    for program, result in zip(first, results):
        policy.observe(problem, program, reward(result))
    best = max(zip(results, first), key=lambda x: reward(x[0]))[1]
    after = policy.propose(problem, Arch.SM90A, 4)
    assert len(after) == 4 and not set(after) & set(first)      # never measured twice
    var = variant(best.backend, best.arch)
    assert set(after) <= {apply(var, best, change) for change in edits(var, best)}


def test_falls_back_to_the_heuristic_off_its_space(trained):
    policy, *_ = trained
    programs = policy.propose(Problem(256, 256, 256), Arch.SM80, 3)
    assert len(programs) == 3 and all(p.arch == Arch.SM80 for p in programs)


def test_checkpoint_round_trip(trained, tmp_path):
    policy, *_, held = trained
    path = policy.save(tmp_path / "policy.pt")
    loaded = LearnedPolicy.load(path)
    programs = policy.propose(held[1], Arch.SM90A, 4)
    assert loaded.vocab.values == policy.vocab.values
    assert torch.allclose(loaded.log_prob([held[1]] * 4, programs),
                          policy.log_prob([held[1]] * 4, programs))
    assert loaded.mode(held[1], Arch.SM90A) == policy.mode(held[1], Arch.SM90A)


def test_observe_updates_the_model():
    policy = LearnedPolicy(archs=(Arch.SM90A,), backends=("cuda_mma",), seed=1, update_every=8)
    problem = Problem(2048, 2048, 2048)
    runner = ReplayRunner(archs=("sm_90a",))
    programs = policy.propose(problem, Arch.SM90A, 8)
    before = policy.log_prob([problem] * 8, programs).detach().clone()
    for program, result in zip(programs, runner.evaluate(programs, problem)):
        policy.observe(problem, program, reward(result))
    assert not torch.allclose(before, policy.log_prob([problem] * 8, programs))


def test_an_edit_to_stream_k_drops_the_split_k_it_disables():
    program = parse("cute_cpp sm_90a 128x128x64 w2x1 s5 swnone row/4 pred k8a persistent "
                    "c1x1 coop tma")
    edited = apply(variant("cute_cpp", Arch.SM90A), program, {"schedule": "stream_k"})
    assert edited.schedule.value == "stream_k" and edited.split_k.slices == 1


def test_the_lineage_search_climbs():
    # a shape above the heuristic's small-problem rules (policy.small_shapes), whose seeds
    # leave room to climb (at 512x128x8192 those rules' seed already reads 0.19)
    problem, runner = Problem(1024, 1024, 8192), ReplayRunner(archs=("sm_90a",))
    policy = LearnedPolicy(archs=(Arch.SM90A,), backends=BACKENDS, seed=0)
    search = ShapeSearch(problem, policy.vocab.variants, runner, random.Random(0))
    search.seed(heuristic_seeds(policy.vocab.variants, [problem], Arch.SM90A))
    start = search.known[search.elites(1)[0]]
    # 30 rounds: edits go round-robin over the knobs, and the synthetic replay model
    # scores some (triton's pdl) as neutral, so a round may spend its edit on one
    for _ in range(30):
        search.climb(1)
    assert search.known[search.elites(1)[0]] > start + 0.1
    assert {p.backend for p in search.leaders()} == set(BACKENDS)


def test_the_model_chooses_swap_first_and_tiles_it_onto_the_instruction():
    """swap_ab is walked before the tile, its heads hold the small-problem values the
    space has (swap, inkernel, 16 stages for triton), a swapped in-kernel program encodes
    and decodes exactly, and the warp-tiling features read bm against the instruction's
    N side once swap_ab is chosen."""
    import math
    from gemmforge.ir.space import Space
    from gemmforge.policy.learned_net import N_DERIVED, STEPS, Vocab, derived
    assert STEPS[:3] == ("backend", "swap_ab", "tile.bm")
    vocab = Vocab(Space.build([Arch.SM90A], ["triton"]))
    program = parse("triton sm_90a 16x64x64 w1x4 s16 swnone row/1 pred k4i dp c1x1 nows direct swap")
    assert vocab.decode(Arch.SM90A, vocab.encode(program)) == program
    problem = Problem(7, 4096, 4096)
    mask = vocab.mask(STEPS.index("swap_ab"), problem, Arch.SM90A, {"backend": "triton"})
    assert mask.tolist() == [True, True]
    units = torch.tensor([[64.0, 8.0, 128.0]])  # a wgmma-like instruction: M 64, N 8
    vals = torch.full((2, len(STEPS)), math.nan)
    vals[:, 0] = 0
    vals[:, STEPS.index("swap_ab")] = torch.tensor([0.0, 1.0])
    for knob, value in (("tile.bm", 16), ("tile.bn", 64), ("tile.bk", 64), ("warps.wm", 1),
                        ("warps.wn", 1)):
        vals[:, STEPS.index(knob)] = value
    dims = torch.tensor([[7.0, 4096.0, 4096.0]] * 2)
    limits = torch.tensor([[132.0, 232448.0, 1024.0]] * 2)
    out = derived(dims, limits, units, vals)
    assert out.shape == (2, N_DERIVED)
    plain, swapped = out[0, 8:10].tolist(), out[1, 8:10].tolist()
    assert plain == pytest.approx([math.log2(16 / 64) / 4, math.log2(64 / 8) / 4])
    assert swapped == pytest.approx([math.log2(16 / 8) / 4, math.log2(64 / 64) / 4])
