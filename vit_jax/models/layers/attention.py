"""Multi-head self-attention in flax's `MultiHeadDotProductAttention` tree."""

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models.layers import fused_attention
from vit_jax.models.layers.dropout import Dropout

ATTENTIONS = ('auto', 'einsum', 'dot_product_attention', 'cudnn')


def project_qkv(x: jax.Array, projections: Sequence[tuple[jax.Array,
                                                          jax.Array]],
                layout: str) -> tuple[jax.Array, ...]:
  """`x` through each (kernel, bias) of `projections`, laid out as `layout`."""
  return tuple(
      jnp.einsum(f'btd,dhe->{layout}', x, kernel) +
      (bias[:, None, :] if layout == 'bhte' else bias)
      for kernel, bias in projections)


class _Projection(nn.Module):
  """One projection's kernel and bias, as flax's `DenseGeneral` makes them."""

  kernel_shape: tuple[int, ...]
  bias_shape: tuple[int, ...]
  fan_in_axes: int
  initial_kernel: jax.Array | None = None  # in place of xavier_uniform

  @nn.compact
  def __call__(self) -> tuple[jax.Array, jax.Array]:
    axes = tuple(range(len(self.kernel_shape)))
    kernel_init = nn.initializers.xavier_uniform(
        in_axis=axes[:self.fan_in_axes], out_axis=axes[self.fan_in_axes:])
    if self.initial_kernel is not None:
      kernel_init = lambda *_: self.initial_kernel
    return (self.param('kernel', kernel_init, self.kernel_shape),
            self.param('bias', nn.initializers.zeros, self.bias_shape))


class MultiHeadSelfAttention(nn.Module):
  """`nn.MultiHeadDotProductAttention`'s parameters and function, faster."""

  num_heads: int
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  # 'einsum' (float32 softmax; sows `attention_weights` and drops them out),
  # 'dot_product_attention' (jax's kernel), 'cudnn' (cuDNN's fused kernel at
  # any token count, 16-bit `dtype` on NVIDIA GPUs), or 'auto' (cudnn where
  # `fused_attention.cudnn_applies` and nothing needs the probabilities,
  # einsum elsewhere).
  attention: str = 'auto'
  # Einsum only (Lee, Lee & Song 2021): a learned per-head `temperature` in
  # place of 1/sqrt(head_dim), and each token's logit for itself masked,
  # sharpening what small-data ViTs spread too evenly.
  locality: bool = False
  mimetic_init: bool = False

  def __post_init__(self):
    if self.attention not in ATTENTIONS:
      raise ValueError(
          f'attention={self.attention!r}; use one of {ATTENTIONS}.')
    if self.attention in fused_attention.KERNELS and self.dropout_rate > 0:
      raise ValueError(
          f'attention={self.attention!r} cannot drop attention probabilities '
          f'(attention_dropout_rate={self.dropout_rate}); use '
          "attention='einsum'.")
    if self.attention in fused_attention.KERNELS and self.locality:
      raise ValueError(
          f'attention={self.attention!r} cannot mask the diagonal or learn the '
          'temperature of locality self-attention (locality_attention=True); '
          "use attention='einsum'.")
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    hidden = x.shape[-1]
    heads, head_dim = self.num_heads, hidden // self.num_heads

    initial = (mimetic_kernels(self.make_rng('params'), hidden, heads)
               if self.mimetic_init and self.is_initializing() else {})

    def projection(name, kernel_shape=(hidden, heads, head_dim),
                   bias_shape=(heads, head_dim), fan_in_axes=1):
      kernel, bias = _Projection(kernel_shape, bias_shape, fan_in_axes,
                                 initial_kernel=initial.get(name), name=name)()
      return kernel.astype(self.dtype), bias.astype(self.dtype)

    (wq, bq), (wk, bk), (wv, bv) = (projection(n)
                                    for n in ('query', 'key', 'value'))
    wo, bo = projection('out', (heads, head_dim, hidden), (hidden,), 2)
    x = x.astype(self.dtype)

    if (attention := self._implementation(head_dim)) in fused_attention.KERNELS:
      q, k, v = project_qkv(x, ((wq, bq), (wk, bk), (wv, bv)), 'bthe')
      kernel, token_multiple = fused_attention.KERNELS[attention]
      out = fused_attention.attend(q, k, v, scale=head_dim**-0.5,
                                   implementation=kernel,
                                   token_multiple=token_multiple)
      return jnp.einsum('bthe,hed->btd', out, wo) + bo

    # Folding the scale into the query weights rounds them once more unless it
    # is a power of two (head_dim a power of 4); float32 folds anyway (its
    # results are pinned).
    fold = not self.locality and (jnp.finfo(self.dtype).bits >= 32 or
                                  math.log2(head_dim) % 2 == 0)
    if fold:
      scale = jnp.asarray(head_dim**-0.5, self.dtype)
      wq, bq = wq * scale, bq * scale
    q, k, v = project_qkv(x, ((wq, bq), (wk, bk), (wv, bv)), 'bhte')
    # float32 softmax: bfloat16 logits would lose the small probabilities.
    logits = jnp.einsum('bhqe,bhke->bhqk', q, k).astype(jnp.float32)
    if self.locality:
      temperature = self.param('temperature',
                               nn.initializers.constant(head_dim**-0.5),
                               (self.num_heads,))
      logits = logits * temperature.astype(jnp.float32)[:, None, None]
      # The lowest float rather than -inf: the same zero probability, and no
      # NaN for a sequence of one token (a row with nothing left).
      logits = jnp.where(jnp.eye(logits.shape[-1], dtype=bool),
                         jnp.finfo(jnp.float32).min, logits)
    elif not fold:
      logits = logits * jnp.float32(head_dim**-0.5)
    weights = jax.nn.softmax(logits).astype(self.dtype)
    self.sow('intermediates', 'attention_weights', weights)
    weights = Dropout(self.dropout_rate)(weights, deterministic=deterministic)
    out = jnp.einsum('bhqk,bhke->bhqe', weights, v)
    return jnp.einsum('bhte,hed->btd', out, wo) + bo

  def _implementation(self, head_dim: int) -> str:
    """`attention` resolved; einsum where the attention maps are collected."""
    if self.is_mutable_collection('intermediates'):
      return 'einsum'
    if self.attention != 'auto':
      return self.attention
    fused = self.dropout_rate == 0 and not self.locality and (
        fused_attention.cudnn_applies(jax.devices()[0], self.dtype, head_dim))
    return 'cudnn' if fused else 'einsum'


