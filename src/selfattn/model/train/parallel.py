"""Train a DecoderLM on long sequences split across processes (context parallelism).

    torchrun --nproc-per-node 2 -m selfattn.model.train.parallel --seq-len 1024 --steps 20
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m selfattn.model.train.parallel --seq-len 8192 --steps 100 --out out/cp-model
    loss = train_step(model, batch, pad_id, optimizer, group=group, layout="zigzag")   one step, as a library

`train_step`: every rank holds the same parameters and the same batch (B, L + 1); each runs the
model on its shard of the inputs, `model(shard(inputs, group, dim=1), group=group)`, and scores its
shard of the targets. The loss is summed over this rank's targets and divided by the global count
of targets, so the ranks' losses add up to one process's mean loss; the loss and the parameter
gradients are then summed over the ranks (all_reduce), as DDP would.

Every rank builds the same corpus, tokenizer, model and batches (everything follows from
--seed) and holds its shard of each sequence (`--layout`, zigzag by default); each step is
`train_step`: the DecoderLM on this rank's rows (`model(shard(ids), group=...)`), attention
through `ring_attention`, gradients summed over the ranks.
Rank 0 prints one line per step (loss, tokens/s, bytes this rank sent) and, with --out, saves
the checkpoint that `selfattn` commands load. `main` is a launcher's entry point: it prints, as
the CLI does; `train_step` and `train` do not. Built on the library `selfattn.distributed` (shard,
ring attention, process groups), which knows nothing of models.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ... import checks
from ...distributed.comm import DEFAULT_TIMEOUT_S, init
from ...distributed.layout import LAYOUTS, check_layout, shard
from ...distributed.ring import count_traffic
from ...functional import use_backend
from ...kernels.dispatch import check_backend
from ..checkpoint import save_checkpoint
from ..corpus import all_words, make_corpus
from ..decoder import DecoderConfig, DecoderLM
from ..tokenizer import WordTokenizer

__all__ = ["main", "parse_args", "sample_batch", "token_stream", "train", "train_step"]


def train_step(
    model: nn.Module,
    batch: torch.Tensor,
    pad_id: int,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    group=None,
    layout: str = "zigzag",
) -> float:
    """One step of `model` (a DecoderLM) on `batch` (B, L + 1), the same on every rank; returns the global mean loss.

    The loss equals `next_token_loss(model(batch[:, :-1]), batch, pad_id)` of one process, and after
    the call every rank holds that loss's parameter gradients (and has stepped `optimizer`, if given).
    group    the process group the sequence is split across (None: the default group)
    layout   "zigzag" or "contiguous" (see `shard`)
    """
    if not isinstance(batch, torch.Tensor) or batch.dim() != 2 or batch.shape[1] < 2:
        raise ValueError(
            f"batch must be (B, L + 1) token ids with L >= 1, got "
            f"{tuple(batch.shape) if isinstance(batch, torch.Tensor) else type(batch).__name__}"
        )
    checks.integer("pad_id", pad_id)
    check_layout(layout)
    inputs, targets = batch[:, :-1], batch[:, 1:]
    ids = shard(inputs, group, layout=layout, dim=1)  # Sharded (B, Lr)
    tgt = shard(targets, group, layout=layout, dim=1)
    local_targets = torch.where(ids.positions < ids.seq_len, tgt.tensor, torch.full_like(tgt.tensor, pad_id))
    count = int((targets != pad_id).sum())
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    logits = model(ids, group=group).tensor  # (B, Lr, V)
    loss = F.cross_entropy(logits.flatten(0, 1), local_targets.flatten(), ignore_index=pad_id, reduction="sum") / max(
        count, 1
    )
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total, group=group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
    if optimizer is not None:
        optimizer.step()
    return float(total)


def token_stream(n_sentences: int, seed: int):
    """(tokenizer, ids): the corpus's training sentences, each with its <bos>, one after another."""
    corpus = make_corpus(n_sentences, 0, 0, seed=seed)
    tokenizer = WordTokenizer.from_words([s.words for s in corpus.train], user_words=all_words())
    ids = [i for s in corpus.train for i in tokenizer.encode_words(s.words, bos=True)]
    return tokenizer, torch.tensor(ids, dtype=torch.int64)


