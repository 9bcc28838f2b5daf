"""Contrastive prompts for the LLM policy, after CUDA-L1 (arXiv 2507.14111).

A prompt shows the model four things and asks for one thing:

1. the problem: m, n, k, layout, accumulator, FLOPs and arithmetic intensity;
2. the hardware facts that matter for the arch (SMs, shared memory per CTA, which
   instruction paths exist there and how far each goes);
3. the backends it may write for, with the values each accepts (from the registry's
   declared capabilities: nothing here names a backend);
4. earlier programs for this problem with their measured speedups, picked from the
   lineage graph: the best, the worst, and the near neighbours of the best;

and asks it to analyse why the faster programs are faster before proposing a new one,
as JSON of the reply schema (`policy.llm.reply_schema`): {"analysis": str, "program": ...}.

The text is a pure function of (problem, arch, lineage, config): the same lineage gives
the same prompt byte for byte, so dataset rows and tests are reproducible.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Sequence

from ..ir.arch import ACCUM_REG_BUDGET, LIMITS
from ..ir.capabilities import serves_dtypes
from ..ir.devices import ARCH_DEFAULT
from ..ir.program import DEFAULTS, OPT_IN_FIELDS, Arch, DType, Problem, Program
from ..ir.schema import to_json
from ..ir.verify import runs_text
from .lineage import Lineage, field_distance
from .reward import WORST_REWARD

FAILED_REWARD = WORST_REWARD
"""Rewards at or below this are failures (policy.reward.WORST_REWARD)."""

SM_COUNT = {arch: facts.sms for arch, facts in ARCH_DEFAULT.items()}  # A100; H100 SXM / H200
DENSE_FP16_TFLOPS = {arch: round(facts.peak_tflops) for arch, facts in ARCH_DEFAULT.items()}  # dense
HALF_BYTES = 2

_ARCH_NOTES = {
    Arch.SM80: (
        "A100 (sm_80): tensor cores through mma.sync (ldmatrix + cp.async pipelines) or WMMA; "
        "no wgmma, no TMA, no thread-block clusters, no warp specialization: cluster must be "
        "1x1, warp_spec none, epilogue not tma.",
    ),
    Arch.SM90A: (
        "H100/H200 (sm_90a): mma.sync (the sm_80 instruction) caps near 63-65% of peak here; "
        "only wgmma fed by TMA (sm_90a only) reaches cuBLAS.",
        "What beats cuBLAS on Hopper: TMA + wgmma, producer/consumer warp specialization, "
        "128x256x64 tiles with 2 consumer warpgroups, clusters with TMA multicast, a "
        "persistent grid with grouped rasterization, a TMA store epilogue.",
        "Small and skinny shapes are where cuBLAS leaves the most room: fill the SMs "
        "(smaller tiles, split-K, stream-K) rather than maximise reuse.",
    ),
}

_TEXT_LEGEND = ("Programs are shown in the canonical text form: backend arch BMxBNxBK "
                "wWMxWN sSTAGES swizzle raster/GROUP padding "
                "kSPLIT[a=atomic, i=inkernel, c=cluster] schedule cCMxCN warp_spec epilogue "
                "[l2first = l2_hint stream_first] [swap = swap_ab true] [pdl = pdl true] "
                "[bias = a fused bias add, C += bias[n], which the caller sets: leave "
                "it out]. "
                "swap_ab computes "
                "C^T = B^T A^T so a small M sits on the MMA's narrow N side (C is written "
                "transposed); tile and warps stay in the problem's terms (bm, wm along M). "
                "split_k inkernel sums the slices inside the kernel (no reduce kernel); "
                "cluster runs a tile's slices as one cluster and sums them through its "
                "shared memory (sm_90a, cluster c1x1, schedule dp). pdl "
                "lets the kernel's set-up overlap the previous kernel's tail (programmatic "
                "dependent launch).")


REPLY_FORMS = ("json", "text")
JSON_REPLY_TOKENS = 768  # an analysis of <= 80 words, then the program's JSON form
TEXT_REPLY_TOKENS = 64
"""The token limit of a one-line reply: the longest program text takes 49 tokens with
SmolLM2's BPE (every optional token set), so 64 leaves a margin; a reply stops at its
newline anyway."""


@dataclass(frozen=True)
class PromptConfig:
    """How many contrastive examples a prompt shows, by kind, which backends it offers
    (`backends`: names; empty for every usable one) and the reply asked for (`reply`):
    "json" (the full prompt, an analysis and the program's JSON form, ~1k prompt tokens
    and ~200 reply tokens) or "text" (the compact prompt, compact_prompt: one line of
    program text back, ~300 prompt tokens and ~50 reply tokens). Fewer backends and text
    replies are what a CPU training run can afford."""

    best: int = 2
    worst: int = 2
    neighbours: int = 3
    backends: tuple[str, ...] = ()
    reply: str = "json"

    def __post_init__(self):
        if self.reply not in REPLY_FORMS:
            raise ValueError(f"reply: {self.reply!r} is not one of {', '.join(REPLY_FORMS)}")


@dataclass(frozen=True)
class Prompt:
    """A chat prompt (system + user); `messages()` for chat APIs, `text()` for completions.

    `parent` is the best program the prompt shows (what a new program is derived from in
    the lineage), or None when it shows none. `reply_prefix` is text the reply starts
    with, written into the assistant's turn before the model continues it (`chat()`,
    `text()`); a sampler returns the prefix and the continuation as one reply."""

    system: str
    user: str
    parent: Program | None = None
    reply_prefix: str = ""

    def messages(self) -> list[dict]:
        """The chat form: a system and a user message."""
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": self.user}]

    def chat(self) -> list[dict]:
        """What a chat model continues: messages(), then an assistant message holding
        `reply_prefix` if there is one (to be continued, not closed)."""
        prefix = [{"role": "assistant", "content": self.reply_prefix}] if self.reply_prefix \
            else []
        return self.messages() + prefix

    def text(self) -> str:
        """The plain-text form, for completion endpoints and models with no chat template."""
        intro = "Reply (JSON):" if not self.reply_prefix else "Reply:"
        return f"{self.system}\n\n{self.user}\n\n{intro}\n{self.reply_prefix}"


SYSTEM = ("You are a GPU performance engineer who writes HGEMM kernels (fp16 C = A @ B) as "
          "programs in the gemmforge IR. You reply with JSON only: an object with an "
          "\"analysis\" string and a \"program\" object in the IR's JSON form.")


OPERAND_WORDS = {DType.F16: "fp16", DType.BF16: "bf16"}
"""How the problem section names the operand dtype."""
_COMPACT_DTYPE = {DType.F16: "", DType.BF16: ", bf16 operands"}  # f16, the default: unsaid


def problem_section(problem: Problem, arch: Arch) -> str:
    """The problem's numbers: shape, layout, accumulator, FLOPs, intensity, grid fill."""
    m, n, k = problem.m, problem.n, problem.k
    moved = HALF_BYTES * (m * k + k * n + m * n)
    ctas = math.ceil(m / 128) * math.ceil(n / 128)
    ideal_us = problem.flops / (DENSE_FP16_TFLOPS[arch] * 1e6)
    return "\n".join([
        "## Problem",
        f"C[m, n] = A[m, k] @ B with m={m}, n={n}, k={k}; layout {problem.layout.value} "
        f"(nn: B is k x n row-major; nt: B is n x k), {OPERAND_WORDS[problem.dtype]} "
        f"operands and output, "
        f"{problem.acc.value} accumulator.",
        f"FLOPs 2mnk = {problem.flops:.3e}; arithmetic intensity "
        f"{problem.flops / moved:.1f} FLOP/byte (each operand read once).",
        f"A 128x128 tile gives {ctas} CTAs for {SM_COUNT[arch]} SMs "
        f"({ctas / SM_COUNT[arch]:.2f} waves); at peak the kernel would take {ideal_us:.2f} us.",
    ])


