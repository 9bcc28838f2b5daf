"""Every bad input and fault the `gemmforge` command is tried with, and what it must answer:
the exit code and the one line. tests/test_faults.py runs each row; docs/errors.md is this
table as it ran, and the tests check that the two agree. After changing a message:

    python tests/fault_rows.py          # runs every row, rewrites docs/errors.md

A row runs in this process (main(argv), torch made to see no GPU) or, for signals and
kill -9, as tests/slow_tune.py in a child process. Lines are shown with the temporary
folder as <tmp>, ports as <port>, and, where a row says so, counts as N.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import fault_table_cli
import fault_table_env
from fault_row import Row

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "errors.md"
T = ("tune", "--shapes", "64x64x64", "--replay", "synthetic", "--storage", ":memory:",
     "--quiet", "--report", "")
LLM = (*T, "--budget", "4", "--batch", "2", "--policy", "llm", "--llm-url", "{url}")
SLOW = ("tune", "--shapes", "64x64x64", "--replay", "synthetic", "--storage",
        "sqlite:///{tmp}/slow.db", "--quiet", "--report", "", "--budget", "16", "--batch", "4",
        "--backends", "cuda_mma", "--seed", "0")


ROWS = [
    Row("tune --backends nosuch", (*T, "--backends", "nosuch"), 2),
    Row("bench --backends nosuch", ("bench", "--shapes", "64x64x64", "--backends", "nosuch"), 2),
    Row("--shapes @missing", ("tune", "--shapes", "@{tmp}/missing", "--replay", "synthetic"), 2),
    Row("--shapes @binary file", ("tune", "--shapes", "@{tmp}/binary.txt"), 2),
    Row("--shapes \" \" (empty)", ("tune", "--shapes", " ", "--replay", "synthetic"), 2),
    Row("train-policy --shapes \" \"", ("train-policy", "--shapes", " ", "--replay",
                                         "synthetic"), 2),
    Row("--shapes -1x2x3", ("tune", "--shapes", "-1x2x3", "--replay", "synthetic"), 2),
    Row("--shapes sample:0", ("tune", "--shapes", "sample:0", "--replay", "synthetic"), 2),
    Row("emit --shape -1x2x3", ("emit", "--shape", "-1x2x3", "--arch", "sm_80", "-o", "{tmp}"), 2),
    Row("--replay missing.csv", (*T[:3], "--replay", "{tmp}/missing.csv"), 2),
    Row("--replay on an empty file", (*T[:3], "--replay", "{tmp}/empty.csv"), 2),
    Row("--budget 0", (*T, "--budget", "0"), 2),
    Row("--budget -5", (*T, "--budget", "-5"), 2),
    Row("--batch 0", (*T, "--batch", "0"), 2),
    Row("--seconds 0", (*T, "--seconds", "0"), 2),
    Row("--gpus 0", (*T, "--gpus", "0"), 2),
    Row("--gpus -1", (*T, "--gpus", "-1"), 2),
    Row("--llm-timeout 0", (*T, "--llm-timeout", "0"), 2),
    Row("--llm-endpoint bogus", (*T, "--llm-endpoint", "bogus"), 2),
    Row("--llm-examples replay without --policy llm", (*T, "--llm-examples", "replay"), 2),
    Row("--storage foo://", (*T[:6], "foo://"), 2),
    Row("--storage in a folder that does not exist", (*T[:6], "sqlite:////proc/nope/t.db"), 2),
    Row("--storage a dead PostgreSQL", (*T[:6], "postgresql+psycopg://gf@127.0.0.1:1/gf"), 1),
    Row("GEMMFORGE_BUILD_TIMEOUT=abc", T, 2, env={"GEMMFORGE_BUILD_TIMEOUT": "abc"}),
    Row("emit -o /proc/nope", ("emit", "--shape", "64x64x64", "--arch", "sm_80", "-o",
                               "/proc/nope"), 2),
    Row("emit --program \"\"", ("emit", "--shape", "64x64x64", "--arch", "sm_80", "--program",
                                "", "-o", "{tmp}"), 2),
    Row("emit --dtype bf17", ("emit", "--shape", "64x64x64", "--arch", "sm_80", "--dtype", "bf17",
                              "-o", "{tmp}"), 2),
    Row("emit --dtype bf16 --acc f16", ("emit", "--shape", "64x64x64", "--arch", "sm_80",
                                        "--dtype", "bf16", "--acc", "f16", "-o", "{tmp}"), 2),
    Row("bench --dtype bf17", ("bench", "--shapes", "64x64x64", "--chosen", "--dtype", "bf17"), 2),
    Row("tune --dtype bf17", (*T, "--dtype", "bf17"), 2),
    Row("tune --quick --dtype bf16 --acc f16", ("tune", "--quick", "--shapes", "64x64x64",
                                                "--replay", "synthetic", "--dtype", "bf16",
                                                "--acc", "f16"), 2),
    Row("tune without a GPU", ("tune", "--shapes", "64x64x64"), 2),
    Row("tune --quick without a GPU", ("tune", "--quick", "--shapes", "77x4096x4096"), 2),
    Row("bench without a GPU", ("bench", "--shapes", "64x64x64", "--backends", "cuda_mma"), 2),
    Row("bench --twins raster", ("bench", "--shapes", "64x64x64", "--chosen", "--twins", "raster"), 2),
    Row("bench --protocols kernel,later", ("bench", "--shapes", "64x64x64", "--chosen",
                                            "--protocols", "kernel,later"), 2),
    Row("ship --shapes @missing", ("ship", "--from", "{tmp}/empty.csv", "--shapes", "@{tmp}/missing",
                                   "--command", "m"), 2),
    Row("GEMMFORGE_PDL=0 with emit: the line says pdl is off", ("emit", "--shape", "1024x1024x1024",
        "--arch", "sm_90a", "-o", "{tmp}"), 0, r"pdl off", env={"GEMMFORGE_PDL": "0"}),
    Row("train-policy without a GPU", ("train-policy", "--shapes", "64x64x64", "--checkpoint",
                                       "{tmp}/p.pt"), 2),
    Row("a misspelt option", (*T, "--budgte", "3"), 2),
    Row("--policy llm, no server listening", LLM, 0, r"llm: a proposal failed", llm="dead"),
    Row("--policy llm, HTTP 500", LLM, 0, r"llm: a proposal failed", llm="http500"),
    Row("--policy llm, reply not JSON", LLM, 0, r"llm: a proposal failed", llm="not_json"),
    Row("--policy llm, wrong schema", LLM, 0, r"llm: a proposal failed", llm="wrong_schema"),
    Row("--policy llm, connection dropped", LLM, 0, r"llm: a proposal failed", llm="drop"),
    Row("--policy llm, `choices` not objects", LLM, 0, r"llm: a proposal failed",
        llm="non_object_choices"),
    Row("--policy llm, every proposal fails", LLM, 0, r"^WARNING: every", llm="http500"),
    Row("--policy llm, server slower than --llm-timeout", (*LLM, "--llm-timeout", "1"), 0,
        r"llm: a proposal failed", llm="stall"),
    Row("--policy llm, a 30 s stall (notice)", (*LLM, "--llm-timeout", "20"), 0,
        r"no reply from the sampler", llm="stall",
        patch={"gemmforge.policy.llm.STALL_NOTICE_S": 0.5}),
    Row("--policy llm, working server", LLM, 0, r"^llm policy: ", llm="ok"),
    Row("Ctrl-C (SIGINT) during tune", SLOW, 130, r"^gemmforge: interrupted", signal="SIGINT"),
    Row("SIGTERM during tune", SLOW, 143, r"^gemmforge: interrupted", signal="SIGTERM"),
    Row("rerun after kill -9", SLOW, 0, r"^re-queued", signal="kill9",
        counts=r"(?<=re-queued )\d+"),
]
ROWS += [*fault_table_cli.ROWS, *fault_table_env.ROWS]  # the generated tables


OLD_S = 3600  # an empty database file this old is not one another process is creating


def _files(tmp: Path) -> None:
    """The files and folders rows name: {tmp}/binary.txt, empty.csv, text.txt, empty.db (0
    bytes, an hour old), truncated.db (an SQLite file cut short), adir/."""
    (tmp / "binary.txt").write_bytes(bytes(range(128, 256)) * 4)
    (tmp / "empty.csv").write_text("")
    (tmp / "text.txt").write_text("not a database\n" * 64)
    (tmp / "adir").mkdir(exist_ok=True)
    empty = tmp / "empty.db"
    empty.write_bytes(b"")
    os.utime(empty, (time.time() - OLD_S, time.time() - OLD_S))
    _truncated(tmp / "truncated.db")


def _truncated(path: Path) -> None:
    """An SQLite database of several pages, cut to its first two pages."""
    if path.exists():
        return
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
        conn.commit()
    data = path.read_bytes()
    path.write_bytes(data[:2 * 4096])


def normalize(line: str, tmp: Path, counts: str = "") -> str:
    line = line.replace(str(tmp), "<tmp>")
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", line)
    line = re.sub(r"registered backend \(one of [^)]*\)",
                  "registered backend (one of <the registered backends>)", line)
    return re.sub(counts, "N", line) if counts else line


def pick(row: Row, err: str, out: str) -> str:
    """The row's documented line: the first line of stderr, then stdout, matching row.pick."""
    for line in (err + "\n" + out).splitlines():
        if re.search(row.pick, line):
            return line.rstrip()
    return ""


