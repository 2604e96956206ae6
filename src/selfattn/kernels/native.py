"""Backend "native": FlashAttention-2 as one compiled CPU kernel (csrc/: attention.cpp and its headers).

Why it exists: the "tiled" kernel runs ~10 multi-threaded PyTorch ops per tile, so a call starts
and joins the thread pool hundreds of times; on cores shared with another busy process every join
waits for a preempted thread. This kernel runs one `at::parallel_for` per pass over (batch,
kv head, query block) tasks, single-threaded BLAS GEMMs and the online softmax inside each task,
and workers take tasks from a shared counter, so a slow core takes fewer of them.

The C++ is compiled on first use and cached (`native_build`); nothing compiles at import, and
`backend="auto"` only considers "native" once it is built (`is_built()`). `build()` (or
`backend="native"`, or `selfattn bench`) builds it and says so through `selfattn.kernels.notices`.
Without a compiler, or when the build fails, the backend refuses every request with the reason, and
"auto" keeps using "tiled". The kernel is called through PyTorch operators (`native_op`:
`torch.ops.selfattn.native_forward` / `native_backward`, with fake implementations and autograd), so
`torch.compile`, `torch.export` and `torch.func.vmap` see one operator.

The backward runs over key blocks: each task owns its dK, dV rows, and dQ is summed per worker
and the worker sums added at the end, so which worker took which task changes dQ's summation
order: gradients are reproducible up to rounding (as FlashAttention-2's atomics on a GPU), not
bit for bit. Under `torch.use_deterministic_algorithms(True)` the tasks are dealt to the workers in a
fixed order instead (no load balancing on busy cores), and dQ is bit for bit the same on every run
with the same thread count. The forward is bit-for-bit the same whatever the thread count.

float32/float64 run in their own precision. Half inputs take one of two paths (`gemm_path(dtype)` says
which): where the CPU has a bfloat16 (float16) GEMM with float32 accumulation — AVX512-BF16 or AMX-BF16
(AMX-FP16), run through MKL's gemm_bf16bf16f32 (gemm_f16f16f32) — q, k, v stay in their dtype, scores,
softmax and sums are float32 and P (dS in the backward) is rounded to the input dtype for its GEMM, as
FlashAttention does; elsewhere they are converted to float32 once (O(N) memory), computed in float32 and
the output converted back. `NativeBackend(half_gemm=True/False)` forces one path (tests run both on any
CPU: MKL's half GEMM also runs without the instructions, widening to float32 inside, at the float32 rate).

The kernel's own tiles (`runs_tiles`; not by default on a CPU with AMX, whose MKL GEMMs were measured and the tiles
were not; `tiles=True / False` forces them): MKL's GEMMs pack both operands on every tile, which on an AVX512-BF16
EPYC made its bfloat16 GEMM no faster than sgemm on the attention's 128 × 512 × 64 tiles (~90 GFLOP/s a core) and
was 12% of a float32 window's forward. Where cpuid has AVX512-BF16, bfloat16's q·kᵀ and P·V run on VDPBF16PS over K
and V packed once a call, and so do the backward's five products (dK and dV on P and dS rounded straight into
transposed pairs, Q and dO packed over the queries); where it has AVX512F, float32's q·kᵀ runs on K packed once a
call and P·V on V's rows where they are, and the backward's dO·Vᵀ on V packed as K is, its dV, dK and dQ on dO's, Q's
and K's rows where they are. The packing is written in parallel, a batch of heads at a time (at most 16 MiB of
packed operands at once, or one head's: the extra memory of a call), into buffers the kernel keeps between calls
(at most 32 MiB, for the process's life); only a query of more than FEW_ROWS rows per kv head pays it back: fewer
(a decoding step) run the few-row loops, bfloat16 too. On that EPYC (B=1, H=8, D=64, 2 threads,
`selfattn bench`): bfloat16 causal L=4096 60 ms against SDPA bfloat16's 123 (138 on MKL's GEMM); forward + backward
L=2048 54 ms against SDPA bfloat16's 101; float32 causal L=4096 98 ms on the tiles, 108 on MKL's sgemm, SDPA 119;
float32 forward + backward L=2048 87 ms on the tiles, 101 on MKL's sgemm, SDPA 119.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import cast

import torch

from .. import checks
from ..request import accumulate_dtype
from ..scores import additive_in
from . import cpu
from .base import EVERY_FEATURE, Backend, Cost, Request, Result, Work, streaming
from .cost import request_pairs, visible_pairs
from .cpu import HALF_DTYPES
from .native_build import ARCH_FLAGS, build, build_dir, is_built, unavailable_reason
from .native_op import TILE_ARGUMENTS, native_attention, unit_stride

__all__ = [
    "NativeBackend",
    "gemm_path",
    "softmax_lanes",
    "instruction_set",
    "has_half_gemm",
    "build",
    "is_built",
    "build_dir",
    "unavailable_reason",
    "tile_arguments",
    "BLOCK_Q",
    "BLOCK_K",
    "SPLIT_ROWS",
    "SPLIT_KEYS",
    "SPLIT_TASKS",
    "MIN_SPLIT_CHUNK",
    "STACK_ROWS",
    "FEW_ROWS",
]

BLOCK_Q = 128
"""Query positions per task: a (BLOCK_Q × BLOCK_K) score tile of float32 is 256 KiB, in L2. Short
blocks waste little on a window's edges (a window of w costs (BLOCK_Q + w) keys per row). Measured:
docs/calibration.md#native."""

