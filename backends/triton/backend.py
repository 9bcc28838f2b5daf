"""The triton backend: one jinja2 template rendered into a Triton kernel.py, compiled ahead
of time with `triton.compile` for `GPUTarget("cuda", 80 or 90, 32)` (no GPU needed), and
launched by backends.triton.runtime."""
from __future__ import annotations

import functools
import hashlib
import json
import traceback
from pathlib import Path

from .. import register
from ..base import Backend
from ...compiler.values import Artifact, BuildError, Source, Target
from ..templating import fingerprint as template_fingerprint
from ..templating import render
from . import toolchain
from .plan import (
    TMA_MAX_BOX_ROWS, TMA_ROW_ALIGN_HALFS, aligned_params, make_plan, template_context, uses_tma,
)
from ...ir.arch import LIMITS, MmaFamily
from ...ir.program import (
    DEFAULTS, Arch, DType, Epilogue, Padding, Problem, Program, Reduction, Schedule, Swizzle,
    WarpSpec,
)

TEMPLATES = Path(__file__).with_name("templates")
ENTRY = "kernel.py"
WARPGROUP_WARPS = 4     # wgmma is issued by whole warpgroups of 4 warps
WGMMA_M = 64            # rows of C one warpgroup's wgmma covers


@register
class TritonBackend(Backend):
    """Triton kernels: tl.dot lowers to mma.sync on sm_80 and to wgmma on sm_90a.

    IR fields, and what they become:
      tile      BLOCK_M x BLOCK_N x BLOCK_K constexprs
      warps     num_warps = wm * wn. Triton lays warps out itself, so only the count
                matters; mma_shape (16, 16, 16) keeps verify's divisibility sane
      stages    num_stages (Triton's software pipeline depth)
      raster    grouped ordering: GROUP consecutive tile-rows (row) or tile-columns (col)
      split_k   SPLIT_K slices of K, each a whole number of BLOCK_K steps. workspace:
                every slice stores fp32 partials, then a reduce kernel sums and casts
                to C; atomic: a zero kernel, fp32 atomic adds, then the same kernel casts;
                inkernel: one kernel: every slice stores its fp32 partial and arrives at
                its tile's int32 counter; the last to arrive sums the partials, writes C
                and resets the counter (counters zeroed once by the runtime, plan.counters)
      swap_ab   tl.dot(B^T, A^T) into a BLOCK_N x BLOCK_M accumulator, stored transposed:
                on sm_90a the wgmma M side (a multiple of 64) is then BLOCK_N, so a small
                BLOCK_M (16, 32) needs no 64-row tile
      schedule  data_parallel (one program per work unit) or persistent (one program
                per SM, the count read from the device at load time, looping over units)
      epilogue  direct: masked pointer loads and stores. tma (sm_90a only): A, B and C
                move through TMA tensor descriptors built on the host; Triton picks
                the shared-memory swizzle (128B for 64-wide fp16 rows) itself. This is
                the one field that switches TMA on.
      pdl       (sm_90a) every kernel of the plan (the GEMM, and split-K's zero and
                reduce kernels) starts with gdc_wait, before any global load or store,
                then gdc_launch_dependents, and is compiled with Triton's launch_pdl
                option, so both launch paths (compiled.run and launcher.RawLauncher) set
                programmatic stream serialization: a launch may start while the
                previous kernel on the stream finishes. Needs triton >= 3.4
                (toolchain.require_pdl: a clear BuildError, never a plain launch)
      bias      the GEMM kernel takes `bias_ptr` and adds bias[n] to the tile in fp32
                before its store (with swap_ab down the columns of the C^T tile);
                split-K adds it once: in-kernel by the last slice, else in the reduce
                kernel, which takes `bias_ptr` and N
      swizzle, padding, cluster, warp_spec: defaults only (none, predicate, 1x1, none):
                Triton chooses shared layouts and masks ragged edges itself.

    Constraints:
      - tile.bm, tile.bn powers of two from 16 (tl.arange spans powers of two; tl.dot
        needs 16 on every side): no tile_extras;
      - stages up to 16 (shared memory permitting);
      - sm_90a: warps.count a multiple of 4 and the MMA's M side (tile.bm, or tile.bn
        with swap_ab) a multiple of 64, else Triton would silently fall back to
        mma.sync (write such programs for sm_80);
      - epilogue tma: tile.bm and tile.bn at most 256; n and k multiples of 8;
      - operand pointers 16-byte aligned (torch allocations are); m, n, k any size.
    """

    name = "triton"
    archs = frozenset({Arch.SM80, Arch.SM90A})
    instruction = "tl.dot (mma.sync on sm_80, wgmma on sm_90a)"
    mma_family = MmaFamily.WGMMA
    mma_shape = (16, 16, 16)
    unit_threads = 32
    allowed = {
        "swizzle": frozenset({Swizzle.NONE}),
        "padding": frozenset({Padding.PREDICATE}),
        "schedule": frozenset({Schedule.DATA_PARALLEL, Schedule.PERSISTENT}),
        "cluster": frozenset({DEFAULTS.cluster}),
        "warp_spec": frozenset({WarpSpec.NONE}),
        "epilogue": frozenset({Epilogue.DIRECT, Epilogue.TMA}),
        "swap_ab": frozenset({False, True}),
        "pdl": frozenset({False, True}),
    }
    max_stages = 16
    reductions = frozenset(Reduction) - {Reduction.CLUSTER}
    fusions = frozenset({"bias"})
    dtypes = frozenset(DType)  # tl.dot on tl.bfloat16 (f32 accumulator) as on tl.float16

    def supports(self, program: Program, problem: Problem | None = None) -> str | None:
        if program.arch == Arch.SM90A:
            if program.warps.count % WARPGROUP_WARPS:
                return (f"warps: sm_90a needs whole warpgroups for wgmma ({program.warps.count} "
                        f"warps is not a multiple of {WARPGROUP_WARPS}); use sm_80 for mma.sync")
            rows, field = ((program.tile.bn, "tile.bn") if program.swap_ab
                           else (program.tile.bm, "tile.bm"))
            if rows % WGMMA_M:
                swapped = " (swap_ab puts it on the wgmma M side)" if program.swap_ab else ""
                return (f"{field}: sm_90a needs a multiple of {WGMMA_M} for wgmma{swapped}, "
                        f"got {rows}; use sm_80 for mma.sync")
        if uses_tma(program):
            return _tma_reason(program, problem)
        return None

    def lower(self, program: Program, problem: Problem) -> Source:
        text = render(TEMPLATES, "gemm.py.jinja", template_context(program, problem))
        return Source(program, problem, "triton", {ENTRY: text}, ENTRY,
                      meta={"plan": make_plan(program, problem).as_json()})

    def build(self, source: Source, target: Target, out_dir: Path) -> Artifact:
        program, problem = source.program, source.problem
        plan = make_plan(program, problem)
        capability, env = toolchain.capability_for(program.arch, target.device_sm)
        aligned = aligned_params(problem.m, problem.n, problem.k)
        (out_dir / source.entry).write_text(source.text)
        record = {"plan": plan.as_json(), "capability": capability, "env": env,
                  "aligned": list(aligned), "entry": source.entry}
        (out_dir / "plan.json").write_text(json.dumps(record, indent=1, sort_keys=True))
        if program.pdl:  # before the import: kernel.py imports the gdc_* functions
            toolchain.require_pdl(str(program))
        module = _load(out_dir, source.entry)
        compiled = [_compile(module, kernel, record, out_dir, program) for kernel in plan.kernels]
        meta = {**record, "triton_version": toolchain.version(), "kernels": compiled}
        path = out_dir / f"{program.name}.json"
        path.write_text(json.dumps(meta, indent=1, sort_keys=True))
        return Artifact(key="", kind="triton", path=path, program_text=str(program),
                        layout=problem.layout, acc=problem.acc, meta=meta,
                        dtype=problem.dtype)

    def fingerprint(self) -> str:
        return _fingerprint(toolchain.version())


