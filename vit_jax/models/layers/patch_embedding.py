"""Images to patch tokens: the official linear patch projection (a conv
whose kernel and stride are the patch size), or shifted patch tokenization
(Lee, Lee & Song 2021), whose tokens also see the pixels around their
patch, for little data."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names

Dtype = Any


def embed_patches(images: jax.Array, patch_size: int, hidden_size: int, *,
                  shifted: bool, dtype: Dtype) -> jax.Array:
  """(batch, rows, columns, hidden_size): the patches' embeddings. Called
  in a compact method, the modules are the caller's children, at the top
  level of the ViT's parameters as in the official tree."""
  if shifted:
    return shifted_patch_embedding(images, patch_size, hidden_size, dtype)
  return nn.Conv(
      hidden_size,
      kernel_size=(patch_size, patch_size),
      strides=(patch_size, patch_size),
      padding='VALID',
      dtype=dtype,
      name=names.PATCH_EMBEDDING)(
          images)


def shifted_patch_tokens(images: jax.Array, patch_size: int) -> jax.Array:
  """Shifted patch tokenization's patches (Lee, Lee & Song 2021), before
  their LayerNorm and linear projection: shape (batch, rows, columns,
  patch_size**2 * 5 * channels).

  The images are concatenated along channels with four copies shifted by
  patch_size // 2 pixels up-left, up-right, down-left and down-right (zeros
  shifted in), then cut into patch_size x patch_size patches, each flattened
  (row, column, channel), as the 'embedding' conv's kernel. Each token thus
  also sees the pixels around its patch, a locality that a ViT trained on
  little data otherwise has to learn.
  """
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
  """(batch, height, width, channels) images cut into patches, each
  flattened (row, column, channel) as the 'embedding' conv's kernel:
  (batch, rows, columns, patch_size**2 * channels)."""
  n, height, width, channels = images.shape
  p = patch_size
  x = images.reshape(n, height // p, p, width // p, p, channels)
  x = x.transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, height // p, width // p, p * p * channels)


def check_shifted_patches(patch_size: int,
                          resnet_stages: tuple[int, ...] | None) -> None:
  if resnet_stages is not None:
    raise ValueError(
        'shifted_patches=True shifts image pixels and cannot follow a '
        'ResNet stem: set resnet_stages=None or shifted_patches=False.')
  if patch_size < 2:
    raise ValueError(
        f'shifted_patches=True shifts by half a patch, which '
        f'patch_size={patch_size} cannot give: use a patch_size of at '
        'least 2.')


def shifted_patch_embedding(images: jax.Array, patch_size: int,
                            hidden_size: int, dtype: Dtype) -> jax.Array:
  """Shifted patch tokenization as modules of the calling compact method
  (`shifted_patch_norm`, `shifted_patch_embedding` beside the ViT's other
  top-level modules): the shifted patches LayerNorm'd and projected, in place
  of the `embedding` conv. Shape (batch, rows, columns, hidden_size)."""
  x = shifted_patch_tokens(images, patch_size)
  x = nn.LayerNorm(dtype=dtype, name=names.SHIFTED_PATCH_NORM)(x)
  return nn.Dense(hidden_size, dtype=dtype,
                  name=names.SHIFTED_PATCH_EMBEDDING)(x)
