"""policy.cases: the heuristic's measured special cases as one table, and the heuristic's
first proposals pinned over a sample of problems (tests/data/heuristic_first_proposals.txt)."""
import pathlib
import re

import pytest

from gemmforge.ir import Arch, parse_problem
from gemmforge.ir.text import parse
from gemmforge.policy import cases
from gemmforge.policy.heuristic import HeuristicPolicy

DATA = pathlib.Path(__file__).parent / "data"
NOTES = pathlib.Path(__file__).parent.parent / "benchmarks" / "NOTES.md"
GOLDEN = [tuple(part.strip() for part in line.split("|"))
          for line in (DATA / "heuristic_first_proposals.txt").read_text().splitlines()
          if line and not line.startswith("#")]


@pytest.mark.parametrize("shape, backend, arch, first", GOLDEN)
def test_first_proposal_is_pinned(shape, backend, arch, first):
    got = HeuristicPolicy(backend).propose(parse_problem(shape), Arch(arch), 1)
    assert (str(got[0]) if got else "-") == first


def test_every_case_is_named_once_and_its_programs_parse():
    names = [case.name for case in cases.CASES]
    assert len(names) == len(set(names))
    for case in cases.CASES:
        assert case.programs, case.name
        for text in case.programs:
            for pad in ("pred", "padop"):
                assert str(parse(text.format(pad=pad))) == text.format(pad=pad), case.name


def test_every_case_names_a_notes_section_that_exists():
    headings = {line.lstrip("#").strip() for line in NOTES.read_text().splitlines()
                if line.startswith("## ")}
    for case in cases.CASES:
        cited = re.findall(r"benchmarks/NOTES\.md, ([^:;]+?)(?:[:;,]|$)", case.evidence)
        assert cited, case.name
        for section in cited:
            assert any(h.startswith(section) for h in headings), (case.name, section)


@pytest.mark.parametrize("shape, names", [
    ("16384x16384x128", {"output-bound", "large-seeds"}),
    ("2048x12288x64 nt", {"output-bound-pdl", "deep-ring-wide", "many-tiles"}),
    ("2048x256x16384", {"long-k-split-32", "large-seeds"}),
    ("12288x128x2048", {"stream-n128", "deep-ring-wide", "long-k-128-deep-wide"}),
    ("40x4096x4096 nt", {"swap-48-split", "few-tiles-k2", "deep-ring"}),
    ("40x14336x1024 nt", {"swap-48", "deep-ring-wide", "stream-m128-128"}),
    ("12288x8192x1024", {"192-rows", "large-seeds"}),
])
def test_cases_apply_by_their_conditions(shape, names):
    assert {case.name for case in cases.applying(parse_problem(shape))} == names


def test_when_ranges_are_inclusive_and_unless_excludes():
    when = cases.When(m=(9, 16), tiles=cases.Tiles(64, 64, (1, 1)))
    assert [when.holds(parse_problem(f"{m}x64x64")) for m in (8, 9, 16, 17)] == \
        [False, True, True, False]
    assert not when.holds(parse_problem("16x65x64"))  # two 64x64 tiles
    case = cases.Case("c", ("x",), cases.When(), "e", unless=cases.When(k=(None, 64)))
    assert not case.holds(parse_problem("16x16x64")) and case.holds(parse_problem("16x16x65"))


def test_pad_placeholder_follows_tma_alignment():
    assert "padop" in cases.programs(parse_problem("17x33x65 nn"))[0]
    assert " pred " in cases.programs(parse_problem("64x64x64 nn"))[0]
