"""Where a program comes from: one resolver for `matmul`, `emit`, `bench` and the torch op.

    choice = resolve(Problem(4099, 4096, 4096), Arch.SM90A, "h100")
    choice.program       # the Program to build (None: cuBLAS serves, Choice.cublas)
    choice.provenance    # "tuned-exact" | "tuned-nearest" | "shipped-exact" | "shipped-nearest" | "heuristic"
    choice.line()        # "program: shipped-nearest (h100, distance 0.00 to 4096x4096x4096 nn f32, 1.05x cuBLAS)"

Sources, both filtered by device class (dispatch.devices: the device's own class, then the
classes of the same die), layout, accumulator, operand dtype (a bf16 problem reads bf16
records only: an f16 record's time or ratio is no evidence for it) and the program's arch:
the user's tuned database (dispatch.tuned; only where SQLAlchemy is importable and the
database exists) and the shipped file (dispatch.shipped). Among candidates legal for the problem (ir.verify.check)
within MAX_DISTANCE, the nearest wins; at equal distance the device's own class before a
sibling's, the tuned database before the shipped file, then the higher measured speedup.
With no candidate, the heuristic policy's program.

Where the nearest candidate is a shipped neighbour, a rule (RULES, default DEFAULT_RULE)
picks among the shipped programs: "learned" ranks the class's shipped programs at this shape
with the layout's learned model (dispatch.ranker; also where no row is within reach, if the
model's training shapes cover the shape; without a usable model, the wave rule), "waves"
carries each neighbour's measured time to this shape by its waves of tiles
(dispatch.waves.predicted_us), "nearest" takes the nearest alone. How each rule reads
against tuning the shape, and the commands that measured it: docs/dispatch.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.program import Arch, Problem, Program
from .devices import lookup_classes, multiprocessors
from .waves import predicted_us

MAX_DISTANCE = 1.0
"""The farthest a measured shape may lie from the asked one (distance(), in octaves) for its
program to be used. The grid's shapes are one octave apart in each of m, n and k (64 to
16384), so every shape inside the grid's box lies within sqrt(3)/2 = 0.87 of a grid shape:
1.0 serves all of them from the shipped file, and refuses shapes more than an octave outside
the box (m = 1 to 31: a GEMV, not a GEMM the grid measured) or more than an octave from
every tuned shape, where a program's tile and schedule no longer describe the problem. (The
learned rule then ranks the shipped programs by its model where the model's training
shapes cover the shape: the module doc and docs/dispatch.md.)"""

SOURCES = ("tuned", "shipped")  # preference order at equal distance and class
RULES = ("learned", "waves", "nearest")  # how a shipped program is picked (module doc)
DEFAULT_RULE = "learned"
MIN_TRAINED_SHAPES = 100
TRAINED_SHARE = 1 / 8
"""The learned rule ranks a shipped program only where its model saw that program timed at
MIN_TRAINED_SHAPES shapes or more, or at TRAINED_SHARE of the model's training shapes where
that is fewer (min_trained_shapes; the nn model's 813 shapes: 100, the nt model's 160: 20);
the wave rule's pick always."""


def min_trained_shapes(shapes: int | None) -> float:
    """The fewest training shapes (of `shapes`, None: not known) at which a model must have
    seen a program timed for the learned rule to rank it (TRAINED_SHARE's doc)."""
    return MIN_TRAINED_SHAPES if not shapes else min(MIN_TRAINED_SHAPES, shapes * TRAINED_SHARE)


def distance(a: Problem, b: Problem) -> float:
    """Euclidean distance of (log2 m, log2 n, log2 k) between two problems, in octaves."""
    return math.dist([math.log2(a.m), math.log2(a.n), math.log2(a.k)],
                     [math.log2(b.m), math.log2(b.n), math.log2(b.k)])


