"""Views of one export dict: the dict itself (`export`), tables, plots, head descriptions, summaries, the experiment."""
