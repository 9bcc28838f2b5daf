"""The nvcc tier of `gemmforge emit --arch sm_90a`: every distinct file that the shipped
shapes emit (both GPU classes, both layouts) compiles for sm_90a, and a cover of them builds
as shared libraries and self-test executables.

Files are told apart by their code: the text without the kernel's name (a hash of the
program), the self-test's default shape and comments. Shapes that share a program, layout
and accumulator differ only there; every program the shipped file picks gives other
constants, so each of its files is a kernel of its own.

What each build catches, and what it costs on 2 cores (nvcc 13.0, the 261 files):
- `-cubin`, every file (2.4 min; 2.7 beside one CPU-bound process): the whole file through
  nvcc's front end, host code included (syntax, types, templates, static_assert, constexpr),
  cicc's -O3 code generation and ptxas for sm_90a (inline PTX: unknown instructions,
  modifiers or wgmma shapes, operand constraints; register and static shared-memory
  limits). Not the host compiler's pass over the host code, nor a link.
- the shared library and the self-test, for a cover of the files (every `constexpr bool`
  both ways; split-K, clusters and consumer warpgroups one and more: 7 files, 20 s): the
  host compiler, and (the executable) the link, which finds an undefined symbol that a
  shared library would accept.
Every file as a shared library takes 3.8 min (5.1 beside one CPU-bound process), half as
long again as the `-cubin` pass for the host compiler's pass alone, which the cover runs.
"""
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gemmforge.backends import registry
from gemmforge.compiler import nvcc
from gemmforge.compiler.values import BuildError
from gemmforge.dispatch import tuned as database
from gemmforge.dispatch import shipped
from gemmforge.emit import build_selftest, choose_program, emit
from gemmforge.ir.program import Arch, Problem

pytestmark = pytest.mark.nvcc
ROWS = json.loads(shipped.text(shipped.DEFAULT_PATH))["rows"]
JOBS = max(1, len(os.sched_getaffinity(0)))


def _code(text: str) -> str:
    """What a file compiles: its text less the kernel's name, the self-test's default
    shape and comments."""
    name = re.search(r"^// gemmforge kernel (\S+)", text, re.M).group(1)
    text = re.sub(r"int M = \d+, N = \d+, K = \d+;", "int M, N, K;", text.replace(name, "gf"))
    lines = (re.sub(r"\s*//.*$", "", line) for line in text.splitlines())
    return "\n".join(line for line in lines if line.strip())


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[tuple[Path, object, str]]:
    """(path, program, text) of each distinct emitted file, written into a folder."""
    out, seen, found = tmp_path_factory.mktemp("emitted"), set(), []
    with pytest.MonkeyPatch.context() as patch:  # the shipped file alone decides
        patch.setattr(database, "tuned_candidates", lambda *a, **k: [])
        for row in ROWS:
            problem = Problem(row["m"], row["n"], row["k"], row["layout"], row["acc"])
            program, _ = choose_program(problem, Arch.SM90A, None, row["device_class"])
            text = registry.get(program.backend).standalone(program, problem)
            if _code(text) not in seen:
                seen.add(_code(text))
                found.append((emit(problem, program, out), program, text))
    assert {(r["device_class"], r["layout"]) for r in ROWS} == {
        (c, layout) for c in ("h100", "h200") for layout in ("nn", "nt")}
    return found


def _flags(program) -> list[str]:
    return [*nvcc.gencode(program.arch), *registry.get(program.backend).nvcc_flags(program)]


def _build_all(jobs: list, build) -> None:
    """Run build(path, program) for every (path, program, ...) on JOBS nvcc processes;
    fail with each failure's program and the compiler's first error."""
    def one(item):
        path, program = item[0], item[1]
        try:
            build(path, program)
        except BuildError as e:
            log = e.log or str(e)
            first = next((line for line in log.splitlines() if "error" in line.lower()),
                         str(e))
            return f"{path.name} ({program}): {first.strip()}"
        return None
    with ThreadPoolExecutor(JOBS) as pool:
        failed = [f for f in pool.map(one, jobs) if f]
    assert not failed, f"{len(failed)} of {len(jobs)} failed:\n" + "\n".join(failed[:10])


def _cubin(path: Path, program) -> None:
    nvcc.compile_cuda(path, path.with_suffix(".cubin"), [*_flags(program), "-cubin"],
                      shared=False)
    assert path.with_suffix(".cubin").stat().st_size > 0


def _library(path: Path, program) -> None:
    nvcc.compile_cuda(path, path.with_suffix(".so"), _flags(program))
    assert path.with_suffix(".so").stat().st_size > 0


def _library_and_selftest(path: Path, program) -> None:
    _library(path, program)
    assert build_selftest(path, program).stat().st_size > 0


SWITCHES = ("kSplitK", "kClusterK", "kConsumers", "kClusterM", "kClusterN")  # 1 or more


def _switches(text: str) -> set[tuple[str, str]]:
    """The file's `constexpr bool` values, and whether each of SWITCHES is above 1."""
    ints = re.findall(rf"\b({'|'.join(SWITCHES)}) = (\d+)\b", text)
    return set(re.findall(r"constexpr bool (\w+) = (true|false);", text)) | {
        (name, str(int(value) > 1)) for name, value in ints}


def _cover(files: list) -> list:
    """A few files that between them take every switch both ways (each `if constexpr`
    path of kernel and launcher): greedy, the file that adds most first."""
    left, chosen = set().union(*(_switches(t) for _, _, t in files)), []
    while left:
        best = max(files, key=lambda f: len(_switches(f[2]) & left))
        chosen.append(best)
        left -= _switches(best[2])
    return chosen


def test_every_distinct_emitted_file_compiles_for_sm_90a(files):
    assert len(files) >= 100
    _build_all(files, _cubin)


def test_a_cover_of_the_emitted_files_builds_libraries_and_self_tests(files):
    cover = _cover(files)
    assert {"kLayoutNT", "kPingpong", "kPersistent", "kStreamK", "kSwapAB", "kPdl",
            "kEpiTma"} <= {name for _, _, t in cover
                           for name, _ in re.findall(r"constexpr bool (\w+) = (true)", t)}
    _build_all(cover, _library_and_selftest)
