"""TrivialAugment and RandAugment in jax, on torchvision's 14 ops (`OPS`), of
float32 NHWC images in [0, 1], before normalization."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

# Where a warp reads outside the image: timm's gray, not torchvision's black,
# so that a large rotation pastes no black area, which no test image has.
FILL = 0.5

OPS = ('identity', 'auto_contrast', 'equalize', 'rotate', 'solarize', 'color',
       'posterize', 'contrast', 'brightness', 'sharpness', 'shear_x', 'shear_y',
       'translate_x', 'translate_y')

# ITU-R 601-2 luma, PIL's convert('L').
_LUMA = (0.299, 0.587, 0.114)


@dataclasses.dataclass(frozen=True)
class OpRanges:
  """What magnitude 1 means for each op (magnitude 0 is the identity)."""
  rotate: float  # degrees
  shear: float  # tan of the shear angle
  translate: float  # pixels, or a fraction of the side if translate_relative
  translate_relative: bool
  # The largest |factor - 1| of color, contrast, brightness and sharpness.
  enhance: float
  posterize: int  # bits dropped of 8


# torchvision's TrivialAugmentWide ranges, and its magnitude bins; a shift
# rounds to whole pixels (torchvision truncates: 14 of the 31 bins shift one
# pixel less there) and solarize thresholds at 256 (1 - m) as the authors' code
# (torchvision's 255 (1 - m) inverts white pixels at magnitude 0).
_MAGNITUDE_BINS = 31
TRIVIAL_AUGMENT_WIDE = OpRanges(rotate=135.0, shear=0.99, translate=32.0,
                                translate_relative=False, enhance=0.99,
                                posterize=6)

# timm's RandAugment `inc1` ranges at magnitude 10; posterize as torchvision's
# (timm's PosterizeIncreasing is not the identity at magnitude 0).
RAND_AUGMENT = OpRanges(rotate=30.0, shear=0.3, translate=0.45,
                        translate_relative=True, enhance=0.9, posterize=4)


def _grayscale(image: jax.Array) -> jax.Array:
  """(H, W, 1) luma of RGB."""
  return (image @ jnp.asarray(_LUMA, image.dtype))[..., None]


def _blend(degenerate: jax.Array, image: jax.Array,
           factor: jax.Array) -> jax.Array:
  """PIL's ImageEnhance: factor 1 is the image, 0 the degenerate one."""
  return jnp.clip(degenerate + factor * (image - degenerate), 0.0, 1.0)


def _auto_contrast(image: jax.Array) -> jax.Array:
  """Each channel stretched to [0, 1] (PIL's autocontrast, no cutoff)."""
  low = image.min(axis=(0, 1), keepdims=True)
  span = image.max(axis=(0, 1), keepdims=True) - low
  return jnp.where(span > 0, (image - low) / jnp.where(span > 0, span, 1.0),
                   image)


def _quantize(image: jax.Array) -> jax.Array:
  return jnp.round(image * 255.0).astype(jnp.int32)


