"""The BiT-style ResNet stem of the hybrid models (R50+ViT-B/16)."""

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

# Added to the kernel's standard deviation, as in the official StdConv.
STD_CONV_EPSILON = 1e-5
# flax's GroupNorm defaults, as the official code.
GROUP_NORM_GROUPS = 32
GROUP_NORM_EPSILON = 1e-6
ROOT_STRIDE = 4


class StdConv(nn.Module):
  """A bias-free 'SAME' conv whose kernel is standardized in float32."""

  features: int
  kernel_size: int
  strides: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    shape = (self.kernel_size, self.kernel_size, x.shape[-1], self.features)
    kernel = self.param('kernel', nn.initializers.lecun_normal(), shape)
    # Each output channel's (h, w, in) weights to zero mean and unit std.
    kernel = kernel - jnp.mean(kernel, axis=(0, 1, 2), keepdims=True)
    kernel = (kernel / (jnp.std(kernel, axis=(0, 1, 2), keepdims=True) +
                        STD_CONV_EPSILON)).astype(self.dtype)
    return jax.lax.conv_general_dilated(
        x.astype(self.dtype), kernel,
        window_strides=(self.strides, self.strides), padding='SAME',
        dimension_numbers=('NHWC', 'HWIO', 'NHWC'))


def _group_norm(x: jax.Array, name: str, dtype: Any, **kwargs) -> jax.Array:
  return nn.GroupNorm(num_groups=GROUP_NORM_GROUPS, epsilon=GROUP_NORM_EPSILON,
                      dtype=dtype, name=name, **kwargs)(x)


class ResidualUnit(nn.Module):
  """Bottleneck unit whose last GroupNorm starts at zero, as its shortcut."""

  features: int
  strides: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    out, shortcut = 4 * self.features, x
    if x.shape[-1] != out or self.strides != 1:
      shortcut = StdConv(out, 1, self.strides, self.dtype, name='conv_proj')(x)
      shortcut = _group_norm(shortcut, 'gn_proj', self.dtype)

    y = StdConv(self.features, 1, dtype=self.dtype, name='conv1')(x)
    y = nn.relu(_group_norm(y, 'gn1', self.dtype))
    y = StdConv(self.features, 3, self.strides, self.dtype, name='conv2')(y)
    y = nn.relu(_group_norm(y, 'gn2', self.dtype))
    y = StdConv(out, 1, dtype=self.dtype, name='conv3')(y)
    y = _group_norm(y, 'gn3', self.dtype, scale_init=nn.initializers.zeros)
    return nn.relu(shortcut + y)


class ResNetStage(nn.Module):
  """`num_units` bottleneck units `unit1`, `unit2`, ...; the first strided."""

  num_units: int
  features: int
  first_stride: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for i in range(self.num_units):
      x = ResidualUnit(self.features,
                       strides=self.first_stride if i == 0 else 1,
                       dtype=self.dtype, name=f'unit{i + 1}')(x)
    return x


def stem_stride(stages: Sequence[int]) -> int:
  """How much the stem downsamples."""
  return ROOT_STRIDE * 2**max(len(stages) - 1, 0)


def resnet_stem(x: jax.Array, stages: Sequence[int], width_factor: int = 1,
                dtype: Any = jnp.float32) -> jax.Array:
  """Root and ResNet stages, as modules of the calling compact method."""
  # At the ViT's top level, as the official hybrid's.
  width = 64 * width_factor
  x = StdConv(width, 7, 2, dtype, name='conv_root')(x)
  x = nn.relu(_group_norm(x, 'gn_root', dtype))
  x = nn.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding='SAME')
  for i, num_units in enumerate(stages):
    x = ResNetStage(num_units, width * 2**i, first_stride=1 if i == 0 else 2,
                    dtype=dtype, name=f'block{i + 1}')(x)
  return x
