"""Views of one export dict, formatting only: the dict itself (`export`), tables, plots, head words, the page."""
