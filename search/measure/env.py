"""A batched, crash-proof reward for RL loops: evaluate(programs, problem) -> Results.

    from gemmforge.ir import parse, parse_problem
    from gemmforge.search.measure.env import evaluate, reward
    from gemmforge.search.measure.measure import BuilderPool, DeviceRunner

    problem = parse_problem("1000x4096x333 nn f32")
    programs = [parse("cuda_simt sm_80 64x64x32 w2x2 s3 swnone row/1 pred k1 dp c1x1 nows direct"),
                "cuda_simt sm_80 128x64x32 w2x2 s2 swnone row/1 pred k1 dp c1x1 nows direct"]
    with BuilderPool() as builders, DeviceRunner(devices=[0]) as runner:  # keep these alive
        results = evaluate(programs, problem, device_runner=runner, builders=builders)
    rewards = [reward(r) for r in results]   # log(cublas_us / kernel_us), WORST_REWARD on failure
    cold = [reward(r, l2="cold") for r in results]  # with BenchSettings(protocols=("kernel", "cold"))

Every program gets a Result, in order: text that doesn't parse and programs that fail
ir.verify become `invalid` here, without a worker; the rest are built in parallel and
measured on the GPU (search.measure.measure), where a compile error, crash, hang or wrong answer
is a failed Result with its kind and message. The programs that build are timed as one
group (BenchSettings.interleave, the default): each timing round visits all of them and
cuBLAS, so a slow spell of the GPU lands on the whole group and rewards within it compare
fairly; a group that crashes or hangs is timed again program by program. Run it under
`if __name__ == "__main__":` or any entry point; workers are separate
`python -m gemmforge.search.measure.worker` processes.
"""
from __future__ import annotations

from typing import Sequence

from ...policy.reward import L2_STATES, WORST_REWARD, reward
from .measure import BuilderPool, DeviceRunner, measure
from .records import BenchSettings, MeasureRequest, Result

SEED_STRIDE = 3  # the gate uses seed, seed + 1, seed + 2 for one request

# reward and its constants live in policy.reward (policies score without measuring); an
# RL loop takes them from here beside evaluate.
__all__ = ["L2_STATES", "WORST_REWARD", "evaluate", "reward"]


def _request(program, problem, settings: BenchSettings, seed: int) -> MeasureRequest | Result:
    """A MeasureRequest, or an `invalid` Result for text that doesn't parse or verify."""
    from ...ir.program import IRError
    from ...ir.text import parse
    from ...ir.verify import check
    text = program if isinstance(program, str) else str(program)
    placeholder = MeasureRequest(text.strip(), problem.m, problem.n, problem.k,
                                 str(problem.layout), str(problem.acc), settings, seed,
                                 dtype=str(problem.dtype))
    try:
        parsed = parse(text) if isinstance(program, str) else program
        reason = check(parsed, problem)
    except IRError as e:
        return Result.failure(placeholder, "invalid", str(e))
    if reason:
        return Result.failure(MeasureRequest.make(parsed, problem, settings, seed), "invalid",
                              reason)
    return MeasureRequest.make(parsed, problem, settings, seed)


class NoGPUError(RuntimeError):
    """evaluate() was called on a machine where torch sees no CUDA GPU."""


def _need_gpu() -> None:
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError("evaluate: needs a CUDA GPU (torch sees none); to try a search "
                         "without one, answer from search.replay.ReplayRunner (synthetic or "
                         "recorded results)")


def evaluate(programs: Sequence, problem, *, device_runner: DeviceRunner | None = None,
             builders: BuilderPool | None = None, settings: BenchSettings | None = None,
             target_sm: int | None = None, seed: int = 0,
             progress: bool = False) -> list[Result]:
    """Measure each of `programs` (ir Programs or their text) on `problem` (an ir Problem).

    Returns one Result per program, in order. `device_runner` and `builders` default to
    pools made (and closed) for this call; pass long-lived ones in a loop. `target_sm`
    defaults to the runner's device. Request i uses random seed `seed + 3 * i`.
    Raises search.measure.measure.WorkerError only if the GPU worker can't start at all, and
    NoGPUError before starting a worker where one is needed (no `device_runner` given,
    some program to measure) and torch sees no GPU."""
    settings = settings or BenchSettings()
    prepared = [_request(p, problem, settings, seed + SEED_STRIDE * i)
                for i, p in enumerate(programs)]
    todo = [p for p in prepared if isinstance(p, MeasureRequest)]
    if todo and device_runner is None:
        _need_gpu()
    measured = iter(measure(todo, target_sm=target_sm, builders=builders,
                            runner=device_runner, progress=progress) if todo else [])
    return [next(measured) if isinstance(p, MeasureRequest) else p for p in prepared]
