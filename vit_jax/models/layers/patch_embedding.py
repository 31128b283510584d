"""Images to patch tokens: the official conv, or shifted patch tokenization."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names


def embed_patches(images: jax.Array, patch_size: int, hidden_size: int, *,
                  shifted: bool, dtype: Any) -> jax.Array:
  """The patches' embeddings, by modules of the calling compact method."""
  if shifted:  # LayerNorm'd and projected, in place of the conv
    x = shifted_patch_tokens(images, patch_size)
    x = nn.LayerNorm(dtype=dtype, name=names.SHIFTED_PATCH_NORM)(x)
    return nn.Dense(hidden_size, dtype=dtype,
                    name=names.SHIFTED_PATCH_EMBEDDING)(x)
  return nn.Conv(hidden_size, kernel_size=(patch_size, patch_size),
                 strides=(patch_size, patch_size), padding='VALID', dtype=dtype,
                 name=names.PATCH_EMBEDDING)(images)


def shifted_patch_tokens(images: jax.Array, patch_size: int) -> jax.Array:
  """The images and their four diagonal half-patch shifts, as patches."""
  _, height, width, _ = images.shape
  s = patch_size // 2
  padded = jnp.pad(images, ((0, 0), (s, s), (s, s), (0, 0)))
  # The copy shifted by (dy, dx) is x[i - dy, j - dx]: padded[s - dy + i, ...].
  copies = [images] + [
      padded[:, s - dy:s - dy + height, s - dx:s - dx + width]
      for dy, dx in ((-s, -s), (-s, s), (s, -s), (s, s))
  ]
  return patch_grid(jnp.concatenate(copies, axis=-1), patch_size)


def patch_grid(images: jax.Array, patch_size: int) -> jax.Array:
  """Images cut into patches, flattened (row, column, channel) as the conv."""
  n, height, width, channels = images.shape
  p = patch_size
  x = images.reshape(n, height // p, p, width // p, p, channels)
  x = x.transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, height // p, width // p, p * p * channels)
