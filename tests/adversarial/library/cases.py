"""Surface (a): the library. Hostile arguments to `selfattn.attention`, `attention_weights`, the modules,
`KVCache`, and hostile model folders for `load_checkpoint` / `Explainer.load`.

Every accepted call is checked: attention against the float64 spec (`selfattn.reference.attention`),
a loaded model by explaining a short text (finite numbers, strict JSON).
"""

# ruff: noqa: B023 — each case's lambda is called at once by `call`, inside its loop iteration

from __future__ import annotations

import json
import math
import random
import shutil
import struct
from pathlib import Path

import numpy as np
import torch

import selfattn
from tests.explainer.documents import explained
from tests.helpers import make_inputs, reference_of

from ...tolerances import FLOOR, TOL
from ..tally import Tally, raised_outside

SEED = 11
ATTENTION_CASES = 420
"""Random hostile attention calls (plus the named regressions)."""
HOSTILE_TOL = {dtype: TOL[f"hostile_{str(dtype).removeprefix('torch.')}"] for dtype in FLOOR}
"""Largest |output - float64 reference| accepted per input dtype (scaled by the values' size): tests/tolerances.py."""

HOSTILE_SHARE = 0.15
"""Chance that each argument of a random call is drawn from its hostile list (else from its valid one), so
that about a third of the calls are valid and must equal the reference, and the rest carry 1-3 bad values."""
VALID = {
    "scale": [None, 0.0, -0.0, -1.0, 0.5, 2, 1e-300, 1e6, -1e6, np.float32(0.5)],
    "softcap": [None, None, None, 0.5, 30.0, 1e6, 1e-3],
    "window": [None, None, 1, 2, 5, 10**30, np.int64(3)],
    "causal": [True, False, np.bool_(True)],
    "dropout_p": [0.0, 0.0, 0.0, 0.5],
    "backend": ["auto", "naive", "sdpa", "tiled"],
    "dtype": [torch.float64, torch.float64, torch.float32, torch.float16, torch.bfloat16],
    "magnitude": [1.0, 1.0, 30.0, 1e3],
    "mask": ["none", "none", "bool", "bool_none_visible", "additive", "1d", "2d", "half"],
}
HOSTILE = {
    "scale": [1e300, -1e300, math.inf, -math.inf, math.nan, True, 10**30, 1e7, "1", torch.tensor(0.5)],
    "softcap": [0.0, -1.0, 1e-300, 1e308, math.inf, math.nan, True, "x"],
    "window": [0, -3, True, 2.0, "4", math.inf],
    "causal": [1, "yes", None, torch.tensor(True)],
    "dropout_p": [1.0, -0.1, math.nan, True, math.inf],
    "backend": ["flex", "NAIVE", None, 3, ""],
    "dtype": [torch.int64, torch.complex64, torch.bool],
    "magnitude": [1e20],
    "mask": ["additive_special", "wrong_shape", "int", "list", "5d"],
}
ADDITIVE_SPECIALS = [-math.inf, math.inf, math.nan, -1e300, 1e300, 1e38, -1e38]


def call(tally: Tally, label: str, fn, check=None, expect: str | None = None) -> str:
    """Run `fn()`; record its outcome. check(value) -> None if right, else why it is wrong.
    expect "error": accepting is wrong; "ok": refusing is wrong; None: either, if right."""
    try:
        value = fn()
    except (TypeError, ValueError, OSError) as exc:
        if raised_outside(exc):
            tally.note_outside(label, exc)
        if not str(exc).strip():
            return tally.record("wrong", label, f"{type(exc).__name__} with no message")
        if expect == "ok":
            return tally.record("wrong", label, f"valid input refused: {type(exc).__name__}: {exc}")
        return tally.record("error", label)
    except Exception as exc:  # noqa: BLE001 — the point is to count these
        return tally.record("traceback", label, f"{type(exc).__name__}: {str(exc)[:200]}")
    if expect == "error":
        return tally.record("wrong", label, "accepted, should be refused")
    why = check(value) if check is not None else None
    return tally.record("wrong", label, why) if why else tally.record("ok", label)


