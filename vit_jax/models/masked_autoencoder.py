"""Masked autoencoding (He et al., CVPR 2022), with an online probe's head."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models.layers.encoder_block import BlockConfig
from vit_jax.models.layers.encoder_block import Encoder1DBlock
from vit_jax.models.layers.patch_embedding import patch_grid
from vit_jax.models.layers.position import AddPositionEmbs
from vit_jax.models.vit import ViTWrapper
from vit_jax.objectives import losses

HEAD_SIZE = 32


def kept_count(num_patches: int, mask_ratio: float) -> int:
  """How many of `num_patches` an image keeps; ValueError for none."""
  if (kept := int(num_patches * (1 - mask_ratio))) < 1:
    raise ValueError(f'mae_mask_ratio={mask_ratio} keeps none of {num_patches} '
                     'patches: lower it, or use smaller patches.')
  return kept


def kept_patches(key: jax.Array, batch: int, num_patches: int,
                 mask_ratio: float) -> jax.Array:
  """(batch, kept) random indices of the patches each image keeps."""
  kept = kept_count(num_patches, mask_ratio)
  noise = jax.random.uniform(key, (batch, num_patches))
  return jnp.argsort(noise, axis=1)[:, :kept]


def masked(kept: jax.Array | None, batch: int, num_patches: int) -> jax.Array:
  """(batch, num_patches) float32, 1 where a patch was dropped."""
  mask = jnp.ones((batch, num_patches), jnp.float32)
  return (jnp.zeros_like(mask) if kept is None else
          mask.at[jnp.arange(batch)[:, None], kept].set(0.0))


class Decoder(nn.Module):
  """MAE's decoder: every patch's pixels, in float32, from the kept ones'."""

  width: int
  depth: int
  patch_pixels: int
  attention: str = 'auto'
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, encoded: jax.Array, kept: jax.Array | None,
               num_patches: int) -> jax.Array:
    batch = encoded.shape[0]
    prefix = encoded.shape[1] - (num_patches if kept is None else kept.shape[1])
    projection = dict(kernel_init=nn.initializers.xavier_uniform(),
                      dtype=self.dtype)
    x = nn.Dense(self.width, name='embed', **projection)(encoded)
    # Made whether or not a patch is dropped: the model initializes in
    # evaluation, where none is.
    mask_token = self.param('mask_token', nn.initializers.normal(0.02),
                            (1, 1, self.width)).astype(x.dtype)
    patches = x[:, prefix:]
    if kept is not None:
      everywhere = jnp.broadcast_to(mask_token,
                                    (batch, num_patches, self.width))
      patches = everywhere.at[jnp.arange(batch)[:, None], kept].set(patches)
    # MAE's decoder but for this: a learned position embedding, not sin-cos.
    x = AddPositionEmbs(name='posembed')(jnp.concatenate(
        [x[:, :prefix], patches], axis=1))
    block = BlockConfig(mlp_dim=4 * self.width,
                        num_heads=self.width // HEAD_SIZE,
                        attention=self.attention, dtype=self.dtype)
    for i in range(self.depth):
      x = Encoder1DBlock(block, name=f'block_{i}')(x, deterministic=True)
    x = nn.LayerNorm(dtype=self.dtype, name='norm')(x[:, prefix:])
    return nn.Dense(self.patch_pixels, name='predictions',
                    **projection)(x).astype(jnp.float32)


class MaskedAutoencoder(ViTWrapper):
  """`vit` as a masked autoencoder; returns the online probe's logits."""

  mask_ratio: float = 0.75
  decoder_depth: int = 8
  decoder_width: int = 512

  def __post_init__(self):
    vit, ratio = self.vit, self.mask_ratio
    depth, width = self.decoder_depth, self.decoder_width
    if not 0.0 < ratio < 1.0:
      raise ValueError(
          f'mae_mask_ratio={ratio} must be in [0, 1): the share of each '
          "image's patches its encoder does not see (MAE: 0.75; 0: off).")
    if depth < 1 or width < HEAD_SIZE or width % HEAD_SIZE:
      raise ValueError(
          f'mae_decoder_depth={depth} and mae_decoder_width={width}: the '
          f'decoder needs at least one block, and a width that is a positive '
          f'multiple of {HEAD_SIZE}, its heads\' size (MAE: 8 and 512).')
    if vit.shifted_patches or vit.resnet_stages is not None:
      raise ValueError(
          f'{"shifted_patches=True" if vit.shifted_patches else "A ResNet stem"} '
          'gives each token its neighbours\' pixels, so a hidden patch would '
          'be seen through them: use the plain patch embedding with '
          'mae_mask_ratio > 0.')
    if vit.posemb == 'none':
      raise ValueError(
          "posemb='none' leaves the encoder no way to tell where its kept "
          "patches are: use 'learned' or 'sincos2d' with mae_mask_ratio > 0.")
    super().__post_init__()

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool,
               return_out: bool = False):
    size = self.vit.effective_patch_size
    n, num_patches = images.shape[0], (images.shape[1] //
                                       size) * (images.shape[2] // size)
    kept = (kept_patches(self.make_rng('dropout'), n, num_patches,
                         self.mask_ratio) if train else None)
    logits, out = self.vit(images, train=train, kept_patches=kept, probe=True,
                           return_out=True)
    # Made in evaluation too, where the parameters are initialized.
    predictions = Decoder(self.decoder_width, self.decoder_depth, size**2 *
                          images.shape[-1], self.vit.attention, self.vit.dtype,
                          name=names.MAE_DECODER)(out['encoded'], kept,
                                                  num_patches)
    if not return_out:
      return logits
    return logits, dict(out, mae_predictions=predictions,
                        mae_mask=masked(kept, n, num_patches))


def reconstruction_error(predictions: jax.Array, mask: jax.Array,
                         images: jax.Array, patch_size: int) -> jax.Array:
  """Per-example error on the dropped patches (MAE's `norm_pix_loss`)."""
  # (batch, patches, pixels), in the order of the ViT's tokens.
  target = patch_grid(images.astype(jnp.float32), patch_size)
  target = target.reshape(target.shape[0], -1, target.shape[-1])
  mean = target.mean(axis=-1, keepdims=True)
  # PyTorch's default, the unbiased variance, as MAE's.
  variance = target.var(axis=-1, keepdims=True, ddof=1)
  target = (target - mean) / jnp.sqrt(variance + 1e-6)
  error = jnp.mean(jnp.square(predictions - target), axis=-1)
  # 0, not 0/0, for an image with nothing hidden (in evaluation).
  return jnp.sum(error * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1)


def objective(base: losses.Objective, patch_size: int) -> losses.Objective:
  """`base` plus the reconstruction error of the patches the encoder missed."""

  def with_reconstruction(logits: jax.Array, outputs: dict, targets: jax.Array,
                          images: jax.Array) -> jax.Array:
    return base(logits, outputs, targets, images) + reconstruction_error(
        outputs['mae_predictions'], outputs['mae_mask'], images, patch_size)

  return with_reconstruction
