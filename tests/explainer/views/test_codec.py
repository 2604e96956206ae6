"""The page's one array codec (views/codec.py): every dtype round-trips, the bytes are the documented layout (read
here with base64, zlib and NumPy alone), each byte plane deflated apart in one zlib stream, and the display's
thumbnails and shown weights travel in it, decoded to the float64 weights within the named tolerances."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest

from selfattn.explainer.views import codec, packing, report
from tests.explainer.documents import both, weights
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL


def planes_of(packed: dict, dtype: str) -> np.ndarray:
    """A packed array's elements read as the module doc says, with the standard library and NumPy only: base64,
    zlib, then byte plane b holding byte b of every little-endian element."""
    raw = zlib.decompress(base64.b64decode(packed["b64"]))
    size = np.dtype(dtype).itemsize
    joined = np.frombuffer(raw, dtype=np.uint8).reshape(size, -1).T.copy()
    return joined.view(dtype).reshape(packed["shape"])


def test_every_packed_dtype_round_trips():
    a = np.array([[0.5, -1.25], [3.0, 7.0]])
    assert report.unpack(codec.encode(a, "f32")).tolist() == a.tolist()
    fixed = codec.fixed(np.array([[0.123456, -np.inf], [np.inf, -2.5]]), 4, "z32")
    assert fixed["dtype"] == "z32" and fixed["digits"] == 4
    assert report.unpack(fixed).tolist() == [[0.1235, -np.inf], [np.inf, -2.5]]
    ends = np.array([-(2**31 - 1), -(2**31 - 2), -1, 0, 1, 2**31 - 3, 2**31 - 2]) / 1e4  # int32's, less ±inf's
    assert report.unpack(codec.fixed(ends, 4, "z32")).tolist() == ends.tolist()
    assert codec.fixed(np.array([2**31 - 1]) / 1e4, 4, "z32")["dtype"] == "f64"  # +inf's word: not a number
    small = codec.fixed(np.array([-0.0001, 0.0001, -0.0128, 0.0127]), 4, "z32")  # words 1, 2, 255, 254
    raw = zlib.decompress(base64.b64decode(small["b64"]))
    assert list(raw) == [1, 2, 255, 254] + [0] * 12  # a sign is no longer in every byte plane
    assert report.unpack(codec.fixed(np.array([0.0, 0.00004, 0.99996, 1.0]), 4, "u16")).tolist() == [0, 0, 1, 1]
    too_big = codec.fixed(np.array([1e6, 0.5]), 4, "z32")  # 1e10 does not fit an int32: float64, exact
    assert too_big["dtype"] == "f64" and report.unpack(too_big).tolist() == [1e6, 0.5]
    assert codec.fixed(np.array([-0.5]), 4, "u16")["dtype"] == "f64"  # no negative u16
    bits = np.array([[1, 0, 1], [0, 0, 1]], dtype=bool)
    assert (report.unpack(codec.bits(bits)) == bits).all()
    keys = np.array([[0, 3, 65535]])
    assert report.unpack(codec.encode(keys, "u16")).tolist() == [[0, 3, 65535]]


def test_f16_holds_every_half_exactly_in_byte_planes():
    """Every one of the 65,536 binary16 bit patterns (zeros, subnormals, ±inf, NaNs) goes through "f16" as it is:
    the bytes in the stream are NumPy's float16 words in byte planes, and `unpack` gives NumPy's float16 values."""
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).reshape(256, 256)
    packed = codec.encode(halves, "f16")
    assert packed["dtype"] == "f16" and packed["shape"] == [256, 256] and "digits" not in packed
    np.testing.assert_array_equal(planes_of(packed, "<u2"), halves.view(np.uint16))
    with np.errstate(invalid="ignore"):  # the NaN patterns
        want = halves.astype(np.float64)
    got = codec.unpack(packed)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert (got[finite] == want[finite]).all() and (np.signbit(got) == np.signbit(want)).all()


def test_fixed_point_words_are_the_rounded_decimals():
    """u16 at 4 digits: each word is round(x · 10⁴), in byte planes, read back with NumPy alone."""
    x = np.array([[0.0, 0.12344, 0.12346], [0.99995, 1.0, 0.5]])
    packed = codec.fixed(x, 4, "u16")
    assert packed["digits"] == 4
    assert planes_of(packed, "<u2").tolist() == [[0, 1234, 1235], [10000, 10000, 5000]]


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_a_stream_of_planes_deflated_apart_is_plain_zlib(itemsize):
    """Noise planes and zero planes, each deflated apart, in one zlib stream that zlib (as the browser) reads back."""
    g = np.random.default_rng(itemsize)
    n = 50_000
    noise = g.integers(0, 256, size=n * (itemsize // 2 or 1), dtype=np.uint8).tobytes()
    raw = noise + bytes(n * itemsize - len(noise))  # the low planes noise, the high ones zeros
    stream = codec.zlib_stream(raw, itemsize)
    assert zlib.decompress(stream) == raw
    assert len(stream) < len(raw) * 0.6 if itemsize > 1 else len(stream) <= len(raw) * 1.01
    assert zlib.decompress(codec.zlib_stream(b"", itemsize)) == b""


def test_a_bad_code_or_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="'f8'"):
        codec.encode(np.zeros(2), "f8")
    with pytest.raises(ValueError, match="'f32'"):
        codec.fixed(np.zeros(2), 4, "f32")
    with pytest.raises(ValueError, match="'i8'"):
        codec.unpack({"dtype": "i8", "shape": [1], "b64": ""})


def test_base64_text_is_standard_base64():
    raw = bytes(range(256))
    assert codec.base64_text(raw) == base64.b64encode(raw).decode("ascii")


def test_the_display_travels_in_the_codec_at_the_precision_it_is_drawn():
    """doc["display"]: every thumbnail "u16" to 4 decimals (the capture's float16 cells, the weights when L fits the
    thumbnail, at 0.01 % as every weight) and the shown head's weights "u16" to 4 decimals, each decoded to the
    head's float64 weights (from the captured Q, K and rule in float64: `LayerTrace.stages`) within the named
    tolerances."""
    e, doc = both(tiny_explainer(), "一只蓝色怪兽走进森林", layer=1, head=1)
    display = doc["display"]
    selected = display["selected"]["weights"]
    assert (selected["dtype"], selected["digits"]) == ("u16", packing.WEIGHT_DIGITS)
    np.testing.assert_allclose(codec.unpack(selected), weights(e, 1, 1), rtol=0, atol=TOL["rounded_to_4_decimals"])
    thumbs = display["thumbnails"]
    assert len(thumbs) == 2 and all(len(row) == 2 for row in thumbs)
    assert {(t["dtype"], t["digits"]) for row in thumbs for t in row} == {("u16", packing.WEIGHT_DIGITS)}
    for l in range(2):
        for h in range(2):
            np.testing.assert_allclose(
                codec.unpack(thumbs[l][h]),
                weights(e, l, h),
                atol=TOL["float16_thumbnail"] + TOL["rounded_to_4_decimals"],  # the capture's float16, at 0.01 %
                rtol=TOL["float16_thumbnail_rel"],
                err_msg=f"layer {l} head {h}",
            )
