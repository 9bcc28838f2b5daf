"""The reward a policy learns from, defined once: log(cuBLAS time / kernel time).

A failed program scores WORST_REWARD (also the floor of every reward); a program that
fails ir.verify, never built or measured, scores INVALID_REWARD, below every measured
result. search.measure.env measures the results; this module only scores them, so a policy can
score without importing the measuring machinery.
"""
from __future__ import annotations

import math

WORST_REWARD = -5.0
"""The reward of a failed program, and the floor of every reward: a working program, however
slow (e^-5 ~ 1/148 of cuBLAS's speed), never scores below a broken one. A result flagged
implausible (faster than the chip can go) gets it too: the measurement can't be trusted, and
a policy must not learn to chase it."""

INVALID_REWARD = WORST_REWARD - 1.0
"""The score of a program that fails ir.verify (optuna's value for its trial, the learned
policy's for its sample): below every measured result, failures included."""

L2_STATES = ("warm", "cold")


def reward(result, l2: str = "warm") -> float:
    """log(cuBLAS time / ours) for an ok Result (0: as fast as cuBLAS, > 0: faster), with L2
    warm (`l2="warm"`: the kernel protocol, operands left in L2 by the launch before) or cold
    (`l2="cold"`: the operands not in L2, as a model's weights are in a forward pass;
    needs the "cold" protocol in BenchSettings.protocols), floored at WORST_REWARD;
    WORST_REWARD for a failure, an implausible measurement, or a state not measured.
    `result`: a search.measure.records.Result (ok, implausible, speedup, cold_speedup)."""
    if l2 not in L2_STATES:
        raise ValueError(f"l2: expected one of {', '.join(L2_STATES)}, got {l2!r}")
    speedup = result.speedup if l2 == "warm" else result.cold_speedup
    if not result.ok or result.implausible or speedup is None or not speedup > 0:
        return WORST_REWARD
    return max(WORST_REWARD, math.log(speedup))