@dataclass(frozen=True)
class Choice:
    """A program and where it came from. `distance` is 0.0 for an exact shape and None for
    the heuristic; `measured` is the problem whose measurement chose it, `device_class`
    the class that measured it, `speedup` its measured cuBLAS/kernel ratio, `command` the
    command that measured it (where known), `kernel_us` its measured kernel time there (µs),
    `predicted_us` the wave rule's time for it at the asked shape (None: not predicted),
    `ranked` how many shipped programs the learned rule ranked to choose it, legal here or
    not (None: it did not rank)."""

    program: Program | None  # None: cuBLAS serves the problem (`cublas`)
    source: str  # "tuned", "shipped", "heuristic" or "cublas"
    distance: float | None = None
    measured: Problem | None = None
    device_class: str | None = None
    speedup: float | None = None
    command: str = ""
    kernel_us: float | None = None
    predicted_us: float | None = None
    ranked: int | None = None
    pdl_dropped: bool = False  # GEMMFORGE_PDL=0 took `pdl` off the program chosen
    ratio: float | None = None  # the record's cuBLAS/ours as a model runs it (after another
                                # kernel where measured, else back to back)
    why: str = ""  # for a cuBLAS choice: why cuBLAS serves

    @property
    def cublas(self) -> bool:
        return self.program is None

    @property
    def provenance(self) -> str:
        if self.source in ("heuristic", "cublas"):
            return self.source
        return f"{self.source}-{'exact' if self.distance == 0 else 'nearest'}"

    def line(self) -> str:
        """One line saying where the program came from (emit and bench print it)."""
        if self.cublas:
            return f"program: cuBLAS ({self.why})"
        if self.source == "heuristic":
            return ("program: heuristic (no tuned or shipped program for this shape"
                    + ("; pdl off (GEMMFORGE_PDL=0))" if self.pdl_dropped else ")"))
        parts = [self.device_class or "?"]
        if self.distance:
            parts.append(f"distance {self.distance:.3g} to {self.measured}")
        if self.speedup is not None:
            parts.append(f"{self.speedup:.3f}x cuBLAS measured" + (" with pdl" if self.pdl_dropped else ""))
        if self.predicted_us is not None:
            parts.append(f"{self.predicted_us:.3g} us predicted here by waves of tiles")
        if self.ranked is not None:
            parts.append(f"the learned model's first usable of {self.ranked} shipped programs")
        if self.pdl_dropped:
            parts.append("pdl off (GEMMFORGE_PDL=0)")
        return f"program: {self.provenance} ({', '.join(parts)})"


def resolve(problem: Problem, arch: Arch, device_class: str | None, *,
            tuned_url: str | None = None, shipped_path=None, use_tuned: bool = True,
            max_distance: float = MAX_DISTANCE, exclude: frozenset = frozenset(),
            rule: str = DEFAULT_RULE, model=None, cublas: str = "never") -> Choice:
    """The program for `problem` on a device of `device_class` (None: no measured source
    applies) running `arch` programs, with its provenance (see the module doc), or cuBLAS
    (`Choice.cublas`) as `cublas` says (CUBLAS_RULES: "never" never; "slower" where a record
    says cuBLAS won the shape or the chosen program's own record reads slower than cuBLAS;
    "unmeasured" also where the program was not measured at this very shape). `exclude`:
    backends whose programs may not serve (the torch op asks for one with a C launch entry);
    `rule`: how a shipped program is picked off the grid, one of RULES; `model`: the learned rule's
    dispatch.ranker.Ranker (None: the package's model file of the problem's layout).
    With GEMMFORGE_PDL=0 the program chosen runs without `pdl` (see without_pdl)."""
    if cublas not in CUBLAS_RULES:
        raise ValueError(f"cublas: {cublas!r} is not one of {', '.join(CUBLAS_RULES)}")
    if cublas != "never":
        won = _cublas_won(problem, device_class, shipped_path)
        if won is not None:
            return won
    if cublas == "unmeasured":  # only an exact record can serve: look at nothing else
        choice = _exact(problem, arch, device_class, tuned_url, shipped_path, use_tuned, exclude)
    else:
        choice = _resolve(problem, arch, device_class, tuned_url=tuned_url,
                          shipped_path=shipped_path, use_tuned=use_tuned,
                          max_distance=max_distance, exclude=exclude, rule=rule, model=model)
    choice = _cublas_rule(choice, cublas)
    from ..compiler.knobs import knobs
    return choice if knobs().pdl or choice.cublas else without_pdl(choice)


