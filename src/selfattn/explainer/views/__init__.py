"""Serializers of an Explanation, formatting only: the page's document (`export`), --json and --npz (`checkable`),
tables, plots, head words, the page."""
