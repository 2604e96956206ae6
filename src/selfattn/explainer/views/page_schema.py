"""The doc as the page reads it: `packing.pack(doc)` (`PageDoc`), the export's `schema.Doc` with its layers packed.

schema_check.validate(packing.pack(doc), PageDoc)   [] or the problems
"""

from typing import TypedDict

from typing_extensions import NotRequired  # typing has it from Python 3.11; the package runs on 3.10

from ...scores import PerHeadValues
from .schema import Doc, Num, Packed, Words

__all__ = ["PageDoc", "OPAQUE"]


PageArray = Packed
"""One array packed for the page (`codec`): the display's arrays and the layers' are one kind."""


class SameAs(TypedDict):
    """K or V of a head that reads the same key/value head as an earlier head of its layer: that head's (GQA)."""

    of_head: int


class TopDimensions(TypedDict):
    """Of one d_model vector per row, in a layer not held in full: the `vector_top` dimensions of largest |value|
    (dims (L, T), largest first) and their values (L, T) to 4 decimals."""

    dims: PageArray
    values: PageArray


class PageHead(TypedDict):
    """A head as the page holds it: Q/K/V in float16, lse packed, and what the page shows computed by Python."""

    kv_head: int
    q: PageArray
    k: PageArray | SameAs
    v: PageArray | SameAs
    lse: PageArray
    weights: PageArray
    keys: PageArray
    key_stages: PageArray
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
    top: NotRequired[dict[str, TopDimensions]]  # instead of x, attn_out, output outside doc["full_layers"]
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
    vector_top: int  # how many dimensions of a d_model vector a layer not held in full keeps per row


OPAQUE = (Packed,)
"""Types the page reads through its own decoder (data.js): their fields are the decoder's, not the doc's."""
