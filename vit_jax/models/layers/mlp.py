"""The Transformer's MLP block, shared by the encoder and the MAP head."""

from typing import Any

import flax.linen as nn
import jax

from vit_jax.models.layers.dropout import Dropout


class MlpBlock(nn.Module):
  """Dense, GELU, dropout, Dense, dropout; its class name is a checkpoint key."""

  mlp_dim: int
  dropout_rate: float = 0.0
  dtype: Any = jax.numpy.float32

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:

    def dense(features):
      return nn.Dense(features, dtype=self.dtype,
                      kernel_init=nn.initializers.xavier_uniform(),
                      bias_init=nn.initializers.normal(stddev=1e-6))

    y = dense(self.mlp_dim)(x)
    y = nn.gelu(y)  # tanh approximation, as in the official code.
    y = Dropout(self.dropout_rate)(y, deterministic=deterministic)
    y = dense(x.shape[-1])(y)
    return Dropout(self.dropout_rate)(y, deterministic=deterministic)
