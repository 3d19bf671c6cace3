"""One module per call format a model may write into text, the registry that runs them, and `families`."""
