"""A wheel built from the tree holds every data file the package reads at run time: the
shipped programs, the ranker models, the replay and prompt data, the program schema, every
template and the torch op's C++ source (a non-editable install has nothing else)."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder in the tree -> its name inside the wheel (pyproject.toml's package-dir)
PACKAGE_DIRS = {"gemmforge": "gemmforge", "ir": "gemmforge/ir", "backends": "gemmforge/backends",
                "compiler": "gemmforge/compiler", "policy": "gemmforge/policy",
                "dispatch": "gemmforge/dispatch", "search": "gemmforge/search"}
DATA_SUFFIXES = (".json", ".jinja", ".txt", ".csv", ".gz", ".xz", ".cpp")


def _data_files() -> set[str]:
    """Every data file of the package folders, as its path inside the wheel."""
    out = set()
    for folder, inside in PACKAGE_DIRS.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.name.endswith(DATA_SUFFIXES) and "__pycache__" not in path.parts:
                out.add(f"{inside}/{path.relative_to(ROOT / folder).as_posix()}")
    return out


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory) -> tuple[set[str], str]:
    """The wheel's file names, and the build's output (-v: setuptools' warnings in it)."""
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-v", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "TMPDIR": str(build)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("gemmforge-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist()), proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel_names(wheel_build) -> set[str]:
    return wheel_build[0]


def test_the_build_names_every_folder_it_installs(wheel_build):
    """Every folder the wheel takes files from is in pyproject.toml's packages: setuptools
    warns of none left out (it would warn once per data folder, on every install)."""
    absent = [line.strip() for line in wheel_build[1].splitlines()
              if "is absent from the `packages` configuration" in line]
    assert not absent, absent


def test_the_wheel_holds_every_data_file(wheel_names):
    wanted = _data_files()
    assert wanted, "no data files found in the tree"
    missing = sorted(wanted - wheel_names)
    assert not missing, f"not in the wheel: {missing}"


def test_the_files_the_runtime_reads_by_name_are_there(wheel_names):
    for name in ("gemmforge/dispatch/data/shipped.json.gz",
                 "gemmforge/dispatch/data/ranker_h100.json.gz",
                 "gemmforge/dispatch/data/ranker_h100_nt.json.gz",
                 "gemmforge/search/data/measured_gpu.csv.xz", "gemmforge/ir/program.schema.json",
                 "gemmforge/csrc/gemmforge_op.cpp",
                 "gemmforge/backends/templates/selftest.cuh.jinja",
                 "gemmforge/backends/templates/layout_entry.cuh.jinja"):
        assert name in wheel_names, name
