"""PyTorch's default conv and Dense initializers, for PyTorch-born modules."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

# PyTorch's kaiming_uniform(a=sqrt(5)): uniform(+-1/sqrt(fan_in)).
torch_kernel_init = nn.initializers.variance_scaling(1 / 3, 'fan_in', 'uniform')


def torch_bias_init(fan_in: int):
  bound = 1 / math.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return init
