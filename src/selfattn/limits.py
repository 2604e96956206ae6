"""Limits on numbers that several rooms accept (CLI arguments, model configs, the calls they reach), written once.

    SIZES                           the largest of each size of a model (layers, width, heads, ...)
    CONFIG_LIMITS                   those sizes under the field names of selfattn's DecoderConfig, EncoderConfig
    TRANSFORMERS_LIMITS             the same sizes under the field names of transformers' config.json
    check_parameters(n, what, how)  the one parameter budget: MAX_PARAMETERS, and no more than this
                                    machine's available memory holds (`parameter_budget`)

Pure Python: the CLI checks its arguments against these before importing torch, and a config is
checked before any tensor is allocated.
"""

from __future__ import annotations

__all__ = [
    "MAX_SEED",
    "MAX_THREADS",
    "MAX_PARAMETERS",
    "MAX_LOAD",
    "TEMPERATURE_RANGE",
    "MAX_ABLATED_HEADS",
    "MAX_PATCH_TOKENS",
    "MAX_BATCH_ROWS",
    "batch_rows",
    "MAX_TOKEN_CHARS",
    "GGUF_CACHE_BYTES",
    "SIZES",
    "CONFIG_LIMITS",
    "TRANSFORMERS_LIMITS",
    "BYTES_PER_PARAMETER",
    "DTYPE_BYTES",
    "check_dtype",
    "MEMORY_SHARE",
    "available_memory",
    "parameter_budget",
    "check_parameters",
    "ARRAY_BYTES",
    "BACKWARD_TILE_BYTES",
    "BLOCK_MASK_CACHE_BYTES",
    "CACHED_KV_BYTES",
    "CACHE_BYTES",
    "DATASET_BYTES",
    "DATASET_RESULTS_BYTES",
    "MAX_DATASET_ROWS",
    "DEFAULT_BUDGET_BYTES",
    "DIGEST_WEIGHTS_BYTES",
    "HEAD_WORDS_BYTES",
    "JSON_NUMBER_BYTES",
    "MAX_BODY_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_JSON_BYTES",
    "MAX_MANIFEST_BYTES",
    "MAX_PAGE_BYTES",
    "LONG_PAGE_BYTES",
    "MAX_RESPONSE_BYTES",
    "THUMBNAIL_BYTES",
    "PAGE_BYTES",
    "PAGE_FIXED_BYTES",
    "RESULT_CACHE_BYTES",
    "TILE_BUDGET_BYTES",
    "TRACE_CACHE_BYTES",
]

MAX_SEED = 2**63 - 1
"""Largest seed of training, sampling and benchmarks: a signed 64-bit integer, which torch.Generator
and NumPy both take (torch refuses 2**64 with "Overflow when unpacking long long")."""

MAX_THREADS = 1024
"""Most torch threads a run may ask for: more than any machine this runs on has cores (torch accepts
100,000 and then crashes the process at exit)."""

MAX_PARAMETERS = 100_000_000_000
"""Largest module or model (parameters, estimated from its sizes before any tensor is allocated) on any
machine: 400 GB of float32. Below it, what decides is the memory available (`parameter_budget`): a 7B model
loads on a machine with 64 GB free, not on a laptop with 8. Wider asks get a ValueError naming the sizes,
not torch's "can't allocate memory" from deep inside."""

