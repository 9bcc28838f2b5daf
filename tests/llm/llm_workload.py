"""The heavy tier's fixed workload: a few problems, each with a lineage of heuristic
programs scored by the replay runner's synthetic model, and the policy's proposals
measured (proposals per second, fraction legal, fraction distinct, schema validity)."""
from __future__ import annotations

import json
import time

import jsonschema

from gemmforge.ir import Arch, parse_problem
from gemmforge.policy.heuristic import HeuristicPolicy
from gemmforge.policy.lineage import Lineage
from gemmforge.policy.llm import reply_schema

ARCH = Arch.SM90A
PROBLEMS = [parse_problem(s) for s in ("1000x4096x333 nn f32", "4096x4096x4096 nn f32",
                                       "64x8192x1024 nt f16")]
SEEDS_PER_PROBLEM = 6

# vLLM's CPU build: 1 GiB of KV cache is 46k tokens for this model, plenty for 16 samples.
CPU_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
# Eager mode: torch.compile of the model takes ~4 min on this 2-core machine and buys
# nothing measurable at this size (measured: same tokens/s). A token budget that holds a
# whole batch of prompts (16 x ~1.8k): with chunked prefill, vLLM 0.32's CPU runner
# crashes on seeded requests ("CPU Generator does not use offset", when it rewinds the
# generator of a request whose prefill was cut), which kills the server's engine.
ENGINE_OPTS = {"enforce_eager": True, "max_num_batched_tokens": 32768}


def reward_of(program, problem) -> float:
    """The replay runner's reward for `program` (its synthetic H200 model)."""
    from gemmforge.search.measure.env import reward
    from gemmforge.search.measure.replay import ReplayRunner
    return reward(ReplayRunner().evaluate([program], problem)[0])


def seeded_lineage(problems=PROBLEMS, arch=ARCH) -> Lineage:
    """Heuristic programs for each problem, with their replayed rewards."""
    lineage = Lineage()
    for problem in problems:
        for program in HeuristicPolicy().propose(problem, arch, SEEDS_PER_PROBLEM):
            lineage.add(program, source="heuristic", problem=str(problem),
                        reward=reward_of(program, problem))
    return lineage


def schema_valid(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def _failure_kind(reason: str) -> str:
    """'verify: tile: 128x256 ...' -> 'verify: tile'."""
    head, _, rest = reason.partition(":")
    return f"{head}: {rest.strip().split(':')[0].split()[0]}" if rest.strip() else head


def run(policy, problems=PROBLEMS, n: int = 4) -> dict:
    """propose(n) once per problem; the measurements over every completion sampled."""
    start, returned, valid = time.perf_counter(), {}, []
    first = len(policy.proposals)
    for problem in problems:
        before = len(policy.proposals)
        returned[str(problem)] = [str(p) for p in policy.propose(problem, ARCH, n)]
        schema = reply_schema(problem, ARCH)
        valid += [schema_valid(p.raw_text, schema) for p in policy.proposals[before:]
                  if p.raw_text]
    wall = time.perf_counter() - start
    proposals = policy.proposals[first:]
    legal = [p.program for p in proposals if p.ok]
    kinds: dict[str, int] = {}
    examples: dict[str, str] = {}
    for p in proposals:
        if not p.ok:
            kind = _failure_kind(p.reason)
            kinds[kind] = kinds.get(kind, 0) + 1
            examples.setdefault(kind, p.reason[:240])
    total = len(proposals) or 1
    return {
        "problems": len(problems), "completions": len(proposals), "wall_s": round(wall, 1),
        "proposals_per_s": round(len(proposals) / wall, 3),
        "schema_valid_fraction": round(sum(valid) / len(valid), 3) if valid else 0.0,
        "legal_fraction": round(len(legal) / total, 3),
        "distinct_legal_fraction": round(len(set(legal)) / total, 3),
        "returned": returned,
        "failure_kinds": kinds,
        "failure_examples": examples,
    }
