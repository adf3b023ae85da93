"""Task accuracy of the user's prompts (check family "task-accuracy"): the items, their scorers, the load and its verdict."""
