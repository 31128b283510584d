"""PyTorch's default conv and Dense initializers, for PyTorch-born modules."""

import functools
import math

import flax.linen as nn
import jax

# PyTorch's kaiming_uniform(a=sqrt(5)): uniform(+-1/sqrt(fan_in)).
torch_kernel_init = nn.initializers.variance_scaling(1 / 3, 'fan_in', 'uniform')


def torch_bias_init(fan_in: int):
  bound = 1 / math.sqrt(fan_in)
  return functools.partial(jax.random.uniform, minval=-bound, maxval=bound)
