"""Constrained decoding of one-line program text: a transformers logits processor that
lets the model write only what ir.grammar offers.

    constraint = TextConstraint(grammar("cuda_wgmma", Arch.SM90A), tokenizer, "cuda_wgmma sm_90a")
    model.generate(**inputs, logits_processor=LogitsProcessorList([constraint]), ...)

At each step, for each sequence: its text so far (the reply prefix and the tokens
generated since the first call) is walked through the grammar; of the TOP_K most likely
vocabulary tokens, those whose text keeps the line a prefix the grammar offers stay, and an
end token (a newline or end-of-text token) stays only where the line is a whole program;
every other token's logit becomes -inf. A whole program may also be followed by the
annotation the prompt's examples carry (` -> 0.97x`, which policy.replies ignores): once
it starts, the rest of the line is left to the model. Only if none of the TOP_K is offered are all
tokens tried (tokens outside the TOP_K most likely carry almost no probability at the
sampling temperatures used here, and trying all ~49k costs seconds a step). A line the
grammar can't continue (possible only after a choice whose viability search ran out of
budget, ir.grammar.LEAF_BUDGET) may only end: its program then fails ir.verify, as an
unconstrained reply would.

Samples are drawn from the model's distribution restricted to the grammar; the
probabilities the GRPO loss uses (search.learn.llm_train) are the model's own, unrestricted.
"""
from __future__ import annotations

import math

from ..ir.grammar import TextGrammar

TOP_K = 64  # most likely tokens checked first at each step
ANNOTATION = " -"  # the start of policy.replies.ANNOTATION (" -> "), after a whole program


class TextConstraint:
    """A transformers LogitsProcessor for one generate() call (it remembers where the
    prompt ends at its first call)."""

    def __init__(self, grammar: TextGrammar, tokenizer, reply_prefix: str,
                 end_ids: list[int] | None = None, top_k: int = TOP_K):
        self.grammar, self.tokenizer, self.prefix, self.top_k = \
            grammar, tokenizer, reply_prefix, top_k
        self.texts, self.candidates, ends, self.openers = _vocabulary(grammar, tokenizer)
        self.end_ids = set(ends) | set(end_ids or ()) | \
            ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
        self.start: int | None = None

    def __call__(self, input_ids, scores):
        if self.start is None:
            self.start = input_ids.shape[1]
        for row in range(input_ids.shape[0]):
            text = self.prefix + self.tokenizer.decode(input_ids[row, self.start:],
                                                       skip_special_tokens=True)
            if ANNOTATION in text:
                continue  # the program is whole (checked when the annotation began)
            keep = self.offered(text, scores[row])
            masked = scores[row].clone().fill_(-math.inf)
            masked[keep] = scores[row][keep]
            scores[row] = masked
        return scores

    def offered(self, text: str, logits) -> list[int]:
        """Token ids the grammar lets follow `text` (the most likely first, see above)."""
        walked = self._walk(text)
        if walked is None:
            return sorted(self.end_ids)
        state, partial = walked
        order = logits.argsort(descending=True).tolist()
        pool = [i for i in order if i in self.end_ids or i in self.candidates
                or i in self.openers]
        for ids in (pool[:self.top_k], pool[self.top_k:]):
            keep = [i for i in ids if self._fits(state, partial, i)]
            if keep:
                return keep
        return sorted(self.end_ids)

    def _walk(self, text: str) -> tuple[tuple, str] | None:
        """(state after the text's whole tokens, the last, partial token), or None."""
        *whole, partial = text.split(" ")
        state: tuple | None = ()
        for token in whole:
            state = self.grammar.step(state, token) if token else None
            if state is None:
                return None
        return state, partial

    def _fits(self, state: tuple, partial: str, token_id: int) -> bool:
        g = self.grammar
        if token_id in self.end_ids or token_id in self.openers:
            text = partial + self.openers.get(token_id, "")
            head = text.split(ANNOTATION)[0] if token_id in self.openers else text
            if token_id in self.openers and not text.startswith(head + ANNOTATION):
                return False
            done = g.step(state, head) if head else None
            return done is not None and g.can_end(done)
        *whole, last = (partial + self.texts[token_id]).split(" ")
        for token in whole:
            state = g.step(state, token) if token else None
            if state is None:
                return False
        return g.prefix_ok(state, last) if last else len(state) < len(g.tokens)


def _vocabulary(grammar: TextGrammar, tokenizer) -> tuple:
    """(id -> text of the tokens made of the grammar's characters, their ids, the ids of
    tokens that are only whitespace holding a newline, id -> text of the tokens that can
    open the annotation: a space and a dash, whole or as their ending)."""
    alphabet = {c for field in grammar.tokens for t in field for c in t} | {" "}
    texts, ends, openers = {}, [], {}
    for i in range(len(tokenizer)):
        text = tokenizer.decode([i], skip_special_tokens=False)
        if "\n" in text and not text.strip():
            ends.append(i)
        elif text and set(text) <= alphabet:
            texts[i] = text
        elif ANNOTATION in text and "\n" not in text and \
                set(text.split(ANNOTATION)[0]) <= alphabet:
            openers[i] = text
    return texts, set(texts), ends, openers


def constrain_generate(model, grammar: TextGrammar, tokenizer, reply_prefix: str,
                       end_ids: list[int] | None = None) -> None:
    """Make every `model.generate()` call (TRL's GRPOTrainer samples through it) apply a
    fresh TextConstraint besides the logits processors the call passes."""
    from transformers import LogitsProcessorList
    inner = model.generate

    def generate(*args, **kwargs):
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(TextConstraint(grammar, tokenizer, reply_prefix, end_ids))
        return inner(*args, logits_processor=processors, **kwargs)

    model.generate = generate
