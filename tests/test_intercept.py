"""The edge around a call: interceptors that misbehave, tensors of another layout, budgets and notices
as context values (this thread only). Issue 18 item 15."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

import selfattn
from selfattn import kernels
from selfattn.kernels.notice import emit

from .helpers import make_inputs, reference_of
from .tolerances import TOL


def test_an_interceptor_that_calls_attention_itself_gets_an_answer_not_a_recursion():
    """The nested call bypasses the interceptor (documented in `selfattn.functional.Interceptor`)."""
    q, k, v = make_inputs(1, 2, 2, 5, 5, 4)
    seen = []

    def recompute(request, compute):
        seen.append(request)
        out = selfattn.attention(request.q, request.k, request.v, causal=request.causal)  # not intercepted again
        return kernels.Result(out, None, None)

    with selfattn.intercept(recompute):
        out = selfattn.attention(q, k, v, causal=True)
    assert len(seen) == 1
    torch.testing.assert_close(out.numpy(), reference_of(q, k, v, causal=True)[0], atol=TOL["float64"], rtol=0)


def test_an_intercept_inside_an_interceptor_sees_the_nested_calls():
    q, k, v = make_inputs(1, 1, 1, 3, 3, 4)
    inner = []

    def outer(request, compute):
        with selfattn.intercept(lambda r, c: inner.append(r) or c(r)):
            selfattn.attention(request.q, request.k, request.v)
        return compute(request)

    with selfattn.intercept(outer):
        selfattn.attention(q, k, v)
        selfattn.attention(q, k, v)
    assert len(inner) == 2


@pytest.mark.parametrize(
    "returns, err, match",
    [
        (lambda r, c: tuple(c(r)), TypeError, "the interceptor returned tuple, not a selfattn.kernels.Result"),
        (lambda r, c: None, TypeError, "the interceptor returned NoneType"),
        (lambda r, c: c(r).output, TypeError, "the interceptor returned Tensor"),
        (
            lambda r, c: kernels.Result(c(r).output[:, :, :2], None, None),
            ValueError,
            r"output of shape \(1, 2, 2, 4\); the request needs \(1, 2, 5, 4\)",
        ),
        (
            lambda r, c: c(r)._replace(lse=None),
            TypeError,
            r"has lse = NoneType, not a tensor of shape \(1, 2, 5\)",
        ),
    ],
)
def test_what_an_interceptor_returns_is_checked_by_name(returns, err, match):
    q, k, v = make_inputs(1, 2, 1, 5, 5, 4)
    with selfattn.intercept(returns):
        with pytest.raises(err, match=match):
            selfattn.attention(q, k, v, return_lse=True)
    assert selfattn.attention(q, k, v).shape == q.shape  # the interceptor is gone with its context


def test_sparse_and_nested_tensors_get_a_named_type_error():
    q, k, v = make_inputs(1, 1, 1, 3, 3, 4)
    with pytest.raises(TypeError, match=r"k has layout torch.sparse_coo; attention needs dense strided tensors"):
        selfattn.attention(q, k.to_sparse(), v)
    nested = torch.nested.nested_tensor([torch.zeros(3, 4), torch.zeros(2, 4)], layout=torch.jagged)
    with pytest.raises(TypeError, match="q is a nested tensor"):
        selfattn.attention(nested, k, v)
    mask = torch.ones(3, 3, dtype=torch.bool).to_sparse()
    with pytest.raises(TypeError, match="mask has layout torch.sparse_coo"):
        selfattn.attention(q, k, v, mask=mask)
    out = selfattn.attention(q, k, v, return_lse=True)
    with pytest.raises(TypeError, match="lse has layout torch.sparse_coo"):
        selfattn.attention_weights(q, k, out.lse.to_sparse())


def test_a_budget_holds_in_its_own_thread_only():
    q, k, v = make_inputs(1, 1, 1, 16, 16, 4, dtype=torch.float32)
    seen = {}

    def other():
        seen["budget"] = kernels.budget_bytes()
        seen["naive"] = selfattn.attention(q, k, v, backend="naive").shape

    with kernels.budget(10):
        with pytest.raises(ValueError, match="over its budget of 10 bytes"):
            selfattn.attention(q, k, v, backend="naive")
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == {"budget": kernels.base.DEFAULT_BUDGET_BYTES, "naive": q.shape}
    with pytest.raises(ValueError, match="budget must be >= 0"):
        with kernels.budget(-1):
            pass


def test_notices_go_to_the_subscriber_of_this_context_and_to_the_log(caplog):
    heard = []
    notice = kernels.Notice("flex", "compiling something", "done", 1.5, "cached")
    with caplog.at_level(logging.INFO, logger="selfattn"):
        emit(notice)  # nobody subscribed: the log only
        with kernels.notices(heard.append):
            emit(notice)
    assert heard == [notice] and str(notice) == "selfattn: compiling something: done in 1.5 s (cached)"
    assert [r.getMessage() for r in caplog.records] == [str(notice)] * 2
    assert str(kernels.Notice("native", "building", "start")) == "selfattn: building ..."
    assert kernels.Notice("native", "building", "failed", 3.04).tail == "failed after 3.0 s"
    with pytest.raises(ValueError, match="stage must be one of"):
        kernels.Notice("flex", "x", "begun")
    with pytest.raises(TypeError, match="notices needs a callable"):
        with kernels.notices(None):
            pass