BLOCK_K = 512
"""Key positions per tile (forward) and per backward task."""

WINDOW_BLOCK_FRACTION = 4
"""Under a window that spans `span` keys a query block is span / WINDOW_BLOCK_FRACTION rows high (at most
block_q, at least MIN_WINDOW_BLOCK_Q): a block of b rows reads b + span − 1 keys per row, so BLOCK_Q = 128 rows
over a 256 window computed 1.5× the visible scores and 64 rows 1.25×. Measured: docs/calibration.md#native."""

MIN_WINDOW_BLOCK_Q = 32
"""The lowest query block a window gets: below it the GEMMs are too thin to run at their rate."""

SPLIT_ROWS = 8
"""A query of at most this many rows (and at most block_q) over more than `split_keys` keys runs split-K
(flash-decoding): the keys are cut into chunks of `split_keys`, one task each, merged by their lse. The kernel's
SPLIT_ROWS (csrc/split_k.h): it splits when Lq <= min(block_q, SPLIT_ROWS) and Lk > the block_k it gets."""

SPLIT_KEYS = 2048
"""Keys per split-K chunk at most (`split_keys`' default)."""

CALL_SECONDS = 95e-6
"""A call's fixed cost in the cost model: 55 µs more than SDPA's (its inputs laid out, the tile's arguments, the
parallel region). With READ_GBPS it puts the crossing with SDPA for one decoding step between 512 and 1,024 keys,
with or without GQA, as measured (docs/calibration.md#native)."""

READ_GBPS = 17.0
"""The rate at which one decoding step reads K and V, in the cost model's units (SDPA's 14), the few-row loops
reading V's rows in one pass and prefetching 32 rows ahead (`FEW_ROWS`); with CALL_SECONDS it fits the measured
times (docs/calibration.md#native)."""

SPLIT_TASKS = 8
"""Tasks a split-K request gets at least, where its keys allow chunks of MIN_SPLIT_CHUNK: with few kv heads (GQA,
one sequence) chunks of SPLIT_KEYS left most workers idle (docs/calibration.md#native). A count of tasks, not of
threads, so the chunks — and the result — do not depend on the thread count."""

STACK_ROWS = 64
"""Under GQA, a query block whose G heads × rows are at most this many runs them as one GEMM per key tile
(csrc/forward_pass.h `stacked_pass`), not head by head (each head a matrix-vector product rereading the tile).
Measured: docs/calibration.md#native."""

FEW_ROWS = 8
"""A float32 GEMM of at most this many rows (a decoding step's query rows, or a GQA group stacked) runs in the
kernel's own AVX2 loops (csrc/few_rows.h `few_rows_abt` / `few_rows_ab`), not BLAS, which packs its operands
for what is a matrix-vector product (docs/calibration.md#native)."""

MIN_SPLIT_CHUNK = 256
"""Fewest keys per split-K chunk `SPLIT_TASKS` may cut to: below it a chunk's merge costs more than it saves."""

RATE_GFLOPS = 90.0
"""Full and causal forward, L = 4096 (91–96), and windows counted as in `_work`, 1 thread (`kernels.cost`)."""


def _checked_dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    if dtype not in HALF_DTYPES + (torch.float32, torch.float64):
        raise ValueError(f"the native kernel runs float32, float64, bfloat16 and float16, not {dtype}")
    return dtype