def _argv(row: Row, tmp: Path, url: str = "") -> list[str]:
    return [a.format(tmp=tmp, url=url) for a in row.argv]


def run_here(row: Row, tmp: Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the row run in this process with no GPU visible."""
    import fake_llm
    from gemmforge.cli import main
    _files(tmp)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, {k: v.format(tmp=tmp) for k, v in
                                                         row.env.items()}))
        stack.enter_context(mock.patch("torch.cuda.is_available", lambda: False))
        for target, value in row.patch.items():
            stack.enter_context(mock.patch(target, value))
        url = ""
        if row.llm == "dead":
            url = fake_llm.DEAD_URL
        elif row.llm:
            url = stack.enter_context(fake_llm.FakeLLM(row.llm, _program_json())).url
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(_argv(row, tmp, url))
            except SystemExit as e:  # argparse's own exits
                code = e.code
    return code, out.getvalue(), err.getvalue()


def _program_json() -> dict:
    from gemmforge.ir import Arch, Problem, to_json
    from gemmforge.policy.heuristic import HeuristicPolicy
    return to_json(HeuristicPolicy().propose(Problem(64, 64, 64), Arch.SM90A, 1)[0])


def trial_counts(db: Path) -> dict[str, int]:
    """Trials by state in an optuna SQLite file (empty before it exists)."""
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        try:
            return dict(conn.execute("SELECT state, count(*) FROM trials GROUP BY state"))
        except sqlite3.Error:
            return {}


def start_slow(row: Row, tmp: Path, delay_s: float = 0.05) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "slow_tune.py"), str(delay_s),
                             *_argv(row, tmp)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp)


def wait_mid_batch(db: Path, proc: subprocess.Popen, least: int, timeout_s: float = 120) -> None:
    """Until `least` trials are measured and some are RUNNING (or the process ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        counts = trial_counts(db)
        if counts.get("COMPLETE", 0) >= least and counts.get("RUNNING", 0):
            return
        time.sleep(0.05)
    raise AssertionError(f"no batch in flight: {trial_counts(db)}, exit {proc.poll()}")


def run_signal(row: Row, tmp: Path) -> tuple[int, str, str]:
    """A slow tune stopped by row.signal mid-batch; for "kill9", the rerun's result."""
    _files(tmp)
    proc = start_slow(row, tmp)
    wait_mid_batch(tmp / "slow.db", proc, least=4)
    sig = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "kill9": signal.SIGKILL}
    proc.send_signal(sig[row.signal])
    out, err = proc.communicate(timeout=120)
    if row.signal != "kill9":
        return proc.returncode, out, err
    rerun = start_slow(row, tmp, delay_s=0.0)
    out, err = rerun.communicate(timeout=120)
    return rerun.returncode, out, err


def run(row: Row, tmp: Path) -> tuple[int, str, str, str]:
    """(exit code, documented line, stdout, stderr) of a row."""
    code, out, err = (run_signal if row.signal else run_here)(row, tmp)
    return code, normalize(pick(row, err, out), tmp, row.counts), out, err


def render(results: list[tuple[Row, int, str]], api_results: list, api_tmp: Path) -> str:
    lines = [
        "# Bad input and faults: exit code and the line printed",
        "",
        "Generated by `python tests/fault_rows.py` from tests/fault_rows.py, whose rows",
        "tests/test_faults.py runs and checks against this table (so it cannot drift).",
        "Exit codes: 0 done, 1 a runtime failure (its cause in one line), 2 bad input (the",
        "argument named, before any work), 130/143 stopped by SIGINT/SIGTERM after printing",
        "what finished. No traceback unless `--debug` or GEMMFORGE_DEBUG=1. An LLM row exits",
        "0: the run goes on with the optuna sampler and the summary counts each failure",
        "reason. `<tmp>`: the test's folder; `N`: a count that varies between runs.",
        "",
        "| tried | exit | line printed |",
        "| --- | --- | --- |",
    ]
    for row, code, line in results:
        cell = line.replace("|", "\\|")
        lines.append(f"| {row.what.replace('|', chr(92) + '|')} | {code} | `{cell}` |")
    lines += ["", "## Python API", "",
              "Each call raises one exception whose message names the argument and what is",
              "expected (tests/fault_table_api.py; tests/test_fault_api.py checks this table).",
              "", "| call | raises | message |", "| --- | --- | --- |"]
    for row, kind, message in api_results:
        cell = normalize(message, api_tmp).replace("|", "\\|")
        lines.append(f"| {row.what} | {kind} | `{cell}` |")
    return "\n".join(lines) + "\n"


def documented_api() -> dict[str, tuple[str, str]]:
    """docs/errors.md's Python API rows: what -> (exception class name, message)."""
    text = DOC.read_text()
    section = text.split("## Python API", 1)[-1] if "## Python API" in text else ""
    out = {}
    for line in section.splitlines():
        m = re.match(r"^\| (.+?) \| ([A-Za-z]+) \| `(.*)` \|$", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3).replace("\\|", "|"))
    return out


def documented() -> dict[str, tuple[int, str]]:
    """docs/errors.md's rows: what -> (exit code, line)."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\| (.+?) \| (\d+) \| `(.*)` \|$", line)
        if m:
            out[m.group(1).replace("\\|", "|")] = (int(m.group(2)),
                                                   m.group(3).replace("\\|", "|"))
    return out


if __name__ == "__main__":
    import tempfile
    sys.path.insert(0, str(HERE))
    results = []
    for row in ROWS:
        with tempfile.TemporaryDirectory() as tmp:
            code, line, _, _ = run(row, Path(tmp))
        print(f"{code:4d}  {row.what}: {line}", file=sys.stderr)
        results.append((row, code, line))
    import fault_table_api
    with tempfile.TemporaryDirectory() as tmp:
        api = [(row, *fault_table_api.run(row, Path(tmp))) for row in fault_table_api.ROWS]
        DOC.write_text(render(results, api, Path(tmp)))
    print(f"wrote {DOC}", file=sys.stderr)
