"""search.measure.timeline (what benchmarks/launch_timeline.py reads from kernel records), on made-up records."""
import math
from types import SimpleNamespace

import pytest
import torch

from gemmforge.search.measure import timeline


def _event(name, start, end):
    return SimpleNamespace(device_type=torch.autograd.DeviceType.CUDA, name=name,
                           time_range=SimpleNamespace(start=start, end=end))


def test_jobs_and_twins(tmp_path):
    path = tmp_path / "jobs.txt"
    path.write_text("# a comment\n64x64x64 cuda_wgmma a b pdl\n\n128x64x64 triton c  # why\n")
    assert timeline.read_jobs(f"@{path}") == [("64x64x64", "cuda_wgmma a b pdl"), ("128x64x64", "triton c")]
    assert timeline.read_jobs("1x2x3 p;4x5x6 q") == [("1x2x3", "p"), ("4x5x6", "q")]
    assert timeline.pdl_twin("x y pdl") == "x y" and timeline.pdl_twin("x y") == "x y pdl"
    with pytest.raises(ValueError):
        timeline.read_jobs("  ")


def test_calls_group_a_calls_kernels_and_leave_the_spacer_out():
    # two replays of three calls; each call a GEMM kernel and a reduce, a spacer between calls
    events, t = [], 0.0
    for _ in range(2):
        for _ in range(3):
            events += [_event("gemm", t, t + 5), _event("reduce", t + 5, t + 6), _event("add", t + 6, t + 7)]
            t += 10
        t += 100
    prof = SimpleNamespace(events=lambda: events)
    calls = timeline.calls_of(prof, launches=3, replays=2, is_spacer=lambda n: n == "add")
    assert calls[0] == [(0.0, 6.0), (10.0, 16.0), (20.0, 26.0)]
    assert calls[1][0] == (130.0, 136.0)
    with pytest.raises(RuntimeError):
        timeline.calls_of(prof, launches=4, replays=2, is_spacer=lambda n: n == "add")


def test_timeline_of_overlapping_calls():
    # pdl-like: each call's first CTA starts 4 before the previous call ends
    calls = [[(i * 10.0, i * 10.0 + 14.0) for i in range(6)]]
    got = timeline.timeline(calls)
    assert got == {"period": 10.0, "busy": 14.0, "gap": -4.0, "tail": 10.0}


def test_twin_summary_is_cublas_over_ours_per_kind():
    rows = [
        {"shape": "a", "contender": "p0", "event": 5.0, "after": 4.0},
        {"shape": "a", "contender": "p0~", "event": 6.0, "after": 3.0},
        {"shape": "a", "contender": "cublas", "event": 6.0, "after": 3.3},
        {"shape": "b", "contender": "p0", "event": 10.0, "after": float("nan")},
        {"shape": "b", "contender": "p0~", "event": 10.0, "after": float("nan")},
        {"shape": "b", "contender": "cublas", "event": 12.1, "after": float("nan")},
    ]
    text = timeline.twin_summary(rows)
    listed, twins = text.splitlines()
    assert listed == f"cuBLAS / ours, listed: event {math.sqrt(1.2 * 1.21):.3f}x (2), after 0.825x (1)"
    assert twins == f"cuBLAS / ours, twins: event {math.sqrt(1.0 * 1.21):.3f}x (2), after 1.100x (1)"
