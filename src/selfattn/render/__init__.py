"""What the `selfattn` commands print, one module per command; only `selfattn.cli` imports these.

    train        format_train_summary(summary) -> str      the lines after `selfattn train`
    generate     format_generation(generation) -> str     the text and its words
    vocab        format_vocabulary(words) -> str          the tokens a model knows
    walkthrough  render(doc, console)                     the tutorial's tables, drawn with rich

The library returns data (dicts, dataclasses); the CLI chooses between these views and `--json`.
Text that comes from a file or a model (tokens, paths) goes through `selfattn.terminal.printable`.
`selfattn.bench.render` and `selfattn.explainer.tables` are the same kind of module for their commands.
"""
