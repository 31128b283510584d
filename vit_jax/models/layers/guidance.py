"""Locality guidance's projections (Li et al., "Locality Guidance for
Improving Vision Transformers on Tiny Datasets", ECCV 2022): encoder
blocks' patch tokens projected to a CNN's stage widths, parameters used only
in training; the loss is `objectives.locality_guidance`'s."""

from typing import Any

import flax.linen as nn
import jax

from vit_jax.models.layers import initializers

Dtype = Any

# Names the projections of `guidance_maps` start with, at the top level of
# the ViT's parameters: `locality_guidance_0`, ...
GUIDANCE_PROJECTION = 'locality_guidance'


def check_guidance(guided_blocks: tuple[int, ...],
                   guidance_widths: tuple[int, ...], num_layers: int,
                   scan: bool) -> None:
  if len(guided_blocks) != len(guidance_widths):
    raise ValueError(
        f'guided_blocks={tuple(guided_blocks)} and guidance_widths='
        f'{tuple(guidance_widths)} must have one entry per CNN stage each: '
        'set both to the same length.')
  if list(guided_blocks) != sorted(set(guided_blocks)) or any(
      not 0 <= block < num_layers for block in guided_blocks):
    raise ValueError(
        f'guided_blocks={tuple(guided_blocks)}: list encoder blocks in '
        f'increasing order, each in 0..{num_layers - 1}.')
  if any(width < 1 for width in guidance_widths):
    raise ValueError(f'guidance_widths={tuple(guidance_widths)} must be '
                     'positive: the channels of the CNN\'s stages.')
  if guided_blocks and scan:
    raise ValueError('guided_blocks needs each block\'s output, which '
                     'scan=True does not keep: set scan=False.')


def guidance_maps(block_outputs: list[jax.Array], widths: tuple[int, ...],
                  grid: tuple[int, int], dtype: Dtype) -> list[jax.Array]:
  """Locality guidance (Li et al. 2022): `block_outputs`, the guided
  blocks' tokens in order, each imitating a CNN stage of `widths[k]`
  channels for `objectives.locality_guidance`'s loss. Each block's patch
  tokens (batch, h * w, hidden), the prefix tokens dropped, are laid on the
  patch `grid` and projected by a 1x1 convolution with bias (a Dense per
  token, named `locality_guidance_k`) to the width of its CNN stage:
  (batch, h, w, width). Called in a compact method, the projections are
  the caller's children."""
  maps = []
  for k, (tokens, width) in enumerate(zip(block_outputs, widths)):
    patches = tokens[:, tokens.shape[1] - grid[0] * grid[1]:]
    patches = patches.reshape(patches.shape[0], *grid, patches.shape[-1])
    # Initialised as PyTorch's Conv2d, the authors' projection.
    maps.append(nn.Dense(
        width, dtype=dtype, kernel_init=initializers.torch_kernel_init,
        bias_init=initializers.torch_bias_init(patches.shape[-1]),
        name=f'{GUIDANCE_PROJECTION}_{k}')(patches))
  return maps