# Trockman & Kolter's values for ViTs, so attention starts out as in trained
# ViTs: W_q W_k^T ~ 0.7 Z + 0.7 I per head,
# W_v W_proj ~ 0.4 Z - 0.4 I, Z with N(0, 1/d) entries.
MIMETIC_QUERY_KEY = (0.7, 0.7)
MIMETIC_VALUE_OUT = (0.4, -0.4)


def _factors(key: jax.Array, size: int, noise: float,
             identity: float) -> tuple[jax.Array, jax.Array]:
  """SVD factors of noise * Z + identity * I, truncatable to best rank k."""
  z = jax.random.normal(key, (size, size), jnp.float32) / jnp.sqrt(size)
  u, s, vh = jnp.linalg.svd(noise * z + identity * jnp.eye(size))
  root = jnp.sqrt(s)
  return u * root, root[:, None] * vh


def mimetic_kernels(key: jax.Array, hidden: int,
                    heads: int) -> dict[str, jax.Array]:
  """Mimetic initialization's kernels (Trockman & Kolter, ICML 2023)."""
  head_dim = hidden // heads
  query_key, value_out = jax.random.split(key)
  left, right = jax.vmap(lambda k: _factors(k, hidden, *MIMETIC_QUERY_KEY))(
      jax.random.split(query_key, heads))
  query = left[:, :, :head_dim].transpose(1, 0, 2)
  key_kernel = right[:, :head_dim, :].transpose(2, 0, 1)
  value, out = _factors(value_out, hidden, *MIMETIC_VALUE_OUT)
  return dict(query=query, key=key_kernel, value=value.reshape(
      hidden, heads, head_dim), out=out.reshape(heads, head_dim, hidden))
