"""The LLM policy: vLLM samples whole IR programs under the IR's JSON Schema.

    policy = LLMPolicy(model="/models/qwen2.5-7b")          # offline vLLM engine
    policy = LLMPolicy(url="http://127.0.0.1:8000")         # any OpenAI-compatible server
    programs = policy.propose(problem, Arch.SM90A, n=4)     # legal, distinct, new
    policy.observe(problem, programs[0], reward)            # lineage + dataset row

Each `propose` builds a contrastive prompt (policy.prompts) from the lineage of measured
programs, samples completions bound to `reply_schema`, and turns every completion into a
`Proposal`: a verified Program, or None with the reason (not JSON, schema violation,
wrong arch, illegal for verify, sampler failure). A bad reply is a failed proposal in
`policy.proposals`, never an exception. The reply form is

    {"analysis": "<why the faster programs are faster>", "program": {<Program JSON form>}}

where "program" is ir.schema's versioned Program object, narrowed to one variant per
backend usable for the problem (`anyOf`): the backend's name, the arch asked for, and the
values the backend declares for its restricted fields. A bare Program object is accepted
too, for servers that ignore the schema.

With PromptConfig(reply="text") (`gemmforge tune --llm-reply text`, what `gemmforge
train-llm` trains on) the prompt is the compact one (policy.prompts.compact_prompt) and a
reply is one line of program text, stopped at its newline, started with the prompt's
reply prefix where one backend is offered. With that prefix and the transformers
engine, every token is constrained to ir.grammar's program text for the backend and the
problem's class (policy.constrained), as train-llm samples; vLLM and servers sample
text replies unconstrained.
"""
from __future__ import annotations

import copy
import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..ir.program import DEFAULTS, Arch, Problem, Program
from ..ir.schema import backend_schema
from .dataset import DatasetWriter, make_row
from .lineage import Lineage
from .prompts import (
    FAILED_REWARD, JSON_REPLY_TOKENS, TEXT_REPLY_TOKENS, Prompt, PromptConfig, build_prompt,
    usable_backends,
)
from .replies import Proposal, parse_reply
from .samplers import (
    OpenAISampler, Sampler, SamplerError, TransformersSampler, VLLMSampler, adapter_id,
    adapter_name,
)

ANALYSIS_MAX_CHARS = 400  # ~100 words; bounds the tokens spent before the program
STALL_NOTICE_S = 30.0  # a sampler call this slow is announced (it may be a dead server)
ALL_FAILED_AFTER = 8  # proposals, every one failed: warn that the LLM contributes nothing
REASON_CHARS = 240  # of a failure reason, in the notices and report()
SEED_STRIDE = 1 << 16  # more samples than one request ever asks for


def backend_program_schema(be, arch: Arch, problem: Problem | None = None) -> dict:
    """The Program JSON schema narrowed to one backend, `arch` and the problem's class
    (ir.schema.backend_schema: each field's values that the backend can make legal)."""
    return backend_schema(be.name, arch, *((problem.layout, problem.acc) if problem else ()))


def reply_schema(problem: Problem, arch: Arch, only: tuple[str, ...] = ()) -> dict:
    """JSON Schema of a reply: {"analysis": str, "program": one of the Program forms of
    the backends usable for `problem` on `arch` (of `only`, if given)}, each narrowed by
    backend_program_schema, so only cross-field rules (divisibility, shared memory,
    registers) are left to verify."""
    variants = [backend_program_schema(be, arch, problem)
                for be in usable_backends(problem, arch, only)]
    if not variants:
        raise ValueError(f"no registered backend computes {problem} on {arch.value}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gemmforge LLM reply",
        "type": "object",
        "properties": {"analysis": {"type": "string", "maxLength": ANALYSIS_MAX_CHARS},
                       "program": variants[0] if len(variants) == 1 else {"anyOf": variants}},
        "required": ["analysis", "program"],
        "additionalProperties": False,
    }


def reason_class(reason: str) -> str:
    """A failure reason's class, its first word: sampler, reply, schema, arch, verify."""
    return reason.split(":", 1)[0].strip() or "unknown"