# --- attention ---------------------------------------------------------------------------------------------


def _draw(rng: random.Random, name: str):
    return rng.choice(HOSTILE[name] if rng.random() < HOSTILE_SHARE else VALID[name])


def _mask(kind: str, rng: random.Random, B, Hq, Lq, Lk, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        return None
    if kind == "bool":
        return torch.rand(B, 1, Lq, Lk, generator=g) > 0.4
    if kind == "bool_none_visible":
        return torch.zeros(1, 1, Lq, Lk, dtype=torch.bool)
    if kind in ("additive", "additive_special"):
        m = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
        if kind == "additive_special" and m.numel():
            m.view(-1)[rng.randrange(m.numel())] = rng.choice(ADDITIVE_SPECIALS)
        return m
    if kind == "1d":
        return torch.rand(Lk, generator=g) > 0.3
    if kind == "2d":
        return torch.rand(Lq, Lk, generator=g) > 0.3
    if kind == "wrong_shape":
        return torch.ones(Lq + 1, Lk + 2, dtype=torch.bool)
    if kind == "int":
        return torch.ones(Lq, Lk, dtype=torch.int64)
    if kind == "list":
        return [[True] * Lk] * Lq
    if kind == "5d":
        return torch.ones(1, 1, 1, Lq, Lk, dtype=torch.bool)
    return torch.zeros(Lq, Lk, dtype=torch.float16)  # "half": an additive mask of another float dtype


def _check_attention(q, k, v, kw, dropout_p, *, nan_inputs: bool):
    """A check: the output equals the float64 reference (NaN only where the reference has NaN)."""

    def check(result):
        out = result[0] if isinstance(result, tuple) else result
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (*q.shape[:3], v.shape[3]):
            return f"output of shape {getattr(out, 'shape', None)}, expected {(*q.shape[:3], v.shape[3])}"
        if dropout_p:  # random: only the shape and finiteness can be checked
            return None if nan_inputs or bool(torch.isfinite(out).all()) else "non-finite output with dropout"
        window = kw["window"]
        if window is not None:
            window = min(int(window), max(k.shape[2], 1))
        with np.errstate(all="ignore"):
            ref, ref_w, ref_lse = reference_of(
                q,
                k,
                v,
                causal=bool(kw["causal"]),
                mask=kw["mask"],
                window=window,
                scale=None if kw["scale"] is None else float(kw["scale"]),
                softcap=kw["softcap"],
            )
        got = out.detach().double().numpy()
        if not nan_inputs and not np.isfinite(got).all():
            return f"non-finite output (reference finite: {bool(np.isfinite(ref).all())})"
        size = max(1.0, float(np.nanmax(np.abs(ref), initial=0.0)))
        tol = HOSTILE_TOL[q.dtype] * size
        if not np.allclose(got, ref, atol=tol, rtol=0, equal_nan=True):
            err = float(np.nanmax(np.abs(got - ref), initial=0.0))
            return f"output differs from the float64 reference by {err:.3g} (tolerance {tol:.3g})"
        if isinstance(result, tuple) and result[1] is not None:
            if not np.allclose(result[1].double().numpy(), ref_w, atol=tol, rtol=0, equal_nan=True):
                return "weights differ from the float64 reference"
        return None

    return check


def attention_cases(tally: Tally) -> None:
    """ATTENTION_CASES random calls drawn from random.Random(SEED) (the run's table), then the named ones."""
    rng = random.Random(SEED)
    for i in range(ATTENTION_CASES):
        attention_case(tally, rng, i)
    named_attention_cases(tally)


def attention_case(tally: Tally, rng, i: int) -> str:
    """One random attention call, its arguments drawn from `rng` (random.Random, or `Drawn` for hypothesis):
    equal to the float64 reference, or refused with a clear error. Returns its outcome."""
    Hkv, G = rng.randint(1, 2), rng.randint(1, 2)
    B, Hq, Lq, Lk, D = rng.randint(1, 2), Hkv * G, rng.randint(0, 9), rng.randint(0, 9), rng.randint(1, 5)
    Dv = D if rng.random() < 0.8 else rng.randint(1, 6)
    dtype, magnitude = _draw(rng, "dtype"), _draw(rng, "magnitude")
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, Dv, dtype=dtype, seed=i, magnitude=magnitude)
    kw = {
        "causal": _draw(rng, "causal"),
        "mask": _mask(_draw(rng, "mask"), rng, B, Hq, Lq, Lk, seed=i),
        "window": _draw(rng, "window"),
        "scale": _draw(rng, "scale"),
        "softcap": _draw(rng, "softcap"),
    }
    dropout_p, backend = _draw(rng, "dropout_p"), _draw(rng, "backend")
    flags = {"return_lse": True} if rng.random() < 0.3 else {}
    if rng.random() < 0.15 and dtype.is_floating_point and Lk > 1:
        k[..., Lk - 1, :] = math.nan  # a NaN in the last key: causal-hidden from every row but the last
    nan_inputs = dtype.is_floating_point and bool(torch.isnan(k).any())
    label = (
        f"attention#{i} {tuple(q.shape)} k{tuple(k.shape)} v{tuple(v.shape)} {dtype} x{magnitude:g} "
        f"backend={backend!r} dropout={dropout_p!r} " + " ".join(f"{n}={_short(x)}" for n, x in kw.items())
    )
    return call(
        tally,
        label,
        lambda: selfattn.attention(q, k, v, **kw, dropout_p=dropout_p, backend=backend, **flags),
        _check_attention(q, k, v, kw, dropout_p, nan_inputs=nan_inputs),
    )


