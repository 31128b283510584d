"""Locality guidance (Li et al., ECCV 2022): in training, a ViT's blocks
imitate a trained CNN's stage features; the ViT stays pure at inference."""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.errors import ConfigError
from vit_jax.models import cnn
from vit_jax.models import names
from vit_jax.models.vit import ViTWrapper
from vit_jax.objectives import losses
from vit_jax.objectives import teacher_run


class GuidedViT(ViTWrapper):
  """`vit` whose `blocks` are projected to the CNN stages' `widths`."""

  blocks: tuple[int, ...]
  widths: tuple[int, ...]

  def __post_init__(self):
    vit, blocks, widths = self.vit, self.blocks, self.widths
    if len(blocks) != len(widths) or not blocks:
      raise ValueError(f'guided_blocks={tuple(blocks)} and '
                       f'guidance_widths={tuple(widths)} must have one entry '
                       'per CNN stage each: set both to the same length.')
    if list(blocks) != sorted(set(blocks)) or any(
        not 0 <= block < vit.num_layers for block in blocks):
      raise ValueError(f'guided_blocks={tuple(blocks)}: list encoder blocks in '
                       f'increasing order, each in 0..{vit.num_layers - 1}.')
    if any(width < 1 for width in widths):
      raise ValueError(f'guidance_widths={tuple(widths)} must be '
                       'positive: the channels of the CNN\'s stages.')
    if vit.scan:
      raise ValueError('guided_blocks needs each block\'s output, which '
                       'scan=True does not keep: set scan=False.')
    super().__post_init__()

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool,
               return_out: bool = False):
    logits, out = self.vit(images, train=train, return_out=True)
    size = self.vit.effective_patch_size
    grid, maps = (images.shape[1] // size, images.shape[2] // size), []
    for k, (block, width) in enumerate(zip(self.blocks, self.widths)):
      patches = out['blocks'][block][:, len(self.vit.prefix_tokens):]
      patches = patches.reshape(patches.shape[0], *grid, patches.shape[-1])
      maps.append(
          nn.Dense(width, dtype=self.vit.dtype,
                   kernel_init=cnn.torch_kernel_init,
                   bias_init=cnn.torch_bias_init(patches.shape[-1]),
                   name=f'{names.GUIDANCE_PROJECTION}_{k}')(patches))
    return (logits, {**out, 'guided_features': maps}) if return_out else logits


def imitation(student: list[jax.Array], teacher: list[jax.Array]) -> jax.Array:
  """Per-example mean squared difference of the map pairs on the larger grid."""
  total = 0.0
  for ours, theirs in zip(student, teacher, strict=True):
    grid = tuple(map(max, ours.shape[1:3], theirs.shape[1:3]))
    ours, theirs = (jax.image.resize(f.astype(jnp.float32),
                                     (f.shape[0], *grid, f.shape[-1]),
                                     'bilinear') for f in (ours, theirs))
    total += jnp.mean(jnp.square(ours - theirs), axis=(1, 2, 3))
  return total


@dataclasses.dataclass(frozen=True)
class Guide:
  module: nn.Module  # a SimpleCNN or SmallResNet
  variables: Any  # {'params': ..., 'batch_stats': ...}, replicated
  workdir: str
  weight: float

  def objective(self, base: losses.Objective) -> losses.Objective:
    """`base` plus `weight` times the imitation of the CNN's features."""

    def guided(logits: jax.Array, outputs: dict, targets: jax.Array,
               images: jax.Array) -> jax.Array:
      _, teacher = self.module.apply(self.variables, images, train=False,
                                     return_out=True)
      return (base(logits, outputs, targets, images) +
              self.weight * imitation(list(outputs['guided_features']),
                                      jax.lax.stop_gradient(teacher['stages'])))

    return guided


def load_guide(config, num_classes: int, sharding) -> Guide | None:
  """The CNN run `config.locality_guidance_teacher` names, or None."""
  if not config.locality_guidance_teacher:
    return None
  workdir = config.locality_guidance_teacher
  module, variables = teacher_run.load(config, 'locality_guidance_teacher',
                                       num_classes, sharding)
  if not isinstance(module, (cnn.SimpleCNN, cnn.SmallResNet)):
    raise ConfigError(f'config.locality_guidance_teacher={workdir} trained a '
                      f'{type(module).__name__}; locality guidance imitates a '
                      'CNN: use a run of simple_cnn or small_resnet.')
  widths = tuple(config.model_overrides.get('guidance_widths', ()))
  if widths != module.feature_widths:
    raise ConfigError(
        f'config.locality_guidance_teacher={workdir} is a '
        f'{type(module).__name__} whose stages end in {module.feature_widths} '
        f'channels, but config.model_overrides.guidance_widths={widths}: set '
        f"--config.model_overrides.guidance_widths='{module.feature_widths}' "
        f'(and guided_blocks to {len(module.feature_widths)} blocks).')
  return Guide(module, variables, str(workdir), config.locality_guidance_weight)