CUBLAS_RULES = ("never", "slower", "unmeasured")


def _cublas_won(problem: Problem, device_class: str | None, shipped_path) -> Choice | None:
    """cuBLAS, where the shipped file records that it won `problem` on the device's class."""
    if not device_class:
        return None
    book = _book(shipped_path)
    for cls in lookup_classes(device_class)[:1]:  # the device's own class measured it
        row = book.cublas_won(cls, problem)
        if row is not None:
            return Choice(None, "cublas", 0.0, row.problem, cls, None,
                          row.measured.get("command", ""), ratio=1.0,
                          why=f"it won this shape's confirmation on {cls}")
    return None


def _exact(problem: Problem, arch: Arch, device_class: str | None, tuned_url, shipped_path,
           use_tuned: bool, exclude: frozenset) -> Choice:
    """The record measured at `problem` itself (tuned before shipped, the device's own class
    first), or cuBLAS where there is none."""
    classes = lookup_classes(device_class) if device_class else ()
    found = [*(_tuned(problem, arch, classes, 0.0, tuned_url) if use_tuned else []),
             *shipped_candidates(problem, arch, classes, _book(shipped_path), 0.0, exclude)]
    found = [c for c in found if c.program.backend not in exclude]
    if not found:
        return Choice(None, "cublas", why="no program was measured at this shape")
    return pick(problem, found, classes, "nearest")


def _cublas_rule(choice: Choice, rule: str) -> Choice:
    """`choice`, or cuBLAS where `rule` says (resolve's doc)."""
    if rule == "never" or choice.cublas:
        return choice
    if choice.ratio is not None and choice.ratio < 1.0:
        return replace(choice, program=None, source="cublas",
                       why=f"the {choice.provenance} program reads {choice.ratio:.3f}x cuBLAS "
                           f"at {choice.measured}")
    if rule == "unmeasured" and (choice.source == "heuristic" or choice.distance != 0.0):
        return replace(choice, program=None, source="cublas",
                       why=f"no program was measured at this shape ({choice.provenance})")
    return choice


def without_pdl(choice: Choice) -> Choice:
    """`choice` with `pdl` taken off its program. Programmatic dependent launch lets a kernel
    start while the previous one on the stream finishes; that pays where a GEMM follows a
    kernel that lets it (another of ours: the kernel protocol's back-to-back launches), and
    costs a little after any other kernel (benchmarks/README.md, "launch_timeline.py":
    over 51 grid rows on an H200, the shipped programs read 1.19x cuBLAS back to back and
    0.975x after a 1 MiB add; the same without pdl 1.03x and 1.04x)."""
    if not choice.program.pdl:
        return choice
    return replace(choice, program=replace(choice.program, pdl=False), pdl_dropped=True)


def _resolve(problem: Problem, arch: Arch, device_class: str | None, *, tuned_url, shipped_path,
             use_tuned, max_distance, exclude, rule, model) -> Choice:
    classes = lookup_classes(device_class) if device_class else ()
    book = _book(shipped_path)
    found = [*(_tuned(problem, arch, classes, max_distance, tuned_url) if use_tuned else []),
             *shipped_candidates(problem, arch, classes, book, max_distance, exclude)]
    found = [c for c in found if c.program.backend not in exclude]
    if found:
        chosen = pick(problem, found, classes, "waves" if rule == "learned" else rule)
        return learned_pick(problem, chosen, book, exclude, model) if rule == "learned" else chosen
    heuristic = _heuristic(problem, arch, exclude)
    if rule == "learned":
        for cls in classes:  # the first class whose model ranks here
            chosen = learned_pick(problem, heuristic, book, exclude, model, cls)
            if chosen is not heuristic:
                return chosen
    return heuristic


