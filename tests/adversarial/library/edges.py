"""Surface "library-edges": the library's edge cases once found wrong and their neighbours, each with its expected
outcome.

    huge finite masks      a row masked with finfo(float32).min, ±3e38 entries, a float64 −1e300 mask with
                           float32 q, float16 q with a 7e4 mask: equal to the float64 spec on every backend
                           (a refusal of a float16 overflow must say float16, not float32)
    DecoderLM caches       per-layer caches out of sync, one cache for two layers: a ValueError
    tiled backward Lk = 0  gradients of zeros, no crash
    interceptors           recursive, returning None / a tuple / a tensor / the wrong shape: right, or a named
                           TypeError/ValueError from selfattn (no RecursionError, AttributeError)
    sparse, nested, meta   a named TypeError/ValueError from selfattn, not a deep RuntimeError
    transformers folders   a tensor missing, all missing, wrong shape, NaN, inf: refused when loading
    tokenizer user_words   [1, null]: an error that names user_words
    file permissions       a saved checkpoint's files follow the umask (0644 under 022, 0600 under 077)
    auto and flex          a transposed q must not make "auto" compile flex again (the warm check)

Cases that may hang or take the machine run in a child process with a timeout and resource limits
(edges_child.py): FIFO / device files as config.json or tokenizer.json, sdpa with a window at
L = 65536, and a save over an existing checkpoint that fails (file size limit): the old one must survive.
"""

# ruff: noqa: B023 — each case's lambda is called at once by `call`, inside its loop iteration

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import torch

import selfattn
from selfattn.kernels.base import Result
from tests.explainer.documents import explained

from ...tolerances import TOL
from ..judge import named
from ..tally import Tally
from .cases import _check_attention, call
from .edges_child import run_children

BACKENDS = ("naive", "sdpa", "tiled", "native", "auto")
TEXT_EN = "a blue monster walks into the forest"


def _spec_check(q, k, v, mask, causal=False):
    kw = {"causal": causal, "mask": mask, "window": None, "scale": None, "softcap": None}
    return _check_attention(q, k, v, kw, 0.0, nan_inputs=False)


def huge_mask_cases(tally: Tally) -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    fmin = torch.finfo(torch.float32).min
    small = torch.randn(6, 6, generator=g) * 0.5
    row_min = small.clone()
    row_min[2] = fmin  # transformers' idiom for a padded row: every key masked with finfo.min
    plus = small.clone()
    plus[:, 3] = 3e38  # one key outweighs all: the output is its value row
    minus = small.clone()
    minus[:, 1::2] = -3e38
    all_min = torch.full((6, 6), fmin)
    masks = [("a row of finfo.min", row_min), ("+3e38 on one key", plus), ("-3e38 on half the keys", minus)]
    masks += [("every entry finfo.min", all_min)]
    for backend in BACKENDS:
        for name, mask in masks:
            call(
                tally,
                f"huge mask float32 {name} backend={backend}",
                lambda: selfattn.attention(q, k, v, mask=mask, backend=backend),
                _spec_check(q, k, v, mask),
                expect="ok",
            )
        m64 = torch.full((6, 6), -1e300, dtype=torch.float64)
        m64[:3] = small[:3].double()  # rows 3-5 fully masked with a finite float64 value: the spec gives mean(V)
        call(
            tally,
            f"huge mask float64 -1e300 rows, float32 q backend={backend}",
            lambda: selfattn.attention(q, k, v, mask=m64, backend=backend),
            _spec_check(q, k, v, m64),
        )
        qh, kh, vh = q.half(), k.half(), v.half()
        m7 = small.clone()
        m7[:, 0] = 7e4  # over float16's 65504, well inside float32
        named(
            tally,
            f"float16 q, float32 mask 7e4 backend={backend}",
            lambda: selfattn.attention(qh, kh, vh, mask=m7, backend=backend),
            says=("float16",),
            check=_spec_check(qh, kh, vh, m7),
            expect=None,
        )


def cache_cases(tally: Tally) -> None:
    from selfattn import KVCache
    from selfattn.model.decoder import DecoderConfig, DecoderLM

    torch.manual_seed(2)
    model = DecoderLM(DecoderConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, max_len=32)).double().eval()
    ids = torch.randint(0, 30, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)

        def in_sync():
            cache = model.new_cache()
            model(ids[:, :4], cache=cache)
            return model(ids[:, 4:], cache=cache)

        def out_of_sync():
            cache = model.new_cache()
            model(ids[:, :4], cache=cache)
            k0 = torch.randn(1, 2, 2, 8, dtype=torch.float64)
            cache[0].append(k0, k0.clone())  # a step that stopped after layer 0: lengths [6, 4]
            return model(ids[:, 6:7], cache=cache)

        def shared():
            c = KVCache()
            return model(ids[:, :3], cache=[c, c])

        def shared_later():
            cache = model.new_cache()
            model(ids[:, :3], cache=cache)
            return model(ids[:, 3:5], cache=[cache[0], cache[0]])

        def near(out):
            return None if float((out - full[:, 4:]).abs().max()) < TOL["float64_decode_vs_full"] else "logits differ"

        call(tally, "DecoderLM cache in sync (control)", in_sync, near, expect="ok")
        call(tally, "DecoderLM caches out of sync (lengths [6, 4])", out_of_sync, expect="error")
        call(tally, "DecoderLM one cache for two layers (empty)", shared, expect="error")
        call(tally, "DecoderLM one cache for two layers (after a step)", shared_later, expect="error")


