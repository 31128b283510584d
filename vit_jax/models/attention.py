"""How the ViT's blocks compute self-attention: one set of parameters (flax's
`MultiHeadDotProductAttention` tree), several implementations.

`MultiHeadSelfAttention(attention=...)` picks the implementation: `'auto'`
(the default: cuDNN's fused attention where it applies, the einsum one
elsewhere), this project's einsum one (which sows the attention maps and can
drop them out), `jax.nn.dot_product_attention` with jax's choice of kernel,
or cuDNN's fused attention at any token count (`fused_attention`);
`locality=True` makes it the locality self-attention of Lee, Lee & Song
(2021).
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import small_data
from vit_jax.models.dropout import Dropout

# How MultiHeadSelfAttention computes softmax(q k^T / sqrt(head_dim)) v; the
# parameters are the same for all (see its docstring).
ATTENTIONS = ('auto', 'einsum', 'dot_product_attention', 'cudnn')

# cuDNN's fused attention trains only on an even token count (jax: "Unsupported
# sequence length Q 197, KV 197"); `fused_attention` pads the tokens to a
# multiple of this and masks the padding. 64 gives ViT-B/16's 197 tokens the
# 256 measured at 1.34 ms a layer on an H100 (issue 47).
CUDNN_TOKEN_MULTIPLE = 64

# For each fused choice, the kernel `jax.nn.dot_product_attention` runs (None:
# jax's choice) and the multiple `fused_attention` pads the tokens to.
FUSED_KERNELS = {'dot_product_attention': (None, 1),
                 'cudnn': ('cudnn', CUDNN_TOKEN_MULTIPLE)}


def check_attention(attention: str, attention_dropout_rate: float,
                     locality: bool = False):
  """Raises ValueError for a combination the implementation cannot do."""
  if attention not in ATTENTIONS:
    raise ValueError(f'attention={attention!r}; use one of {ATTENTIONS}.')
  if attention in FUSED_KERNELS and attention_dropout_rate > 0:
    raise ValueError(
        f'attention={attention!r} cannot drop attention probabilities '
        f'(attention_dropout_rate={attention_dropout_rate}); use '
        "attention='einsum'.")
  if attention in FUSED_KERNELS and locality:
    raise ValueError(
        f'attention={attention!r} cannot mask the diagonal or learn the '
        'temperature of locality self-attention (locality_attention=True); '
        "use attention='einsum'.")


def cudnn_applies(device: jax.Device, dtype, head_dim: int) -> bool:
  """Whether cuDNN's fused attention runs on `device` at this `dtype` and
  `head_dim`: an NVIDIA GPU from Ampere on (compute capability 8.0), 16-bit
  floats, a head_dim that is a multiple of 8 up to 128 (256 from Hopper on),
  as jax's cuDNN binding checks them."""
  if device.platform != 'gpu' or 'cuda' not in device.client.platform_version:
    return False
  try:
    capability = tuple(int(n) for n in device.compute_capability.split('.'))
  except (AttributeError, ValueError):
    return False
  largest = 256 if capability >= (9, 0) else 128
  return (capability >= (8, 0) and
          jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
          and head_dim % 8 == 0 and head_dim <= largest)


