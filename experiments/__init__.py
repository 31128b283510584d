"""The project's studies, a folder each: its README, its configs' runs
(`sweep.py`), and the results and figures its `summary.py` writes beside
them; `runs` is what they share."""
