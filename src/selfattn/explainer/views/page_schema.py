"""The doc as the page reads it: `packing.pack(doc)` (`PageDoc`), the export's `schema.Doc` with its layers packed.

schema_check.validate(packing.pack(doc), PageDoc)   [] or the problems
"""

from typing import Literal, TypedDict

from typing_extensions import NotRequired  # typing has it from Python 3.11; the package runs on 3.10

from ...scores import PerHeadValues
from .schema import Doc, Num, Packed, Words

__all__ = ["PageDoc", "OPAQUE"]


class PageArray(TypedDict):
    """One array packed for the page (`packing._encode`): byte planes, zlib, base64; digits: fixed point."""

    dtype: Literal["f32", "f64", "u16", "u32", "z32", "bits"]
    shape: list[int]
    b64: str
    digits: NotRequired[int]


class SameAs(TypedDict):
    """K or V of a head that reads the same key/value head as an earlier head of its layer: that head's (GQA)."""

    of_head: int


class PageHead(TypedDict):
    """A head as the page holds it: Q/K/V/lse packed, and what the page shows computed by Python."""

    kv_head: int
    q: PageArray
    k: PageArray | SameAs
    v: PageArray | SameAs
    lse: PageArray
    weights: PageArray
    keys: PageArray
    key_stages: PageArray
    key_weights: PageArray
    weighted: PageArray
    sums: PageArray
    sink: NotRequired[PageArray]
    scale: NotRequired[Num]
    softcap: NotRequired[Num | None]
    causal: NotRequired[bool]
    visible: NotRequired[PageArray]


class PageLayer(PerHeadValues):
    scale: Num
    causal: bool
    softcap: Num | None
    window: int | list[int] | None
    omitted: NotRequired[bool]
    visible: NotRequired[PageArray]
    x: NotRequired[PageArray]
    attn_out: NotRequired[PageArray]
    output: NotRequired[PageArray]
    norms: NotRequired[dict[str, PageArray]]
    heads: NotRequired[list[PageHead]]
    types: NotRequired[list[str | None]]


class ScaleWords(TypedDict):
    stage: Words
    row: Words
    how: Words


class ShownKeys(TypedDict):
    all_up_to: int
    top: int


class PageDoc(Doc):
    """`packing.pack(doc)`: the doc with its layers packed (PageLayer) and the page's words and limits."""

    layers: list[PageLayer]  # type: ignore[misc]  # the packed layers replace the export's
    scale_words: ScaleWords
    shown_keys: ShownKeys


OPAQUE = (PageArray, Packed)
"""Types the page reads through its own decoder (data.js): their fields are the decoder's, not the doc's."""