def fused_attention(query: jax.Array, key: jax.Array, value: jax.Array, *,
                    scale: float, implementation: str | None,
                    token_multiple: int = CUDNN_TOKEN_MULTIPLE) -> jax.Array:
  """softmax(q k^T * scale) v of (batch, tokens, heads, head_dim) arrays by
  `jax.nn.dot_product_attention(implementation=...)`, at any token count:
  the tokens are padded with zeros to a multiple of `token_multiple`, the
  padded keys and queries masked by sequence lengths (no dense mask), and
  the padding sliced off the result, so it is the unpadded function, its
  gradients too."""
  batch, tokens = query.shape[:2]
  padded = -(-tokens // token_multiple) * token_multiple
  if padded == tokens:
    return jax.nn.dot_product_attention(query, key, value, scale=scale,
                                        implementation=implementation)
  widths = ((0, 0), (0, padded - tokens), (0, 0), (0, 0))
  query, key, value = (jnp.pad(x, widths) for x in (query, key, value))
  lengths = jnp.full((batch,), tokens, jnp.int32)
  out = jax.nn.dot_product_attention(
      query, key, value, scale=scale, query_seq_lengths=lengths,
      key_value_seq_lengths=lengths, implementation=implementation)
  return out[:, :tokens]


def _is_power_of_4(n: int) -> bool:
  """Whether 1/sqrt(n) is a power of two, so scaling by it is exact."""
  return n > 0 and n & (n - 1) == 0 and (n.bit_length() - 1) % 2 == 0


class _Projection(nn.Module):
  """One attention projection's kernel and bias, nothing else.

  Initialised like flax's `DenseGeneral` (xavier_uniform on the kernel
  flattened to 2-D, zero bias), under the same names.
  """

  kernel_shape: tuple[int, ...]
  bias_shape: tuple[int, ...]
  fan_in_axes: int
  initial_kernel: jax.Array | None = None  # in place of xavier_uniform

  @nn.compact
  def __call__(self) -> tuple[jax.Array, jax.Array]:

    def kernel_init(key, shape, dtype=jnp.float32):
      if self.initial_kernel is not None:
        return self.initial_kernel.astype(dtype)
      fan_in = math.prod(shape[:self.fan_in_axes])
      flat_shape = (fan_in, math.prod(shape) // fan_in)
      flat = nn.initializers.xavier_uniform()(key, flat_shape, dtype)
      return flat.reshape(shape)

    return (self.param('kernel', kernel_init, self.kernel_shape),
            self.param('bias', nn.initializers.zeros, self.bias_shape))


class MultiHeadSelfAttention(nn.Module):
  """Multi-head self-attention with flax's parameters, in a faster layout.

  Same parameters (`query`, `key`, `value`: kernel (hidden, heads, head_dim);
  `out`: kernel (heads, head_dim, hidden)) and the same function as
  `nn.MultiHeadDotProductAttention`, whichever `attention` computes it:

  - `'auto'` (default): `'cudnn'` where it applies (`cudnn_applies`: an
    NVIDIA GPU, a bfloat16 or float16 `dtype`), with no attention dropout,
    no locality and nobody collecting the attention maps; `'einsum'`
    everywhere else (on a CPU, in float32, for analysis).
  - `'einsum'`: in (batch, heads, tokens, head_dim) layout, which
    saves the transposes around the per-head matmuls
    (experiments/benchmarks/README.md), with a float32 softmax. The
    1/sqrt(head_dim) scale is folded into the query projection where that is
    exact or the computation is float32; in bfloat16 with a head_dim that is
    not a power of 4 (32, 80, ...) it scales the float32 logits instead, as
    folding would round the scale and every query weight once more. Sows the
    attention probabilities as `attention_weights`, and drops them out with
    `dropout_rate` in training.
  - `'dot_product_attention'`: `jax.nn.dot_product_attention` with
    `implementation=None`, jax's choice of kernel; in jax 0.10 that is XLA
    on every backend (float32 logits, float32 softmax).
  - `'cudnn'`: `jax.nn.dot_product_attention(implementation='cudnn')`,
    cuDNN's fused (flash) attention on NVIDIA GPUs: bfloat16 or float16
    `dtype`, head_dim a multiple of 8 up to 128 (256 from Hopper on); jax
    raises elsewhere. Any token count: `fused_attention` pads and masks
    what cuDNN cannot train on. It never holds the (tokens x tokens)
    probabilities in memory.

  The fused kernels return no probabilities, so they can neither sow nor drop
  them out: a nonzero `dropout_rate` is an error there, and when the caller
  collects `intermediates` (`logits_and_attention`) the einsum path runs so
  that `attention_weights` are there.

  `locality` is the locality self-attention of Lee, Lee & Song (2021, "Vision
  Transformer for Small-Size Datasets"): the fixed 1/sqrt(head_dim) becomes
  a learned `temperature` per head (initialised to it, multiplied on the
  float32 logits, as the authors' code), and each token's logit for itself is
  masked out before
  the softmax. Both sharpen the attention towards other tokens, which ViTs
  trained on small data spread too evenly. Only the einsum path has it.

  `mimetic_init` initialises the four kernels as Trockman & Kolter (2023)
  do (`small_data.mimetic_kernels`); the parameters and the function are
  the same.
  """

  num_heads: int
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  attention: str = 'auto'
  locality: bool = False
  mimetic_init: bool = False

  def __post_init__(self):
    check_attention(self.attention, self.dropout_rate, self.locality)
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    hidden = x.shape[-1]
    heads, head_dim = self.num_heads, hidden // self.num_heads

    initial = {}
    if self.mimetic_init and self.is_initializing():
      initial = small_data.mimetic_kernels(self.make_rng('params'), hidden,
                                           heads)

    def projection(name):
      kernel, bias = _Projection((hidden, heads, head_dim), (heads, head_dim),
                                 fan_in_axes=1, initial_kernel=initial.get(name),
                                 name=name)()
      return kernel.astype(self.dtype), bias.astype(self.dtype)

    (wq, bq), (wk, bk), (wv, bv) = (projection(n)
                                    for n in ('query', 'key', 'value'))
    wo, bo = _Projection((heads, head_dim, hidden), (hidden,), fan_in_axes=2,
                         initial_kernel=initial.get('out'), name='out')()
    wo, bo = wo.astype(self.dtype), bo.astype(self.dtype)
    x = x.astype(self.dtype)

    attention = self._implementation(head_dim)
    if attention in FUSED_KERNELS:
      q, k, v = (jnp.einsum('btd,dhe->bthe', x, w) + b
                 for w, b in ((wq, bq), (wk, bk), (wv, bv)))
      kernel, token_multiple = FUSED_KERNELS[attention]
      out = fused_attention(q, k, v, scale=head_dim**-0.5,
                            implementation=kernel,
                            token_multiple=token_multiple)
      return jnp.einsum('bthe,hed->btd', out, wo) + bo

    bq, bk, bv = bq[:, None, :], bk[:, None, :], bv[:, None, :]
    # Folding the scale into the query projection is exact when it is a power
    # of two; float32 keeps the fold whatever head_dim (its results pinned).
    # A learned temperature cannot be folded.
    fold = not self.locality and (jnp.finfo(self.dtype).bits >= 32 or
                                  _is_power_of_4(head_dim))
    if fold:
      scale = jnp.asarray(head_dim**-0.5, self.dtype)
      wq, bq = wq * scale, bq * scale
    q = jnp.einsum('btd,dhe->bhte', x, wq) + bq
    k = jnp.einsum('btd,dhe->bhte', x, wk) + bk
    v = jnp.einsum('btd,dhe->bhte', x, wv) + bv
    # float32 softmax: bfloat16 logits would lose the small probabilities.
    logits = jnp.einsum('bhqe,bhke->bhqk', q, k).astype(jnp.float32)
    if self.locality:
      temperature = self.param('temperature',
                               nn.initializers.constant(head_dim**-0.5),
                               (self.num_heads,))
      logits = logits * temperature.astype(jnp.float32)[:, None, None]
      # The lowest float rather than -inf: the same zero probability, and no
      # NaN for a sequence of one token (a row with nothing left).
      tokens = logits.shape[-1]
      logits = jnp.where(jnp.eye(tokens, dtype=bool),
                         jnp.finfo(jnp.float32).min, logits)
    elif not fold:
      logits = logits * jnp.float32(head_dim**-0.5)
    weights = jax.nn.softmax(logits).astype(self.dtype)
    self.sow('intermediates', 'attention_weights', weights)
    weights = Dropout(self.dropout_rate)(weights, deterministic=deterministic)
    out = jnp.einsum('bhqk,bhke->bhqe', weights, v)
    return jnp.einsum('bhte,hed->btd', out, wo) + bo

  def _implementation(self, head_dim: int) -> str:
    """The implementation `attention` means here: the einsum one wherever
    the attention maps are collected (only it has them), and `'auto'`
    resolved as the class docstring says."""
    if self.is_mutable_collection('intermediates'):
      return 'einsum'
    if self.attention != 'auto':
      return self.attention
    fused = (self.dropout_rate == 0 and not self.locality and
             cudnn_applies(jax.devices()[0], self.dtype, head_dim))
    return 'cudnn' if fused else 'einsum'