def hardware_section(arch: Arch) -> str:
    """The facts about `arch` that decide which programs can be fast."""
    lim = LIMITS[arch]
    lines = ["## Hardware", *(f"- {note}" for note in _ARCH_NOTES[arch]),
             f"- {SM_COUNT[arch]} SMs; up to {lim.max_smem_per_block} B of shared memory per "
             f"CTA (stages x (BM + BN) x BK x 2 B must fit); {lim.max_threads_per_block} "
             f"threads per CTA; {lim.max_regs_per_thread} registers per thread, of which "
             f"the accumulator may take {ACCUM_REG_BUDGET}: BM x BN / threads (f32; half "
             f"that for f16) must stay within it, so 128x256 needs 256 threads.",
             f"- Dense fp16 tensor-core peak about {DENSE_FP16_TFLOPS[arch]} TFLOP/s."]
    return "\n".join(lines)


def json_value(fld: str, value) -> str:
    """How one Program field's value is spelled in the JSON form the model writes."""
    return json.dumps(to_json(DEFAULTS.replace(**{fld: value}))[fld], separators=(", ", ": "))


def _backend_lines(be) -> list[str]:
    mm, mn, mk = be.mma_shape
    swaps = True in be.allowed.get("swap_ab", ())
    lines = [f"- {be.name}: {be.instruction}; each entry of warps is {be.unit_threads} "
             f"threads; tile.bm a multiple of warps.wm x {mm}, tile.bn of warps.wn x {mn}, "
             f"tile.bk of {mk}" + (f" (with swap_ab: tile.bm of warps.wm x {mn}, tile.bn "
                                   f"of warps.wn x {mm})." if swaps else "."),
             f"    tile.bm, tile.bn: powers of two" + (
                 f", or {runs_text(sorted(be.tile_extras))}" if be.tile_extras
                 else "") + f"; stages at most {be.max_stages}; split_k.reduction one of "
             f"{', '.join(sorted(json.dumps(r.value) for r in be.reductions))}"]
    opt_in = {fld: frozenset({getattr(DEFAULTS, fld)}) for fld in OPT_IN_FIELDS}
    for fld, allowed in sorted({**opt_in, **be.allowed}.items()):
        values = sorted(json_value(fld, v) for v in allowed)
        if len(values) == 1:
            lines.append(f"    {fld}: must be {values[0]}")
        else:
            lines.append(f"    {fld}: one of {', '.join(values)}")
    return lines


