"""DeiT's hard distillation (Touvron et al., ICML 2021): a ViT with a
distillation token learns from a trained teacher's predicted classes.

The student (`model_overrides.distillation_token=True`) sows two logits, its
class head's and its distillation head's (`vit.TRAINING_OUTPUTS`); the
class head learns the (smoothed, mixed) targets and the distillation head
the teacher's argmax on the same images, each half of the loss
(`Teacher.objective`, around the run's other objective). The teacher is one of our own runs
(`config.distillation_teacher`, read by `teacher_run`), applied in eval
mode inside the train step.
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from vit_jax.errors import ConfigError
from vit_jax.objectives import losses
from vit_jax.objectives import teacher_run


@dataclasses.dataclass(frozen=True)
class Teacher:
  module: nn.Module
  variables: Any  # {'params': ..., 'batch_stats': ...}, replicated
  workdir: str

  def labels(self, images: jax.Array) -> jax.Array:
    """The teacher's predicted class of each image, in eval mode."""
    logits = self.module.apply(self.variables, images, train=False)
    return jnp.argmax(jax.lax.stop_gradient(logits), axis=-1)

  def objective(self, base: losses.Objective) -> losses.Objective:
    """Half `base` on the class head's logits, half the distillation
    head's loss on the teacher's classes."""

    def distilled(logits: jax.Array, outputs: dict, targets: jax.Array,
                  images: jax.Array) -> jax.Array:
      del logits  # the heads' average, what the student predicts
      return (base(outputs['class_logits'], outputs, targets, images) +
              optax.softmax_cross_entropy_with_integer_labels(
                  outputs['distillation_logits'], self.labels(images))) / 2

    return distilled


def load_teacher(config, num_classes: int, sharding) -> Teacher | None:
  """The run `config.distillation_teacher` names (`teacher_run.load`); None
  when the config distils from nothing. ConfigError for a teacher that is
  itself a distilled ViT."""
  if not config.distillation_teacher:
    return None
  module, variables = teacher_run.load(config, 'distillation_teacher',
                                       num_classes, sharding)
  if getattr(module, 'distillation_token', False):
    raise ConfigError(
        f'config.distillation_teacher={config.distillation_teacher} is itself '
        'a distilled ViT; use a run of a model with one head.')
  return Teacher(module, variables, str(config.distillation_teacher))
