"""The IR values: a GEMM `Problem` and the `Program` (one kernel) that computes it.

Every value is a small frozen dataclass that checks its own invariants in
`__post_init__` and raises `IRError` naming the field and what is allowed.
Cross-field legality (shared memory, divisibility, what a backend supports)
lives in `ir.verify`, not here: a `Program` is well-formed in isolation, and
`verify` decides whether it is a legal kernel for its backend and arch.
"""
from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass, field, fields, replace

MAX_STAGES = 16  # the IR's bound; each backend declares its own (Backend.max_stages)
MAX_SPLIT_K = 16
MAX_RASTER_GROUP = 64
MAX_CLUSTER = 4  # portable cluster size limit per dimension on sm_90a
TILE_LIMITS = {"bm": (8, 512), "bn": (8, 512), "bk": (8, 256)}
TILE_STEP = 8  # tile.bm / tile.bn besides the powers of two: multiples of 8 up to 256
# tile.bm / tile.bn values besides the powers of two: the token-side tiles of small problems
# (8..256 in steps of 8, e.g. 40 for 77 rows as two tiles, 56 for 333 as six) and 192,
# three 64-wide wgmma steps, the tile cuBLAS picks where N = 256 leaves 128 x 256 tiles a
# wave short (benchmarks/NOTES.md). Only backends that list one in `tile_extras` accept it
# (ir.verify).
TILE_EXTRAS = frozenset(v for v in range(TILE_STEP, 257, TILE_STEP) if v & (v - 1))
MAX_WARPS_PER_DIM = 8
MAX_DIM = 1 << 20  # largest m, n or k a Problem accepts
# Program fields added after the backends were written: a backend takes a value other than
# the default only where its `allowed` lists the field (ir.verify).
OPT_IN_FIELDS = ("l2_hint", "swap_ab", "pdl")
# Program fields that change what a kernel computes (an operation fused into its epilogue),
# not how: no search explores them, and a backend lowers one only where its `fusions`
# lists it (ir.verify). A program's fused twin is `p.replace(bias=True)`.
FUSION_FIELDS = ("bias",)


class IRError(ValueError):
    """An IR value is malformed or illegal; the message names the field and the limit."""


