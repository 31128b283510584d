"""The pieces of a ViT's encoder that its MAE decoder shares: the learned
position embedding and the pre-LayerNorm block, named as the official
linen model names them (`vit`)."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import attention as attention_lib
from vit_jax.models import small_data
from vit_jax.models.dropout import Dropout
from vit_jax.models.mlp import MlpBlock

Dtype = Any


class AddPositionEmbs(nn.Module):
  """Adds a learned 1-D position embedding, one vector per token."""

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    shape = (1, tokens.shape[1], tokens.shape[2])
    if self.has_variable('params', 'pos_embedding'):
      stored = self.get_variable('params', 'pos_embedding').shape
      if stored != shape:
        raise ValueError(
            f'The position embedding was made for {stored[1]} tokens but the '
            f'input gives {shape[1]}: the image size differs from the one the '
            'parameters were initialised at. Use that image size, or resize '
            'the position embedding to the new patch grid (fine-tuning).')
    # normal(0.02) as in BERT and the official ViT.
    pos_embedding = self.param(
        'pos_embedding', nn.initializers.normal(stddev=0.02), shape)
    return tokens + pos_embedding.astype(tokens.dtype)


class BlockFields(nn.Module):
  """What every encoder block is made with, and so the encoder that makes
  them: declared once for both."""

  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  attention: str = 'auto'
  mimetic_init: bool = False


class Encoder1DBlock(BlockFields):
  """Pre-LayerNorm encoder block: x + MSA(LN(x)), then x + MLP(LN(x)).

  The attention probabilities are sown into the `intermediates` collection
  (`MultiHeadDotProductAttention_0/attention_weights`); see `attention_weights`.
  `drop_path_rate` drops both residual branches for whole examples in
  training (`small_data.DropPath`).
  """

  drop_path_rate: float = 0.0
  locality: bool = False

  @nn.compact
  def __call__(self, inputs: jax.Array, *, deterministic: bool) -> jax.Array:
    x = nn.LayerNorm(dtype=self.dtype)(inputs)
    x = attention_lib.MultiHeadSelfAttention(
        num_heads=self.num_heads,
        dropout_rate=self.attention_dropout_rate,
        dtype=self.dtype,
        attention=self.attention,
        locality=self.locality,
        mimetic_init=self.mimetic_init,
        name='MultiHeadDotProductAttention_0')(
            x, deterministic=deterministic)
    x = Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = small_data.DropPath(self.drop_path_rate, name='DropPath_0')(
        x, deterministic=deterministic)
    x = x + inputs

    y = nn.LayerNorm(dtype=self.dtype)(x)
    y = MlpBlock(
        mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate, dtype=self.dtype)(
            y, deterministic=deterministic)
    y = small_data.DropPath(self.drop_path_rate, name='DropPath_1')(
        y, deterministic=deterministic)
    return x + y