BYTES_PER_PARAMETER = 4
"""A parameter's bytes as the models are built here, and as the explainer loads them by default: float32."""

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""The dtypes a model may be loaded in (`--dtype`, `selfattn.explain(..., dtype=)`), and a parameter's bytes in
each: the parameter budget counts these, so a 7B model in bfloat16 (14 GB) fits where its float32 (28 GB) does not."""


def check_dtype(name: object) -> str:
    """`name` if it is one of DTYPE_BYTES, else a ValueError naming it (a TypeError if it is no string)."""
    if not isinstance(name, str):
        raise TypeError(f"dtype must be one of {', '.join(DTYPE_BYTES)} (a string), got {type(name).__name__}")
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {name!r}")
    return name


MEMORY_SHARE = 0.5
"""The weights may take at most this share of the memory available when the model is built: the rest is
for the activations of a forward pass (the explainer keeps every layer's Q, K, V and weights)."""

MAX_ABLATED_HEADS = 1024
"""Most heads one ablation names (each once): a list longer than this is refused before it is read further,
whatever the model (a model has at most SIZES["layers"] × SIZES["heads"] heads, far more than anyone ablates)."""

MAX_PATCH_TOKENS = 128
"""Longest text (in tokens) activation patching takes: it runs one prompt of L tokens per (layer, head) and per
(layer, position) (each position's residual patched apart), in batches of up to MAX_BATCH_ROWS, so its work grows
as layers × L²; at 128 tokens a 30-layer model runs ~4,000 prompts of 128 tokens."""

GGUF_CACHE_BYTES = 16 << 30
"""Most bytes the cache of dequantized GGUF weights holds (`explainer.gguf_cache`): beyond it the entries used
longest ago are removed; 16 GiB holds SmolLM2-135M (0.5 GB as float32) many times, a 7B model in bfloat16 once."""

MAX_BATCH_ROWS = 512
"""Most prompts one batched pass of activation patching runs at once, whatever the memory: beyond a few hundred
rows a CPU's matrix products run no faster, and one pass's memory grows with every row."""


def batch_rows(row_bytes: int, available: int | None = None) -> int:
    """How many prompts of `row_bytes` (their activations in one pass) a batched pass may hold: MEMORY_SHARE of the
    `available` bytes (default: `available_memory()`; the loaded weights are already taken from it), at least 1,
    at most MAX_BATCH_ROWS."""
    available = available_memory() if available is None else available
    if available is None:
        return MAX_BATCH_ROWS
    return max(1, min(MAX_BATCH_ROWS, int(available * MEMORY_SHARE) // max(1, row_bytes)))


MAX_TOKEN_CHARS = 256
"""Longest text of one token named by its text (a patching target or foil): longer ones are never one token."""

SIZES = {
    "layers": 512,
    "width": 1 << 15,
    "heads": 1024,
    "head_dim": 1024,
    "hidden": 1 << 18,
    "vocab": 1 << 21,
    "positions": 1 << 21,
}
"""Largest value of each size of a model (blocks; d_model; query or key/value heads; one head's width; the
MLP's hidden width; vocabulary; positions): beyond any released model, far below what would exhaust memory
through one field alone. Every size field of every config read is checked against one of these."""

CONFIG_LIMITS = {
    "vocab_size": SIZES["vocab"],
    "type_vocab_size": SIZES["vocab"],
    "d_model": SIZES["width"],
    "n_layers": SIZES["layers"],
    "n_heads": SIZES["heads"],
    "n_kv_heads": SIZES["heads"],
    "d_ff": SIZES["hidden"],
    "max_len": SIZES["positions"],
}
"""SIZES under the field names of `selfattn.model.decoder.DecoderConfig` and `encoder.EncoderConfig`."""

TRANSFORMERS_LIMITS = {
    "num_hidden_layers": SIZES["layers"],
    "n_layer": SIZES["layers"],
    "hidden_size": SIZES["width"],
    "n_embd": SIZES["width"],
    "num_attention_heads": SIZES["heads"],
    "n_head": SIZES["heads"],
    "num_key_value_heads": SIZES["heads"],
    "head_dim": SIZES["head_dim"],
    "intermediate_size": SIZES["hidden"],
    "n_inner": SIZES["hidden"],
    "vocab_size": SIZES["vocab"],
    "max_position_embeddings": SIZES["positions"],
    "n_positions": SIZES["positions"],
}
"""SIZES under the field names of a transformers config.json (llama/qwen/mistral/gemma names, GPT-2's names)."""

_CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),  # cgroup v1
)


def _read_int(path: str) -> int | None:
    """The integer a one-number kernel file holds (None: absent, unreadable, or "max")."""
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read(64).strip())
    except (OSError, ValueError):
        return None


def available_memory() -> int | None:
    """Bytes of memory a new allocation can take now, or None where the system does not say.

    psutil's available memory (Linux: MemAvailable), lowered to what the process's memory cgroup (a
    container's limit) still allows."""
    try:
        import psutil

        found = int(psutil.virtual_memory().available)
    except (ImportError, OSError, RuntimeError, AttributeError):
        return None
    for limit_file, usage_file in _CGROUP_FILES:
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None:
            found = min(found, max(limit - usage, 0))
    return found