def _heuristic(problem: Problem, arch: Arch, exclude: frozenset) -> Choice:
    """The heuristic policy's program, of its first preferred backend not `exclude`d."""
    from ..policy.heuristic import PREFERRED, default_program
    for backend in [b for b in PREFERRED[arch] if b not in exclude] if exclude else [None]:
        try:
            return Choice(default_program(problem, arch, backend), "heuristic")
        except ValueError:
            continue
    raise ValueError(f"no legal program for {problem} on {arch.value} outside "
                     f"{', '.join(sorted(exclude))}")


def pick(problem: Problem, found: list[Choice], classes: tuple[str, ...],
         rule: str = "waves") -> Choice:
    """The candidate `resolve` serves among `found` (legal candidates within reach, of
    `classes`, best class first): the nearest (module doc); where that is a shipped
    neighbour and `rule` is "waves", the shipped neighbour of the nearest's device class with
    the shortest predicted time at `problem` (dispatch.waves), the nearest among equal ones."""
    if rule not in RULES:
        raise ValueError(f"rule: {rule!r} is not one of {', '.join(RULES)}")
    ranked = sorted(found, key=lambda c: (c.distance, classes.index(c.device_class),
                                          SOURCES.index(c.source), -(c.speedup or 0.0)))
    nearest = ranked[0]
    if rule == "nearest" or nearest.source != "shipped" or nearest.distance == 0.0:
        return nearest
    # one class's times only: a sibling's rows were timed on another memory system (an H200's
    # bandwidth-bound kernels run shorter), so they serve only where the nearest is theirs
    same_class = [c for c in ranked if c.device_class == nearest.device_class]
    timed = [(c.predicted_us, rank, c) for rank, c in enumerate(map(
        lambda c: _predicted(c, problem), same_class)) if c.predicted_us is not None]
    return min(timed, key=lambda t: t[:2])[2] if timed else nearest


def learned_pick(problem: Problem, fallback: Choice, book, exclude=frozenset(),
                 model=None, device_class: str | None = None) -> Choice:
    """The learned rule (module doc): where `fallback` (the wave rule's pick) is a shipped
    neighbour of the model's device class and layout, the distinct shipped program of that
    class that `model` (None: dispatch.ranker.load() of the problem's layout) ranks best among
    those usable at `problem` (the fallback's program where the model ranks it first); where
    `fallback` is the heuristic's (no shipped neighbour within reach) and the model of
    `device_class` covers `problem` (Ranker.covers: inside its training shapes' range), the
    best ranked of that class's shipped programs; else, or with no model, `fallback`. A
    model of a sibling class (dispatch.devices.SIBLINGS: the same die and SM count) ranks a
    class that has none of its own: an H200's rows are ranked by the H100's model."""
    far = fallback.source == "heuristic"
    if (fallback.source != "shipped" or fallback.distance == 0.0) and not far:
        return fallback
    cls = device_class if far else fallback.device_class
    from . import ranker
    model = model if model is not None else ranker.load(layout=problem.layout.value)
    sms = multiprocessors(cls)
    if (model is None or sms is None or model.device_class not in lookup_classes(cls)
            or model.layout != problem.layout.value or (far and not model.covers(problem))):
        return fallback
    ranked = _learned_rows(problem, fallback, book, model, exclude, cls)
    if len(ranked) < 2:
        return fallback
    scores = model.scores([rows[0].program for rows in ranked], problem, sms)
    # best first; among equals the fallback's program (it leads `ranked`), then text order.
    # Legality is checked down the ranking only as far as the first usable program
    # (ir.verify builds a program's pipeline graph: most of a resolve's time otherwise)
    for i in sorted(range(len(ranked)), key=lambda i: -scores[i]):
        program = ranked[i][0].program
        if program == fallback.program:
            return replace(fallback, ranked=len(ranked))
        if usable(program, problem):
            row = min(ranked[i], key=lambda r: distance(problem, r.problem))
            return Choice(program, "shipped", distance(problem, row.problem), row.problem,
                          row.device_class, row.speedup, row.measured.get("command", ""),
                          row.figures.get("kernel_us"), ranked=len(ranked), ratio=row.ratio)
    return fallback


