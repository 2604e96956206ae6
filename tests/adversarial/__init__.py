"""The hostile campaign: many hostile inputs per surface of selfattn, each judged by one rule (`tally`).

    library/   attention, attention_weights, modules, KVCache, model folders; huge masks, caches, interceptors
    cli/       every subcommand as a subprocess: arguments, texts, files (--force, devices), model files
    web/       a real `selfattn serve`: bodies, framing, Host, slow clients, Unicode, concurrency, measurements
    ring/      ring attention in process groups of 2-5 ranks
    files/     output paths, the GGUF cache's key, ranges in arguments (the fourth reliability pass)

Each surface's campaign is one test marked `hostile` (skipped unless chosen: `conftest.py`); the random attention
calls are a hypothesis property whose size the "hostile" profile sets. `scripts/hostile_run.py` prints the
campaign's table (inputs, wrong results, tracebacks, hangs, files lost) from the same cases.
"""
