"""A run's own config as a `--config` file, `--config=THIS_FILE:WORKDIR` (or
`:CONFIG.json`, which `--config=CONFIG.json` stands for), so that
`--config.FIELD=VALUE` overrides apply to it."""

import json
import pathlib

import ml_collections

from vit_jax.checkpoints import reading


def get_config(source: str) -> ml_collections.ConfigDict:
  if (path := pathlib.Path(source)).suffix != '.json':
    return ml_collections.ConfigDict(
        reading.saved_config(reading.run_directory(path)))
  try:
    return ml_collections.ConfigDict(json.loads(path.read_text()))
  except (OSError, ValueError) as e:
    problem = e
  # Raised outside the handler: the error line shows this refusal alone.
  raise ValueError(f'{path} is not a JSON config ({problem})')
