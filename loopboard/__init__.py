"""loopboard: find the runs where an LLM agent stopped making progress."""
