"""The small-data study's CNN baselines, with PyTorch's defaults as trained."""

import functools
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

# PyTorch's default conv and Dense initializers, for PyTorch-born modules (the
# CNNs, locality guidance's projections). kaiming_uniform(a=sqrt(5)):
# uniform(+-1/sqrt(fan_in)).
torch_kernel_init = nn.initializers.variance_scaling(1 / 3, 'fan_in', 'uniform')


def torch_bias_init(fan_in: int):
  bound = 1 / math.sqrt(fan_in)
  return functools.partial(jax.random.uniform, minval=-bound, maxval=bound)


def _conv_bn(x: jax.Array, features: int, kernel_size: int, *, train: bool,
             dtype: Any, names: tuple[str, str], strides: int = 1,
             use_bias: bool = False) -> jax.Array:
  """A conv and the BatchNorm after it, modules `names` of the caller."""
  fan_in = kernel_size * kernel_size * x.shape[-1]
  x = nn.Conv(features, kernel_size=(kernel_size, kernel_size), strides=strides,
              padding=kernel_size // 2, use_bias=use_bias, dtype=dtype,
              kernel_init=torch_kernel_init, bias_init=torch_bias_init(fan_in),
              name=names[0])(x)
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5,
                      dtype=dtype, name=names[1])(x)


def _head(x: jax.Array, num_classes: int) -> jax.Array:
  # float32, like the ViT head, so logits are float32 whatever the dtype.
  return nn.Dense(num_classes, kernel_init=torch_kernel_init,
                  bias_init=torch_bias_init(x.shape[-1]), name='head')(x)


class SimpleCNN(nn.Module):
  """Five 3x3 conv-BN-ReLU layers, max-pools after the 2nd and 4th, a head."""

  num_classes: int = 10
  widths: Sequence[int] = (32, 32, 64, 64, 128)
  pool_after: Sequence[int] = (1, 3)
  dtype: Any = jnp.float32

  @property
  def _stage_ends(self) -> list[int]:
    return sorted({*self.pool_after, len(self.widths) - 1})

  @property
  def feature_widths(self) -> tuple[int, ...]:
    return tuple(self.widths[i] for i in self._stage_ends)

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool,
               return_out: bool = False):
    x, stages = images, []
    for i, width in enumerate(self.widths):
      x = _conv_bn(x, width, 3, train=train, dtype=self.dtype, use_bias=True,
                   names=(f'conv_{i}', f'bn_{i}'))
      x = nn.relu(x)
      if i in self._stage_ends:
        stages.append(x)
      if i in self.pool_after:
        x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
    logits = _head(jnp.mean(x, axis=(1, 2)), self.num_classes)
    return (logits, {'stages': stages}) if return_out else logits


class BasicBlock(nn.Module):
  """ResNet basic block (He et al. 2016)."""

  features: int
  strides: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
    y = _conv_bn(x, self.features, 3, strides=self.strides, train=train,
                 dtype=self.dtype, names=('conv_0', 'bn_0'))
    y = nn.relu(y)
    y = _conv_bn(y, self.features, 3, train=train, dtype=self.dtype,
                 names=('conv_1', 'bn_1'))

    shortcut = x
    if self.strides != 1 or x.shape[-1] != self.features:
      shortcut = _conv_bn(x, self.features, 1, strides=self.strides,
                          train=train, dtype=self.dtype, names=('shortcut_conv',
                                                                'shortcut_bn'))
    return nn.relu(shortcut + y)


class SmallResNet(nn.Module):
  """CIFAR ResNet: a 3x3 stem, stages of basic blocks, a linear head."""

  num_classes: int = 10
  stage_widths: Sequence[int] = (16, 32, 64)
  blocks_per_stage: int = 2
  stem_stride: int = 1
  stem_pool: bool = False
  dtype: Any = jnp.float32

  @property
  def feature_widths(self) -> tuple[int, ...]:
    return tuple(self.stage_widths)

  @nn.compact
  def __call__(self, images: jax.Array, *, train: bool,
               return_out: bool = False):
    stages = []
    x = _conv_bn(images, self.stage_widths[0], 3, strides=self.stem_stride,
                 train=train, dtype=self.dtype, names=('stem_conv', 'stem_bn'))
    x = nn.relu(x)
    if self.stem_pool:
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME')
    for stage, width in enumerate(self.stage_widths):
      for block in range(self.blocks_per_stage):
        strides = 2 if stage > 0 and block == 0 else 1
        name = f'stage{stage + 1}_block{block + 1}'
        x = BasicBlock(width, strides, self.dtype, name=name)(x, train=train)
      stages.append(x)
    logits = _head(jnp.mean(x, axis=(1, 2)), self.num_classes)
    return (logits, {'stages': stages}) if return_out else logits
