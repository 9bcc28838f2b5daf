"""Bad arguments of every `gemmforge` subcommand, as rows of tests/fault_rows.py: each one
exit 2 with one line naming the argument. The table is generated from small lists (bad
numbers per numeric option, bad shapes, programs, storages and files per option that takes
them), so a new option gets its rows by joining a list. Files named here ({tmp}/...) are
made by fault_rows._files."""
from __future__ import annotations

from fault_row import Row

R = ("--replay", "synthetic")
TUNE = ("tune", "--shapes", "64x64x64", *R, "--storage", ":memory:", "--quiet", "--report", "")
EMIT = ("emit", "--shape", "64x64x64", "--arch", "sm_90a", "-o", "{tmp}/out")
VERIFY = ("verify", "cuda_mma sm_90a 16x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct")
BENCH = ("bench", "--shapes", "64x64x64", "--chosen")
TRAIN = ("train-policy", "--shapes", "64x64x64", *R, "--checkpoint", "{tmp}/p.pt")
LLM = ("train-llm", "--model", "{tmp}/adir", "--output", "{tmp}/adapter")
CAMPAIGN = ("campaign", "--storage", "{tmp}/c.db", "--shapes", "64x64x64", *R, "--quiet")
SHIP = ("ship", "--from", "{tmp}/empty.csv", "--command", "m", "--out", "{tmp}/s.json")

BAD_INT = ("abc", "1.5", "")
BAD_COUNT = ("0", "-1", *BAD_INT)          # options that must be >= 1
BAD_NONNEG = ("-1", *BAD_INT)              # options that may be 0
BAD_SECONDS = ("0", "-5", "nan", "abc")    # seconds > 0
BAD_SHAPES = ("64", "64x64", "64x64x64x64", "axbxc", "0x64x64", "64x0x64", "64x64x0",
              "1.5x2x3", "2000000x64x64", "64x64x64,abc", "grid:huge", "sample:abc",
              "sample:5:x", "sample:2000", "@{tmp}/missing", "@{tmp}/binary.txt", ",")
BAD_LAYOUT = ("xx", "tn", "")
BAD_ACC = ("f64", "bf16", "")
BAD_ARCH = ("sm_70", "sm_100", "")
PROGRAMS = {
    "garbage text": "garbage",
    "a lone brace": "{{",
    "empty JSON": "{{}}",
    "JSON of version 99": '{{"version": 99}}',
    "text cut short": "cuda_mma sm_90a",
    "a 7-row tile": "cuda_mma sm_90a 7x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct",
    "9 stages": "cuda_mma sm_90a 16x16x16 w1x1 s9 sw128 row/8 pred k1 dp c1x1 nows direct",
    "an unknown backend": "nosuch sm_90a 16x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct",
    "an sm_80 wgmma": "cuda_wgmma sm_80 128x128x64 w1x1 s4 sw128 row/8 pred k1 dp c1x1 coop tma",
    "@missing": "@{tmp}/missing",
    "@an empty file": "@{tmp}/empty.csv",
    "@a binary file": "@{tmp}/binary.txt",
}
STORAGES = {
    "empty": "",
    "foo://": "foo://",
    "not a URL": "not-a-url",
    "sqlite in /proc/nope": "sqlite:////proc/nope/t.db",
    "a 0-byte file": "sqlite:///{tmp}/empty.db",
    "a truncated database": "sqlite:///{tmp}/truncated.db",
    "a text file": "sqlite:///{tmp}/text.txt",
    "a folder": "sqlite:///{tmp}/adir",
    "postgresql without its driver": "postgresql+nosuchdriver://u@h/db",
}