class Drawn:
    """The few methods of random.Random that `attention_case` uses, drawn from a hypothesis `data` object, so
    that hypothesis chooses (and shrinks) every argument."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self._data, self._st = data, st

    def randint(self, a: int, b: int) -> int:
        return self._data.draw(self._st.integers(a, b))

    def randrange(self, n: int) -> int:
        return self._data.draw(self._st.integers(0, n - 1))

    def random(self) -> float:
        """In [0, 1), its simplest value (where hypothesis starts and shrinks to) 1 - 2⁻³², not 0: the plain side
        of every `rng.random() < share` (a valid argument, no NaN key), so a failure shrinks to its fewest
        hostile arguments and most calls stay valid enough to be checked against the reference."""
        return 1.0 - self._data.draw(self._st.integers(1, 2**32)) / 2**32

    def choice(self, seq):
        return self._data.draw(self._st.sampled_from(list(seq)))


def _short(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor{tuple(x.shape)}:{str(x.dtype).replace('torch.', '')}"
    return repr(x)[:30]


def named_attention_cases(tally: Tally) -> None:
    """Attention calls once answered wrong, each on every backend."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float32) for _ in range(3))
    hidden_nan = k.clone()
    hidden_nan[..., 4, :] = math.nan  # hidden from rows 0-3 by causality
    pad = torch.tensor([True, True, True, False, True])  # a 1-D key-padding mask
    cases = [
        ("scale=0 causal", {"causal": True, "scale": 0.0}),
        ("scale<0 causal", {"causal": True, "scale": -0.5}),
        ("1-D key padding mask", {"mask": pad}),
        ("causal NaN hidden key", {"causal": True}),
        ("mask-hidden NaN key", {"mask": pad}),
        ("scale=1e300", {"scale": 1e300}),
        ("softcap=1e308", {"softcap": 1e308}),
        ("+inf additive mask", {"mask": torch.full((5, 5), math.inf)}),
        ("window=10**30", {"window": 10**30, "causal": True}),
    ]
    for backend in ("auto", "naive", "sdpa", "tiled"):
        for name, kw in cases:
            keys = hidden_nan if "NaN" in name else k
            if name == "mask-hidden NaN key":
                keys = k.clone()
                keys[..., 3, :] = math.nan
            full = {"causal": False, "mask": None, "window": None, "scale": None, "softcap": None, **kw}
            call(
                tally,
                f"named {name} backend={backend}",
                lambda: selfattn.attention(q, keys, v, **kw, backend=backend),
                _check_attention(q, keys, v, full, 0.0, nan_inputs="NaN" in name),
            )
    for Hq, Lk, Dv in ((0, 3, 4), (1, 0, 4), (1, 3, 0)):
        qq, kk, vv = torch.zeros(1, Hq, 3, 4), torch.zeros(1, max(Hq, 1), Lk, 4), torch.zeros(1, max(Hq, 1), Lk, Dv)
        for backend in ("naive", "tiled"):
            full = {"causal": True, "mask": None, "window": None, "scale": None, "softcap": None}
            call(
                tally,
                f"named zero-sized Hq={Hq} Lk={Lk} Dv={Dv} backend={backend}",
                lambda: selfattn.attention(qq, kk, vv, causal=True, backend=backend),
                _check_attention(qq, kk, vv, full, 0.0, nan_inputs=False),
            )


