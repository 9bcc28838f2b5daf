"""Bad GEMMFORGE_* environment settings, as rows of tests/fault_rows.py: each one exit 2
with one line naming the setting, whichever subcommand reads it (compiler.knobs declares
them all; the command line checks them before any work)."""
from __future__ import annotations

from fault_row import Row

R = ("--replay", "synthetic")
COMMANDS = {
    "emit": ("emit", "--shape", "64x64x64", "--arch", "sm_90a", "-o", "{tmp}/out"),
    "verify": ("verify", "cuda_mma sm_90a 16x16x16 w1x1 s2 sw128 row/8 pred k1 dp c1x1 nows direct"),
    "tune": ("tune", "--shapes", "64x64x64", *R, "--storage", ":memory:", "--quiet",
             "--report", ""),
    "schema": ("schema",),
}
SWITCHES = ("GEMMFORGE_PDL", "GEMMFORGE_TORCH_OP", "GEMMFORGE_TRITON_DIRECT_LAUNCH",
            "GEMMFORGE_TRITON_RAW_LAUNCH", "GEMMFORGE_TRITON_DESCRIPTOR_CACHE", "GEMMFORGE_DEBUG")
BAD = {
    **{name: ("abc", "2", "yes") for name in SWITCHES},
    "GEMMFORGE_BUILD_TIMEOUT": ("abc", "0", "-1", "nan"),
    "GEMMFORGE_NVCC_THREADS": ("abc", "-1", "1.5"),
    "GEMMFORGE_TUNE_DB": ("foo", "not a url"),
    "GEMMFORGE_SHIPPED": ("/nonexistent.json", "{tmp}/adir", "{tmp}/text.txt",
                          "{tmp}/binary.txt"),
    "GEMMFORGE_CUDA_WGMMA_TEMPLATES": ("/nonexistent", "{tmp}/text.txt"),
    "GEMMFORGE_CUTLASS_DIR": ("/nonexistent", "{tmp}/text.txt"),
    "GEMMFORGE_CACHE_DIR": ("{tmp}/text.txt",),
    "GEMMFORGE_DUMP": ("{tmp}/text.txt",),
}
ONLY = {"GEMMFORGE_DEBUG": ("verify",)}  # GEMMFORGE_DEBUG=1 changes output, not the check


def _rows() -> list[Row]:
    rows = []
    for name, values in BAD.items():
        for value in values:
            for command, argv in COMMANDS.items():
                if command in ONLY.get(name, (command,)):
                    rows.append(Row(f"{name}={value} with {command}", argv, 2,
                                    env={name: value}))
    rows += [
        Row("GEMMFORGE_TUNE_DB=foo:// with emit", COMMANDS["emit"], 2,
            env={"GEMMFORGE_TUNE_DB": "foo://"}),
        Row("GEMMFORGE_TUNE_DB=foo:// with tune (no --storage)", ("tune", "--shapes",
            "64x64x64", *R, "--quiet", "--report", ""), 2, env={"GEMMFORGE_TUNE_DB": "foo://"}),
        Row("GEMMFORGE_TUNE_DB a 0-byte file with emit: named, skipped", COMMANDS["emit"], 0,
            r"^gemmforge: tuned database", env={"GEMMFORGE_TUNE_DB": "sqlite:///{tmp}/empty.db"}),
        Row("GEMMFORGE_TUNE_DB a truncated database with emit: named, skipped",
            COMMANDS["emit"], 0, r"^gemmforge: tuned database",
            env={"GEMMFORGE_TUNE_DB": "sqlite:///{tmp}/truncated.db"}),
        Row("GEMMFORGE_TUNE_DB a missing file with emit: named, skipped", COMMANDS["emit"], 0,
            r"^gemmforge: tuned database",
            env={"GEMMFORGE_TUNE_DB": "sqlite:///{tmp}/missing.db"}),
        Row("GEMMFORGE_TUNE_DB a 0-byte file with tune", ("tune", "--shapes", "64x64x64", *R,
            "--quiet", "--report", ""), 2,
            env={"GEMMFORGE_TUNE_DB": "sqlite:///{tmp}/empty.db"}),
    ]
    return rows


ROWS = _rows()