def _equalize_channel(channel: jax.Array) -> jax.Array:
  """PIL's ImageOps.equalize of one (H, W) channel."""
  values = _quantize(channel)
  histogram = jnp.bincount(values.ravel(), length=256)
  step = (values.size - histogram[values.max()]) // 255
  below = jnp.cumsum(histogram) - histogram
  lut = jnp.clip((step // 2 + below) // jnp.maximum(step, 1), 0, 255)
  return jnp.where(step > 0, lut[values].astype(channel.dtype) / 255.0, channel)


def _solarize(image: jax.Array, magnitude: jax.Array) -> jax.Array:
  """timm's SolarizeIncreasing: inverts nothing at m = 0, all at 1."""
  threshold = (1.0 - magnitude) * 256.0 / 255.0
  return jnp.where(image >= threshold, 1.0 - image, image)


def _posterize(image: jax.Array, bits: jax.Array) -> jax.Array:
  """PIL's posterize; 8 bits is exactly the identity."""
  bucket = 2.0**(8 - bits)
  posterized = jnp.floor(_quantize(image) / bucket) * bucket / 255.0
  return jnp.where(bits >= 8, image, posterized)


def _sharpness(image: jax.Array, factor: jax.Array) -> jax.Array:
  """PIL's ImageEnhance.Sharpness: border pixels stay the image's."""
  h, w, _ = image.shape
  neighbours = sum(image[dy:h - 2 + dy, dx:w - 2 + dx] for dy in range(3)
                   for dx in range(3))
  smooth = image.at[1:-1, 1:-1].set(
      (neighbours + 4.0 * image[1:-1, 1:-1]) / 13.0)
  return _blend(smooth, image, factor)


def _affine(image: jax.Array, matrix: jax.Array,
            offset: jax.Array) -> jax.Array:
  """Pixel p read bilinearly at `matrix @ (p - centre) + centre + offset`."""
  h, w, _ = image.shape
  ys, xs = jnp.meshgrid(jnp.arange(h, dtype=jnp.float32),
                        jnp.arange(w, dtype=jnp.float32), indexing='ij')
  cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
  src_x = (matrix[0, 0] * (xs - cx) + matrix[0, 1] * (ys - cy) + cx + offset[0])
  src_y = (matrix[1, 0] * (xs - cx) + matrix[1, 1] * (ys - cy) + cy + offset[1])
  x0, y0 = jnp.floor(src_x), jnp.floor(src_y)
  fx, fy = (src_x - x0)[..., None], (src_y - y0)[..., None]
  x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
  # One gather of flattened rows: XLA on CPU ran the 2-D gather slower.
  ty = jnp.stack([y0, y0, y0 + 1, y0 + 1])
  tx = jnp.stack([x0, x0 + 1, x0, x0 + 1])
  inside = ((ty >= 0) & (ty < h) & (tx >= 0) & (tx < w))[..., None]
  rows = jnp.clip(ty, 0, h - 1) * w + jnp.clip(tx, 0, w - 1)
  taps = jnp.where(inside, image.reshape(h * w, -1)[rows], FILL)
  out = ((1 - fy) * ((1 - fx) * taps[0] + fx * taps[1]) + fy *
         ((1 - fx) * taps[2] + fx * taps[3]))
  return jnp.clip(out, 0.0, 1.0)


def _warp_parameters(op: jax.Array, magnitude: jax.Array, ranges: OpRanges,
                     height: int, width: int) -> tuple[jax.Array, jax.Array]:
  """The (x, y) matrix and offset of op `op`, the identity unless geometric."""
  angle = magnitude * ranges.rotate * math.pi / 180.0
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  shear = magnitude * ranges.shear
  sides = (width, height) if ranges.translate_relative else (1, 1)
  shift_x, shift_y = (jnp.round(magnitude * ranges.translate * side)
                      for side in sides)
  one, zero = jnp.ones_like(magnitude), jnp.zeros_like(magnitude)
  # (matrix, offset) per op; a shear's offset moves its fixed point from
  # `_affine`'s centre to the corner.
  warps = {name: (one, zero, zero, one, zero, zero) for name in OPS}
  warps['rotate'] = (cos, -sin, sin, cos, zero, zero)
  warps['shear_x'] = (one, shear, zero, one, shear * height / 2, zero)
  warps['shear_y'] = (one, zero, shear, one, zero, shear * width / 2)
  warps['translate_x'] = (one, zero, zero, one, -shift_x, zero)
  warps['translate_y'] = (one, zero, zero, one, zero, -shift_y)
  warp = jnp.asarray([warps[name] for name in OPS])[op]
  return warp[:4].reshape(2, 2), warp[4:]


def _apply_one(image: jax.Array, op: jax.Array, magnitude: jax.Array,
               ranges: OpRanges) -> jax.Array:
  """Op `OPS[op]` on one image; solarize and posterize use |magnitude|."""
  h, w, _ = image.shape
  strength = jnp.abs(magnitude)
  factor = jnp.maximum(1.0 + magnitude * ranges.enhance, 0.0)
  bits = 8 - jnp.round(strength * ranges.posterize)
  photometric = dict(
      auto_contrast=_auto_contrast,
      equalize=jax.vmap(_equalize_channel, in_axes=-1, out_axes=-1),
      solarize=lambda x: _solarize(x, strength),
      # PIL's ImageEnhance.Color, Contrast (its mean gray level not rounded)
      # and Brightness.
      color=lambda x: _blend(_grayscale(x), x, factor),
      contrast=lambda x: _blend(_grayscale(x).mean(), x, factor),
      brightness=lambda x: _blend(jnp.zeros_like(x), x, factor),
      posterize=lambda x: _posterize(x, bits),
      sharpness=lambda x: _sharpness(x, factor))
  # Exactly the image for the identity warp of the other ops.
  warped = _affine(image, *_warp_parameters(op, magnitude, ranges, h, w))
  branches = [photometric.get(name, lambda x: x) for name in OPS]
  return jax.lax.switch(op, branches, warped)


def apply_op(images: jax.Array, ops, magnitudes,
             ranges: OpRanges = TRIVIAL_AUGMENT_WIDE) -> jax.Array:
  """Op `OPS[ops[i]]` at signed `magnitudes[i]` on image i (or scalars)."""
  n = images.shape[0]
  ops = jnp.broadcast_to(jnp.asarray(ops, jnp.int32), (n,))
  magnitudes = jnp.broadcast_to(jnp.asarray(magnitudes, jnp.float32), (n,))
  return jax.vmap(functools.partial(_apply_one, ranges=ranges))(images, ops,
                                                                magnitudes)


def _random_signs(key: jax.Array, n: int) -> jax.Array:
  return jnp.where(jax.random.bernoulli(key, 0.5, (n,)), 1.0, -1.0)


def trivial_augment(key: jax.Array, images: jax.Array) -> jax.Array:
  """TrivialAugment (Muller & Hutter 2021), torchvision's TrivialAugmentWide."""
  n = images.shape[0]
  op_key, bin_key, sign_key = jax.random.split(key, 3)
  ops = jax.random.randint(op_key, (n,), 0, len(OPS))
  bins = jax.random.randint(bin_key, (n,), 0, _MAGNITUDE_BINS)
  magnitudes = bins / (_MAGNITUDE_BINS - 1) * _random_signs(sign_key, n)
  return apply_op(images, ops, magnitudes)


def rand_augment(key: jax.Array, images: jax.Array, num_ops: int = 2,
                 magnitude: float = 9, *, probability: float = 0.5,
                 ranges: OpRanges = RAND_AUGMENT) -> jax.Array:
  """RandAugment (Cubuk et al. 2020) as timm's `rand-mM-nN-inc1`."""
  # `num_ops` and `ranges` are static.
  n = images.shape[0]
  keys = jax.random.split(key, num_ops)

  def step(i, images):
    # The third key drew timm's magnitude noise (`mstd`), not offered.
    op_key, apply_key, _, sign_key = jax.random.split(keys[i], 4)
    ops = jax.random.randint(op_key, (n,), 0, len(OPS))
    level = jnp.clip(magnitude, 0.0, 10.0) / 10.0
    applied = jax.random.bernoulli(apply_key, probability, (n,))
    ops = jnp.where(applied, ops, OPS.index('identity'))
    return apply_op(images, ops, level * _random_signs(sign_key, n), ranges)

  # Not unrolled: XLA on CPU fused one op into the next one's warp and
  # recomputed it per sample; the loop boundary materializes the images.
  return jax.lax.fori_loop(0, num_ops, step, images)
