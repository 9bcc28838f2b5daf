"""An LLM's reply turned into a Proposal: a verified Program, or None with the reason
(not JSON, no program object, a schema violation, the wrong arch, illegal for the problem).

policy.llm parses its completions with `parse_reply`; policy.dataset's TRL reward function
does too, without importing the LLM policy.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gemmforge.ir.program import Arch, IRError, Problem, Program
from gemmforge.ir.schema import from_json
from gemmforge.ir.verify import check

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


@dataclass(frozen=True)
class Proposal:
    """One completion and what became of it: `program` is None when `reason` says why."""

    program: Program | None
    reason: str
    raw_text: str
    analysis: str = ""

    @property
    def ok(self) -> bool:
        return self.program is not None


def _loads(text: str):
    """The JSON value of a reply (a ```json fence around it is tolerated)."""
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


def parse_reply(text: str, problem: Problem, arch: Arch) -> Proposal:
    """Turn one completion into a Proposal: a verified Program, or None and the reason."""
    if not isinstance(text, str) or not text.strip():
        return Proposal(None, "reply: empty completion", str(text or ""))
    try:
        obj = _loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        return Proposal(None, f"reply: not valid JSON ({e})", text)
    if not isinstance(obj, dict):
        return Proposal(None, f"reply: expected a JSON object, got {type(obj).__name__}", text)
    analysis = obj.get("analysis", "")
    body = obj.get("program", obj if "backend" in obj else None)
    if not isinstance(body, dict):
        return Proposal(None, "reply: no 'program' object", text, str(analysis))
    try:
        program = from_json(body)
    except IRError as e:
        return Proposal(None, f"schema: {e}", text, str(analysis))
    if program.arch != arch:
        return Proposal(None, f"arch: asked for {arch.value}, got {program.arch.value}",
                        text, str(analysis))
    reason = check(program, problem)
    if reason:
        return Proposal(None, f"verify: {reason}", text, str(analysis))
    return Proposal(program, "", text, str(analysis))
