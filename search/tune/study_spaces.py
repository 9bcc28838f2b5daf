"""Which study a tuning run over a given search space continues.

optuna fixes a parameter's choices for the life of a study: a trial that suggests
"backend" from (cuda_mma, cuda_wgmma) in a study whose earlier trials drew it from
(cuda_mma, triton) raises "CategoricalDistribution does not support dynamic value space".
The space of a run changes with its `--backends` and archs, and with the package version
(a knob that gains values). So a run continues the problem's study "<device> | <problem>"
only where every parameter it shares with the stored trials has the same choices; else it
continues "<device> | <problem> | space <fingerprint>", made on first use and seeded with
the finished trials of the problem's other studies: their programs, values, results and
failures carried over (parameters only where the program lies in the new space), so the
budget, the duplicate check and the best so far go on from where they were and no
measurement is repeated.
"""
from __future__ import annotations

import hashlib
import json
import time

SPACE_MARK = " | space "
CARRIED_ATTR = "carried_from"  # study user attr: the studies whose trials it was seeded with
WAIT_S = 30.0  # how long a second process waits for the first to finish seeding


def fingerprint(distributions: dict) -> str:
    """8 hex digits naming a space by its parameters and their choices."""
    canon = {name: [str(c) for c in d.choices] for name, d in sorted(distributions.items())}
    return hashlib.sha1(json.dumps(canon, sort_keys=True).encode()).hexdigest()[:8]


def fits(trials, distributions: dict) -> bool:
    """Whether every stored trial's parameters that `distributions` also names have the
    same choices there (what optuna requires of a study's later trials)."""
    return all(distributions.get(name, d) == d
               for t in trials for name, d in t.distributions.items())


def _load(storage, name: str):
    import optuna
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def resolve(storage, base: str, distributions: dict) -> str:
    """The study name a run over `distributions` uses for the problem whose plain study
    name is `base` (nothing is created)."""
    study = _load(storage, base)
    if study is None or fits(study.get_trials(deepcopy=False), distributions):
        return base
    return f"{base}{SPACE_MARK}{fingerprint(distributions)}"


def open_for_space(storage, base: str, space, sampler):
    """The study (created if missing) that a run over `space` continues; a new space study
    is seeded with the finished trials of the problem's other studies (module doc)."""
    import optuna
    distributions = space.distributions()
    name = resolve(storage, base, distributions)
    if name == base:
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                   direction="maximize", load_if_exists=True)
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                    direction="maximize")
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        if _seeded(study):  # else its creator died seeding it, or is slow: finish the job
            return study
    _seed(storage, study, base, space, distributions)
    return study


def _seeded(study) -> bool:
    """Whether `study` has been seeded, waiting up to WAIT_S for the process seeding it."""
    deadline = time.monotonic() + WAIT_S
    while CARRIED_ATTR not in study.user_attrs:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _seed(storage, study, base: str, space, distributions: dict) -> None:
    """Add to `study` the carried trials whose programs it lacks, then mark it seeded (so a
    seeding cut short is completed by the next run, without adding a program twice)."""
    import optuna
    sources = [base] + sorted(n for n in optuna.get_all_study_names(storage)
                              if n.startswith(base + SPACE_MARK) and n != study.study_name)
    have = {t.user_attrs.get("program") for t in study.get_trials(deepcopy=False)}
    study.add_trials([t for t in carried(storage, sources, space, distributions)
                      if t.user_attrs["program"] not in have])
    study.set_user_attr(CARRIED_ATTR, sources)


def carried(storage, sources: list[str], space, distributions: dict) -> list:
    """Frozen trials for a new space study: every finished trial of the `sources` studies
    that names a program, each program once (a measured trial before an unmeasured one), its
    parameters those of `space` where the program lies in it, else none (the trial then
    still counts towards the budget and the duplicate check, and its result towards the
    best)."""
    from optuna.trial import TrialState, create_trial

    from ...ir.text import parse
    out, seen = [], {}
    for name in sources:
        study = _load(storage, name)
        if study is None:
            continue
        for t in study.get_trials(deepcopy=False,
                                  states=(TrialState.COMPLETE, TrialState.FAIL)):
            text = t.user_attrs.get("program")
            if not text:  # asked, never given a program: nothing to carry
                continue
            if text in seen and not (t.user_attrs.get("measured")
                                     and not out[seen[text]].user_attrs.get("measured")):
                continue
            try:  # a text that no longer parses, or a program outside the space: none
                params = space.params(parse(text))
            except ValueError:
                params = {}
            trial = create_trial(
                state=t.state, value=t.value if t.state == TrialState.COMPLETE else None,
                params=params, distributions={k: distributions[k] for k in params},
                user_attrs=dict(t.user_attrs))
            if text in seen:
                out[seen[text]] = trial
            else:
                seen[text] = len(out)
                out.append(trial)
    return out