def _tma_reason(program: Program, problem: Problem | None) -> str | None:
    t = program.tile
    if max(t.bm, t.bn) > TMA_MAX_BOX_ROWS:
        return (f"tile: epilogue tma needs bm and bn at most {TMA_MAX_BOX_ROWS} (the TMA box "
                f"limit), got {t.bm}x{t.bn}")
    halves = TMA_ROW_ALIGN_HALFS
    if problem is not None and (problem.n % halves or problem.k % halves):
        return (f"epilogue: tma needs n and k multiples of {halves} (16-byte row strides "
                f"for TMA descriptors), got n={problem.n}, k={problem.k}; use epilogue direct")
    return None


def _load(out_dir: Path, entry: str):
    try:
        return toolchain.load_module(out_dir / entry)
    except Exception as e:  # a template bug: the rendered file does not even import
        raise BuildError(f"the rendered {entry} does not import: {type(e).__name__}: {e}",
                         toolchain.repro_command(out_dir), str(out_dir / entry),
                         traceback.format_exc()) from None


def _compile(module, kernel, record: dict, out_dir: Path, program: Program) -> dict:
    """Compile one kernel of the plan, write its PTX and cubin, return its record."""
    try:
        compiled = toolchain.compile_kernel(module, kernel, record["capability"], record["env"],
                                            tuple(record["aligned"]))
    except BuildError:
        raise
    except Exception as e:
        raise BuildError(f"triton failed to compile {kernel.name}: {type(e).__name__}: {e}",
                         toolchain.repro_command(out_dir), str(out_dir / record["entry"]),
                         traceback.format_exc()) from None
    shared, limit = compiled.metadata.shared, LIMITS[program.arch].max_smem_per_block
    if shared > limit:
        raise BuildError(f"{kernel.name} needs {shared} B of shared memory; "
                         f"{program.arch.value} allows {limit} B per CTA (lower stages or tile)",
                         toolchain.repro_command(out_dir), str(out_dir / record["entry"]))
    (out_dir / f"{kernel.name}.ptx").write_text(compiled.asm["ptx"])
    (out_dir / f"{kernel.name}.cubin").write_bytes(compiled.asm["cubin"])
    return {"role": kernel.role, "name": kernel.name, "function": compiled.metadata.name,
            "shared": shared, "num_warps": compiled.metadata.num_warps,
            "launch_pdl": bool(getattr(compiled.metadata, "launch_pdl", False)),
            "num_stages": kernel.num_stages, "ptx": f"{kernel.name}.ptx",
            "cubin": f"{kernel.name}.cubin"}


@functools.lru_cache(maxsize=None)
def _fingerprint(triton_version: str) -> str:
    """Templates, this package's own Python source, and the Triton version."""
    h = hashlib.sha256(template_fingerprint(str(TEMPLATES)).encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(f"triton {triton_version}".encode())
    return h.hexdigest()
