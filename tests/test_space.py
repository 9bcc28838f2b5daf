"""ir.space: the knob values per backend and arch follow verify (allowed values, sm_90a-only
features), parameters round-trip, optuna sees one fixed distribution per name, and the
conditional knobs appear only where the IR lets them."""
from __future__ import annotations

import random

import optuna
import pytest

from gemmforge.backends import registry
from gemmforge.ir.knobs import KNOBS, assemble, knob_value
from gemmforge.ir.program import Arch, Problem
from gemmforge.ir.space import Space, Variant, variant
from gemmforge.ir.verify import check

PROBLEM = Problem(1000, 4096, 336)


def test_allowed_values_restrict_the_knobs():
    for be in registry.all():
        for arch in be.archs:
            v = variant(be.name, arch)
            for fld, values in be.allowed.items():
                knobs = [k for k in KNOBS if k.split(".")[0] == fld]
                allowed = {knob_value(assemble(be.name, arch, {}).replace(**{fld: x}), k)
                           for x in values for k in knobs}
                for k in knobs:
                    assert set(v.choices(k)) <= allowed | {knob_value(
                        assemble(be.name, arch, {}), k)}, (be.name, arch, k)


def test_hopper_features_only_on_sm90a():
    for be in registry.all():
        if Arch.SM80 in be.archs:
            v = variant(be.name, Arch.SM80)
            assert v.choices("cluster.cm") == (1,) and v.choices("cluster.cn") == (1,)
            assert v.choices("warp_spec") == ("none",)
            assert "tma" not in v.choices("epilogue")
    triton = variant("triton", Arch.SM90A)
    assert "tma" in triton.choices("epilogue") and "tma" not in \
        variant("triton", Arch.SM80).choices("epilogue")


def test_params_round_trip_and_stay_in_the_distributions():
    space = Space.build([Arch.SM90A, Arch.SM80], problem=PROBLEM)
    dists = space.distributions()
    assert all(isinstance(d, optuna.distributions.CategoricalDistribution)
               for d in dists.values())
    rng = random.Random(0)
    for _ in range(200):
        p = space.sample(rng)
        params = space.params(p)
        assert space.program(params) == p and space.contains(p)
        assert all(value in dists[name].choices for name, value in params.items())


def test_conditional_knobs():
    space = Space.build([Arch.SM90A], ["cuda_mma"])
    one = assemble("cuda_mma", Arch.SM90A, {"split_k.slices": 1})
    many = assemble("cuda_mma", Arch.SM90A, {"split_k.slices": 4,
                                             "split_k.reduction": "atomic"})
    assert "cuda_mma:split_k.reduction" not in space.params(one)
    assert space.params(many)["cuda_mma:split_k.reduction"] == "atomic"
    assert "backend" not in space.params(one) and "cuda_mma:arch" not in space.params(one)
    assert Variant.active("split_k.slices", {"schedule": "stream_k"}) is False


def test_suggest_through_optuna_and_legal_sampling():
    space = Space.build([Arch.SM90A, Arch.SM80], ["cuda_mma", "triton"], PROBLEM)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    legal = 0
    for _ in range(60):
        trial = study.ask()
        program = space.suggest(trial)
        assert space.params(program) == trial.params
        legal += check(program, PROBLEM) is None
        study.tell(trial, 0.0)
    assert legal > 5
    p = space.sample_legal(PROBLEM, random.Random(1))
    assert check(p, PROBLEM) is None


def test_size_counts_the_enumeration():
    base = variant("cuda_simt", Arch.SM80)
    small = [(c[0],) for c in base.values]
    small[KNOBS.index("split_k.slices")] = (1, 2)
    small[KNOBS.index("split_k.reduction")] = ("workspace", "atomic")
    small[KNOBS.index("tile.bm")] = (32, 64)
    v = Variant("cuda_simt", Arch.SM80, tuple(small))
    programs = list(v.programs())
    assert len(programs) == v.size() == 2 * 3 and len(set(programs)) == 6


def test_outside_the_space_is_refused():
    space = Space.build([Arch.SM90A], ["cuda_mma"])
    with pytest.raises(ValueError, match="not in this space"):
        space.params(assemble("triton", Arch.SM90A, {}))


def test_tile_extras_are_searched_where_the_backend_takes_them():
    """192-wide tiles are candidates for cute_cpp and cuda_wgmma only; like every shape knob
    they are listed before legality, which keeps them off sm_80 when programs are sampled."""
    for name in ("cute_cpp", "cuda_wgmma"):
        assert 192 in variant(name, Arch.SM90A).choices("tile.bm")
        assert 192 in variant(name, Arch.SM90A).choices("tile.bn")
    assert 192 not in variant("triton", Arch.SM90A).choices("tile.bn")
    sm80, rng = Space.build([Arch.SM80], ["cute_cpp"], PROBLEM), random.Random(0)
    sampled = [sm80.sample_legal(PROBLEM, rng) for _ in range(30)]
    assert all(check(p, PROBLEM) is None and 192 not in (p.tile.bm, p.tile.bn)
               for p in sampled)


@pytest.mark.parametrize("shape", [(4096, 4096, 4096, "nn"), (64, 256, 64, "nn"),
                                   (16, 4096, 4096, "nt"), (77, 1000, 336, "nn")])
def test_sample_legal_finds_cuda_wgmma_programs(shape):
    """cuda_wgmma's tile, warps and stages rules hold jointly: drawn independently, its
    knobs gave no legal program in 3,000 draws at 4096^3, so `tune --backends cuda_wgmma`
    stopped at its first random fill. sample_legal redraws the field verify blames."""
    *mnk, layout = shape
    problem = Problem(*mnk, layout, "f32")
    space = Space.build([Arch.SM90A], ["cuda_wgmma"], problem)
    rng = random.Random(0)
    drawn = [space.sample_legal(problem, rng, tries=50) for _ in range(5)]
    assert all(check(p, problem) is None for p in drawn)
    assert all(space.contains(p) for p in drawn) and len(set(drawn)) > 1


def test_every_shipped_program_lies_in_its_backends_space():
    """What ships was found by campaigns, some of it from hand-written lists; a tune must be
    able to find it again (the skinny decode programs' 256-deep k-tiles were once outside)."""
    from gemmforge.dispatch.shipped import shipped
    by_space: dict = {}
    for row in shipped().rows:
        p = row.program
        by_space.setdefault((p.backend, p.arch), set()).add(p)
    assert by_space
    for (backend, arch), programs in by_space.items():
        space = Space.build([arch], [backend])
        outside = sorted(str(p) for p in programs if not space.contains(p))
        assert outside == [], f"{backend} {arch}: {outside}"
