"""The heuristic policy proposes only legal programs, for every backend it is given."""
import pytest

from backends import registry
from ir import Arch, check, parse_problem
from policy.heuristic import SEED_MIN_FLOPS, HeuristicPolicy, default_program

SHAPES = ["8192x8192x8192", "64x64x64", "17x33x65 nt f16", "4096x64x8192"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("arch", list(Arch))
def test_every_backend_gets_legal_distinct_programs(shape, arch):
    problem = parse_problem(shape)
    for name in registry.names():
        programs = HeuristicPolicy(name).propose(problem, arch, 3)
        assert len(set(programs)) == len(programs)
        for p in programs:
            assert p.backend == name and p.arch == arch
            assert check(p, problem) is None, (str(p), check(p, problem))


def test_several_backends_take_turns():
    problem = parse_problem("4096x4096x4096")
    got = HeuristicPolicy(backends=["triton", "cuda_wgmma"]).propose(problem, Arch.SM90A, 4)
    assert [p.backend for p in got] == ["triton", "cuda_wgmma", "triton", "cuda_wgmma"]


def test_seeds_only_for_large_problems():
    big, small = parse_problem("8192x8192x8192"), parse_problem("64x64x64")
    assert big.flops >= SEED_MIN_FLOPS > small.flops
    first = HeuristicPolicy("cuda_wgmma").propose(big, Arch.SM90A, 1)[0]
    assert str(first).endswith("persistent c1x1 coop direct")
    assert HeuristicPolicy("cuda_wgmma").propose(small, Arch.SM90A, 1)[0].tile.bm == 64


def test_default_program_falls_back_where_the_first_backend_cannot_serve():
    # unaligned rows: wgmma's TMA refuses them, so the sm_90a default falls back to cuda_mma
    assert default_program(parse_problem("17x33x65"), Arch.SM90A).backend == "cuda_mma"
    assert default_program(parse_problem("4096x4096x4096"), Arch.SM90A).backend == "cuda_wgmma"
    assert default_program(parse_problem("4096x4096x4096"), Arch.SM80).backend == "cuda_mma"