def _numbers() -> list[Row]:
    """Each numeric option of each subcommand with values out of its range or not numbers."""
    spec = [
        (TUNE, "--budget", BAD_COUNT), (TUNE, "--batch", BAD_COUNT), (TUNE, "--gpus", ("abc",)),
        (TUNE, "--concurrent", BAD_COUNT), (TUNE, "--confirm", BAD_NONNEG),
        (TUNE, "--seed", BAD_INT), (TUNE, "--seconds", ("-5", "nan", "abc")),
        (BENCH, "--rounds", BAD_COUNT), (BENCH, "--device", ("-1", "abc")),
        (BENCH, "--sustained-seconds", BAD_SECONDS),
        (TRAIN, "--steps", BAD_COUNT), (TRAIN, "--device", ("-1", "abc")),
        (TRAIN, "--seed", BAD_INT),
        (LLM, "--steps", BAD_COUNT), (LLM, "--generations", ("0", "-1", "abc")),
        (LLM, "--lora-rank", ("0", "-1", "abc")), (LLM, "--per-problem", ("0", "abc")),
        (LLM, "--learning-rate", ("0", "-1", "abc")), (LLM, "--temperature", ("-1", "abc")),
        (LLM, "--large-share", ("-0.5", "1.5", "abc")), (LLM, "--save-steps", ("0", "abc")),
        (LLM, "--max-completion-length", ("0", "abc")),
        (CAMPAIGN, "--max-seconds", BAD_SECONDS), (CAMPAIGN, "--per-backend", ("-1", "abc")),
        (CAMPAIGN, "--per-shape", ("0", "-1", "abc")), (CAMPAIGN, "--chunk", ("0", "-1", "abc")),
        (CAMPAIGN, "--search-budget", ("-1", "abc")), (CAMPAIGN, "--search-batch", ("0", "abc")),
        (CAMPAIGN, "--top", ("0", "abc")), (CAMPAIGN, "--builders", ("0", "abc")),
        (CAMPAIGN, "--threshold", ("0", "-1", "abc")),
        (CAMPAIGN, "--sustained-seconds", ("0", "-1", "abc")),
        (CAMPAIGN, "--replay-delay", ("-1", "abc")), (CAMPAIGN, "--seed", ("abc",)),
    ]
    return [Row(f"{base[0]} {option} {value!r}", (*base, option, value), 2)
            for base, option, values in spec for value in values]


def _kinds() -> list[Row]:
    """Shapes, layouts, accumulators and archs wherever a subcommand takes them."""
    rows = []
    for base, option in ((TUNE[:1], "--shapes"), (("emit", "--arch", "sm_90a", "-o",
                                                     "{tmp}/out"), "--shape"),
                         (BENCH[:1] + ("--chosen",), "--shapes"),
                         (("train-policy", *R), "--shapes"),
                         (SHIP, "--shapes")):
        for shape in BAD_SHAPES[:9] if base[0] != "tune" else BAD_SHAPES:
            rows.append(Row(f"{base[0]} {option} {shape!r}", (*base, option, shape, *R[:0]), 2))
    for base in (TUNE, EMIT, (*VERIFY, "--shape", "64x64x64"), BENCH, TRAIN, CAMPAIGN):
        for option, values in (("--layout", BAD_LAYOUT), ("--acc", BAD_ACC)):
            for value in values:
                rows.append(Row(f"{base[0]} {option} {value!r}", (*base, option, value), 2))
    for base in (EMIT[:3] + EMIT[5:], BENCH, TRAIN):
        for arch in BAD_ARCH:
            rows.append(Row(f"{base[0]} --arch {arch!r}", (*base, "--arch", arch), 2))
    return rows


def _programs() -> list[Row]:
    rows = []
    for what, text in PROGRAMS.items():
        rows.append(Row(f"emit --program {what}", (*EMIT, "--program", text), 2))
        rows.append(Row(f"verify {what}", ("verify", text), 2))
        rows.append(Row(f"bench --program {what}", ("bench", "--shapes", "64x64x64",
                                                     "--program", text), 2))
    return rows


def _storages() -> list[Row]:
    rows = [Row(f"tune --storage {what}", (*TUNE[:5], "--storage", url), 2)
            for what, url in STORAGES.items()]
    rows += [Row(f"tune --quick --storage {what}", ("tune", "--quick", "--shapes", "64x64x64",
                                                   *R, "--storage", url), 2)
             for what, url in STORAGES.items() if what != "empty"]
    for what, path in (("a 0-byte file", "{tmp}/empty.db"),
                       ("a truncated database", "{tmp}/truncated.db"),
                       ("a text file", "{tmp}/text.txt"), ("a folder", "{tmp}/adir"),
                       ("in a missing folder", "{tmp}/missing/c.db"), ("empty", "")):
        rows.append(Row(f"campaign --storage {what}", ("campaign", "--storage", path, *R,
                                                       "--quiet"), 2))
        rows.append(Row(f"campaign --status --storage {what}", ("campaign", "--storage", path,
                                                                "--status"), 2))
    rows.append(Row("campaign --status on a missing file",
                    ("campaign", "--storage", "{tmp}/none.db", "--status"), 2))
    return rows


