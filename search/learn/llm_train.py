"""`gemmforge train-llm`: GRPO fine-tuning of the LLM policy, a LoRA adapter on replayed rewards.

    gemmforge train-llm --model .venv/models/smollm2-135m --output runs/llm-rl --steps 40

TRL's GRPOTrainer samples `generations` completions per prompt with transformers (any
device), each token constrained to ir.grammar's program text for the prompts' backend,
arch and problem class (policy.constrained; `grammar=False`, `--free`, samples freely);
policy.replies.parse_reply parses each reply and ir.verify judges it, constrained or not;
it scores each with search.learn.llm_tasks' replayed reward, and updates a PEFT LoRA adapter with group-relative advantages. Prompts
are policy.prompts' compact prompts (search.learn.llm_tasks.CONFIG: one line of program text
back, the assistant turn started with the reply prefix "cuda_wgmma sm_90a") for the
training shapes of search.learn.llm_tasks.split_shapes, drawn stratified by size (LARGE_SHARE,
0.4, of the prompts at shapes of 1e11 FLOPs or more; `large_share=None`,
`--uniform-shapes`, each shape once); the 30 held-out
shapes are excluded from the reward model too, so nothing measured on them reaches
training.

What a CPU step costs (benchmarks/README.md, llm_rl.py): the model runs in float32 (a bf16
checkpoint samples and trains ~4x slower on these CPUs), with the KV cache in generation
(no gradient checkpointing: TRL's default turns the cache off), and a completion ends at
its first newline (every token holding one is an end token, samplers.line_stop_ids) or at
TEXT_REPLY_TOKENS; the full prompt with a JSON reply was ~900 + ~200 tokens a sample.

It writes to OUTPUT: `checkpoint-N/` (TRL's, every --save-steps; a second run with the
same OUTPUT resumes from the last one), `adapter/` (the final LoRA adapter, what
`gemmforge tune --policy llm --llm-adapter` loads), `steps.csv` (per step: mean reward,
legal and distinct fractions of the completions, seconds), `completions.jsonl` (every
reply with its problem, program and reward) and `split.json`.
"""
from __future__ import annotations

import csv
import json
import time
from dataclasses import dataclass
from pathlib import Path

from ...policy.prompts import FAILED_REWARD, TEXT_REPLY_TOKENS
from .llm_tasks import (
    GENERATIONS, LARGE_SHARE, TEMPERATURE, held_out_free, make_replay_reward_fn, make_tasks,
    prompt_pool, split_shapes, stratified_problems,
)
from .replay_reward import DATA_FILE, DEFAULT_DEVICE, ReplayReward

STEP_FIELDS = ("step", "reward_mean", "reward_max", "legal_fraction", "distinct_fraction",
               "seconds")


@dataclass(frozen=True)
class TrainSettings:
    """GRPO and LoRA settings: one prompt per step, `generations` completions of it."""

    steps: int = 40
    generations: int = GENERATIONS
    learning_rate: float = 5e-4
    lora_rank: int = 16
    max_completion_length: int = TEXT_REPLY_TOKENS
    temperature: float = TEMPERATURE
    save_steps: int = 5
    per_problem: int = 1
    seed: int = 0
    large_share: float | None = LARGE_SHARE  # None: every training shape alike (uniform)
    grammar: bool = True  # sample under ir.grammar (policy.constrained), not freely


class StepLog:
    """Collects what the reward function saw; one steps.csv row per optimizer step."""

    def __init__(self, path: Path, completions: Path | None = None):
        self.path, self.completions = path, completions
        self.pending: list[tuple[float, str | None]] = []  # (reward, program text)
        self.last = time.perf_counter()

    def add(self, rewards: list[float], programs: list[str | None],
            texts: list[str] = (), problems: list[str] = ()) -> None:
        """Keep one reward call's results; with a completions file, append each reply."""
        self.pending.extend(zip(rewards, programs))
        if self.completions is not None and texts:
            with self.completions.open("a") as f:
                for reward, program, text, problem in zip(rewards, programs, texts, problems):
                    f.write(json.dumps({"problem": problem, "reward": reward,
                                        "program": program, "completion": text}) + "\n")

    def write(self, step: int) -> dict:
        """Append the row for `step` from the completions scored since the last one."""
        rewards = [r for r, _ in self.pending]
        legal = [p for r, p in self.pending if r > FAILED_REWARD]
        now = time.perf_counter()
        row = {"step": step, "reward_mean": sum(rewards) / len(rewards) if rewards else "",
               "reward_max": max(rewards) if rewards else "",
               "legal_fraction": len(legal) / len(rewards) if rewards else "",
               "distinct_fraction": len(set(legal)) / len(rewards) if rewards else "",
               "seconds": round(now - self.last, 2)}
        new = not self.path.exists()
        with self.path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=STEP_FIELDS)
            if new:
                writer.writeheader()
            writer.writerow(row)
        self.pending, self.last = [], now
        return row