def backward_empty_cases(tally: Tally) -> None:
    for backend in ("naive", "sdpa", "tiled", "native", "auto"):
        for Lk in (0,):

            def run():
                q = torch.randn(1, 2, 3, 4, requires_grad=True)
                k = torch.randn(1, 2, Lk, 4, requires_grad=True)
                v = torch.randn(1, 2, Lk, 4, requires_grad=True)
                out = selfattn.attention(q, k, v, backend=backend)
                (out * torch.randn_like(out)).sum().backward()
                return out, q.grad, k.grad, v.grad

            def check(res):
                out, dq, dk, dv = res
                if out.abs().max() != 0 or dq is None or dq.abs().max() != 0:
                    return "a row that sees nothing must give output 0 and no gradient"
                return None if dk is not None and dk.shape == (1, 2, 0, 4) else f"dk {getattr(dk, 'shape', None)}"

            call(tally, f"backward with Lk=0 backend={backend}", run, check, expect="ok")


def interceptor_cases(tally: Tally) -> None:
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))

    def recursive(request, compute):
        return selfattn.attention(request.q, request.k, request.v, causal=request.causal, return_lse=True)

    cases = [
        ("calls attention itself", recursive, None),
        ("returns None", lambda r, c: None, "error"),
        ("returns a 2-tuple", lambda r, c: tuple(c(r))[:2], "error"),
        ("returns the output tensor", lambda r, c: c(r).output, "error"),
        ("returns a plain 3-tuple", lambda r, c: tuple(c(r)), None),
        ("returns the wrong shape", lambda r, c: Result(c(r).output[:, :, :2], None, None), "error"),
        ("returns a dict", lambda r, c: {"output": c(r).output}, "error"),
    ]
    for name, fn, expect in cases:

        def run():
            with selfattn.intercept(fn):
                return selfattn.attention(q, k, v, causal=True)

        named(tally, f"interceptor {name}", run, check=_spec_check(q, k, v, None, causal=True), expect=expect)


def layout_cases(tally: Tally) -> None:
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))
    nested = torch.nested.nested_tensor([torch.randn(2, 5, 4), torch.randn(2, 3, 4)])
    meta = torch.empty(1, 2, 5, 4, device="meta")
    cases = [
        ("sparse COO q", lambda: selfattn.attention(q.to_sparse(), k, v), ("sparse",)),
        ("sparse COO k", lambda: selfattn.attention(q, k.to_sparse(), v), ("sparse",)),
        ("sparse CSR v", lambda: selfattn.attention(q, k, v[0, 0].to_sparse_csr()), ()),
        ("sparse mask", lambda: selfattn.attention(q, k, v, mask=torch.ones(5, 5).to_sparse()), ("sparse",)),
        ("nested q", lambda: selfattn.attention(nested, nested, nested), ("nested",)),
        ("sparse x into MultiHeadSelfAttention", lambda: selfattn.MultiHeadSelfAttention(4, 2)(q[0].to_sparse()), ()),
    ]
    for name, fn, says in cases:
        named(tally, f"attention with {name}", fn, says=says)
    meta_shape = lambda out: None if out.shape == (1, 2, 5, 4) else f"output of shape {tuple(out.shape)}"  # noqa: E731
    named(
        tally,
        "attention with meta q, k, v",
        lambda: selfattn.attention(meta, meta, meta),
        check=meta_shape,
        expect=None,
    )


def _hf_folder(root: Path, name: str, kind: str, change) -> Path:
    from safetensors.torch import load_file, save_file

    from tests.hf.models import save

    folder = save(kind, root / name)
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    changed = change(tensors)
    if changed is not None:
        weights.unlink()
        save_file(changed, str(weights), metadata={"format": "pt"})
    return folder


def transformers_cases(tally: Tally, work: Path) -> None:
    """Refused when loading, naming the weights: a folder that transformers fills in with random values
    (it only warns) or whose weights cannot give a finite explanation."""
    import transformers

    from selfattn.explainer.session import Explainer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    def first(t: dict, part: str) -> str:
        return next(n for n in t if part in n and t[n].dim() == 2)

    changes = [
        ("one attention tensor missing", lambda t: {n: x for n, x in t.items() if n != first(t, "attn")}),
        ("every tensor but one missing", lambda t: {first(t, "attn"): t[first(t, "attn")]}),
        ("a tensor of the wrong shape", lambda t: {**t, first(t, "attn"): torch.zeros(3, 3)}),
        ("a NaN tensor", lambda t: {**t, first(t, "attn"): torch.full_like(t[first(t, "attn")], math.nan)}),
        ("an inf tensor", lambda t: {**t, first(t, "mlp"): torch.full_like(t[first(t, "mlp")], math.inf)}),
    ]

    def strict(ex):
        try:
            json.dumps(explained(ex, TEXT_EN), allow_nan=False)
        except ValueError as e:
            return f"loaded, and its explanation fails: {e}"
        return None

    for kind in ("gpt2", "llama"):
        folder = _hf_folder(work, f"hf_{kind}_control", kind, lambda t: None)
        call(tally, f"transformers {kind} folder intact (control)", lambda: Explainer.load(folder), strict, "ok")
        for i, (name, change) in enumerate(changes):
            folder = _hf_folder(work, f"hf_{kind}_{i}", kind, change)
            named(tally, f"transformers {kind} folder, {name}", lambda: Explainer.load(folder), says=("weight",))


