"""Where state is saved, and any checkpoint read back.

  run_checkpoints.py  a run's checkpoints, `workdir/checkpoints/<step>/`:
                      saved and restored by the loop (`RunCheckpoints`),
                      read by the commands while a run may be writing
  best_checkpoint.py  the state of a run's best evaluation, kept beside
                      them in `workdir/best_checkpoint/<step>/`
  digests.py          what a checkpoint hashes to, checked on every restore
  reading.py          any checkpoint read back: a workdir (`load_run`), an
                      official .npz, timm's or transformers' (`load`,
                      `load_params`); a lost config.json rebuilt
  export.py           any checkpoint written as npz, timm or hf (what
                      `vit_jax.convert` does)

The formats themselves (the official .npz, timm, transformers) are
`vit_jax.formats`'. What scripts call is here: `load_run`, `load`,
`load_params` and `convert`.
"""

from vit_jax.checkpoints.export import convert
from vit_jax.checkpoints.reading import load
from vit_jax.checkpoints.reading import load_params
from vit_jax.checkpoints.reading import load_run

__all__ = ['convert', 'load', 'load_params', 'load_run']