def _say(line: str) -> None:
    print(f"gemmforge: llm: {line}", file=sys.stderr, flush=True)


@dataclass
class _Origin:
    """Where a proposed program came from, kept until it is observed."""

    prompt: Prompt
    proposal: Proposal
    arch: Arch


class LLMPolicy:
    """Proposes programs sampled from an LLM; learns only through its prompt's lineage.

    `model`: a local model directory for vLLM's offline engine; with `url`, the served
    model's name instead (default: the server's first). `dataset`: a JSONL path (or a
    DatasetWriter) that gets one row per observed proposal and per failed one.
    `oversample` asks for that many completions per program wanted; `rounds` how many
    requests one propose() may make before returning fewer than `n`; `max_n` caps the
    programs one propose() returns, whatever `n` asks (sampling is the slow part).
    `adapter`: a PEFT LoRA folder (gemmforge train-llm) the sampler applies; its id
    (samplers.adapter_id) goes into every dataset row and into the lineage's `source`
    ("llm:<id>") of the programs it proposed.

    Failures are counted by reason class (`failures`: class -> [count, first reason]);
    `say(line)` (default: stderr) hears the first failure of each class, a sampler call
    slower than STALL_NOTICE_S, and a warning once the first ALL_FAILED_AFTER proposals
    have all failed.
    """

    name = "llm"

    def __init__(self, model: str | Path | None = None, url: str | None = None, *,
                 sampler: Sampler | None = None, lineage: Lineage | None = None,
                 dataset: str | Path | DatasetWriter | None = None,
                 config: PromptConfig = PromptConfig(), temperature: float = 0.8,
                 max_tokens: int | None = None, oversample: int = 2, rounds: int = 2,
                 max_n: int = 8, seed: int | None = None,
                 adapter: str | Path | None = None, say=_say, **sampler_opts):
        self.sampler = sampler or make_sampler(model, url, adapter=adapter, **sampler_opts)
        self.model_name = str(model or url or type(self.sampler).__name__)
        self.adapter = None if adapter is None else adapter_id(adapter)
        self.source = self.name if self.adapter is None else f"{self.name}:{self.adapter}"
        self.lineage = lineage if lineage is not None else Lineage()
        self.dataset = DatasetWriter(dataset) if isinstance(dataset, (str, Path)) else dataset
        self.config, self.temperature = config, temperature
        self.max_tokens = max_tokens or (JSON_REPLY_TOKENS if config.reply == "json"
                                         else TEXT_REPLY_TOKENS)
        self.oversample, self.rounds, self.seed = max(1, oversample), max(1, rounds), seed
        self.max_n = max(1, max_n)
        self.proposals: list[Proposal] = []
        self.sample_seconds = 0.0
        self._origins: dict[tuple[str, Program], _Origin] = {}
        self._requests = 0
        self.failures: dict[str, list] = {}
        self.say, self._warned = say, False

    def _sample(self, prompt: Prompt, schema: dict | None, k: int,
                grammar=None) -> list[str] | str:
        """k completions, or the sampler's failure reason as a string; `grammar` (an
        ir.grammar.TextGrammar) goes to a sampler that takes one."""
        # vLLM seeds the i-th of n samples with seed + i: space requests far apart
        seed = None if self.seed is None else self.seed + SEED_STRIDE * self._requests
        self._requests += 1
        start = time.perf_counter()
        limit = getattr(self.sampler, "timeout_s", None)
        notice = threading.Timer(STALL_NOTICE_S, self.say, [
            f"no reply from the sampler after {STALL_NOTICE_S:g} s" +
            (f" (it gives up at {limit:.0f} s: --llm-timeout)" if limit else "")])
        notice.daemon = True
        notice.start()
        try:
            extra = {"grammar": grammar} if grammar is not None else {}
            return self.sampler.sample(prompt, schema, k, temperature=self.temperature,
                                       max_tokens=self.max_tokens, seed=seed, **extra)
        except SamplerError as e:
            return f"sampler: {e}"
        except Exception as e:  # a sampler's own bug must not end the search either
            return f"sampler: {type(e).__name__}: {e}"
        finally:
            notice.cancel()
            self.sample_seconds += time.perf_counter() - start

    def _text_grammar(self, prompt: Prompt, problem: Problem, arch: Arch):
        """The grammar a text reply is sampled under: ir.grammar's, for the backend the
        reply prefix names, where the sampler takes one (TransformersSampler); else None
        (the reply is unconstrained, and verified like any other)."""
        if self.config.reply != "text" or not prompt.reply_prefix or \
                not getattr(self.sampler, "takes_grammar", False):
            return None
        from ..ir.grammar import grammar
        return grammar(prompt.reply_prefix.split()[0], arch, problem.layout, problem.acc)

    def _measured(self, problem: Problem) -> set[Program]:
        return {p for p, _ in self.lineage.measured(str(problem))}

    def propose(self, problem: Problem, arch: Arch, n: int = 1) -> list[Program]:
        """Up to `n` distinct legal programs not yet measured for `problem`, in sampled
        order. Each round after the first lists the programs already proposed in the
        prompt, so the model is asked not to repeat them."""
        n = min(n, self.max_n)
        if n < 1:
            return []
        try:
            schema = reply_schema(problem, arch, self.config.backends)
            schema = schema if self.config.reply == "json" else None  # text: unconstrained
        except ValueError as e:
            prompt = build_prompt(problem, arch, self.lineage, self.config)
            self._fail(Proposal(None, f"schema: {e}", ""), prompt, problem, arch)
            return []
        out: list[Program] = []
        seen: list[Program] = []  # every legal program sampled in this call
        skip = self._measured(problem)
        for _ in range(self.rounds):
            prompt = build_prompt(problem, arch, self.lineage, self.config, avoid=seen)
            texts = self._sample(prompt, schema, (n - len(out)) * self.oversample,
                                 self._text_grammar(prompt, problem, arch))
            if isinstance(texts, str):
                self._fail(Proposal(None, texts, ""), prompt, problem, arch)
                break
            for text in texts:
                proposal = parse_reply(text, problem, arch, self.config.reply)
                self._take(proposal, prompt, problem, arch, out, seen, skip)
            if len(out) >= n:
                break
        self._warn_if_all_failed()
        return out[:n]

    def _warn_if_all_failed(self) -> None:
        if self._warned or len(self.proposals) < ALL_FAILED_AFTER or \
                any(p.ok for p in self.proposals):
            return
        self._warned = True
        self.say(f"WARNING: the first {len(self.proposals)} LLM proposals all failed; "
                 "tuning goes on with the optuna sampler alone")

    def _take(self, proposal: Proposal, prompt: Prompt, problem: Problem, arch: Arch,
              out: list[Program], seen: list[Program], skip: set[Program]) -> None:
        """Record one proposal; keep its program if it is new for this call and problem."""
        if not proposal.ok:
            self._fail(proposal, prompt, problem, arch)
            return
        self.proposals.append(proposal)
        program = proposal.program
        if program in seen:
            return
        seen.append(program)
        if program not in skip:
            out.append(program)
            self._origins.setdefault((str(problem), program), _Origin(prompt, proposal, arch))

    def _fail(self, proposal: Proposal, prompt: Prompt, problem: Problem, arch: Arch) -> None:
        self.proposals.append(proposal)
        kind = reason_class(proposal.reason)
        if kind not in self.failures:
            self.failures[kind] = [0, proposal.reason[:REASON_CHARS]]
            self.say(f"a proposal failed ({proposal.reason[:REASON_CHARS]}); later '{kind}' "
                     "failures are counted in the summary")
        self.failures[kind][0] += 1
        if self.dataset is not None and proposal.raw_text:
            self.dataset.append(make_row(prompt, proposal.raw_text, None, FAILED_REWARD,
                                         problem, arch, self.model_name, proposal.reason,
                                         adapter=self.adapter))

    def observe(self, problem: Problem, program: Program, reward: float) -> None:
        """Add the result to the lineage (child of the prompt's best program, if it was
        ours) and, for a program this policy proposed, write a dataset row."""
        origin = self._origins.pop((str(problem), program), None)
        parent = origin.prompt.parent if origin else None
        self.lineage.add(program, source=self.source if origin else "observed",
                         problem=str(problem), parent=parent if parent != program else None,
                         reward=reward)
        if origin is not None and self.dataset is not None:
            self.dataset.append(make_row(origin.prompt, origin.proposal.raw_text, program,
                                         reward, problem, origin.arch, self.model_name,
                                         adapter=self.adapter))

    def report(self) -> dict:
        """Plain counts for a run's summary: proposals, legal ones, and failures by reason
        class ({class: [count, first reason]})."""
        return {"proposals": len(self.proposals), "legal": sum(p.ok for p in self.proposals),
                "failures": {k: list(v) for k, v in self.failures.items()}}

    def stats(self) -> dict:
        """Counts over every proposal so far: legal fraction, distinct legal programs,
        and proposals per second of sampling time."""
        total = len(self.proposals)
        legal = [p.program for p in self.proposals if p.ok]
        return {"proposals": total, "legal": len(legal), "distinct": len(set(legal)),
                "legal_fraction": len(legal) / total if total else 0.0,
                "distinct_fraction": len(set(legal)) / total if total else 0.0,
                "sample_seconds": self.sample_seconds,
                "proposals_per_second": total / self.sample_seconds if self.sample_seconds
                else 0.0}


