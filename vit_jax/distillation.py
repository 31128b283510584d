"""DeiT's hard distillation (Touvron et al., ICML 2021): a ViT with a
distillation token learns from a trained teacher's predicted classes.

The student (`model_overrides.distillation_token=True`) sows two logits, its
class head's and its distillation head's (`vit.HEAD_LOGITS`); the class head
learns the (smoothed, mixed) targets and the distillation head the teacher's
argmax on the same images, each half of the loss (`Teacher.objective`). The
teacher is one of our own runs, read from its `vit_jax.main` workdir
(`config.distillation_teacher`) and applied in eval mode inside the train
step; it trains nothing.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from vit_jax import checkpoint
from vit_jax import config_schema
from vit_jax import losses
from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.errors import ConfigError

# Teacher fields that must equal the student's: the teacher sees the
# student's normalised images.
_SAME_INPUT = ('dataset', 'image_size', 'pixel_mean', 'pixel_std')


@dataclasses.dataclass(frozen=True)
class Teacher:
  module: nn.Module
  variables: Any  # {'params': ..., 'batch_stats': ...}, replicated
  workdir: str

  def labels(self, images: jax.Array) -> jax.Array:
    """The teacher's predicted class of each image, in eval mode."""
    logits = self.module.apply(self.variables, images, train=False)
    return jnp.argmax(jax.lax.stop_gradient(logits), axis=-1)

  def objective(self, logits: jax.Array, heads: dict, targets: jax.Array,
                images: jax.Array) -> jax.Array:
    """`losses.Objective`: half the class head's loss on the targets, half
    the distillation head's on the teacher's classes."""
    del logits  # the heads' average, what the student predicts
    return (losses.cross_entropy(heads['class_logits'], targets) +
            optax.softmax_cross_entropy_with_integer_labels(
                heads['distillation_logits'], self.labels(images))) / 2


def load_teacher(config, num_classes: int, sharding) -> Teacher | None:
  """The run `config.distillation_teacher` names, its variables placed with
  `sharding`; None when the config distils from nothing. ConfigError for a
  workdir that is no finished-enough run or whose inputs differ."""
  if not config.distillation_teacher:
    return None
  workdir = config.distillation_teacher
  try:
    run = checkpoint.load_run(workdir)
  except CheckpointError as e:
    raise ConfigError(f'config.distillation_teacher={workdir}: {e}') from e
  teacher_config = run.config.copy_and_resolve_references()
  for name in _SAME_INPUT:
    theirs, ours = teacher_config[name], config[name]
    if config_schema.comparable(theirs) != config_schema.comparable(ours):
      raise ConfigError(
          f'config.distillation_teacher={workdir} was trained with '
          f'{name}={theirs}, this run uses {ours}: the teacher must see the '
          f'same inputs; set --config.{name} to the teacher\'s.')
  teacher_config.dtype = config.dtype
  module = models.from_config(teacher_config, num_classes)
  if getattr(module, 'distillation_token', False):
    raise ConfigError(f'config.distillation_teacher={workdir} is itself a '
                      'distilled ViT; use a run of a model with one head.')
  variables = jax.device_put(run.variables, sharding)
  return Teacher(module, variables, str(workdir))