def tokenizer_cases(tally: Tally, work: Path) -> None:
    from selfattn.model.checkpoint import DEFAULT_DIR, load_checkpoint

    config = json.loads((DEFAULT_DIR / "config.json").read_text())
    config.pop("files", None)
    tok = json.loads((DEFAULT_DIR / "tokenizer.json").read_text())
    for i, (name, words, says) in enumerate(
        [
            ("user_words [1, null]", [1, None], ("user_words",)),
            ("user_words ['a', 3]", ["a", 3], ("user_words",)),
            ("user_words a string", "一只", ("user_words",)),
            ("user_words [[]]", [[]], ("user_words",)),
        ]
    ):
        d = work / f"tokenizer_{i}"
        shutil.copytree(DEFAULT_DIR, d)
        (d / "config.json").write_text(json.dumps(config))
        (d / "tokenizer.json").write_text(json.dumps({**tok, "user_words": words}))
        named(tally, f"tokenizer {name}", lambda: load_checkpoint(d), says=says)


def permission_cases(tally: Tally, work: Path) -> None:
    from selfattn.model.checkpoint import DEFAULT_DIR, load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(DEFAULT_DIR)
    for umask in (0o022, 0o077, 0o002):
        out = work / f"perm_{umask:03o}"

        def run():
            old = os.umask(umask)
            try:
                return save_checkpoint(ckpt.model, ckpt.tokenizer, out)
            finally:
                os.umask(old)

        def check(written):
            want = 0o666 & ~umask
            modes = {Path(p).name: Path(p).stat().st_mode & 0o777 for p in written.values()}
            bad = {n: oct(m) for n, m in modes.items() if m != want}
            return f"files written {bad}, the umask {umask:03o} says {oct(want)}" if bad else None

        call(tally, f"save_checkpoint file modes under umask {umask:03o}", run, check, expect="ok")


def flex_cases(tally: Tally) -> None:
    """Auto takes a warm flex only for the signature it compiled: a transposed q is another one."""
    from torch._dynamo.utils import counters

    from selfattn.functional import build_request
    from selfattn.kernels import BACKENDS, dispatch

    g = torch.Generator().manual_seed(8)
    L, kw = 2048, {"scale": 0.0, "softcap": 1.0}  # refused by sdpa (softcap) and native (scale 0): flex or tiled
    q, k, v = (torch.randn(1, 2, L, 16, generator=g) for _ in range(3))
    if BACKENDS["flex"].not_supported_reasons(build_request(q, k, v, **kw)):
        return
    check = _check_attention(q, k, v, {"causal": False, "mask": None, "window": None, **kw}, 0.0, nan_inputs=False)
    call(tally, "flex warm-up call (contiguous q)", lambda: selfattn.attention(q, k, v, backend="flex", **kw), check)
    if dispatch.choose(build_request(q, k, v, **kw), "auto").name != "flex":
        return  # auto does not take flex for this request here: nothing to see
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # the same numbers, (B, L, H, D) in memory
    before = sum(counters["frames"].values())

    def check_t(out):
        compiled = sum(counters["frames"].values()) - before
        return f"auto compiled flex again for a transposed q ({compiled} frames)" if compiled else check(out)

    call(tally, "auto with a transposed q after flex is warm", lambda: selfattn.attention(qt, k, v, **kw), check_t)
    call(tally, "flex with a transposed q", lambda: selfattn.attention(qt, k, v, backend="flex", **kw), check)


def run(work: Path) -> list[Tally]:
    work.mkdir(parents=True, exist_ok=True)
    parts = [
        ("huge finite masks", huge_mask_cases),
        ("DecoderLM caches", cache_cases),
        ("backward Lk=0", backward_empty_cases),
        ("interceptors", interceptor_cases),
        ("sparse, nested, meta", layout_cases),
        ("transformers folders", lambda t: transformers_cases(t, work)),
        ("tokenizer files", lambda t: tokenizer_cases(t, work)),
        ("file permissions", lambda t: permission_cases(t, work)),
        ("auto and flex", flex_cases),
        ("in a child (hangs, memory, failed saves)", lambda t: run_children(t, work)),
    ]
    tallies = []
    for name, fn in parts:
        tally = Tally(f"library edges: {name}")
        fn(tally)
        tallies.append(tally)
    return tallies
