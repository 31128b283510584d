"""A trained run read from its workdir as a frozen teacher."""

from typing import Any

from absl import logging
import flax.linen as nn

from vit_jax import config_schema
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.errors import ConfigError
from vit_jax.runtime import sharding as sharding_lib

# Teacher fields that must equal the student's: the teacher sees the
# student's normalized images.
_SAME_INPUT = ('dataset', 'image_size', 'pixel_mean', 'pixel_std')


def load(config, field: str, num_classes: int,
         sharding) -> tuple[nn.Module, Any]:
  """The module and variables of the run `config[field]` names."""
  workdir = config[field]
  try:
    run = reading.load_run(workdir, best=config.teacher_checkpoint == 'best')
  except CheckpointError as e:
    raise ConfigError(f'config.{field}={workdir}: {e}') from e
  if not (reading.run_directory(workdir) / 'summary.json').exists():
    logging.warning(
        'config.%s=%s has not finished training: it teaches as '
        'its step %d left it.', field, workdir, run.step)
  teacher_config = run.config.copy_and_resolve_references()
  for name in _SAME_INPUT:
    theirs, ours = teacher_config[name], config[name]
    if config_schema.comparable(theirs) != config_schema.comparable(ours):
      raise ConfigError(
          f'config.{field}={workdir} was trained with {name}={theirs}, this '
          f'run uses {ours}: the teacher must see the same inputs; set '
          f'--config.{name} to the teacher\'s.')
  if (theirs := run.params['head']['bias'].shape[-1]) != num_classes:
    raise ConfigError(
        f'config.{field}={workdir} classifies {theirs} classes, this run\'s '
        f'data has {num_classes}: the teacher must know the same classes.')
  teacher_config.dtype = config.dtype
  module = models.from_config(teacher_config, num_classes)
  return module, sharding_lib.from_hosts(run.variables, sharding,
                                         f'config.{field}={workdir}')