def _others() -> list[Row]:
    """One-off refusals: options that need another, files that are folders, and so on."""
    q = ("tune", "--quick", "--shapes", "64x64x64", *R)
    rows = [Row(f"tune --quick {o}", (*q, o, v), 2) for o, v in (
        ("--budget", "5"), ("--batch", "4"), ("--policy", "random"), ("--seconds", "9"),
        ("--confirm", "2"), ("--protocols", "kernel"), ("--gpus", "1"))]
    rows += [Row(f"tune {o} without --policy llm", (*TUNE, o, v), 2) for o, v in (
        ("--llm-url", "http://127.0.0.1:1"), ("--llm-model", "m"), ("--llm-dataset", "d.jsonl"),
        ("--llm-adapter", "a"), ("--llm-engine", "transformers"), ("--llm-reply", "text"),
        ("--llm-timeout", "5"))]
    rows += [
        Row("tune --checkpoint without --policy learned", (*TUNE, "--checkpoint", "{tmp}/p.pt"), 2),
        Row("tune --checkpoint garbage", (*TUNE, "--policy", "learned", "--checkpoint",
                                          "{tmp}/binary.txt"), 2),
        Row("tune --checkpoint in a missing folder", (*TUNE, "--policy", "learned",
                                                      "--checkpoint", "{tmp}/no/p.pt"), 2),
        Row("tune --policy nosuch", (*TUNE, "--policy", "nosuch"), 2),
        Row("tune --policy llm without a server or model", (*TUNE, "--policy", "llm"), 2),
        Row("tune --llm-endpoint completions without --llm-url",
            (*TUNE, "--policy", "llm", "--llm-model", "m", "--llm-endpoint", "completions"), 2),
        Row("tune --protocols \"\"", (*TUNE, "--protocols", ""), 2),
        Row("tune --protocols cold", (*TUNE, "--protocols", "cold"), 2),
        Row("tune --backends \"\"", (*TUNE, "--backends", ","), 2),
        Row("tune --report a/b", (*TUNE[:-1], "a/b"), 2),
        Row("tune --report-dir a file", (*TUNE[:-2], "--report", "r", "--report-dir",
                                         "{tmp}/text.txt"), 2),
        Row("tune --replay a folder", (*TUNE[:3], "--replay", "{tmp}/adir"), 2),
        Row("tune --replay a text file", (*TUNE[:3], "--replay", "{tmp}/text.txt"), 2),
        Row("tune --replay a binary file", (*TUNE[:3], "--replay", "{tmp}/binary.txt"), 2),
        Row("tune without --shapes", ("tune", *R), 2),
        Row("emit without --arch", ("emit", "--shape", "64x64x64", "-o", "{tmp}/o"), 2),
        Row("emit without -o", ("emit", "--shape", "64x64x64", "--arch", "sm_90a"), 2),
        Row("emit -o \"\"", (*EMIT[:-1], ""), 2),
        Row("emit -o a file", (*EMIT[:-1], "{tmp}/text.txt"), 2),
        Row("emit --device-class a10", (*EMIT, "--device-class", "a10"), 2),
        Row("emit --device-class \"\"", (*EMIT, "--device-class", ""), 2),
        Row("emit --device-class synthetic", (*EMIT, "--device-class", "synthetic"), 2),
        Row("emit --device-class H 100", (*EMIT, "--device-class", "H 100"), 2),
        Row("emit a triton --program", (*EMIT, "--program", "triton sm_90a 128x128x64 w2x2 s3 "
                                        "sw128 row/8 pred k1 dp c1x1 nows direct"), 2),
        Row("emit an sm_80 --program with --arch sm_90a", (*EMIT, "--program", "cuda_mma sm_80 "
            "16x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct"), 2),
        Row("verify --layout xx without --shape", (*VERIFY, "--layout", "xx"), 2),
        Row("verify --layout nt without --shape", (*VERIFY, "--layout", "nt"), 2),
        Row("verify --acc f16 without --shape", (*VERIFY, "--acc", "f16"), 2),
        Row("verify a 2^32-CTA grid", (*VERIFY, "--shape", "1048576x1048576x16"), 2),
        Row("verify \"\"", ("verify", ""), 2),
        Row("schema --bogus", ("schema", "--bogus"), 2),
        Row("no subcommand", (), 2),
        Row("an unknown subcommand", ("frobnicate",), 2),
        Row("bench --twins nosuch", (*BENCH, "--twins", "nosuch"), 2),
        Row("bench --protocols \"\"", (*BENCH, "--protocols", ""), 2),
        Row("bench --name a/b", (*BENCH, "--name", "a/b"), 2),
        Row("bench --report-dir a file", (*BENCH, "--report-dir", "{tmp}/text.txt"), 2),
        Row("bench without --shapes", ("bench", "--chosen"), 2),
        Row("train-policy --backends nosuch", (*TRAIN, "--backends", "nosuch"), 2),
        Row("train-policy --checkpoint a folder", (*TRAIN[:-1], "{tmp}/adir"), 2),
        Row("train-policy --checkpoint in a missing folder", (*TRAIN[:-1], "{tmp}/no/p.pt"), 2),
        Row("train-policy --replay missing", ("train-policy", "--shapes", "64x64x64",
                                              "--replay", "{tmp}/missing.csv"), 2),
        Row("train-llm --output a file", (*LLM[:3], "--output", "{tmp}/text.txt"), 2),
        Row("train-llm --model missing folder", ("train-llm", "--model", "{tmp}/nomodel",
                                                 *LLM[3:]), 2),
        Row("campaign --passes bogus", (*CAMPAIGN, "--passes", "bogus"), 2),
        Row("campaign --incumbents bogus", (*CAMPAIGN, "--incumbents", "bogus"), 2),
        Row("campaign --backends nosuch", (*CAMPAIGN, "--backends", "nosuch"), 2),
        Row("campaign --policy nosuch", (*CAMPAIGN, "--policy", "nosuch"), 2),
        Row("campaign --portfolio bogus", (*CAMPAIGN, "--portfolio", "bogus"), 2),
        Row("campaign --portfolio huge=missing", (*CAMPAIGN, "--portfolio",
                                                  "huge={tmp}/missing"), 2),
        Row("campaign --twins nosuch", (*CAMPAIGN, "--twins", "nosuch"), 2),
        Row("campaign --shapes bad", (*CAMPAIGN[:3], "--shapes", "64x64", *R), 2),
        Row("campaign --report a/b", ("campaign", "--storage", "{tmp}/c.db", "--report", "a/b"), 2),
        Row("campaign --shipped-only without --report", (*CAMPAIGN, "--shipped-only"), 2),
        Row("campaign --replay missing", (*CAMPAIGN[:5], "--replay", "{tmp}/missing.csv"), 2),
        Row("ship --from missing", ("ship", "--from", "{tmp}/missing.csv", *SHIP[3:]), 2),
        Row("ship --command \"\"", (*SHIP[:3], "--command", " ", *SHIP[5:]), 2),
        Row("ship --out /proc/nope/s.json", (*SHIP[:-2], "--out", "/proc/nope/s.json"), 2),
        Row("ship --out a folder", (*SHIP[:-2], "--out", "{tmp}/adir"), 2),
        Row("ship --out \"\"", (*SHIP[:-2], "--out", ""), 2),
        Row("ship --device-class \"\"", (*SHIP, "--device-class", ""), 2),
        Row("ship --shape-classes huge", (*SHIP, "--shape-classes", "huge"), 2),
        Row("ship --rank-by bogus", (*SHIP, "--rank-by", "bogus"), 2),
        Row("ship without --command", (*SHIP[:3], *SHIP[5:]), 2),
    ]
    return rows


ROWS = [*_numbers(), *_kinds(), *_programs(), *_storages(), *_others()]
