"""Issue 11's attack run, one module per surface (`scripts/hostile_run.py` runs them all)."""
