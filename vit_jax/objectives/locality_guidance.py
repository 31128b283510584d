"""Locality guidance (Li et al., "Locality Guidance for Improving Vision
Transformers on Tiny Datasets", ECCV 2022): while it trains, a ViT's
intermediate features imitate a trained CNN's, which carry the locality a
ViT lacks on little data; the ViT stays pure at inference.

The student (`model_overrides.guided_blocks` and `guidance_widths`) projects
the patch tokens of each guided encoder block to the channels of one CNN
stage with a 1x1 convolution and sows the maps (`vit.TRAINING_OUTPUTS`,
`guided_features`); the CNN (`config.locality_guidance_teacher`, a
`vit_jax.main` workdir of a `StagedCNN`, read by `teacher_run`) gives the
feature map each of its stages ends with (`cnn.stage_features`). Each pair
is resized bilinearly to the larger of the two grids and compared by mean
squared error; the sum over the pairs, times
`config.locality_guidance_weight`, is added to the run's other objective
(`Guide.objective`: cross-entropy, or DeiT's distillation).

As the authors' code: the stages' outputs after their ReLU (one map per
resolution), no normalisation of either side, the projections initialised
as PyTorch's Conv2d, weight 2.5, ViT blocks at the start, middle and end
(0, 6, 11 of 12; 0, 3, 5 of the study's 6). Where we differ: their
teacher's BatchNorm runs in training mode inside the student's step, ours
in eval mode (its running averages, as our distillation teacher); their
teacher may take another image size, ours sees the student's images
(`teacher_run`); with DeiT's distillation their loss drops the
distillation head's term, ours keeps both; and a run's checkpoints keep
the projections, so that it resumes exactly.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from vit_jax.errors import ConfigError
from vit_jax.models import cnn
from vit_jax.objectives import losses
from vit_jax.objectives import teacher_run


def imitation(student: list[jax.Array], teacher: list[jax.Array]
              ) -> jax.Array:
  """Per-example loss: for each (student, teacher) pair of feature maps
  (batch, height, width, channels), both resized bilinearly to the larger
  grid, the mean squared difference; summed over the pairs, in float32."""
  total = 0.0
  for ours, theirs in zip(student, teacher, strict=True):
    grid = tuple(map(max, ours.shape[1:3], theirs.shape[1:3]))

    def resized(features, grid=grid):
      shape = (features.shape[0], *grid, features.shape[-1])
      return jax.image.resize(features.astype(jnp.float32), shape, 'bilinear')

    total += jnp.mean(jnp.square(resized(ours) - resized(theirs)),
                      axis=(1, 2, 3))
  return total


@dataclasses.dataclass(frozen=True)
class Guide:
  module: cnn.StagedCNN
  variables: Any  # {'params': ..., 'batch_stats': ...}, replicated
  workdir: str
  weight: float

  def objective(self, base: losses.Objective) -> losses.Objective:
    """`base` plus `weight` times the student's imitation of the CNN's
    stage features on the same images."""

    def guided(logits: jax.Array, outputs: dict, targets: jax.Array,
               images: jax.Array) -> jax.Array:
      teacher = jax.lax.stop_gradient(
          cnn.stage_features(self.module, self.variables, images))
      return (base(logits, outputs, targets, images) + self.weight *
              imitation(list(outputs['guided_features']), teacher))

    return guided


def load_guide(config, num_classes: int, sharding) -> Guide | None:
  """The CNN run `config.locality_guidance_teacher` names, checked against
  the student's guidance; None when the config guides with nothing. A
  ConfigError in one line for a run that is no staged CNN or whose stages
  have other widths than `guidance_widths`."""
  if not config.locality_guidance_teacher:
    return None
  workdir = config.locality_guidance_teacher
  module, variables = teacher_run.load(config, 'locality_guidance_teacher',
                                       num_classes, sharding)
  if not isinstance(module, cnn.StagedCNN):
    raise ConfigError(
        f'config.locality_guidance_teacher={workdir} trained a '
        f'{type(module).__name__}; locality guidance imitates a CNN: use a '
        'run of simple_cnn or small_resnet.')
  widths = tuple(config.model_overrides.get('guidance_widths', ()))
  if widths != module.feature_widths:
    raise ConfigError(
        f'config.locality_guidance_teacher={workdir} is a '
        f'{type(module).__name__} whose stages end in '
        f'{module.feature_widths} channels, but config.model_overrides.'
        f'guidance_widths={widths}: set --config.model_overrides.'
        f"guidance_widths='{module.feature_widths}' (and guided_blocks to "
        f'{len(module.feature_widths)} blocks).')
  return Guide(module, variables, str(workdir),
               config.locality_guidance_weight)
