"""The induction probe's forward asks a transformers language model for the last position's logits only: its
attention is that of a whole eager forward (plain transformers, output_attentions), its logits the last row."""

import numpy as np
import torch

from selfattn.explainer import induction_probe, tracing
from selfattn.explainer.session import Explainer
from tests.hf import models
from tests.tolerances import TOL


def test_the_probe_reads_the_attention_of_eager_and_keeps_one_row_of_logits(tmp_path):
    folder = models.save("llama", tmp_path / "llama")
    ex = Explainer.load(folder)
    assert induction_probe._extra_for(ex, 5)["logits_to_keep"] == 1
    trace = tracing.probe_trace(ex)
    ids = torch.tensor([[int(i) for i in trace.token_ids]])
    eager = models.build("llama")  # the same seed: the same weights as the folder's
    with torch.no_grad():
        out = eager(ids, output_attentions=True, use_cache=False)
    assert trace.logits is not None and trace.logits.shape == (1, eager.config.vocab_size)
    torch.testing.assert_close(trace.logits[0], out.logits[0, -1], atol=TOL["float32_logits"], rtol=0)
    for l, layer in enumerate(trace.layers):
        for h in range(layer.n_heads):
            got = layer.stages(h)["weights"].numpy()
            want = out.attentions[l][0, h].double().numpy()
            np.testing.assert_allclose(got, want, atol=TOL["float32_model_weights"], rtol=0)


def test_a_model_without_logits_to_keep_is_not_given_it():
    from tests.explainer.tiny import tiny_explainer

    assert "logits_to_keep" not in induction_probe._extra_for(tiny_explainer(), 5)
