"""The Transformer encoder, named as the official linen model names it."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models import remat_scan
from vit_jax.models.layers import position
from vit_jax.models.layers.dropout import Dropout
from vit_jax.models.layers.dropout import drop_path_rates
from vit_jax.models.layers.encoder_block import BlockConfig
from vit_jax.models.layers.encoder_block import Encoder1DBlock


class Encoder(nn.Module):
  """Position embedding, dropout, `num_layers` blocks, a final LayerNorm."""

  num_layers: int
  block: BlockConfig
  posemb: str = 'learned'
  stochastic_depth_rate: float = 0.0
  remat: str = 'none'
  scan: bool = False

  @nn.compact
  def __call__(
      self, x: jax.Array, *, train: bool, grid: tuple[int, int],
      kept: jax.Array | None = None) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """The encoded tokens and each block's output (none when scanned)."""
    if self.posemb == 'learned':
      x = position.AddPositionEmbs(name=names.POSITION_EMBEDDING)(x)
    elif self.posemb == 'sincos2d':
      x = position.AddSincos2dPositionEmbs(grid, name='posembed_sincos2d')(x)
    if kept is not None:  # the prefix tokens and the patch tokens it indexes
      prefix = x.shape[1] - grid[0] * grid[1]
      patches = jnp.take_along_axis(x[:, prefix:], kept[..., None], axis=1)
      x = jnp.concatenate([x[:, :prefix], patches], axis=1)
    x = Dropout(self.block.dropout_rate)(x, deterministic=not train)
    blocks = []
    if self.scan:  # no stochastic depth (`remat_scan.check`)
      x = remat_scan.scan_blocks(
          Encoder1DBlock(self.block, name=names.STACKED_BLOCK), x,
          num_layers=self.num_layers, deterministic=not train, remat=self.remat)
    else:
      rates = drop_path_rates(self.stochastic_depth_rate, self.num_layers)
      call = remat_scan.block_call(self.remat, not train, prevent_cse=True)
      for i in range(self.num_layers):
        layer = Encoder1DBlock(self.block, rates[i], name=names.block_name(i))
        x = call(layer, x)
        blocks.append(x)
    norm = nn.LayerNorm(dtype=self.block.dtype, name=names.ENCODER_NORM)
    return norm(x), tuple(blocks)
