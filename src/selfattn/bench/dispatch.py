"""`selfattn bench --explain`: for each case, what every backend says about its request, and auto's choice.

    explain_case(case) -> str     the case's request as `attention` would build it, then per backend
                                  its time estimate or its refusal, then the backend "auto" takes
"""

from __future__ import annotations

from .cases import Case

__all__ = ["explain_case", "request_of"]


def request_of(case: Case):
    """The `selfattn.kernels.Request` that `attention` builds for this case's inputs and masking."""
    from ..functional import build_request

    return build_request(*case.inputs(requires_grad=case.backward), **case.kwargs())


def explain_case(case: Case) -> str:
    """Lines of text: the case, then the dispatch of its request."""
    request = request_of(case)
    # MERGE (lead): `selfattn.kernels.explain(request)` is being written on the dispatch branch. Once it is on
    # main, replace the next line by `body = kernels.explain(request)` (with `from .. import kernels`) and
    # delete `_dispatch_lines`, so the bench and the library explain a request in one place.
    body = "\n".join(_dispatch_lines(request))
    return f"{case.name}: {case.title}\n  shape {case.shape}, {case.dtype}\n{body}"


def _dispatch_lines(request) -> list[str]:
    """Each backend's estimated time or refusal, from `kernels.BACKENDS` and `kernels.cost`, and auto's choice."""
    from .. import kernels
    from ..kernels import cost

    lines = []
    for name, backend in kernels.BACKENDS.items():
        why = backend.refuse(request)
        if why is None:
            lines.append(f"  {name:<6} estimate {cost.estimate_seconds(name, request) * 1e3:.3g} ms")
        else:
            lines.append(f"  {name:<6} refuses: {why}")
    try:
        lines.append(f"  auto   → {kernels.choose(request, 'auto').name}")
    except ValueError as refusal:
        lines.append(f"  auto   → none: {refusal}")
    return lines
