"""The explainer's numbers and what they mean: head types, summaries, relations, experiments' comparisons.

Nothing here formats text; views read these results.
"""
