"""A run's own config as a `--config` file, `--config=THIS_FILE:WORKDIR`, so
that `--config.FIELD=VALUE` overrides apply to it."""

import ml_collections

from vit_jax.checkpoints import reading


def get_config(workdir: str) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(
      reading.saved_config(reading.run_directory(workdir)))