def attention_weights_cases(tally: Tally) -> None:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    res = selfattn.attention(q, k, v, causal=True, return_weights=True, return_lse=True, backend="naive")
    lse = res.lse
    for rows in [
        None,
        0,
        -1,
        5,
        6,
        -7,
        10**30,
        True,
        1.5,
        "1",
        [0, 2],
        [0, 0],
        [],
        slice(1, 4),
        slice(None, None, -1),
        torch.tensor([1, 3]),
        torch.tensor([1.0]),
        torch.tensor([[1]]),
        torch.tensor([True]),
        np.int64(2),
        [np.int64(1)],
        [1, None],
        range(3),
        {0: 1},
    ]:

        def check(w, rows=rows):
            if rows is None or isinstance(rows, slice):
                index = torch.arange(6)[rows if rows is not None else slice(None)]
            elif isinstance(rows, torch.Tensor):
                index = rows
            else:
                try:
                    index = torch.tensor(
                        [int(r) for r in (rows if hasattr(rows, "__iter__") else [rows])], dtype=torch.long
                    )
                except (TypeError, ValueError):
                    return "accepted rows that are not integers"
            want = res.weights[:, :, index]
            if w.shape != want.shape or not torch.allclose(w, want, atol=TOL["float64"]):
                return "weights differ from attention's"
            return None

        call(
            tally,
            f"attention_weights rows={rows!r}",
            lambda: selfattn.attention_weights(q, k, lse, rows, causal=True),
            check,
        )
    for name, bad in [
        ("lse NaN", torch.full_like(lse, math.nan)),
        ("lse +inf", torch.full_like(lse, math.inf)),
        ("lse int", lse.long()),
        ("lse wrong shape", lse[..., :3]),
        ("lse list", lse.tolist()),
        ("lse float32", lse.float()),
    ]:

        def check(w, name=name):
            if not bool(torch.isfinite(w).all()):
                return f"non-finite weights from {name}"
            return None if name == "lse float32" or torch.allclose(w, res.weights) else "weights differ"

        call(tally, f"attention_weights {name}", lambda: selfattn.attention_weights(q, k, bad, causal=True), check)


# --- modules and KVCache -----------------------------------------------------------------------------------


