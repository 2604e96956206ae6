"""What the pages must show, computed without the explainer: `selfattn.reference` (NumPy float64)
on the weights of the model, and a float64 copy of the model for the input of deeper layers.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from selfattn import reference
from selfattn.model.decoder import DecoderLM


def layer_input(model: DecoderLM, ids, layer: int) -> np.ndarray:
    """x (L, d_model) that attention layer `layer` multiplies by W_Q: LN_1 of the residual stream,
    from a float64 copy of the model without any intervention."""
    m = copy.deepcopy(model).double().eval()
    ids = torch.as_tensor(ids)
    with torch.no_grad():
        x = m.tok_emb(ids) + m.pos_emb(torch.arange(len(ids)))
        for block in m.blocks[:layer]:
            x = block(x[None])[0]
        return m.blocks[layer].ln_1(x).numpy()


def head_weights(model: DecoderLM, layer: int, head: int):
    """W_Q, W_K, W_V of one head as (d_model + 1, D) float64, the bias as the last row
    (so that `reference.project` of x with a column of ones appended is X W + b)."""
    attn = model.blocks[layer].attn
    D = attn.head_dim
    kv = head // (attn.n_heads // attn.n_kv_heads)
    out = []
    for lin, h in ((attn.q_proj, head), (attn.k_proj, kv), (attn.v_proj, kv)):
        w = lin.weight.detach().double().numpy()[h * D : (h + 1) * D]  # (D, d_model)
        b = lin.bias.detach().double().numpy()[h * D : (h + 1) * D]  # (D,)
        out.append(np.vstack([w.T, b[None]]))
    return out


def stages(
    model: DecoderLM, ids, layer: int, head: int, *, scaling=True, causal=True, temperature=1.0, blocked=None
) -> dict:
    """The tutorial's stages of one head, every query row, by `selfattn.reference`.

    blocked  (query, key): that one link is hidden (the "block" intervention), as a 0 in the mask

    An intervention changes the input of the layers above the first; this function reads the
    input without intervention, so with one it is right for layer 0 only (and refuses others).
    """
    if layer and not (scaling and causal and temperature == 1.0 and blocked is None):
        raise ValueError("with an intervention only layer 0's input is known without the explainer")
    x = layer_input(model, ids, layer)
    x1 = np.hstack([x, np.ones((len(x), 1))])
    q, k, v = reference.project(x1, *head_weights(model, layer, head))
    scores = reference.scores(q, k)
    scaled = (reference.scale_scores(scores, q.shape[1]) if scaling else scores) / temperature
    mask = reference.causal_mask(len(x)) if causal else np.ones((len(x), len(x)), dtype=bool)
    if blocked is not None:
        mask = mask.copy()
        mask[blocked] = False
    masked = reference.apply_mask(scaled, mask)
    weights = reference.softmax(masked)
    return {
        "x": x,
        "q": q,
        "k": k,
        "v": v,
        "scores": scores,
        "scaled": scaled,
        "mask": mask,
        "masked": masked,
        "weights": weights,
        "weighted": reference.weighted_sum(weights, v),
    }


def outputs(model: DecoderLM, ids, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(attention output, block output), each (L, d_model): every head's weights·V by the reference,
    concatenated and through W_O; then the block (residual and MLP) of a float64 copy of the model."""
    attn = model.blocks[layer].attn
    heads = np.hstack([stages(model, ids, layer, h)["weighted"] for h in range(attn.n_heads)])
    attn_out = heads @ attn.out_proj.weight.detach().double().numpy().T + attn.out_proj.bias.detach().double().numpy()
    m = copy.deepcopy(model).double().eval()
    ids = torch.as_tensor(ids)
    with torch.no_grad():
        x = m.tok_emb(ids) + m.pos_emb(torch.arange(len(ids)))
        for block in m.blocks[: layer + 1]:
            x = block(x[None])[0]
    return attn_out, x.numpy()


def relation_rows(ex, trace, controls, attentions) -> dict[str, list]:
    """The rows the query-specific test of a relation reads, recomputed from independent attentions: for each
    relation, over the text and its control and contrast sentences, each link whose key is not the previous word, as
    (attentions of that sentence [layer] (H, L, L), the query word's last piece, the key pieces, the last piece of
    every later word but the query). attentions(ids) -> [layer] (H, L, L) float64 (plain eager attention)."""
    from selfattn.explainer.analysis import held
    from selfattn.explainer.analysis.word_relations import word_links, word_pieces

    rows: dict[str, list] = {}
    for t in [trace, *controls]:
        att = attentions([int(i) for i in t.token_ids])
        words = held.words_of(t, ex.user_words)
        pieces = word_pieces(words, t.pieces.spans)
        for link in word_links(words):
            keys = [p for k in link.keys for p in pieces[k]]
            if link.query - 1 in link.keys or not keys or not pieces[link.query]:
                continue  # the test's rows only: the key not the previous word
            q = pieces[link.query][-1]
            others = [p[-1] for i, p in enumerate(pieces) if p and i != link.query and p[-1] > max(keys)]
            rows.setdefault(link.relation, []).append((att, q, keys, others))
    return rows


def check_query_specific(found, rows, tol: float, min_rows: int) -> int:
    """Every head's relations (`held.held`'s answer) against `relation_rows`: the baseline it records (the other words'
    mean weight on the keys, and the query's) equals the independent one to `tol`, and a credited relation's query
    gives its keys more than the other words do, on at least `min_rows` rows with p < 0.01. Returns how many were
    credited."""
    credited = 0
    for l, row in enumerate(found):
        for h, per_head in enumerate(row):
            for name, r in per_head["relations"].items():
                if name not in rows:
                    continue
                mine = [a[l][h][q, keys].sum() for a, q, keys, others in rows[name] if others]
                theirs = [
                    np.mean([a[l][h][o, keys].sum() for o in others]) for a, q, keys, others in rows[name] if others
                ]
                b = r["test"]["baseline"]
                assert b["rows"] == len(mine)
                assert abs(b["weight"] - np.mean(theirs)) <= tol, (l, h, name)
                assert abs(b["query"] - np.mean(mine)) <= tol, (l, h, name)
                if r["held"]:
                    credited += 1
                    assert np.mean(mine) > np.mean(theirs), (l, h, name)
                    assert len(mine) >= min_rows and b["p"] < 0.01
    return credited