def sample_batch(stream: torch.Tensor, batch: int, seq_len: int, rng: random.Random) -> torch.Tensor:
    """(batch, seq_len + 1) windows of the stream at random offsets (the same on every rank)."""
    if stream.numel() < seq_len + 1:
        raise ValueError(
            f"the corpus has {stream.numel()} tokens, fewer than seq_len + 1 = {seq_len + 1}; raise --sentences"
        )
    starts = [rng.randrange(stream.numel() - seq_len) for _ in range(batch)]
    return torch.stack([stream[s : s + seq_len + 1] for s in starts])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun ... -m selfattn.model.train.parallel", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (split across the ranks)")
    p.add_argument("--batch", type=int, default=2, help="sequences per step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--sentences", type=int, default=4000, help="corpus sentences to draw windows from")
    p.add_argument("--d-model", type=int, default=96)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--layout", choices=LAYOUTS, default="zigzag")
    p.add_argument("--backend", default="auto", help="attention backend for each block (auto, tiled, naive, ...)")
    p.add_argument("--dist-backend", choices=("gloo", "nccl"), default=None, help="default: nccl with CUDA, else gloo")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds any rank may stay silent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="rank 0 saves the trained checkpoint here")
    p.add_argument("--force", action="store_true", help="replace an existing checkpoint in --out")
    p.add_argument("--json", action="store_true", help="print one JSON object per step instead of text")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = _parser().parse_args(argv)
    for name in ("seq_len", "batch", "steps", "sentences", "d_model", "layers", "heads"):
        checks.integer(name, getattr(args, name), low=1)
    checks.real("lr", args.lr, low=0.0, low_open=True)
    checks.real("timeout", args.timeout, low=0.0, low_open=True)
    check_backend(args.backend)
    return args


def train(args: argparse.Namespace, report=None) -> tuple[DecoderLM, WordTokenizer, list[dict]]:
    """The training loop on an initialised process group: (model, tokenizer, one row per step).

    report(row) is called on every rank after each step (the row is the same on every rank but for
    `bytes_sent`, this rank's)."""
    world = dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tokenizer, stream = token_stream(args.sentences, args.seed)
    torch.manual_seed(args.seed)
    config = DecoderConfig(
        vocab_size=tokenizer.vocab_size,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        max_len=args.seq_len,
    )
    model = DecoderLM(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    rng = random.Random(args.seed)
    rows = []
    for step in range(1, args.steps + 1):
        batch = sample_batch(stream, args.batch, args.seq_len, rng).to(device)
        t0 = time.perf_counter()
        with count_traffic() as traffic, use_backend(args.backend):
            loss = train_step(model, batch, tokenizer.pad_id, opt, layout=args.layout)
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "step": step,
                "loss": loss,
                "seconds": seconds,
                "tokens_per_s": batch.numel() / seconds,
                "world": world,
                "bytes_sent": traffic.forward + traffic.backward,
            }
        )
        if report is not None:
            report(rows[-1])
    return model, tokenizer, rows


def _print_row(row: dict, as_json: bool) -> None:
    print(
        json.dumps(row)
        if as_json
        else f"step {row['step']:4d}  loss {row['loss']:.4f}  {row['tokens_per_s']:9.0f} tokens/s  "
        f"rank 0 sent {row['bytes_sent'] / 2**20:8.2f} MiB",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    init(args.dist_backend, timeout_s=args.timeout)
    rank = dist.get_rank()
    model, tokenizer, rows = train(args, report=(lambda row: _print_row(row, args.json)) if rank == 0 else None)
    if args.out is not None and rank == 0:
        save_checkpoint(
            model.cpu(),
            tokenizer,
            args.out,
            force=args.force,
            training={
                "command": "torchrun -m selfattn.model.train.parallel " + " ".join(sys.argv[1:]),
                "world": dist.get_world_size(),
                "layout": args.layout,
                "steps": rows,
            },
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