def usable_backends(problem: Problem, arch: Arch, only: Sequence[str] = ()) -> list:
    """Registered backends that emit code for `arch` and compute `problem`'s layout, acc and
    operand dtype (of those named in `only`, if any)."""
    from ..backends import registry
    return [be for be in registry.all() if arch in be.archs
            and problem.layout in be.layouts and problem.acc in be.accumulators
            and problem.dtype in serves_dtypes(be) and (not only or be.name in only)]


def backends_section(problem: Problem, arch: Arch, only: Sequence[str] = ()) -> str:
    """Each usable backend (of `only`, if given) with its instruction, divisibility rule
    and accepted values."""
    lines = [f"## Backends for {arch.value} (fields not listed accept every IR value)",
             "Rules for every backend: split_k.reduction is \"workspace\" when slices is 1; "
             "schedule \"stream_k\" needs split_k slices 1."]
    for be in usable_backends(problem, arch, only):
        lines.extend(_backend_lines(be))
    return "\n".join(lines)


def _describe(reward: float) -> str:
    if reward <= FAILED_REWARD:
        return "FAILED (illegal, wrong or crashed; reward -5)"
    return f"{math.exp(reward):.3f}x cuBLAS (reward {reward:+.3f})"


def pick_examples(lineage: Lineage, problem: Problem,
                  config: PromptConfig) -> list[tuple[str, Program, float]]:
    """(label, program, reward) rows: best, worst, then neighbours of the best, no repeats.

    Ties in reward break on the program text, so the choice doesn't depend on the order
    the lineage saw programs in."""
    rows = sorted(lineage.measured(str(problem)), key=lambda r: (-r[1], str(r[0])))
    if not rows:
        return []
    picked: list[tuple[str, Program, float]] = []
    seen: set[Program] = set()

    def take(label: str, candidates) -> None:
        for program, reward in candidates:
            if program not in seen:
                seen.add(program)
                picked.append((label, program, reward))

    take("best", rows[:config.best])
    take("worst", rows[::-1][:config.worst])
    best = rows[0][0]
    near = sorted((r for r in rows if r[0] not in seen),
                  key=lambda r: (field_distance(best, r[0]), -r[1], str(r[0])))
    take("neighbour of the best", near[:config.neighbours])
    return picked


def examples_section(examples: list[tuple[str, Program, float]]) -> str:
    """The measured programs, labelled, fastest first, and the best one in JSON form."""
    if not examples:
        return ("## Earlier programs\nNone measured yet for this problem: propose a strong "
                "first program.")
    ordered = sorted(examples, key=lambda e: (-e[2], str(e[1])))
    lines = ["## Earlier programs for this problem (measured)", _TEXT_LEGEND]
    for i, (label, program, reward) in enumerate(ordered, 1):
        lines.append(f"{i}. [{label}] {program}  ->  {_describe(reward)}")
    best = ordered[0][1]
    lines.append("The best one in JSON form: " + json.dumps(to_json(best), sort_keys=False))
    return "\n".join(lines)


def request_section(examples: list) -> str:
    """What the model must do: contrast, explain, then propose something new."""
    if len(examples) >= 2:
        ask = ("First, in \"analysis\", compare the fastest and the slowest programs above "
               "and explain why the faster one is faster for this shape (tile size against "
               "m and n, waves over the SMs, pipeline depth, split-K, instruction path). "
               "Then, in \"program\", propose one new program, different from every program "
               "listed, that you expect to beat the best.")
    else:
        ask = ("In \"analysis\", reason briefly about which tile shape, pipeline depth and "
               "split-K suit this shape on this hardware; in \"program\", give the program.")
    return "## Task\n" + ask + (" Keep the analysis under 80 words. The program must be "
                                "legal for a backend listed above and use the arch "
                                "given above.")


