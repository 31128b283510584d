"""Where state is saved, and any checkpoint read back (docs/layout.md lists
its modules). Scripts call `load_run`, `load`, `load_params` and `convert`;
the formats themselves (.npz, timm, transformers) are `vit_jax.formats`'."""

from vit_jax.checkpoints.export import convert
from vit_jax.checkpoints.reading import load
from vit_jax.checkpoints.reading import load_params
from vit_jax.checkpoints.reading import load_run
