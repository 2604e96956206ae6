"""`selfattn bench --explain`: for each case, what every backend says about its request, and auto's choice.

explain_case(case) -> str     the case's request as `attention` would build it, then per backend
                              its time estimate or its refusal, then the backend "auto" takes
"""

from __future__ import annotations

from .. import kernels
from .cases import Case, request_of

__all__ = ["explain_case", "request_of"]


def explain_case(case: Case) -> str:
    """Lines of text: the case, then `selfattn.kernels.explain` of its request (the library's one account)."""
    body = kernels.render(kernels.explain(request_of(case)))
    return f"{case.name}: {case.title}\n  shape {case.shape}, {case.dtype}\n{body}"