class _TextEnum(str, enum.Enum):
    """An enum whose value is its canonical spelling in text and JSON."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str, what: str):
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise IRError(f"{what}: {value!r} is not one of {allowed}") from None


class Arch(_TextEnum):
    SM80 = "sm_80"
    SM90A = "sm_90a"


class Layout(_TextEnum):
    """Operand layouts of C[M,N] = A[M,K] @ B, all row-major in memory.

    nn: B is stored K x N. nt: B is stored N x K (B transposed, cuBLAS's "TN").
    """

    NN = "nn"
    NT = "nt"


class Accum(_TextEnum):
    F32 = "f32"
    F16 = "f16"


class DType(_TextEnum):
    """Element type of A, B and C (both 2 bytes). bf16 keeps fp32's exponent range with 8
    bits of precision; it accumulates in f32 only (an f16 accumulator is for f16 operands)."""
    F16 = "f16"
    BF16 = "bf16"


class Swizzle(_TextEnum):
    NONE = "none"
    B32 = "32B"
    B64 = "64B"
    B128 = "128B"
    PAD = "pad"


class RasterOrder(_TextEnum):
    ROW = "row"
    COL = "col"


class Padding(_TextEnum):
    PREDICATE = "predicate"
    PAD_OPERANDS = "pad_operands"


class Reduction(_TextEnum):
    """How split-K slices are summed. workspace: fp32 partials, then a reduce step;
    atomic: fp32 atomic adds into a zeroed buffer, then a cast; inkernel: inside the GEMM
    kernel itself, no second kernel and no per-call memset (partials in an fp32 workspace
    and per-tile arrival counters, zeroed once when allocated; the last slice to arrive
    sums the partials, writes C and resets its counter to zero); cluster: the slices of a
    tile run as one thread-block cluster (sm_90a) and are summed through its distributed
    shared memory, no global memory at all."""
    WORKSPACE = "workspace"
    ATOMIC = "atomic"
    INKERNEL = "inkernel"
    CLUSTER = "cluster"


class Schedule(_TextEnum):
    DATA_PARALLEL = "data_parallel"
    PERSISTENT = "persistent"
    STREAM_K = "stream_k"


class WarpSpec(_TextEnum):
    NONE = "none"
    COOPERATIVE = "cooperative"
    PINGPONG = "pingpong"


class Epilogue(_TextEnum):
    DIRECT = "direct"
    SMEM = "smem"
    TMA = "tma"


class L2Hint(_TextEnum):
    """L2 priority of the operand loads. `stream_first`: the operand the raster streams (B
    for row rasters, A for column rasters: each panel read by one wave, then not until the
    raster comes round again) is loaded with evict_first, so the other operand's panels,
    which every wave of a raster group reads again, stay in L2."""
    NONE = "none"
    STREAM_FIRST = "stream_first"


def _check_int(value, name: str, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise IRError(f"{name}: expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise IRError(f"{name}: {value} is outside {lo}..{hi}")


def _check_pow2(value: int, name: str) -> None:
    if value & (value - 1):
        raise IRError(f"{name}: {value} is not a power of two")


def _check_tile_value(value: int, name: str, pow2_only: bool) -> None:
    if value & (value - 1):
        also = "" if pow2_only else f", nor a multiple of {TILE_STEP} up to 256"
        raise IRError(f"{name}: {value} is not a power of two{also}")


@dataclass(frozen=True, slots=True)
class Problem:
    """C[m, n] = A[m, k] @ B; `acc` is the accumulator type, `dtype` that of A, B and C."""

    m: int
    n: int
    k: int
    layout: Layout = Layout.NN
    acc: Accum = Accum.F32
    dtype: DType = DType.F16

    def __post_init__(self):
        for name in ("m", "n", "k"):
            _check_int(getattr(self, name), name, 1, MAX_DIM)
        object.__setattr__(self, "layout", Layout.parse(str(self.layout), "layout"))
        object.__setattr__(self, "acc", Accum.parse(str(self.acc), "acc"))
        object.__setattr__(self, "dtype", DType.parse(str(self.dtype), "dtype"))
        if self.acc == Accum.F16 and self.dtype != DType.F16:
            raise IRError(f"acc: f16 accumulation is for f16 operands; {self.dtype.value} "
                          "accumulates in f32")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def __str__(self) -> str:
        """'MxNxK layout acc', then the dtype where it is not the default f16 (so a text
        without one is an f16 problem)."""
        dtype = "" if self.dtype == DType.F16 else f" {self.dtype}"
        return f"{self.shape} {self.layout} {self.acc}{dtype}"


@dataclass(frozen=True, slots=True)
class Tile:
    """CTA tile: the block of C one CTA owns (bm x bn) and the K step (bk)."""

    bm: int = 128
    bn: int = 128
    bk: int = 32

    def __post_init__(self):
        for name, (lo, hi) in TILE_LIMITS.items():
            value = getattr(self, name)
            _check_int(value, f"tile.{name}", lo, hi)
            if name == "bk" or value not in TILE_EXTRAS:
                _check_tile_value(value, f"tile.{name}", name == "bk")

    @property
    def extras(self) -> tuple[int, ...]:
        """bm / bn values outside the powers of two (TILE_EXTRAS), if any."""
        return tuple(v for v in (self.bm, self.bn) if v & (v - 1))


@dataclass(frozen=True, slots=True)
class Warps:
    """Warp (or, on wgmma paths, warpgroup) layout inside the CTA: wm along M, wn along N."""

    wm: int = 2
    wn: int = 2

    def __post_init__(self):
        for name in ("wm", "wn"):
            _check_int(getattr(self, name), f"warps.{name}", 1, MAX_WARPS_PER_DIM)
            _check_pow2(getattr(self, name), f"warps.{name}")

    @property
    def count(self) -> int:
        return self.wm * self.wn


@dataclass(frozen=True, slots=True)
class Raster:
    """CTA launch order: along rows or columns of C, in groups of `group` tiles for L2 reuse."""

    order: RasterOrder = RasterOrder.ROW
    group: int = 1

    def __post_init__(self):
        object.__setattr__(self, "order", RasterOrder.parse(str(self.order), "raster.order"))
        _check_int(self.group, "raster.group", 1, MAX_RASTER_GROUP)


@dataclass(frozen=True, slots=True)
class SplitK:
    """K is cut into `slices` pieces computed by separate CTAs, then reduced."""

    slices: int = 1
    reduction: Reduction = Reduction.WORKSPACE

    def __post_init__(self):
        _check_int(self.slices, "split_k.slices", 1, MAX_SPLIT_K)
        object.__setattr__(
            self, "reduction", Reduction.parse(str(self.reduction), "split_k.reduction"))
        if self.slices == 1 and self.reduction != Reduction.WORKSPACE:
            raise IRError("split_k.reduction: must be 'workspace' (the default) when slices is 1")


@dataclass(frozen=True, slots=True)
class Cluster:
    """Hopper thread-block cluster shape (cm CTAs along M, cn along N)."""

    cm: int = 1
    cn: int = 1

    def __post_init__(self):
        for name in ("cm", "cn"):
            _check_int(getattr(self, name), f"cluster.{name}", 1, MAX_CLUSTER)
            _check_pow2(getattr(self, name), f"cluster.{name}")

    @property
    def size(self) -> int:
        return self.cm * self.cn


_BACKEND_NAME = re.compile(r"^[a-z][a-z0-9_]{1,31}$")

# (field name, coercer) for the enum-valued fields of Program.
_ENUM_FIELDS = {
    "arch": Arch, "swizzle": Swizzle, "padding": Padding, "schedule": Schedule,
    "warp_spec": WarpSpec, "epilogue": Epilogue, "l2_hint": L2Hint,
}


@dataclass(frozen=True, slots=True)
class Program:
    """One GEMM kernel, as a policy writes it. Shape-generic: m, n, k come at run time.

    Field order is the order of the canonical text form (see `ir.text`).
    """

    backend: str
    arch: Arch = Arch.SM80
    tile: Tile = field(default_factory=Tile)
    warps: Warps = field(default_factory=Warps)
    stages: int = 3
    swizzle: Swizzle = Swizzle.NONE
    raster: Raster = field(default_factory=Raster)
    padding: Padding = Padding.PREDICATE
    split_k: SplitK = field(default_factory=SplitK)
    schedule: Schedule = Schedule.DATA_PARALLEL
    cluster: Cluster = field(default_factory=Cluster)
    warp_spec: WarpSpec = WarpSpec.NONE
    epilogue: Epilogue = Epilogue.DIRECT
    l2_hint: L2Hint = L2Hint.NONE
    swap_ab: bool = False
    """Compute C^T = B^T A^T: the problem's N side feeds the MMA's M (wide) side and M its
    narrow N side, so a small M fills the instruction; the epilogue writes C transposed.
    tile (bm along M, bn along N) and warps (wm along M, wn along N) stay in the problem's
    terms whatever swap_ab says."""
    pdl: bool = False
    """Programmatic dependent launch: the kernel is launched so that it may start while the
    previous kernel on the stream finishes; it sets up (shared memory, barriers, descriptor
    prefetch) and then waits for that kernel's memory before touching global memory, and
    lets the next kernel start as soon as its own last wave runs."""
    bias: bool = False
    """Fused bias add: C[m, n] = sum_k A[m, k] B[k, n] + bias[n], bias an fp16 vector of
    length n, added in fp32 before C's rounding (the kernel takes it through
    `gemmforge_launch_bias`; see FUSION_FIELDS)."""

    def __post_init__(self):
        if not isinstance(self.backend, str) or not _BACKEND_NAME.match(self.backend):
            raise IRError(f"backend: {self.backend!r} is not a backend name "
                          "(lower-case letters, digits and '_')")
        for name, enum_type in _ENUM_FIELDS.items():
            object.__setattr__(self, name, enum_type.parse(str(getattr(self, name)), name))
        for name, value_type in (("tile", Tile), ("warps", Warps), ("raster", Raster),
                                 ("split_k", SplitK), ("cluster", Cluster)):
            if not isinstance(getattr(self, name), value_type):
                raise IRError(f"{name}: expected a {value_type.__name__}, "
                              f"got {getattr(self, name)!r}")
        _check_int(self.stages, "stages", 1, MAX_STAGES)
        for name in ("swap_ab", "pdl", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise IRError(f"{name}: expected true or false, got {getattr(self, name)!r}")

    @property
    def mma_mn(self) -> tuple[int, int]:
        """(rows, cols) of the tile as the MMA sees them: (bm, bn), or (bn, bm) with swap_ab."""
        t = self.tile
        return (t.bn, t.bm) if self.swap_ab else (t.bm, t.bn)

    def replace(self, **changes) -> "Program":
        """A copy with some fields changed (validated like any new Program)."""
        return replace(self, **changes)

    @property
    def key(self) -> str:
        """Content hash: 16 hex digits of sha256 over the canonical text form."""
        return hashlib.sha256(_TEXT_FORM[0](self).encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """Procedural kernel name, e.g. gf_cuda_mma_sm80_128x128x32_w2x2_s3_<key[:8]>."""
        t, w = self.tile, self.warps
        arch = self.arch.value.replace("_", "")
        return (f"gf_{self.backend}_{arch}_{t.bm}x{t.bn}x{t.bk}_w{w.wm}x{w.wn}"
                f"_s{self.stages}_{self.key[:8]}")

    def __str__(self) -> str:
        return _TEXT_FORM[0](self)


def lowered_name(program: Program, problem: Problem) -> str:
    """The kernel's name as lowered for `problem`: `program.name`, with the operand dtype
    before the hash where it is not the default f16 (a bf16 build of a program is another
    kernel, named and cached apart; an f16 build is named `program.name`)."""
    if problem.dtype == DType.F16:
        return program.name
    head, _, key = program.name.rpartition("_")
    return f"{head}_{problem.dtype.value}_{key}"


_TEXT_FORM: list = [None]
"""The canonical text form's writer, `ir.text.to_text`: ir/text.py sets it when imported
(the package's __init__ imports it), so this file need not import the text form that
imports it."""


def set_text_form(to_text) -> None:
    """Install `to_text` (Program -> str) as the form str() and key use."""
    _TEXT_FORM[0] = to_text


def program_fields() -> tuple[str, ...]:
    """The names of Program's fields, in canonical order."""
    return tuple(f.name for f in fields(Program))


DEFAULTS = Program(backend="default")
"""A Program whose fields (backend aside) all hold their defaults."""