def instruction_set() -> str:
    """This CPU's vector instructions as the kernels see them, in words: torch's detected capability and the
    half-precision GEMM instructions (for `selfattn bench`'s header)."""
    halves = [name for name, feature in cpu.HALF_ISA if cpu.has(feature)]
    has = ", ".join(halves) if halves else "no AVX512-BF16, no AMX"
    capability = cpu.capability()
    forced = "" if cpu.name() == "this CPU" else f" (forced: {cpu.ENVIRONMENT} or cpu.forced)"
    return f"{capability}{forced} (torch's CPU capability); {has}; native softmax in {softmax_lanes()}"


def softmax_lanes() -> str:
    """The instructions the kernel's exp and online softmax (and the rounding of P to bfloat16) run in on this
    CPU, in words, as the kernel chose them on cpuid when it loaded: AVX512 (16 lanes) where the CPU has AVX512F,
    AVX2 (8 lanes) elsewhere. Never compiles: before the kernel is built it says so."""
    if not is_built():
        return "instructions chosen on this CPU's cpuid when the kernel loads (not built yet)"
    return build().softmax_path()


def has_half_gemm(dtype: torch.dtype) -> bool:
    """True when this CPU runs a `dtype` (bfloat16/float16) GEMM with float32 accumulation in hardware,
    so "native" keeps half inputs in their dtype (False for float32/float64: they need none)."""
    return cpu.has_half_gemm(_checked_dtype(dtype))


def gemm_path(dtype: torch.dtype, half_gemm: bool | None = None) -> str:
    """Which GEMMs the native kernel runs for inputs of `dtype` on this CPU, in words (for `bench --explain`).
    `half_gemm` as NativeBackend's (None: chosen by the CPU). Never compiles.

        float32   "float32 GEMM (BLAS sgemm)"            float64  "float64 GEMM (BLAS dgemm)"
        bfloat16  "bfloat16 GEMM, float32 accumulation (MKL gemm_bf16bf16f32, AVX512-BF16)" (or AMX-BF16), or
                  "converted to float32 (this CPU has no bfloat16 GEMM: no AVX512-BF16 or AMX-BF16)"
        float16   "float16 GEMM, float32 accumulation (MKL gemm_f16f16f32, AMX-FP16)", or
                  "converted to float32 (this CPU has no float16 GEMM: no AMX-FP16)"
    A forced half path on a CPU without the instructions says "(..., forced: widened to float32 inside MKL)";
    a forced fallback "converted to float32 (forced)"."""
    dtype = _checked_dtype(dtype)
    if dtype in (torch.float32, torch.float64):
        return "float32 GEMM (BLAS sgemm)" if dtype == torch.float32 else "float64 GEMM (BLAS dgemm)"
    isa = cpu.half_gemm_isa(dtype)
    half, mkl = ("bfloat16", "gemm_bf16bf16f32") if dtype == torch.bfloat16 else ("float16", "gemm_f16f16f32")
    if half_gemm is False:
        return "converted to float32 (forced)"
    if half_gemm is None and isa is None:
        lacks = "AVX512-BF16 or AMX-BF16" if dtype == torch.bfloat16 else "AMX-FP16"
        return f"converted to float32 (this CPU has no {half} GEMM: no {lacks})"
    return f"{half} GEMM, float32 accumulation (MKL {mkl}, {isa or 'forced: widened to float32 inside MKL'})"