def _learned_rows(problem: Problem, fallback: Choice, book, model, exclude,
                  device_class: str) -> list[list]:
    """The shipped rows of each distinct program the learned rule ranks at `problem`, one
    list per program: the fallback's first (where it is shipped), then in text order each
    program of `device_class`'s rows, of the fallback's arch and not of an `exclude`d
    backend, that `model` saw timed at min_trained_shapes() of its shapes or more. Not yet
    checked for legality at `problem`."""
    keep = str(fallback.program)
    floor = min_trained_shapes(model.trained.get("shapes"))
    by_text: dict = {}
    for row in book.group(device_class, problem):
        text = row.program_text
        if text == keep or model.programs.get(text, 0) >= floor:
            by_text.setdefault(text, []).append(row)
    ranked = [by_text[t] for t in sorted(by_text, key=lambda t: (t != keep, t))]
    return [rows for rows in ranked if rows[0].program.arch == fallback.program.arch
            and rows[0].program.backend not in exclude]


def _predicted(c: Choice, problem: Problem) -> Choice:
    """`c` with its predicted time at `problem` (None where its class's SM count is unknown)."""
    sms = multiprocessors(c.device_class)
    if sms is None or c.source != "shipped" or not c.kernel_us:
        return c
    return replace(c, predicted_us=predicted_us(c.program, c.measured, c.kernel_us, problem, sms))


def usable(program: Program, problem: Problem) -> bool:
    """`program` is legal at `problem` and its backend can build on this machine (a shipped
    cute_cpp program needs the CUTLASS headers: without them a neighbour's program or the
    heuristic's serves instead of a failing build)."""
    from ..ir.capabilities import table
    from ..ir.verify import check
    if check(program, problem) is not None:
        return False
    return table.get(program.backend).unavailable() is None


def _tuned(problem, arch, classes, limit, url) -> list[Choice]:
    """Legal candidates from the user's tuned database, [] without SQLAlchemy or a database."""
    if not classes:
        return []
    from .tuned import tuned_candidates
    out = []
    for e, cls in tuned_candidates(problem, arch, classes, url):
        d = distance(problem, e.problem)
        if d <= limit and usable(e.program, problem):
            out.append(Choice(e.program, "tuned", d, e.problem, cls, e.speedup, e.command,
                              ratio=e.ratio if e.ratio is not None else e.speedup))
    return out


def _book(path):
    from .shipped import shipped
    return shipped(path)


def shipped_candidates(problem: Problem, arch: Arch, classes: tuple[str, ...], book,
                       limit: float = MAX_DISTANCE, exclude=frozenset()) -> list[Choice]:
    """Legal candidates from the shipped file `book` (dispatch.shipped.ShippedFile): per class
    of `classes` its exact row if that is legal (and not of an `exclude`d backend), else its
    rows within `limit`."""
    out = []
    for cls in classes:
        exact = book.exact(cls, problem)
        for rows in ([exact] if exact is not None else [], book.group(cls, problem)):
            for row in rows:
                d = distance(problem, row.problem)
                if (d <= limit and row.program.arch == arch
                        and row.program.backend not in exclude and usable(row.program, problem)):
                    out.append(Choice(row.program, "shipped", d, row.problem, cls, row.speedup,
                                      row.measured.get("command", ""),
                                      row.figures.get("kernel_us"), ratio=row.ratio))
            if out and out[-1].device_class == cls and out[-1].distance == 0.0:
                break  # a legal exact row: no neighbour can beat it
    return out
