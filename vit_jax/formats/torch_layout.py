"""Our (flax) arrays in PyTorch's layout and back, for the formats of
PyTorch libraries: a Dense kernel (in, out) is a Linear weight (out, in), a
Conv kernel (h, w, in, out) a Conv2d weight (out, in, h, w), and attention's
per-head kernels (in, heads, head_dim) and (heads, head_dim, out) Linear
weights with the heads flattened.

Each works on numpy arrays and, for `jax.eval_shape`, on jax's abstract
ones, so a format can derive the shapes it expects from a model's.
"""

from typing import Any

import jax.numpy as jnp
import numpy as np


def _xp(array):
  return np if isinstance(array, np.ndarray) else jnp


def linear(kernel: Any) -> Any:
  """Dense kernel (in, out) -> Linear weight (out, in)."""
  return kernel.T


def dense(weight: Any) -> Any:
  """Linear weight (out, in) -> Dense kernel (in, out)."""
  return weight.T


def conv2d(kernel: Any) -> Any:
  """Conv kernel (h, w, in, out) -> Conv2d weight (out, in, h, w)."""
  return kernel.transpose(3, 2, 0, 1)


def conv(weight: Any) -> Any:
  """Conv2d weight (out, in, h, w) -> Conv kernel (h, w, in, out)."""
  return weight.transpose(2, 3, 1, 0)


def heads_linear(kernel: Any) -> Any:
  """Query/key/value kernel (in, heads, head_dim) -> Linear weight
  (heads * head_dim, in)."""
  return kernel.reshape(kernel.shape[0], -1).T


def heads_dense(weight: Any, num_heads: int) -> Any:
  """Linear weight (heads * head_dim, in) -> kernel (in, heads, head_dim)."""
  return weight.T.reshape(weight.shape[1], num_heads, -1)


def out_linear(kernel: Any) -> Any:
  """Output kernel (heads, head_dim, out) -> Linear weight (out, heads *
  head_dim)."""
  return kernel.reshape(-1, kernel.shape[-1]).T


def out_dense(weight: Any, num_heads: int) -> Any:
  """Linear weight (out, heads * head_dim) -> kernel (heads, head_dim,
  out)."""
  return weight.T.reshape(num_heads, -1, weight.shape[0])


def flat(bias: Any) -> Any:
  """A per-head bias (heads, head_dim) -> (heads * head_dim,)."""
  return bias.reshape(-1)


def per_head(bias: Any, num_heads: int) -> Any:
  return bias.reshape(num_heads, -1)


def concatenate(arrays: list[Any]) -> Any:
  return _xp(arrays[0]).concatenate(arrays)


def split(array: Any, parts: int) -> list[Any]:
  return _xp(array).split(array, parts)
