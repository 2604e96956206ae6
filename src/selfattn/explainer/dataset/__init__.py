"""Datasets of prompts: head scores, ablation and patching on every prompt, their means with 95 % intervals.

    rows      a JSONL or CSV file of prompts (text; corrupted, target, foil) read and checked → PromptRow
    running   each prompt run as its single run would be (one model, one Session), then averaged → DatasetResult
    stats     a mean and its Student's t-interval (the t quantile computed here)
    store     the results file: each prompt written as it finishes (atomically), a rerun resumes
    dataset_result  DatasetResult, PromptResult, HeadMeans: frozen, JSON-ready
    words     the sentences, each saying over how many prompts it holds
    table     the CSV (one row per head per prompt) and the terminal's table

The Python API is `selfattn.explain_dataset` / `selfattn.heads_dataset` (explainer/api.py), the CLI
`selfattn explain|heads --dataset FILE` (docs/dataset.md).
"""