def parameter_budget(available: int | None = None, dtype: str = "float32") -> int:
    """Most parameters a model built now in `dtype` may have: MAX_PARAMETERS, or fewer where MEMORY_SHARE of the
    `available` bytes (default: `available_memory()`) holds fewer at DTYPE_BYTES[dtype] each."""
    available = available_memory() if available is None else available
    if available is None:
        return MAX_PARAMETERS
    return min(MAX_PARAMETERS, int(available * MEMORY_SHARE) // DTYPE_BYTES[check_dtype(dtype)])


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_parameters(
    estimate: int, what: str, how: str = "", *, available: int | None = None, dtype: str = "float32"
) -> None:
    """Refuse (ValueError), before any tensor is allocated, a model of about `estimate` parameters over the
    budget: the sentence names the estimate, the limit it broke and the memory available.

    what       the model, e.g. "the config" or a config file's path
    how        how the estimate was made, e.g. "n_layers × d_model × …"
    available  bytes of memory available (default: `available_memory()`; tests pass their own)
    dtype      what the weights are loaded in (a key of DTYPE_BYTES)"""
    available = available_memory() if available is None else available
    if estimate <= parameter_budget(available, dtype):
        return
    weights = f"{_gib(estimate * DTYPE_BYTES[dtype])} as {dtype}"
    memory = "" if available is None else f"; this machine has {_gib(available)} of memory available"
    about = f"{what} describes about {estimate:,} parameters" + (f" ({how})" if how else "")
    if estimate > MAX_PARAMETERS or available is None:  # without a memory figure the budget is MAX_PARAMETERS
        raise ValueError(
            f"{about}, {weights}: over the limit of {MAX_PARAMETERS:,} (selfattn.limits.MAX_PARAMETERS){memory}"
        )
    raise ValueError(
        f"{about}, {weights}: more than this machine can hold with room to run it (the weights may take "
        f"{MEMORY_SHARE:.0%} of the {_gib(available)} of memory available, {parameter_budget(available, dtype):,} "
        f"parameters); free memory or choose a smaller model"
    )


MAX_LOAD = 256
"""Most busy processes `selfattn bench --load` starts (`selfattn.bench.load`)."""

TEMPERATURE_RANGE = (0.01, 100.0)
"""Lowest and highest softmax temperature, of sampling (`selfattn.model.generate`) and of the explainer's
intervention: logits / 0.01 stay finite in float32 for any logit a model gives (a temperature like 1e-300
turns them into ±inf and the probabilities into NaN), and at 100 the distribution is all but uniform."""


# --- budgets in bytes: every *_BYTES of the package (a test holds that none is defined elsewhere) ---

BACKWARD_TILE_BYTES = 8 << 20
"""Most bytes one score tile (B, Hq, rows, block keys) of the backward may take: the strip's rows are
chosen so, whatever the block's length, so a rank's peak memory follows its O(Lr) tensors, not Lr²."""

DIGEST_WEIGHTS_BYTES = 256 << 20
"""A call whose weights (B·H·L·L, in its dtype) fit this is asked for them at the capture point."""

MAX_MANIFEST_BYTES = 1 << 20

MAX_ENTRY_BYTES = 16 << 20
"""Most bytes one entry of what is kept per model files takes (`explainer.source.stamps`): the induction probe's
measures of a 64 × 64-head model take about 5 MB."""

CACHE_BYTES = 256 << 20
"""Traces kept per Session of the Python API (one `selfattn.explain` call and the Explanations made from it)."""

MAX_PAGE_BYTES = 23_500_000
"""Most bytes the layers' arrays may take in the page (`packing`: packed, base64) when `layers="auto"`:
beyond, the dict holds the shown layer and the layers nearest it that fit, and doc["omitted"] names the
others and how to get them (`--layers`, `layers=[…]`, the app). With the thumbnails of every head (at most
64 × 64 u16 each) and the script, a page stays under PAGE_BYTES (`layers_budget`): every layer of SmolLM2 (30 × 9
heads) at 128 tokens takes 23.1 MB."""

LONG_PAGE_BYTES = 6_000_000
"""MAX_PAGE_BYTES for a text of more than `page_budget.ALL_LAYERS_UP_TO` tokens (issue 43: every layer up to 128
tokens; beyond, --layers, and the app fetches any layer): the time a page adds grows with the bytes it packs (on a
2-core EPYC, 0.6 s for the six layers, 21 MB, of SmolLM2 at 512 tokens), so a long text's page holds the shown layer
and the nearest that fit 6 MB: one of SmolLM2's or the 0.5B configuration's at 512 tokens, both of the bundled
model's."""

PAGE_BYTES = 25_000_000
"""The most a page of layers="auto" takes: the layers' arrays, every head's thumbnail (doc["display"]: 0.8 MB for
SmolLM2's 30 × 9 heads), the words of every head (descriptions, summaries: ~1.6 KB a head) and the script."""

PAGE_FIXED_BYTES = 400_000
"""The page's script and styles (~0.14 MB), its texts and the doc's fields that do not grow with heads or layers."""

HEAD_WORDS_BYTES = 2_000
"""A head's words in the doc (`descriptions`, `summaries`): 1.6 KB each on the 131-token SmolLM2 page."""

JSON_NUMBER_BYTES = 21
"""What one float costs in JSON, about (sign, 17 digits, point, exponent, comma); a 0/1 of `visible`: 2."""

THUMBNAIL_BYTES = 11_000
"""What one head's thumbnail takes in the page at most: 64 × 64 u16 values, base64 (doc["display"])."""

ARRAY_BYTES = 160
"""The JSON around one packed array ({"dtype", "shape", "digits", "b64"}, its key) and a head's other fields."""

MAX_HEADER_BYTES = 16 * 1024
"""Most bytes of request headers (names and values together) accepted: browsers send 1-2 KB."""

MAX_RESPONSE_BYTES = 16 << 20
"""Largest response sent (estimated before it is encoded): 16 MiB."""

MAX_BODY_BYTES = 64 * 1024
"""Largest request body accepted: MAX_CHARS characters, JSON-escaped, fit with room to spare."""

TRACE_CACHE_BYTES = 128 << 20
"""Most bytes of traces the app keeps for reuse (`TraceCache`): a few dozen short texts of a small model."""

RESULT_CACHE_BYTES = 16 << 20
"""Most bytes (as JSON) of experiment results kept: a patching run of 30 layers × 128 positions is ~100 KB."""

MAX_JSON_BYTES = 64 << 20
"""Largest JSON file read by default (64 MiB): a tokenizer of a real model is a few MiB."""

DEFAULT_BUDGET_BYTES = 1 << 30
"""Most bytes a backend may materialise beyond its O(L) tensors (naive's weight matrix, SDPA's dense
mask) unless `budget(...)` says otherwise: 1 GiB."""

CACHED_KV_BYTES = 6 << 20
"""Under GQA SDPA reads a kv head's K and V once per query head; while they take at most this much the repeats
hit the cache (`CACHED_READ_GBPS`), beyond it they come from memory again (measured: docs/calibration.md)."""

TILE_BUDGET_BYTES = 8 << 20
"""Most bytes one score tile (heads × rows × keys) may take; more heads are split into chunks."""

BLOCK_MASK_CACHE_BYTES = 256 << 20
"""Most bytes of block masks `selfattn.attention(mask_mod=...)` keeps, one per (mask_mod, shape), the least recently
used dropped first (`masks.cached_block_mask`): a document mask at L = 8192 holds a few hundred KiB, a dilated one
(every block partial) the whole L² bools, 64 MiB."""

DATASET_BYTES = 16 << 20
"""Largest dataset of prompts read (`--dataset FILE`, JSONL or CSV): 16 MiB, checked before a byte is parsed."""

DATASET_RESULTS_BYTES = 256 << 20
"""Largest results file of a dataset run read back to resume it (`--out FILE`): each prompt's per-head numbers."""

MAX_DATASET_ROWS = 10_000
"""Most prompts a dataset holds: each is a whole explain run (and a patching run where it has a corrupted text)."""
