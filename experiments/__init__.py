"""The project's studies, a folder each: its README, its `run.py`, and the
results and figures that `run.py` writes beside them; `runs` is what the
runners share."""
