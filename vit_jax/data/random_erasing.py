"""Random erasing on the devices, on images in [0, 1] before normalization."""

import jax
import jax.numpy as jnp

from vit_jax.data import auto_augment


def random_erasing(key: jax.Array, images: jax.Array, probability: float = 0.25,
                   area: tuple[float, float] = (0.02, 1 / 3),
                   aspect: tuple[float, float] = (0.3, 1 / 0.3), *,
                   mode: str = 'const', mean=auto_augment.FILL, std=1.0,
                   attempts: int = 10) -> jax.Array:
  """Random erasing (Zhong et al. 2020) as timm's RandomErasing, one box."""
  # `mode` and `attempts` are static.
  if mode not in ('const', 'pixel'):
    raise ValueError(f"mode={mode!r}: use 'const' or 'pixel'.")
  n, h, w, _ = images.shape
  keys = jax.random.split(key, 6)
  target = jax.random.uniform(keys[0], (n, attempts), minval=area[0],
                              maxval=area[1]) * h * w
  ratio = jnp.exp(
      jax.random.uniform(keys[1], (n, attempts), minval=jnp.log(aspect[0]),
                         maxval=jnp.log(aspect[1])))
  heights = jnp.round(jnp.sqrt(target * ratio)).astype(jnp.int32)
  widths = jnp.round(jnp.sqrt(target / ratio)).astype(jnp.int32)
  fits = (heights < h) & (widths < w)
  first = jnp.argmax(fits, axis=1)[:, None]
  height = jnp.take_along_axis(heights, first, 1)[:, 0]
  width = jnp.take_along_axis(widths, first, 1)[:, 0]
  top = jax.random.randint(keys[2], (n,), 0, h - height + 1)
  left = jax.random.randint(keys[3], (n,), 0, w - width + 1)
  erase = jax.random.bernoulli(keys[4], probability, (n,)) & fits.any(axis=1)

  def inside(start, size, length):
    positions = jnp.arange(length)
    return (positions >= start[:, None]) & (positions < (start + size)[:, None])

  mask = (inside(top, height, h)[:, :, None] & inside(left, width, w)[:, None] &
          erase[:, None, None])
  # The mean (plus std times normal noise): timm's zeros (normal noise) once
  # normalized by the dataset's mean and std.
  values = jnp.asarray(mean, images.dtype)
  if mode == 'pixel':
    values = values + jnp.asarray(std, images.dtype) * jax.random.normal(
        keys[5], images.shape, images.dtype)
  return jnp.where(mask[..., None], values, images)
