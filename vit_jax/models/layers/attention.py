"""How the ViT's blocks compute self-attention: one set of parameters (flax's
`MultiHeadDotProductAttention` tree), several implementations.

`MultiHeadSelfAttention(attention=...)` picks the implementation: `'auto'`
(the default: cuDNN's fused attention where it applies, the einsum one
elsewhere), this project's einsum one (which sows the attention maps and can
drop them out), `jax.nn.dot_product_attention` with jax's choice of kernel,
or cuDNN's fused attention at any token count (`fused_attention`);
`locality=True` makes it the locality self-attention of Lee, Lee & Song
(2021), and `mimetic_init=True` initialises it as Trockman & Kolter (2023)
(`mimetic_kernels`): the small-data techniques of this layer.
"""

import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models.layers import fused_attention
from vit_jax.models.layers.dropout import Dropout

# How MultiHeadSelfAttention computes softmax(q k^T / sqrt(head_dim)) v; the
# parameters are the same for all (see its docstring).
ATTENTIONS = ('auto', 'einsum', 'dot_product_attention', 'cudnn')


def _check_attention(attention: str, attention_dropout_rate: float,
                     locality: bool = False):
  """Raises ValueError for a combination the implementation cannot do."""
  if attention not in ATTENTIONS:
    raise ValueError(f'attention={attention!r}; use one of {ATTENTIONS}.')
  if attention in fused_attention.KERNELS and attention_dropout_rate > 0:
    raise ValueError(
        f'attention={attention!r} cannot drop attention probabilities '
        f'(attention_dropout_rate={attention_dropout_rate}); use '
        "attention='einsum'.")
  if attention in fused_attention.KERNELS and locality:
    raise ValueError(
        f'attention={attention!r} cannot mask the diagonal or learn the '
        'temperature of locality self-attention (locality_attention=True); '
        "use attention='einsum'.")


def project_qkv(x: jax.Array,
                projections: Sequence[tuple[jax.Array, jax.Array]],
                layout: str) -> tuple[jax.Array, ...]:
  """The queries, keys and values: `x` (batch, tokens, hidden) through each
  (kernel (hidden, heads, head_dim), bias (heads, head_dim)) of
  `projections`, in `layout`: 'bthe' (batch, tokens, heads, head_dim) or
  'bhte'."""
  return tuple(jnp.einsum(f'btd,dhe->{layout}', x, kernel) +
               (bias[:, None, :] if layout == 'bhte' else bias)
               for kernel, bias in projections)


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

  - `'auto'` (default): `'cudnn'` where it applies
    (`fused_attention.cudnn_applies`: an NVIDIA GPU, a bfloat16 or float16
    `dtype`), with no attention dropout, no locality and nobody collecting
    the attention maps; `'einsum'` everywhere else (on a CPU, in float32,
    for analysis).
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
    raises elsewhere. Any token count: `fused_attention.attend` pads and
    masks what cuDNN cannot train on. It never holds the (tokens x tokens)
    probabilities in memory.

  The fused kernels return no probabilities, so they can neither sow nor drop
  them out: a nonzero `dropout_rate` is an error there, and when the caller
  collects `intermediates` (`logits_and_attention`) the einsum path runs so
  that `attention_weights` are there.

  `locality` is the locality self-attention of Lee, Lee & Song (2021, "Vision
  Transformer for Small-Size Datasets"): the fixed 1/sqrt(head_dim) becomes
  a learned `temperature` per head (initialised to it, multiplied on the
  float32 logits, as the authors' code), and each token's logit for itself is
  masked out before the softmax. Both sharpen the attention towards other tokens, which ViTs
  trained on small data spread too evenly. Only the einsum path has it.

  `mimetic_init` initialises the four kernels as Trockman & Kolter (2023)
  do (`mimetic_kernels`); the parameters and the function are the same.
  """

  num_heads: int
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  attention: str = 'auto'
  locality: bool = False
  mimetic_init: bool = False

  def __post_init__(self):
    _check_attention(self.attention, self.dropout_rate, self.locality)
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    hidden = x.shape[-1]
    heads, head_dim = self.num_heads, hidden // self.num_heads

    initial = {}
    if self.mimetic_init and self.is_initializing():
      initial = mimetic_kernels(self.make_rng('params'), hidden,
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
    if attention in fused_attention.KERNELS:
      q, k, v = project_qkv(x, ((wq, bq), (wk, bk), (wv, bv)), 'bthe')
      kernel, token_multiple = fused_attention.KERNELS[attention]
      out = fused_attention.attend(q, k, v, scale=head_dim**-0.5,
                                   implementation=kernel,
                                   token_multiple=token_multiple)
      return jnp.einsum('bthe,hed->btd', out, wo) + bo

    # Folding the scale into the query projection is exact when it is a power
    # of two; float32 keeps the fold whatever head_dim (its results pinned).
    # A learned temperature cannot be folded.
    fold = not self.locality and (jnp.finfo(self.dtype).bits >= 32 or
                                  _is_power_of_4(head_dim))
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
             fused_attention.cudnn_applies(jax.devices()[0], self.dtype,
                                           head_dim))
    return 'cudnn' if fused else 'einsum'


# Trockman & Kolter's values for ViTs: W_q W_k^T ~ 0.7 Z + 0.7 I per head,
# W_v W_proj ~ 0.4 Z - 0.4 I, Z with N(0, 1/d) entries.
MIMETIC_QUERY_KEY = (0.7, 0.7)
MIMETIC_VALUE_OUT = (0.4, -0.4)


def _factors(key: jax.Array, size: int, noise: float,
             identity: float) -> tuple[jax.Array, jax.Array]:
  """`left`, `right` with left @ right = noise * Z + identity * I, Z of
  N(0, 1/size) entries; each takes the square root of the singular values,
  and the first k columns of `left` times the first k rows of `right` are
  the best rank-k approximation."""
  z = jax.random.normal(key, (size, size), jnp.float32) / jnp.sqrt(size)
  u, s, vh = jnp.linalg.svd(noise * z + identity * jnp.eye(size))
  root = jnp.sqrt(s)
  return u * root, root[:, None] * vh


def mimetic_kernels(key: jax.Array, hidden: int,
                    heads: int) -> dict[str, jax.Array]:
  """Initial `query`, `key`, `value` kernels (hidden, heads, head_dim) and
  `out` kernel (heads, head_dim, hidden) of mimetic initialisation (Trockman
  & Kolter, "Mimetic Initialization of Self-Attention Layers", ICML 2023):
  each head's W_q W_k^T is the best rank-head_dim approximation of
  0.7 Z + 0.7 I (a Z of its own), and W_v W_proj, the heads together, is
  0.4 Z - 0.4 I, so that attention starts out favouring each token's own
  and similar tokens, as in trained ViTs. Biases stay zero."""
  head_dim = hidden // heads
  query_key, value_out = jax.random.split(key)
  left, right = jax.vmap(lambda k: _factors(k, hidden, *MIMETIC_QUERY_KEY))(
      jax.random.split(query_key, heads))
  # (heads, hidden, head_dim) -> (hidden, heads, head_dim)
  query = left[:, :, :head_dim].transpose(1, 0, 2)
  key_kernel = right[:, :head_dim, :].transpose(2, 0, 1)
  value, out = _factors(value_out, hidden, *MIMETIC_VALUE_OUT)
  return {'query': query, 'key': key_kernel,
          'value': value.reshape(hidden, heads, head_dim),
          'out': out.reshape(heads, head_dim, hidden)}