def module_cases(tally: Tally) -> None:
    from selfattn import KVCache, MultiHeadSelfAttention, SelfAttention

    for d in [0, -1, True, 1.5, "8", None, 10**30, 1 << 40, 2**20, np.int64(8)]:
        call(tally, f"SelfAttention({d!r})", lambda: SelfAttention(d), check=lambda m: None)
    for args in [
        (8, 0),
        (8, 3),
        (8, 2, 3),
        (8, 4, 0),
        (
            8,
            2,
            None,
            True,
        ),
        (10**6, 1),
        (1 << 20, 1 << 10),
        (8, 2, 2, "yes"),
        (8, 1 << 40),
    ]:
        call(tally, f"MultiHeadSelfAttention{args!r}", lambda: MultiHeadSelfAttention(*args), check=lambda m: None)
    for kw in [
        {"dropout": 1.0},
        {"dropout": math.nan},
        {"head_dim": 0},
        {"head_dim": 1 << 30},
        {"backend": "nope"},
        {"backend": None},
    ]:
        call(
            tally,
            f"MultiHeadSelfAttention(8, 2, **{kw!r})",
            lambda: MultiHeadSelfAttention(8, 2, **kw),
            check=lambda m: None,
        )
    torch.manual_seed(0)
    sa, mha = SelfAttention(8).eval(), MultiHeadSelfAttention(8, 2).eval()
    x = torch.randn(5, 8)
    for name, bad in [
        ("float64 x", x.double()),
        ("float16 x", x.half()),
        ("1-D x", x[0]),
        ("4-D x", x[None, None]),
        ("wrong width", torch.randn(5, 7)),
        ("list x", x.tolist()),
        ("int x", x.long()),
        ("empty L", torch.randn(0, 8)),
    ]:
        for mod in (sa, mha):
            call(
                tally,
                f"{type(mod).__name__} forward {name}",
                lambda: mod(bad),
                check=lambda out, bad=bad: (
                    None
                    if out.shape == bad.shape and bool(torch.isfinite(out).all())
                    else f"output {tuple(out.shape)} for input {tuple(bad.shape)}"
                ),
            )
    for name, mask in [
        ("5x5 bool", torch.ones(5, 5, dtype=torch.bool)),
        ("wrong shape", torch.ones(3, 3)),
        ("int mask", torch.ones(5, 5, dtype=torch.long)),
        ("NaN mask", torch.full((5, 5), math.nan)),
        ("1-D padding", torch.tensor([True, True, False, True, True])),
    ]:
        cache = KVCache()
        with torch.no_grad():
            mha(x[:3], cache=cache)

        def run(mask=mask, cache=cache):
            with torch.no_grad():
                return mha(x[3:], mask=mask[..., -2:, :] if mask.dim() == 2 else mask, cache=cache)

        def check(out, cache=cache):
            return None if len(cache) == 5 else f"cache length {len(cache)} after one accepted 2-token step from 3"

        outcome = call(tally, f"MHSA with cache, mask {name}", run, check)
        if outcome == "error" and len(cache) != 3:
            tally.counts["error"] -= 1
            tally.record("wrong", f"MHSA with cache, refused mask {name}", f"cache grew to {len(cache)} from 3")
    for name, kk, vv in [
        ("v fewer heads", torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 4)),
        ("v other Dv", torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 3)),
        ("k 3-D", torch.zeros(2, 1, 4), torch.zeros(2, 1, 4)),
        ("dtype mix", torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4, dtype=torch.float64)),
        ("lists", [[0.0]], [[0.0]]),
        ("other B", torch.zeros(3, 2, 1, 4), torch.zeros(3, 2, 1, 4)),
    ]:
        cache = KVCache()
        cache.append(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))

        def check(_, cache=cache):
            return None if len(cache) == 3 else f"cache length {len(cache)}"

        outcome = call(tally, f"KVCache.append {name}", lambda: cache.append(kk, vv), check)
        if outcome == "error" and len(cache) != 2:
            tally.counts["error"] -= 1
            tally.record("wrong", f"KVCache.append refused {name}", f"cache length changed to {len(cache)}")
    for n in [-1, 3, True, 1.0, None, 10**30]:
        cache = KVCache()
        cache.append(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
        call(tally, f"KVCache.truncate({n!r})", lambda: cache.truncate(n), expect="error")


# --- model folders -----------------------------------------------------------------------------------------


def _safetensors_header(path: Path, header: dict, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def model_folder_cases(tally: Tally, work: Path) -> None:
    """Hostile checkpoint and transformers folders, each loaded by `load_checkpoint` and `Explainer.load`."""
    from selfattn.explainer.session import Explainer
    from selfattn.model.checkpoint import DEFAULT_DIR, load_checkpoint

    base_config = json.loads((DEFAULT_DIR / "config.json").read_text())
    weights = (DEFAULT_DIR / "model.safetensors").read_bytes()

    def folder(
        name: str,
        config=None,
        *,
        raw_config: bytes | None = None,
        weights_bytes: bytes | None = None,
        extra: dict | None = None,
        manifest: bool = False,
    ) -> Path:
        d = work / "models" / name
        shutil.copytree(DEFAULT_DIR, d)
        if config is not None:
            if not manifest:
                config = {k: v for k, v in config.items() if k != "files"}
            (d / "config.json").write_text(json.dumps(config))
        if raw_config is not None:
            (d / "config.json").write_bytes(raw_config)
        if weights_bytes is not None:
            (d / "model.safetensors").write_bytes(weights_bytes)
        for fname, content in (extra or {}).items():
            (d / fname).write_bytes(content) if isinstance(content, bytes) else (d / fname).write_text(content)
        return d

    def with_model(**fields):
        return {**base_config, "model": {**base_config["model"], **fields}}

    legacy = {k: v for k, v in base_config.items() if k != "files"}  # no manifest: the content checks alone
    folders = {"control": (folder("control"), "ok"), "control without manifest": (folder("legacy", legacy), "ok")}
    for field, value in [
        ("n_layers", 10_000_000),
        ("d_model", 1 << 30),
        ("vocab_size", 10**12),
        ("n_heads", -4),
        ("max_len", 0),
        ("d_ff", 1 << 40),
        ("n_layers", True),
        ("d_model", 96.0),
        ("norm_eps", math.nan),
        ("norm_eps", -1),
        ("dropout", True),
        ("activation", "evil"),
        ("n_kv_heads", 3),
        ("n_heads", 5),
        ("n_layers", "2"),
        ("max_len", 1 << 21),
    ]:
        folders[f"{field}={value!r}"] = (folder(f"m_{field}_{len(folders)}", with_model(**{field: value})), "error")
    for name, raw in [
        ("nested 100000", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        ("invalid UTF-8", b'{"\xff": 1}'),
        ("empty", b""),
        ("array", b"[1, 2]"),
        ("NaN literal", json.dumps(with_model()).replace('"norm_eps": 1e-05', '"norm_eps": NaN').encode()),
        ("Infinity literal", json.dumps(with_model()).replace('"d_model": 96', '"d_model": Infinity').encode()),
        ("1e400 width", json.dumps(with_model()).replace('"d_model": 96', '"d_model": 1e400').encode()),
        ("huge int", json.dumps(with_model()).replace('"n_layers": 2', '"n_layers": ' + "9" * 5000).encode()),
        ("version 2", json.dumps({**base_config, "version": 2}).encode()),
        ("no model section", json.dumps({k: v for k, v in base_config.items() if k != "model"}).encode()),
        ("model is a list", json.dumps({**base_config, "model": [1]}).encode()),
        ("unknown field", json.dumps(with_model(evil=1)).encode()),
    ]:
        folders[f"config {name}"] = (folder(f"c_{len(folders)}", raw_config=raw), "error")
    big = folder("c_big", raw_config=b"{}")
    with open(big / "config.json", "r+b") as f:  # sparse: 100 MB that takes no disk
        f.truncate(100 << 20)
    folders["config 100 MB"] = (big, "error")
    for name, data in [
        ("truncated", weights[: len(weights) // 2]),
        ("empty", b""),
        ("8 bytes", weights[:8]),
        ("garbage", b"\x00" * 1000),
    ]:
        folders[f"weights {name}"] = (folder(f"w_{len(folders)}", legacy, weights_bytes=data), "error")
    huge_header = work / "huge_header.safetensors"
    huge_header.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    folders["weights header claims 1 TB"] = (folder("w_huge", legacy, weights_bytes=huge_header.read_bytes()), "error")
    from safetensors.torch import load_file, save

    tensors = load_file(str(DEFAULT_DIR / "model.safetensors"))
    name0 = next(iter(tensors))
    for case, change in [
        ("wrong shape", lambda t: {**t, name0: torch.zeros(3, 3)}),
        ("missing tensor", lambda t: {k: v for k, v in t.items() if k != name0}),
        ("extra tensor", lambda t: {**t, "evil": torch.zeros(1)}),
        ("int tensor", lambda t: {**t, name0: t[name0].long()}),
        ("NaN weights", lambda t: {**t, name0: torch.full_like(t[name0], math.nan)}),
        ("inf weights", lambda t: {**t, name0: torch.full_like(t[name0], math.inf)}),
        ("float16 weights", lambda t: {k: v.half() for k, v in t.items()}),
    ]:
        data = save(change(dict(tensors)), metadata={"format": "selfattn.decoder-lm"})
        folders[f"weights {case}"] = (
            folder(f"t_{len(folders)}", legacy, weights_bytes=data),
            "ok" if case == "float16 weights" else "error",
        )
    folders["weights changed, manifest kept"] = (
        folder("manifest", base_config, manifest=True, weights_bytes=save(dict(tensors), metadata={"x": "y"})),
        "error" if "files" in base_config else None,
    )
    pickles = work / "models" / "pickles"
    pickles.mkdir(parents=True)
    (pickles / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2}))
    (pickles / "pytorch_model.bin").write_bytes(b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.")
    folders["pickle weights only"] = (pickles, "error")
    for name, cfg in [
        ("gpt2 n_layer 10M", {"model_type": "gpt2", "n_layer": 10_000_000, "n_embd": 8, "n_head": 2}),
        ("llama hidden 2**30", {"model_type": "llama", "hidden_size": 1 << 30}),
        ("gpt2 negative", {"model_type": "gpt2", "n_layer": -1}),
        ("gpt2 float", {"model_type": "gpt2", "n_embd": 8.5}),
        ("gpt2 nested text_config", {"model_type": "gpt2", "text_config": {"hidden_size": 1 << 30}}),
        ("unknown model_type", {"model_type": "evil"}),
        ("no model_type", {"n_layer": 1}),
    ]:
        d = work / "models" / f"hf_{len(folders)}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "model.safetensors").write_bytes(save({"x": torch.zeros(1)}))
        folders[f"transformers {name}"] = (d, "error")

    def loaded_right(ex):
        doc = explained(ex, "一只蓝色怪兽走进森林")
        try:
            json.dumps(doc, allow_nan=False)
        except ValueError as e:
            return f"loaded, and its explanation is not strict JSON ({e})"
        return None

    for name, (path, expect) in folders.items():
        call(
            tally,
            f"load_checkpoint {name}",
            lambda: load_checkpoint(path),
            expect=expect,
            check=lambda ckpt: loaded_right(Explainer._from_checkpoint(ckpt.model, ckpt.tokenizer, name="x")),
        )
        call(tally, f"Explainer.load {name}", lambda: Explainer.load(path), expect=expect, check=loaded_right)


def run(work: Path) -> list[Tally]:
    """Every library case; returns one tally per part of the library."""
    parts = [
        ("attention", attention_cases),
        ("attention_weights", attention_weights_cases),
        ("modules, KVCache", module_cases),
        ("model folders", lambda t: model_folder_cases(t, work)),
    ]
    tallies = []
    for name, fn in parts:
        tally = Tally(f"library: {name}")
        fn(tally)
        tallies.append(tally)
    return tallies
