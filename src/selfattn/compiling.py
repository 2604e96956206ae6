"""What a check may do while `torch.compile`, `torch.export` or `torch.func` traces: read a value or not, keep
a result or not, mark a function constant. Small helpers the score rule, the request and the kernels share."""

from __future__ import annotations

import torch

__all__ = ["values_readable", "once", "constant_when_compiled"]


def values_readable(*tensors: torch.Tensor | None) -> bool:
    """Whether a check may read these tensors' values (a Python bool of a tensor): not while `torch.compile`
    or `torch.export` traces (it would break the graph), nor for a `torch.func` (vmap, grad) wrapped tensor
    (vmap refuses data-dependent control flow). Checks skipped then say so in their callers' docstrings."""
    if torch.compiler.is_compiling():
        return False
    return not any(t is not None and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


class once:  # noqa: N801 - used as a decorator, like functools.cached_property
    """`functools.cached_property` without its lock (Python 3.11 takes an RLock, which `torch.compile` cannot
    trace): computed on first access and kept in the instance's __dict__; while compiling, computed each time
    (the graph holds the result)."""

    def __init__(self, fn):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if torch.compiler.is_compiling():
            return self.fn(obj)
        value = self.fn(obj)
        obj.__dict__[self.name] = value
        return value


def constant_when_compiled(fn):
    """`fn` marked as `torch.compiler.assume_constant_result` marks it (called once when compiled, its result a
    constant of the graph), without importing torch._dynamo: that import pulls in the compiler stack (Inductor,
    sympy, ~1 s) on a plain call. `tests/kernels/test_imports.py` checks the mark is still torch's."""
    fn._dynamo_marked_constant = True
    return fn
