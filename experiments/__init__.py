"""The studies, a folder each (README, sweep.py, summary.py); `runs` is shared."""