def query_block(r: Request, block_q: int) -> int:
    """The query-block height the kernel gets for `r`: block_q, or less under a window bounded on both sides
    (WINDOW_BLOCK_FRACTION)."""
    bounds = r.rule.bounds
    if bounds is None or None in bounds:
        return block_q
    span = bounds[0] + bounds[1] + 1
    return min(block_q, max(MIN_WINDOW_BLOCK_Q, span // WINDOW_BLOCK_FRACTION // 16 * 16))


def _work(r: Request) -> Work:
    """Visible pairs, plus a window's ragged edge: a query block of b rows (`query_block`) reads about b + w keys
    per row (measured at the same rate)."""
    if isinstance(r.window, int):
        return r.Lq * min(r.Lk, query_block(r, BLOCK_Q) + r.window), RATE_GFLOPS, 0.0
    if r.rule.block_mask is not None:  # the visible blocks' pairs (empty blocks are skipped)
        return request_pairs(r), RATE_GFLOPS, 0.0
    if r.window is not None or r.rule.segments is not None:  # pairs per row, and a block's ragged edge
        return request_pairs(r) / r.B + r.Lq * query_block(r, BLOCK_Q), RATE_GFLOPS, 0.0
    return visible_pairs(r.Lq, r.Lk, causal=r.causal), RATE_GFLOPS, 0.0


class NativeBackend(Backend):
    """The compiled kernel; `BACKENDS["native"]` is `NativeBackend()`."""

    name = "native"
    capabilities = streaming(
        devices=frozenset({"cpu"}),
        features=EVERY_FEATURE - {"score_mod"},
        notes={
            "weights": "use backend='naive', or selfattn.attention_weights(q, k, lse, rows=...) for chosen rows",
            "score_mod": "a compiled kernel cannot call a Python function per tile; use backend='tiled' or 'naive' "
            "(or 'flex'), or give a position term as alibi= or an additive mask=",
            "device": "on a GPU use 'sdpa' or 'flex'",
        },
    )
    cost = Cost(
        work=_work,
        read_gbps=READ_GBPS,
        call_seconds=CALL_SECONDS,
        backward_factor=3.9,
        busy_factor=1.0,
        dtype_speed={torch.bfloat16: 0.95, torch.float64: 0.35},
        backward_dtype_speed={torch.bfloat16: 0.98, torch.float64: 0.33},
        hardware_dtype_speed={torch.bfloat16: 1.77, (torch.bfloat16, "AVX512-BF16"): 1.86},
        hardware_backward_dtype_speed={torch.bfloat16: 1.74, (torch.bfloat16, "AVX512-BF16"): 1.63},
    )
    """One `at::parallel_for` per pass: under load it loses about the share of the core it gives away."""

    def __init__(
        self,
        block_q: int = BLOCK_Q,
        block_k: int = BLOCK_K,
        half_gemm: bool | None = None,
        split_keys: int | None = SPLIT_KEYS,
        tiles: bool | None = None,
    ):
        """half_gemm: None (default) keeps bfloat16/float16 inputs in their dtype where the CPU has that
        GEMM (`has_half_gemm`) and converts them to float32 elsewhere; True / False force one path.
        split_keys: keys per split-K chunk at most (`chunk`) for a query of at most SPLIT_ROWS rows (None: never
        split, one task per kv head).
        tiles: the products on the kernel's own tiles, operands packed once a call (`runs_tiles`), forward and
        backward: bfloat16's on VDPBF16PS where the CPU has AVX512-BF16, float32's on AVX512 FMAs where it has
        AVX512F. None (default): where the CPU has no AMX (whose MKL GEMMs were measured; the tiles were not,
        there) and a kv head has more than FEW_ROWS query rows; True: wherever the CPU has the instructions;
        False: MKL's GEMM on every tile."""
        self.block_q = checks.integer("block_q", block_q, low=1)
        self.block_k = checks.integer("block_k", block_k, low=1)
        if half_gemm is not None and not isinstance(half_gemm, bool):
            raise TypeError(f"half_gemm must be None, True or False, got {type(half_gemm).__name__} {half_gemm!r}")
        self.half_gemm = half_gemm
        self.split_keys = None if split_keys is None else checks.integer("split_keys", split_keys, low=1)
        if tiles is not None and not isinstance(tiles, bool):
            raise TypeError(f"tiles must be None, True or False, got {type(tiles).__name__} {tiles!r}")
        self.tiles = tiles

    def __repr__(self) -> str:
        forced = "" if self.half_gemm is None else f", half_gemm={self.half_gemm}"
        split = "" if self.split_keys == SPLIT_KEYS else f", split_keys={self.split_keys}"
        tiles = "" if self.tiles is None else f", tiles={self.tiles}"
        return f"NativeBackend(block_q={self.block_q}, block_k={self.block_k}{forced}{split}{tiles})"

    def chunk(self, r: Request) -> int | None:
        """Keys per split-K chunk for `r` (None: splitting off): `split_keys`, or fewer where the batch's kv heads
        give under SPLIT_TASKS tasks — cut to ceil(Lk / tasks per head), a multiple of 64, at least
        MIN_SPLIT_CHUNK."""
        if self.split_keys is None:
            return None
        per_head = -(-SPLIT_TASKS // max(1, r.B * r.Hkv))  # (an empty batch has no task to share)
        even = -(-r.Lk // per_head)
        return min(self.split_keys, max(MIN_SPLIT_CHUNK, -(-even // 64) * 64))

    def splits(self, r: Request) -> bool:
        """True when the kernel runs `r` split-K (flash-decoding): a short query over more keys than a chunk."""
        chunk = self.chunk(r)
        return chunk is not None and r.Lq <= min(self.block_q, SPLIT_ROWS) and r.Lk > chunk

    def blocks(self, r: Request) -> tuple[int, int]:
        """(block_q, block_k) the kernel gets for `r`: block_q lowered under a window (`query_block`); block_k
        the split-K chunk where the query is short (the kernel splits when Lk exceeds it), or as wide as the keys
        where splitting is off."""
        if r.Lq > min(self.block_q, SPLIT_ROWS):
            return query_block(r, self.block_q), self.block_k
        if self.splits(r):
            return self.block_q, cast(int, self.chunk(r))
        return self.block_q, max(self.block_k, r.Lk)

    def gemm_path(self, dtype: torch.dtype) -> str:
        """`gemm_path(dtype)` for this backend's `half_gemm` setting."""
        return gemm_path(dtype, self.half_gemm)

    def compute_path(self, request: Request) -> str:
        """What native runs for `request`, in words (`kernels.explain`, `selfattn bench --explain`): the GEMMs
        (`gemm_path`), the softmax's vector instructions (`softmax_lanes`), and split-K where it splits."""
        path = f"{self.gemm_path(request.q.dtype)}; softmax in {softmax_lanes()}"
        if self.splits(request):
            chunk = cast(int, self.chunk(request))
            path += f"; split-K: {-(-request.Lk // chunk)} chunks of {chunk} keys per kv head, merged by lse"
        if self.stacks(request):
            path += (
                f"; the {request.G} query heads of each kv head stacked into one GEMM of {self._stacked_rows(request)}"
                " rows per key tile"
            )
        if self.runs_tiles(request):
            if self._operand_dtype(request.q.dtype) == torch.bfloat16:
                tiles = "q·kᵀ, P·V and the backward's products on VDPBF16PS (AVX512-BF16), operands packed once a call"
            else:
                tiles = "q·kᵀ, P·V and the backward's products on AVX512 tiles, K (and V) packed once a call"
            path += f"; {tiles}"
        rows = self.few_rows(request)
        if rows is not None:
            path += f"; q·kᵀ and P·V of {rows} rows in the kernel's own AVX2 loops (FEW_ROWS), not a packing GEMM"
        return path

    def runs_tiles(self, r: Request) -> bool:
        """True when `r` runs its q·kᵀ and P·V on the kernel's own tiles, operands packed once a call: bfloat16 on
        VDPBF16PS where the CPU has AVX512-BF16 (csrc `qk_bf16` / `pv_bf16`), float32 on AVX512 FMAs where it has
        AVX512F (csrc `qk_f32` / `pv_f32`), the backward's products too — the kernel checks cpuid too —
        with `tiles` True, or None on a CPU without AMX (whose MKL GEMMs were measured; the tiles were not, there)
        for a query whose G × Lq rows per kv head are more than FEW_ROWS; else MKL's GEMM runs each tile, or the
        few-row loops (`few_rows`). The tiles pack their operands (K; V too for bfloat16 and for a backward) once a
        call, a pass that only many query rows pay back (docs/calibration.md#native)."""
        operand = self._operand_dtype(r.q.dtype)
        if operand == torch.bfloat16:
            here = cpu.has("avx512_bf16") and cpu.has("avx512")
        else:
            here = operand == torch.float32 and cpu.has("avx512")
        if not here:
            return False
        if self.tiles is not None:
            return self.tiles
        return not cpu.has("amx_tile") and r.G * r.Lq > FEW_ROWS

    def few_rows(self, r: Request) -> int | None:
        """The rows of each GEMM where they are few enough for the kernel's own AVX2 loops (`FEW_ROWS`: float32, or
        bfloat16 off the tiles, on a CPU the kernel is built for with AVX2), else None."""
        vector = cpu.capability() in ARCH_FLAGS
        operand = self._operand_dtype(r.q.dtype)
        if operand not in (torch.float32, torch.bfloat16) or self.runs_tiles(r) or not vector:
            return None
        rows = self._stacked_rows(r) if self.stacks(r) else min(r.Lq, self.blocks(r)[0])
        return rows if rows <= FEW_ROWS else None

    def stacks(self, r: Request) -> bool:
        """True when the kernel runs the G query heads of a kv head as one GEMM (`STACK_ROWS`): GQA whose query
        block is short (a decoding step, a short prefill chunk)."""
        return r.G > 1 and self._stacked_rows(r) <= STACK_ROWS

    def _stacked_rows(self, r: Request) -> int:
        """G × the rows of a query block: the stacked GEMM's height."""
        return r.G * min(r.Lq, self.blocks(r)[0])

    def _operand_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype q, k, v reach the kernel in: half inputs stay half on the half-GEMM path."""
        if dtype in HALF_DTYPES and (self.half_gemm if self.half_gemm is not None else has_half_gemm(dtype)):
            return dtype
        return accumulate_dtype(dtype)

    def not_supported_reasons(self, request: Request) -> list[str]:
        """Every reason this backend cannot serve `request` (empty: it can). Never compiles."""
        reasons = super().not_supported_reasons(request)
        if request.scale == 0:
            reasons.append(
                "scale = 0 is not supported: BLAS skips a product whose alpha is 0, so a NaN in q or k "
                "would not reach the scores as it does in the reference; use backend='tiled' or 'naive'"
            )
        why = unavailable_reason()
        return reasons + ([] if why is None else [why])

    def auto_reasons(self, request: Request) -> list[str]:
        """ "auto" never waits on a compile: it takes native only once the kernel is built."""
        if is_built():
            return []
        return [
            "not built yet, and auto never waits on a compile: build it once with "
            "selfattn.kernels.native.build() (or `selfattn bench`, which says so)"
        ]

    def form_decides(self, r: Request) -> bool:
        """True: its reasons read no tensor values (scale is part of the form; `Backend.form_decides`)."""
        return True

    def state(self) -> Hashable:
        """Whether the kernel can be used and is built (`auto_reasons`): it changes once, when it is built."""
        return unavailable_reason(), is_built()

    def forward(self, r: Request) -> Result:
        compute, operand = r.accumulate_dtype, self._operand_dtype(r.q.dtype)
        q, k, v = (_prepared(t, operand) for t in (r.q, r.k, r.v))
        arguments = list(tile_arguments(r, *self.blocks(r), self.runs_tiles(r)))
        if r.rule.sinks is not None and r.rule.sinks.requires_grad and torch.is_grad_enabled():
            # differentiable: the operator's autograd gives its gradient
            arguments[_SINKS_AT] = r.rule.sinks.to(compute).contiguous()
        out, lse = native_attention(q, k, v, *arguments)
        return Result(out.to(r.q.dtype), None, lse if r.return_lse else None)


def tile_arguments(r: Request, block_q: int, block_k: int, tiles: bool = False) -> tuple:
    """The C++ tile's arguments after q, k, v, from the request's score rule — the one place its fields
    become the kernel's: (mask expanded to (B, Hq, Lq, Lk) — bool, or additive in the compute dtype,
    saturated — left, right (the rule's `bounds`, −1: unbounded), scale, softcap (0: none), each per-head
    feature ((Hq,) in the compute dtype, or None: `ScoreRule.per_head`), the segments' spans (2, B, L) and,
    only where a segment is not one contiguous run, their ids (B, L), a mask_mod's block map (kinds, index, partial
    of `masks.BlockMask`, or three None), block_q, block_k, and tiles: whether the
    products run on the kernel's own tiles (`NativeBackend.runs_tiles`; the kernel checks cpuid too))."""
    rule, acc = r.rule, r.accumulate_dtype
    mask = None
    if rule.mask is not None:
        mask = rule.mask if rule.mask_kind == "bool" else additive_in(rule.mask.detach(), acc)
        mask = mask.expand(r.B, r.Hq, r.Lq, r.Lk)
    left, right = (-1 if side is None else side for side in (rule.bounds or (None, None)))
    per_head = tuple(None if t is None else t.detach().to(acc).contiguous() for t in rule.per_head())
    span = ids = None
    if rule.segments is not None:
        span, contiguous = rule.segment_spans
        ids = None if contiguous else rule.segments.contiguous()
    blocks: tuple[torch.Tensor | None, ...] = (None, None, None)
    if rule.block_mask is not None:  # a mask_mod's block map: empty blocks skipped, partial ones masked
        bm = rule.block_mask
        blocks = (bm.kinds.contiguous(), bm.index.contiguous(), bm.partial.contiguous())
    return (mask, left, right, rule.scale, rule.softcap or 0.0, *per_head, span, ids, *blocks, block_q, block_k, tiles)


_SINKS_AT = [name for name, _ in TILE_ARGUMENTS].index("sinks")
"""Where the sinks stand among `tile_arguments`."""


def _prepared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in the compute dtype, laid out as the kernel reads it: unit stride along D, rows ≥ D apart."""
    return unit_stride(t.to(dtype))