def avoid_section(avoid: Sequence[Program]) -> str:
    """Programs already proposed in this request that a new proposal must not repeat."""
    lines = ["## Already proposed in this request (do not repeat these)"]
    lines.extend(f"- {p}" for p in sorted(set(avoid), key=str))
    return "\n".join(lines)


def build_prompt(problem: Problem, arch: Arch, lineage: Lineage | None = None,
                 config: PromptConfig = PromptConfig(), avoid: Sequence[Program] = ()) -> Prompt:
    """The contrastive prompt for `problem` on `arch`; deterministic given the lineage
    (and `avoid`, programs proposed earlier in the same call that it must not repeat).
    With config.reply "text", the compact prompt (compact_prompt)."""
    examples = pick_examples(lineage, problem, config) if lineage is not None else []
    if config.reply == "text":
        return compact_prompt(problem, arch, examples, config, avoid)
    sections = [problem_section(problem, arch), hardware_section(arch),
                backends_section(problem, arch, config.backends), examples_section(examples)]
    if avoid:
        sections.append(avoid_section(avoid))
    user = "\n\n".join([*sections, request_section(examples)])
    parent = min(examples, key=lambda e: (-e[2], str(e[1])))[1] if examples else None
    return Prompt(SYSTEM, user, parent)


COMPACT_SYSTEM = ("You write HGEMM kernels (fp16 C = A @ B) as programs of the gemmforge IR, "
                  "one line of text each. Reply with one program line and nothing else.")

_COMPACT_FORM = ("Program form: backend arch BMxBNxBK wWMxWN sSTAGES swizzle raster/GROUP "
                 "padding kSPLIT schedule cCMxCN warp_spec epilogue [l2first] [swap] [pdl].")


def compact_rules(be, arch: Arch) -> str:
    """One line of `be`'s divisibility, stage, shared-memory and register rules."""
    mm, mn, mk = be.mma_shape
    lim = LIMITS[arch]
    return (f"{be.name} rules: bm a multiple of {mm}*wm, bn of {mn}*wn, bk of {mk}; "
            f"stages <= {be.max_stages} and stages*(bm+bn)*bk*2 <= {lim.max_smem_per_block} "
            f"bytes; bm*bn/({be.unit_threads}*wm*wn) <= {ACCUM_REG_BUDGET}.")


def compact_prompt(problem: Problem, arch: Arch, examples: list[tuple[str, Program, float]],
                   config: PromptConfig, avoid: Sequence[Program] = ()) -> Prompt:
    """The short prompt that asks for one line of program text: the problem, the text
    form, each usable backend's rules in a line, the measured examples fastest first with
    their speed against cuBLAS, and programs already proposed (`avoid`)."""
    m, n, k = problem.m, problem.n, problem.k
    ctas = math.ceil(m / 128) * math.ceil(n / 128)
    lines = [f"Write one HGEMM kernel program for {arch.value}: C = A @ B, m={m} n={n} "
             f"k={k}, layout {problem.layout.value}{_COMPACT_DTYPE[problem.dtype]}, "
             f"{problem.acc.value} accumulate; 128x128 "
             f"tiles give {ctas} CTAs on {SM_COUNT[arch]} SMs.", _COMPACT_FORM]
    lines.extend(compact_rules(be, arch) for be in usable_backends(problem, arch,
                                                                  config.backends))
    ordered = sorted(examples, key=lambda e: (-e[2], str(e[1])))
    if ordered:
        lines.append("Measured for this shape (speed vs cuBLAS):")
        lines.extend(f"{p} -> " + ("failed" if r <= FAILED_REWARD else f"{math.exp(r):.3f}x")
                     for _, p, r in ordered)
    if avoid:
        lines.append("Already proposed: " + "; ".join(str(p) for p in sorted(set(avoid), key=str)))
    lines.append("Reply with one new program line, different from those above, that should "
                 "be faster." if ordered else "Reply with one program line.")
    parent = ordered[0][1] if ordered else None
    return Prompt(COMPACT_SYSTEM, "\n".join(lines), parent, reply_prefix(problem, arch, config))


def reply_prefix(problem: Problem, arch: Arch, config: PromptConfig) -> str:
    """What every legal one-line reply starts with: "BACKEND ARCH" where one backend is
    usable, else "". A small model told to reply with program text mostly writes prose
    (SmolLM2-135M: 0 of 40 replies legal); started on the program's first tokens, it
    continues the examples' form."""
    usable = usable_backends(problem, arch, config.backends)
    return f"{usable[0].name} {arch.value}" if len(usable) == 1 else ""
