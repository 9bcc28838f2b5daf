#!/usr/bin/env bash
# Set up a virtual environment and run the CPU test tier (README: "Run the tests").
# GEMMFORGE_TEST_INSTALL=copy installs the package as a regular (non-editable) copy, so the
# suite runs against what `pip install .` puts in site-packages, not the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch 2.13.0 is the CPU build these machines keep on disk; an unpinned torch pulls CUDA
if [ "${GEMMFORGE_TEST_INSTALL:-editable}" = copy ]; then
  python -m pip install -q "torch==2.13.0" ".[triton,search,test,cutlass]"
else
  python -m pip install -q "torch==2.13.0" -e ".[triton,search,test,cutlass]"
fi
# PostgreSQL server for tests/test_postgres.py (it starts a private server and skips, saying
# why, when it can't): Debian's package, installed as root where no server binary exists.
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql \
      >/dev/null) || echo "could not install postgresql: tests/test_postgres.py will skip" >&2
  else
    echo "no PostgreSQL server and not root: tests/test_postgres.py will skip" >&2
  fi
fi
# `pytest`, not `python -m pytest`: the latter puts the repository root on sys.path, where
# the folder gemmforge/ (the package's face alone) would shadow the installed package.
pytest -q -m "not gpu" "$@"
