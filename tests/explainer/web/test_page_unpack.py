"""data.js's one `unpack` (run in node) reads every dtype of the codec (views/codec.py) to the numbers NumPy reads
from the same words: float16 bit patterns all 65,536 of them, fixed-point and zigzag integers, and bits."""

from __future__ import annotations

import json
import subprocess

import numpy as np

from selfattn.explainer.views import codec, report


def js_unpack(arrays: dict[str, dict], tmp_path) -> dict:
    """Each packed array through data.js's `unpack`: {name: {shape, kind (the typed array's class), data, unit}};
    NaN and ±inf written as strings, which JSON has no word for."""
    (tmp_path / "arrays.json").write_text(json.dumps(arrays), encoding="utf-8")
    data_js = (report.STATIC_DIR / "data.js").resolve().as_uri()
    script = f"""
import {{ readFileSync }} from "node:fs";
import {{ unpack }} from "{data_js}";
const arrays = JSON.parse(readFileSync({json.dumps(str(tmp_path / "arrays.json"))}, "utf8"));
const word = (x) => (Number.isFinite(x) ? x : String(x));
const out = {{}};
for (const [name, p] of Object.entries(arrays)) {{
  const u = await unpack(p);
  const values = u.bits ? Array.from(u.bits) : Array.from(u.data, word);
  out[name] = {{ shape: u.shape, kind: (u.bits || u.data).constructor.name, data: values, unit: u.unit ?? null }};
}}
console.log(JSON.stringify(out));
"""
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)


def numbers(values: list) -> np.ndarray:
    return np.array([float(v) if isinstance(v, str) else v for v in values], dtype=np.float64)


def test_unpack_reads_every_dtype_as_numpy_reads_its_words(tmp_path):
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).reshape(256, 256)
    stages = np.array([[0.1235, -np.inf], [np.inf, -2.5]])
    weights = np.array([[0.0, 0.1234, 1.0]])
    mask = np.array([[1, 0, 1], [0, 0, 1]], dtype=bool)
    got = js_unpack(
        {
            "f16": codec.encode(halves, "f16"),
            "z32": codec.fixed(stages, 4, "z32"),
            "u16": codec.fixed(weights, 4, "u16"),
            "bits": codec.bits(mask),
        },
        tmp_path,
    )
    f16 = got["f16"]
    assert f16["shape"] == [256, 256] and f16["kind"] == "Float32Array"
    with np.errstate(invalid="ignore"):  # the NaN patterns
        want = halves.astype(np.float32).astype(np.float64).ravel()  # NumPy's binary16 → float32, exact
    data = numbers(f16["data"])
    np.testing.assert_array_equal(np.isnan(data), np.isnan(want))
    same = ~np.isnan(want)
    assert (data[same] == want[same]).all()
    np.testing.assert_array_equal(numbers(got["z32"]["data"]).reshape(2, 2), stages)
    assert got["u16"]["kind"] == "Uint16Array" and got["u16"]["unit"] == 10**4
    assert got["u16"]["data"] == [0, 1234, 10000]
    assert got["bits"]["kind"] == "Uint8Array" and got["bits"]["data"] == list(np.packbits(mask.ravel()))