def _logged_reward_fn(model: ReplayReward, log: StepLog):
    """The replayed reward, with each call's rewards and programs kept in `log`."""
    from ...ir.program import Arch
    from ...ir.text import parse_problem
    from ...policy.dataset import _text
    from ...policy.replies import parse_reply
    inner = make_replay_reward_fn(model)

    def reward_fn(completions, problem, arch, reply_prefix=None, **kw):
        rewards = inner(completions, problem, arch, reply_prefix=reply_prefix, **kw)
        prefixes = reply_prefix or [""] * len(completions)
        replies = [pre + _text(c) for pre, c in zip(prefixes, completions)]
        programs = [parse_reply(r, parse_problem(p), Arch(a)).program
                    for r, p, a in zip(replies, problem, arch)]
        log.add(rewards, [None if p is None else str(p) for p in programs], replies,
                list(problem))
        return rewards

    reward_fn.__name__ = inner.__name__
    return reward_fn


def _callback(log: StepLog):
    from transformers import TrainerCallback

    class StepCsv(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            row = log.write(state.global_step)
            print(f"step {row['step']}: reward {row['reward_mean']:.3f}, legal "
                  f"{row['legal_fraction']:.2f}, {row['seconds']} s", flush=True)

    return StepCsv()


def grpo_config(output: Path, settings: TrainSettings):
    """TRL's GRPOConfig for a CPU run: fp32, no reference model (beta 0), no reports."""
    from trl import GRPOConfig
    return GRPOConfig(
        output_dir=str(output), max_steps=settings.steps,
        per_device_train_batch_size=settings.generations,
        num_generations=settings.generations, gradient_accumulation_steps=1,
        learning_rate=settings.learning_rate, temperature=settings.temperature,
        max_completion_length=settings.max_completion_length, beta=0.0,
        logging_steps=1, save_steps=settings.save_steps, save_total_limit=2,
        report_to="none", use_cpu=True, bf16=False, seed=settings.seed,
        remove_unused_columns=False, dataloader_num_workers=0,
        gradient_checkpointing=False)  # TRL's default turns off the KV cache in generation


def load_model(model_dir: str | Path):
    """(model, tokenizer) in float32 (bf16 matmuls are ~4x slower on these CPUs), every
    newline-holding token an end token, so a completion is one line."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from ...policy.samplers import line_stop_ids
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    model.generation_config.eos_token_id = line_stop_ids(tokenizer, model.generation_config)
    return model, tokenizer


def _constrain(model, tokenizer, rows: list[dict]) -> None:
    """Make every generate() of `model` (TRL's sampling) follow the grammar of the rows'
    reply prefix (one backend and arch: search.learn.llm_tasks.CONFIG) and problem class."""
    from ...ir.grammar import grammar
    from ...ir.program import Arch
    from ...ir.text import parse_problem
    from ...policy.constrained import constrain_generate
    from ...policy.samplers import line_stop_ids
    classes = {(r["reply_prefix"], r["arch"], parse_problem(r["problem"]).layout,
                parse_problem(r["problem"]).acc) for r in rows}
    if len(classes) != 1:
        raise ValueError(f"train-llm constrains one backend, arch and problem class; the "
                         f"prompts hold {len(classes)}")
    ((prefix, arch, layout, acc),) = classes
    backend = prefix.split()[0]
    constrain_generate(model, grammar(backend, Arch(arch), layout, acc), tokenizer, prefix,
                       line_stop_ids(tokenizer, model.generation_config))


def lora_config(settings: TrainSettings):
    """A LoRA adapter on every linear layer of the model."""
    from peft import LoraConfig
    return LoraConfig(r=settings.lora_rank, lora_alpha=2 * settings.lora_rank,
                      lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


def rendered(tokenizer, messages: list[dict]) -> str:
    """The prompt as text through the chat template, the assistant turn left open when
    it holds the reply prefix (TRL renders chat prompts with a new assistant turn, so
    a prefix there would be closed before the model continues)."""
    from ...policy.samplers import continuation_args
    prefix = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
    return tokenizer.apply_chat_template(messages, tokenize=False,
                                         **continuation_args(prefix))


def train(model_dir: str | Path, output: str | Path, settings: TrainSettings = TrainSettings(),
          *, data: str | Path = DATA_FILE, device: str = DEFAULT_DEVICE) -> Path:
    """Run (or resume) GRPO; returns the folder of the final adapter."""
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOTrainer
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    full = ReplayReward(data, device)
    split = split_shapes(full)
    model = held_out_free(full, split)
    (output / "split.json").write_text(json.dumps(
        {"train": [str(p) for p in split.train], "held_out": [str(p) for p in split.held_out]},
        indent=1))
    policy, tokenizer = load_model(model_dir)
    shapes = (split.train if settings.large_share is None
              else stratified_problems(split.train, settings.seed, settings.large_share))
    rows = [dict(row, prompt=rendered(tokenizer, row["prompt"]))
            for row in make_tasks(shapes, model, per_problem=settings.per_problem,
                                  seed=settings.seed, pool=prompt_pool())]
    log = StepLog(output / "steps.csv", output / "completions.jsonl")
    trainer = GRPOTrainer(model=policy, processing_class=tokenizer,
                          reward_funcs=_logged_reward_fn(model, log),
                          args=grpo_config(output, settings), train_dataset=Dataset.from_list(rows),
                          peft_config=lora_config(settings), callbacks=[_callback(log)])
    if settings.grammar:
        _constrain(trainer.model, tokenizer, rows)
    trainer.train(resume_from_checkpoint=get_last_checkpoint(str(output)))
    trainer.save_model(str(output / "adapter"))
    return output / "adapter"
