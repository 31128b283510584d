"""The studies, a folder each with its README; `runs` and `held_out` are shared."""
