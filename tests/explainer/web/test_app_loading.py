"""The app never shows a stale head (headless Chromium): while a layer the answer left out is fetched, the page says
so and shows no number of the head it showed before; a request sent during that wait (an intervention switched on)
asks for the head being fetched, and the page then shows exactly that head's numbers, equal to `selfattn.reference`
on the model's weights. No console error anywhere."""

from __future__ import annotations

import time

from selfattn.explainer.interventions import Intervention
from tests.explainer import truth
from tests.explainer.documents import explained
from tests.explainer.web.test_browser import (  # noqa: F401 - fixtures
    TEXT,
    app_url,
    assert_clean,
    assert_row,
    browser,
    explainer,
    stage,
    state,
    submit,
    wait_ready,
    watched,
)
from tests.tolerances import TOL

HOLD_S = 10.0
"""How long the test waits for the page to ask for the held layer."""


def _held_until(page, held: list, n: int) -> None:
    """Let the page run until `n` requests are held by the route."""
    deadline = time.monotonic() + HOLD_S
    while len(held) < n:
        assert time.monotonic() < deadline, f"the page asked {len(held)} times, not {n}"
        page.wait_for_timeout(50)


def test_a_layer_being_fetched_shows_no_stale_number_and_a_request_meanwhile_asks_for_it(watched, explainer, app_url):  # noqa: F811
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    submit(page, TEXT)
    if state(page)["layer"] == "0":  # open layer 1, then ask again: the answer holds the shown layer only
        page.select_option("[data-testid=layer-select]", "1")
        wait_ready(page)
        submit(page, TEXT)
    assert state(page)["layer"] == "1"
    other = 0  # the layer whose numbers the reference knows under an intervention (its input is the embeddings)
    assert explained(explainer, TEXT, layer=1, head=0, layers="selected")["layers"][other].get("omitted")
    held: list = []
    page.route("**/api/explain", lambda route: held.append(route))
    page.select_option("[data-testid=layer-select]", str(other))
    page.select_option("[data-testid=head-select]", "1")
    _held_until(page, held, 1)
    # while it loads: the page says which layer, and hides the sentence, the arrays and the stepper of the old head
    assert page.is_visible("[data-testid=loading]")
    assert f"{other}" in page.text_content("[data-testid=loading]")
    for testid in ("head-description", "heatmap", "stage-panel"):
        assert page.eval_on_selector(f"[data-testid={testid}]", "e => getComputedStyle(e).visibility") == "hidden"
    assert state(page)["ready"] == "0"
    # an intervention switched on during the wait asks for the head being fetched, not the one shown before
    page.check("[data-testid=toggle-no_causal]")
    _held_until(page, held, 2)
    asked = held[1].request.post_data_json
    assert (asked["layer"], asked["head"]) == (other, 1), asked
    for route in held:  # the layer's answer first, then the intervention's
        route.continue_()
    page.unroute("**/api/explain")
    wait_ready(page)
    page.wait_for_selector("[data-testid=loading]", state="hidden")
    assert (state(page)["layer"], state(page)["head"]) == (str(other), "1")
    row = int(state(page)["row"])
    _, ids, _ = explainer.tokenize(TEXT)
    stage(page, "softmax")
    want = truth.stages(explainer.model, ids, other, 1, causal=False)["weights"][row]
    assert_row(page, "weights", want, TOL["page_weight"])
    assert Intervention(causal=False).applied  # the numbers shown are the intervention's
    origin = app_url.rstrip("/")
    assert_clean(watched, {app_url, f"{origin}/api/explain"})
