"""Mixup and CutMix as timm's batch-mode Mixup; targets come in smoothed."""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class MixParameters(NamedTuple):
  """Image i keeps `lam` of itself, the rest from image n - 1 - i (in `box`)."""
  lam: jax.Array
  use_cutmix: jax.Array
  box: jax.Array


def mix_parameters(key: jax.Array, image_shape: tuple[int,
                                                      ...], mixup_alpha: float,
                   cutmix_alpha: float, switch_probability: float = 0.5,
                   probability: float = 1.0) -> MixParameters:
  """timm's Mixup parameters; only `image_shape` is static."""
  _, h, w, _ = image_shape
  mix_key, switch_key, lam_key, y_key, x_key = jax.random.split(key, 5)
  mixup_alpha = jnp.asarray(mixup_alpha, jnp.float32)
  cutmix_alpha = jnp.asarray(cutmix_alpha, jnp.float32)
  mixup_on, cutmix_on = mixup_alpha > 0, cutmix_alpha > 0
  use_cutmix = jnp.where(mixup_on & cutmix_on,
                         jax.random.bernoulli(switch_key, switch_probability),
                         cutmix_on)
  mixed = jax.random.bernoulli(mix_key, probability) & (mixup_on | cutmix_on)
  use_cutmix = use_cutmix & mixed
  # One Beta draw: the sampler is the costly part of this program to compile.
  alpha = jnp.where(use_cutmix, cutmix_alpha, mixup_alpha)
  lam = jax.random.beta(lam_key, *(2 * [jnp.where(alpha > 0, alpha, 1.0)]))
  # timm's rand_bbox.
  ratio = jnp.sqrt(1.0 - lam)
  half_h = jnp.floor(h * ratio).astype(jnp.int32) // 2
  half_w = jnp.floor(w * ratio).astype(jnp.int32) // 2
  cy = jax.random.randint(y_key, (), 0, h)
  cx = jax.random.randint(x_key, (), 0, w)
  top, bottom = jnp.clip(cy - half_h, 0, h), jnp.clip(cy + half_h, 0, h)
  left, right = jnp.clip(cx - half_w, 0, w), jnp.clip(cx + half_w, 0, w)
  rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
  box = ((rows >= top) & (rows < bottom) & (cols >= left) & (cols < right) &
         use_cutmix)
  # The area pasted, as timm's `correct_lam`.
  cutmix_lam = 1.0 - ((bottom - top) * (right - left)) / (h * w)
  lam = jnp.where(mixed, jnp.where(use_cutmix, cutmix_lam, lam), 1.0)
  return MixParameters(lam.astype(jnp.float32), use_cutmix, box)


def mix(key: jax.Array, images: jax.Array, targets: jax.Array,
        mixup_alpha: float, cutmix_alpha: float,
        switch_probability: float = 0.5,
        probability: float = 1.0) -> tuple[jax.Array, jax.Array]:
  """`images` and their soft `targets`, mixed by `mix_parameters`."""
  alphas = (mixup_alpha, cutmix_alpha)
  if all(isinstance(a, (int, float)) and a <= 0 for a in alphas):
    return images, targets
  lam, use_cutmix, box = mix_parameters(key, images.shape, mixup_alpha,
                                        cutmix_alpha, switch_probability,
                                        probability)
  partner = images[::-1]
  mixed = jnp.where(use_cutmix, jnp.where(box[None, :, :, None], partner,
                                          images),
                    lam * images + (1.0 - lam) * partner)
  return mixed, lam * targets + (1.0 - lam) * targets[::-1]
