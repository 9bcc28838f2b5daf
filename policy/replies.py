"""An LLM's reply turned into a Proposal: a verified Program, or None with the reason
(not JSON, no program object, a schema violation, bad program text, the wrong arch,
illegal for the problem).

A reply is either JSON ({"analysis", "program": the Program's JSON form}, or a bare
Program object) or, where it does not start with `{`, `[` or a ``` fence, program text: its
first non-empty line, in ir.text's canonical form (the compact prompt's reply,
policy.prompts.compact_prompt; an annotation after ` -> ` and the lines after it are
ignored).

policy.llm parses its completions with `parse_reply`; policy.dataset's TRL reward function
does too, without importing the LLM policy.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..ir.program import Arch, IRError, Problem, Program
from ..ir.schema import from_json
from ..ir.text import parse
from ..ir.verify import check

ANNOTATION = " -> "
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


def _is_json(text: str) -> bool:
    start = text.lstrip()
    return start[:1] in ("{", "[") or start.startswith("```")


def _program_line(text: str) -> str:
    """The first non-empty line of a text reply, without backticks around it and without
    an annotation ` -> ...` (the compact prompt lists programs as `PROGRAM -> SPEED`)."""
    line = next(line for line in text.splitlines() if line.strip())
    return line.split(ANNOTATION)[0].strip().strip("`").strip()


def parse_reply(text: str, problem: Problem, arch: Arch, form: str = "auto") -> Proposal:
    """Turn one completion into a Proposal: a verified Program, or None and the reason.
    `form`: "json", "text" (policy.prompts.REPLY_FORMS: what the prompt asked for), or
    "auto" (JSON where the reply starts with `{`, `[` or a fence, else text)."""
    if not isinstance(text, str) or not text.strip():
        return Proposal(None, "reply: empty completion", str(text or ""))
    if form == "text" or (form == "auto" and not _is_json(text)):
        try:
            program = parse(_program_line(text))
        except IRError as e:
            return Proposal(None, f"text: {e}", text)
        return _verified(program, problem, arch, text, "")
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
    return _verified(program, problem, arch, text, str(analysis))


def _verified(program: Program, problem: Problem, arch: Arch, text: str,
              analysis: str) -> Proposal:
    """The Proposal of a parsed program: refused for another arch or by ir.verify."""
    if program.arch != arch:
        return Proposal(None, f"arch: asked for {arch.value}, got {program.arch.value}",
                        text, analysis)
    reason = check(program, problem)
    if reason:
        return Proposal(None, f"verify: {reason}", text, analysis)
    return Proposal(program, "", text, analysis)