def make_sampler(model: str | Path | None = None, url: str | None = None, *,
                 adapter: str | Path | None = None, engine: str = "vllm", **opts) -> Sampler:
    """An OpenAISampler for `url` (model = the served name; with `adapter` and no model,
    the adapter's folder name, as `vllm serve --lora-modules NAME=PATH` serves it), else
    a sampler on the local directory `model` with the adapter applied: vLLM's offline
    engine (`engine` "vllm") or transformers ("transformers", any device, CPU included)."""
    if url:
        name = model if model is not None else (adapter_name(adapter) if adapter else None)
        return OpenAISampler(url, None if name is None else str(name), **opts)
    if model and engine == "transformers":
        return TransformersSampler(model, adapter=adapter, **opts)
    if model:
        return VLLMSampler(model, adapter=adapter, **opts)
    raise ValueError("the llm policy needs a server URL (--llm-url) or a local model "
                     "directory for vLLM (--llm-model)")


def from_cli(url: str | None = None, model: str | None = None, *,
             dataset: str | None = None, lineage: str | Path | None = None,
             temperature: float = 0.8, seed: int | None = None,
             adapter: str | None = None, engine: str = "vllm",
             backends=None, timeout_s: float | None = None,
             endpoint: str = "chat", reply: str = "json") -> LLMPolicy:
    """The policy `gemmforge tune --policy llm --llm-url URL --llm-model DIR` runs.

    `url`: an OpenAI-compatible server (`model`, if given, is the served model's name);
    without it `model` is a local model directory for the offline vLLM engine.
    `dataset`: JSONL file to append (prompt, completion, reward) rows to. `lineage`: a
    saved Lineage JSON (policy.lineage) to start from, if the file exists. `adapter`: a
    LoRA folder from `gemmforge train-llm` (a server must serve it under its folder's
    name: `vllm serve BASE --enable-lora --lora-modules NAME=PATH`). `engine`: "vllm" or
    "transformers" for a local model directory. `backends`: names the prompt and the
    reply schema offer (None: every usable backend).
    `reply`: "json" (the full contrastive prompt, a JSON reply under the schema) or "text"
    (the compact prompt and one line of program text back: how `gemmforge train-llm`
    trains, so an adapter from it wants "text"). With `url`: `timeout_s` per request
    (default samplers.DEFAULT_TIMEOUT_S) and `endpoint` ("chat" or "completions").
    """
    graph = Lineage.load(lineage) if lineage and Path(lineage).exists() else None
    server = {"api": endpoint, **({"timeout_s": timeout_s} if timeout_s else {})} if url else {}
    return LLMPolicy(model=model, url=url, dataset=dataset, lineage=graph,
                     config=PromptConfig(backends=tuple(backends or ()), reply=reply),
                     temperature=temperature, seed=seed, adapter=adapter, engine=engine,
                     **server)
