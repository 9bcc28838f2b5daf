"""The prompts' examples (issue 24, twentieth session): the fixed pool with its small-tile
programs, the best pool programs at the nearest shapes of a prompt's FLOP decade, and the
training shapes drawn by size. The replay data fixtures (`full`, `split`) are conftest's."""
from __future__ import annotations

import json

from gemmforge.ir import parse, parse_problem
from gemmforge.search.learn.llm_tasks import held_out_free, make_tasks, prompt_pool, seeded_lineage
from gemmforge.search.learn.replay_reward import Measured, ReplayReward

WGMMA = "cuda_wgmma sm_90a 128x128x64 w1x1 s4 sw128 row/8 pred k1 persistent c1x1 coop tma"
PROBLEM = parse_problem("4096x4096x4096")


def test_prompts_draw_their_examples_from_the_fixed_pool(full, split):
    import random
    pool = prompt_pool()
    assert len(pool) > 100 and all(str(parse(t)) == t for t in pool)
    assert {tuple(t.split()[:2]) for t in pool} == {("cuda_wgmma", "sm_90a")}
    assert len(full.programs()) > 5 * len(pool)  # the stores measured many more
    lineage = seeded_lineage(split.held_out[3], held_out_free(full, split), random.Random(0),
                             pool=pool)
    assert {str(p) for p, _ in lineage.measured(str(split.held_out[3]))} <= set(pool)


def test_small_held_out_shapes_are_prompted_with_small_tile_examples(full, split):
    from gemmforge.search.learn.llm_tasks import tile_side
    model = held_out_free(full, split)
    small = [p for p in split.held_out if p.flops < 1e10]
    assert len(small) >= 5
    for task in make_tasks(small, model, seed=1234, pool=prompt_pool()):
        shown = json.loads(task["shown"])
        assert min(tile_side(t) for t in shown) <= 64, task["problem"]


def test_near_examples_are_the_best_pool_programs_at_the_nearest_shapes_of_the_decade():
    import random
    from gemmforge.search.learn.llm_tasks import PoolReadings
    s3, s5 = WGMMA.replace("s4", "s3"), WGMMA.replace("s4", "s5")
    near, far, other_decade = (parse_problem(t) for t in
                               ("4096x4096x8192", "4096x4096x16384", "8192x8192x8192"))
    model = ReplayReward(rows=[
        Measured(near, str(parse(WGMMA)), 1.1, 1.0, 1.1, 1),
        Measured(near, str(parse(s3)), 0.9, 1.0, 0.9, 1),
        Measured(far, str(parse(s3)), 1.2, 1.0, 1.2, 1),
        Measured(far, str(parse(s5)), 1.0, 1.0, 1.0, 1),
        Measured(other_decade, str(parse(s5)), 2.0, 1.0, 2.0, 1),
        Measured(PROBLEM, str(parse(s5)), 3.0, 1.0, 3.0, 1)])  # the shape itself: not a neighbour
    pool = [str(parse(t)) for t in (WGMMA, s3, s5)]
    readings = PoolReadings(model, pool)
    assert readings.nearest(PROBLEM) == [near, far]
    assert readings.near_programs(PROBLEM) == [str(parse(WGMMA)), str(parse(s3))]
    lineage = seeded_lineage(PROBLEM, model, random.Random(0), examples=2, pool=pool,
                             readings=readings)
    assert {str(p) for p, _ in lineage.measured(str(PROBLEM))} == {str(parse(WGMMA)),
                                                                   str(parse(s3))}


def test_training_shapes_are_drawn_stratified_by_size(split):
    from gemmforge.search.learn.llm_tasks import LARGE_FLOPS, LARGE_SHARE, stratified_problems
    from collections import Counter
    drawn = stratified_problems(split.train, seed=0)
    assert len(drawn) == len(split.train) and set(drawn) <= set(split.train)
    large = [p for p in drawn if p.flops >= LARGE_FLOPS]
    assert len(large) == round(LARGE_SHARE * len(drawn))  # 401 of 1,002, not 164
    counts = Counter(large)
    assert len(counts) == sum(p.flops >= LARGE_FLOPS for p in split.train)  # every one
    assert max(counts.values()) - min(counts.values()) <= 1
    assert stratified_problems(split.train, seed=0) == drawn  # deterministic
    assert stratified_problems(split.train, seed=1) != drawn
    only_small = [p for p in split.train if p.flops < LARGE_FLOPS][:5]
    assert stratified_problems(only_small) == only_small


def test_the_pool_holds_small_tile_programs_measured_at_training_shapes(full, split):
    from gemmforge.search.learn.llm_tasks import small_tile_bests, tile_side
    model = held_out_free(full, split)
    pool = prompt_pool()
    small = [t for t in pool if tile_side(t) <= 64]
    assert len(small) >= 50
    measured = {r.program for p in split.train for r in model.at(p)}
    assert set(small) <= measured  # at training shapes: no held-out reading chose them
    assert set(small_tile_bests(model, split.train)) <= set(pool)


def test_train_llm_takes_the_large_share():
    from gemmforge.cli import build_parser
    args = build_parser().parse_args(["train-llm", "--model", "m", "--output", "o",
                                      "--large-share", "0.5"])
    assert args.large_share == 0.5 and not args.uniform_shapes
    from gemmforge.search.learn.llm_train import TrainSettings
    assert TrainSettings().large_share == 0.4
