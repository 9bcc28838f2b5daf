"""The compiler pipeline: verify → lower → build → load, as named stages.

It lives with the backends, not in the toolchain (`compiler/`), because it looks each
program's backend up in the registry: the toolchain sits below the backends and never
imports them.

    artifact = compile(program, problem, Target(90))
    kernel = load(artifact)            # or: kernel = compile_and_load(...)

Set GEMMFORGE_DUMP=dir to write every stage's output to dir/<kernel name>/<stage>.*
(the verified dataflow, the lowered files, the artifact record). Builds are cached
(compiler.artifacts); a cache hit skips the build stage.
"""
from __future__ import annotations

from pathlib import Path

from . import registry
from .base import Backend
from ..compiler.artifacts import ArtifactCache, cache_key
from ..compiler.knobs import knobs
from ..compiler.runtime import Kernel, artifact_meta_json
from ..compiler.runtime import load as load_artifact
from ..compiler.values import Artifact, Source, Target
from ..ir import graph
from ..ir.program import Problem, Program
from ..ir.verify import verify

STAGES = ("verify", "lower", "build", "load")


def _dump(program: Program, stage: str, files: dict[str, str]) -> None:
    root = knobs().dump_dir
    if root is None:
        return
    folder = Path(root) / program.name
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{stage}.{name}").write_text(text)


def verify_stage(program: Program, problem: Problem) -> Backend:
    verify(program, problem)
    backend = registry.get(program.backend)
    g = graph.build(program, backend.unit_threads, problem.layout, problem.acc)
    _dump(program, "verify", {"txt": f"{program}\n{problem}\n{graph.describe(g)}\n"})
    return backend


def lower_stage(backend: Backend, program: Program, problem: Problem) -> Source:
    source = backend.lower(program, problem)
    _dump(program, "lower", source.files)
    return source


def build_stage(backend: Backend, source: Source, target: Target,
                cache: ArtifactCache | None) -> Artifact:
    from ..compiler import nvcc
    key = cache_key(source, target, backend.fingerprint(), nvcc.version())
    cache = cache or ArtifactCache(knobs().cache_dir)
    artifact = cache.get(key) or cache.put(key, lambda d: backend.build(source, target, d))
    _dump(source.program, "build", {"json": artifact_meta_json(artifact)})
    return artifact


def compile(program: Program, problem: Problem, target: Target = Target(),
            cache: ArtifactCache | None = None) -> Artifact:
    """Verify, lower and build `program` for `problem`'s layout and accumulator.

    Raises ir.VerifyError for an illegal program and compiler.values.BuildError (with the
    reproduce command) when the toolchain fails."""
    backend = verify_stage(program, problem)
    source = lower_stage(backend, program, problem)
    return build_stage(backend, source, target, cache)


def load(artifact: Artifact) -> Kernel:
    """The Kernel for `artifact`, through the loader its backend registered."""
    registry.names()  # imports every backend, and with it every loader
    return load_artifact(artifact)


def compile_and_load(program: Program, problem: Problem, target: Target | None = None,
                     cache: ArtifactCache | None = None) -> Kernel:
    """compile() for the current CUDA device (or `target`), then load()."""
    if target is None:
        target = current_target()
    return load(compile(program, problem, target, cache))


def current_target() -> Target:
    """The build target of the current torch CUDA device."""
    import torch
    major, minor = torch.cuda.get_device_capability()
    return Target(device_sm=major * 10 + minor)
