"""What a tune competes against: the program the resolver served before it, and the stored entry.

    before = resolver_choice(runner, problem, database)   # a dispatch.choice.Choice
    programs = incumbent_programs(before, database.best(runner.device, problem))

A tune must never leave a shape slower than it found it. So the quick tune's group
(search.tune.quick) and the study's confirmation (search.tune.confirm) time the incumbent,
the program `matmul` served before the tune (dispatch.choice.resolve with the "slower" cuBLAS
rule: the tuned database, else the shipped file, else the heuristic), and the tuned database's
stored entry beside their own best, with cuBLAS timed in the same rounds. The best of that one
measurement is recorded, replacing the stored entry; where it reads slower than cuBLAS its
record says so (its ratio under 1.0), and the resolver's cuBLAS rule then serves cuBLAS.
"""
from __future__ import annotations

from ...dispatch.choice import Choice, resolve
from ...dispatch.devices import DEFAULT_CLASS, device_class
from ...ir.program import Arch, Problem, Program

RULE = "slower"  # the cuBLAS rule `matmul` resolves with: what "served before" means


def lookup_class(runner, arch: Arch) -> tuple[str, bool]:
    """The device class to take shipped neighbours from, and whether it is the runner's
    own: the runner's device's class, else (a replayed or synthetic device) the arch's
    default class (dispatch.devices.DEFAULT_CLASS), whose rows then only seed the candidates."""
    cls = device_class(runner.device)
    return (cls, True) if cls else (DEFAULT_CLASS[arch], False)


def served_class(runner, arch: Arch) -> str | None:
    """The class whose resolver a record of the runner's device changes (None: a device
    of no class, which the resolver serves from the heuristic alone)."""
    cls, own = lookup_class(runner, arch)
    return cls if own else None


def resolver_choice(runner, problem: Problem, database, shipped_path=None) -> Choice:
    """What the resolver serves `problem` on the runner's device for its preferred arch
    now: from `database` (search.tune.database.TunedDatabase; None: no tuned entry counts),
    the shipped file at `shipped_path` (None: the package's) and the heuristic."""
    arch = runner.archs[0]
    return resolve(problem, arch, served_class(runner, arch),
                   tuned_url=database.url if database is not None else None,
                   use_tuned=database is not None, shipped_path=shipped_path, cublas=RULE)


def incumbent_programs(before: Choice | None, stored) -> list[Program]:
    """The programs a tune must time beside its own: `before`'s (none where cuBLAS served,
    or for None), then the stored entry's (a dispatch.tuned.Entry, or None) if it is
    another program."""
    out = [] if before is None or before.cublas else [before.program]
    if stored is not None and stored.program not in out:
        out.append(stored.program)
    return out
