"""Optional dependencies and the pip extra that installs each.

    optuna = require("optuna")        # ModuleNotFoundError: ... pip install 'gemmforge[search]'

`require` imports a module of an optional extra, or raises ModuleNotFoundError whose
message names the extra; `install_hint` turns any ModuleNotFoundError into that hint (the
CLI prints it as its one line)."""
from __future__ import annotations

from importlib import import_module
from types import ModuleType

EXTRAS = {
    "optuna": "search", "sqlalchemy": "search", "matplotlib": "search", "psycopg": "search",
    "sklearn": "search",
    "triton": "triton", "vllm": "llm", "torch": "torch", "cutlass": "cute-dsl",
    "cutlass_library": "cutlass",
}


def install_hint(error: ModuleNotFoundError) -> str | None:
    """'<module> is not installed: pip install 'gemmforge[<extra>]'' when `error` is about a
    module of an optional extra, else None."""
    root = (error.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    return f"{root} is not installed: pip install 'gemmforge[{extra}]'"


def require(module: str) -> ModuleType:
    """`import_module(module)`, or ModuleNotFoundError naming the extra to install."""
    try:
        return import_module(module)
    except ModuleNotFoundError as e:
        hint = install_hint(e)
        if hint is None or e.name.split(".")[0] != module.split(".")[0]:
            raise
        raise ModuleNotFoundError(hint, name=e.name) from e
