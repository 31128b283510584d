"""DeiT's distillation (Touvron et al., ICML 2021) from a trained run."""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from vit_jax.errors import ConfigError
from vit_jax.objectives import losses
from vit_jax.objectives import teacher_run


def hard_target(student: jax.Array, teacher: jax.Array,
                temperature: float) -> jax.Array:
  """Per-example cross-entropy with the teacher's predicted classes."""
  del temperature
  return optax.softmax_cross_entropy_with_integer_labels(
      student, jnp.argmax(teacher, axis=-1))


def soft_target(student: jax.Array, teacher: jax.Array,
                temperature: float) -> jax.Array:
  """Per-example T^2 KL(teacher || student), both softened by T."""
  return temperature**2 * optax.kl_divergence(
      jax.nn.log_softmax(student / temperature),
      jax.nn.softmax(teacher / temperature))


# What the distillation head learns of the teacher (`distillation_target`).
TARGETS = {'hard': hard_target, 'soft': soft_target}


@dataclasses.dataclass(frozen=True)
class Teacher:
  module: nn.Module
  variables: Any  # {'params': ..., 'batch_stats': ...}, replicated
  workdir: str
  target: str = 'hard'
  temperature: float = 1.0

  def objective(self, base: losses.Objective) -> losses.Objective:
    """Half `base` on the class head, half the distillation head's loss."""
    learn = TARGETS[self.target]

    def distilled(logits: jax.Array, outputs: dict, targets: jax.Array,
                  images: jax.Array) -> jax.Array:
      del logits  # the heads' average, what the student predicts
      teacher = jax.lax.stop_gradient(
          self.module.apply(self.variables, images, train=False))
      return (base(outputs['class_logits'], outputs, targets, images) + learn(
          outputs['distillation_logits'], teacher, self.temperature)) / 2

    return distilled


def load_teacher(config, num_classes: int, sharding) -> Teacher | None:
  """The run `config.distillation_teacher` names, or None."""
  if not config.distillation_teacher:
    return None
  module, variables = teacher_run.load(config, 'distillation_teacher',
                                       num_classes, sharding)
  if getattr(module, 'distillation_token', False):
    raise ConfigError(
        f'config.distillation_teacher={config.distillation_teacher} is itself '
        'a distilled ViT; use a run of a model with one head.')
  return Teacher(module, variables, str(config.distillation_teacher),
                 config.distillation_target, config.distillation_temperature)
