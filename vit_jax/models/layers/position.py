"""Position embeddings: learned, fixed 2-D sine-cosine (MoCo v3), or none."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

POSEMBS = ('learned', 'sincos2d', 'none')


class AddPositionEmbs(nn.Module):
  """Adds a learned 1-D position embedding, one vector per token."""

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    shape = (1, tokens.shape[1], tokens.shape[2])
    if self.has_variable('params', 'pos_embedding'):
      stored = self.get_variable('params', 'pos_embedding').shape
      if stored != shape:
        raise ValueError(
            f'The position embedding was made for {stored[1]} tokens but the '
            f'input gives {shape[1]}: the image size differs from the one the '
            'parameters were initialized at. Use that image size, or resize '
            'the position embedding to the new patch grid (fine-tuning).')
    # normal(0.02) as in BERT and the official ViT.
    pos_embedding = self.param('pos_embedding',
                               nn.initializers.normal(stddev=0.02), shape)
    return tokens + pos_embedding.astype(tokens.dtype)


def posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.,
                     dtype: Any = jnp.float32) -> jax.Array:
  """big_vision's `posemb_sincos_2d` of an h x w grid, (1, h * w, width)."""
  y, x = jnp.mgrid[:h, :w]
  quarter = width // 4
  # A one-channel quarter would divide by zero.
  omega = jnp.arange(quarter) / max(quarter - 1, 1)
  omega = 1.0 / (temperature**omega)
  x = x.reshape(-1)[:, None] * omega[None, :]
  y = y.reshape(-1)[:, None] * omega[None, :]
  parts = [jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)]
  return jnp.concatenate(parts, axis=1)[None].astype(dtype)


class AddSincos2dPositionEmbs(nn.Module):
  """Adds `posemb_sincos_2d` to the patch tokens, zero to the prefix tokens."""

  grid: tuple[int, int]

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    h, w = self.grid
    # The encoder passes the grid its patch tokens were cut into.
    prefix = tokens.shape[1] - h * w
    embedding = posemb_sincos_2d(h, w, tokens.shape[2], dtype=tokens.dtype)
    return tokens + jnp.pad(embedding, ((0, 0), (prefix, 0), (0, 0)))
