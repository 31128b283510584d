"""What the classifier reads: prefix tokens, the mean, or a MAP head."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import names
from vit_jax.models.layers.mlp import MlpBlock

CLASSIFIERS = ('token', 'gap', 'map')


def pooled_features(x: jax.Array, classifier: str, *, prefix_tokens: int,
                    num_heads: int, mlp_dim: int,
                    dtype: Any) -> list[jax.Array]:
  """A (batch, hidden) feature per head; a MAP head is the caller's child."""
  if classifier == 'token':
    return [x[:, i] for i in range(prefix_tokens)]
  if classifier == 'gap':
    return [jnp.mean(x, axis=1)]
  head = MAPHead(num_heads=num_heads, mlp_dim=mlp_dim, dtype=dtype,
                 name=names.MAP_HEAD)
  return [head(x)]


class MAPHead(nn.Module):
  """Multihead attention pooling in big_vision's module names."""

  num_heads: int
  mlp_dim: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    n, _, d = x.shape
    probe = self.param('probe', nn.initializers.xavier_uniform(), (1, 1, d))
    probe = jnp.broadcast_to(probe.astype(x.dtype), (n, 1, d))
    x = nn.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype,
        kernel_init=nn.initializers.xavier_uniform(),
        force_fp32_for_softmax=True, name=names.ATTENTION)(probe, x)
    x = x + MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype, name=names.MLP)(
        nn.LayerNorm(dtype=self.dtype)(x), deterministic=True)
    return x[:, 0]
