"""Training a `DecoderLM` on the corpus, one room per job.

    run_training("default", "out/model", seed=0)                               run.py
      presets   the run's settings: PRESETS ("tiny", "default"), Stage, Preset
      setup     corpus (make_corpus) → tokenizer (WordTokenizer.from_words) → DecoderLM, and every
                epoch's batches decided up front. An epoch reads every training sentence once: a
                share alone at position 0, the rest in paragraphs of up to the stage's number of
                sentences, each paragraph at a random start position (`data.epoch_batches`)
      schedule  AdamW, warmup + one cosine decay of the learning rate over the whole run, clipping
      loop      the stages of a length curriculum, each some epochs; validation loss after each epoch
                on the validation sentences read alone and packed into paragraphs of max_len tokens;
                the epoch with the lowest mean of the two is kept
      progress  the rich progress bar (loss, tokens/s, ETA)
      records   test: perplexity, measure-word agreement, 这+measure agreement, attention probe, how
                many sentences sampled from the model the grammar accepts, and the same questions asked
                of sentences late in paragraphs of max_len tokens; config.json's "training" section
      run       → out/model/{model.safetensors, config.json, tokenizer.json}  and a loss-curve PNG
    parallel    context-parallel training over torch.distributed (`train_step`, and the torchrun entry
                point `torchrun --nproc-per-node 2 -m selfattn.model.train.parallel`)

Everything random follows from `seed`: the corpus, the initial weights, the batch order.
On the same machine and thread count the result is the same bit for bit.
"""

from __future__ import annotations

from .presets import POS_INITS, PRESETS, Preset, Stage, default_command, train_command_line
from .run import run_training
from .schedule import lr_at
from .setup import fourier_positions

__all__ = [
    "Stage",
    "Preset",
    "PRESETS",
    "run_training",
    "default_command",
    "train_command_line",
    "fourier_positions",
    "lr_at",
    "POS_INITS",
]
