"""DeiT's hard distillation (Touvron et al., ICML 2021): a ViT with a
distillation token learns from a trained teacher's predicted classes.

The student (`model_overrides.distillation_token=True`) returns two logits
in training, its class head's and its distillation head's; the class head
learns the labels and the distillation head the teacher's argmax on the same
(augmented, mixed) images, each half of the loss. The teacher is one of our
own runs, read from its `vit_jax.main` workdir (`config.distillation_teacher`)
and applied in eval mode inside the train step; it trains nothing.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax import checkpoint
from vit_jax import models
from vit_jax.errors import ConfigError

# Teacher fields that must equal the student's: the teacher sees the
# student's normalised images.
_SAME_INPUT = ('dataset', 'image_size', 'pixel_mean', 'pixel_std')


def _comparable(value):
  return tuple(value) if isinstance(value, (list, tuple)) else value


@dataclasses.dataclass(frozen=True)
class Teacher:
  module: nn.Module
  variables: Any  # {'params': ..., 'batch_stats': ...}, replicated
  workdir: str

  def labels(self, images: jax.Array) -> jax.Array:
    """The teacher's predicted class of each image, in eval mode."""
    logits = self.module.apply(self.variables, images, train=False)
    return jnp.argmax(jax.lax.stop_gradient(logits), axis=-1)


def load_teacher(config, num_classes: int, sharding) -> Teacher | None:
  """The run `config.distillation_teacher` names, its variables placed with
  `sharding`; None when the config distils from nothing. ConfigError for a
  workdir that is no finished-enough run or whose inputs differ."""
  if not config.distillation_teacher:
    return None
  workdir = config.distillation_teacher
  try:
    run = checkpoint.load_run(workdir)
  except checkpoint.CheckpointError as e:
    raise ConfigError(f'config.distillation_teacher={workdir}: {e}') from e
  for name in _SAME_INPUT:
    theirs, ours = run.config.get(name), config[name]
    if _comparable(theirs) != _comparable(ours):
      raise ConfigError(
          f'config.distillation_teacher={workdir} was trained with '
          f'{name}={theirs}, this run uses {ours}: the teacher must see the '
          f'same inputs; set --config.{name} to the teacher\'s.')
  teacher_config = run.config.copy_and_resolve_references()
  teacher_config.dtype = config.dtype
  module = models.from_config(teacher_config, num_classes)
  if getattr(module, 'distillation_token', False):
    raise ConfigError(f'config.distillation_teacher={workdir} is itself a '
                      'distilled ViT; use a run of a model with one head.')
  variables = jax.device_put(run.variables, sharding)
  return Teacher(module, variables, str(workdir))

