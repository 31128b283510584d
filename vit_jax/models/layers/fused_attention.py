"""`jax.nn.dot_product_attention` at any token count; where cuDNN's runs."""

import jax
import jax.numpy as jnp

# cuDNN trains only on an even token count; the least padding is fastest
# (experiments/benchmarks/README.md, Attempts).
CUDNN_TOKEN_MULTIPLE = 2

# Each fused choice's `implementation` and token multiple.
KERNELS = dict(dot_product_attention=(None, 1),
               cudnn=('cudnn', CUDNN_TOKEN_MULTIPLE))


def cudnn_applies(device: jax.Device, dtype, head_dim: int) -> bool:
  """Whether cuDNN's fused attention runs here (jax's binding's checks)."""
  if device.platform != 'gpu' or 'cuda' not in device.client.platform_version:
    return False
  try:
    capability = tuple(int(n) for n in device.compute_capability.split('.'))
  except (AttributeError, ValueError):
    return False
  return (capability >= (8, 0) and jnp.dtype(dtype) in (jnp.dtype(
      jnp.bfloat16), jnp.dtype(jnp.float16)) and head_dim % 8 == 0 and
          head_dim <= (256 if capability >= (9, 0) else 128))


def attend(query: jax.Array, key: jax.Array, value: jax.Array, *, scale: float,
           implementation: str | None,
           token_multiple: int = CUDNN_TOKEN_MULTIPLE) -> jax.Array:
  """softmax(q k^T * scale) v, tokens padded to `token_multiple`, masked."""
  batch, tokens = query.shape[:2]
  if (padded := -(-tokens // token_multiple) * token_multiple) == tokens:
    return jax.nn.dot_product_attention(query, key, value, scale=scale,
                                        implementation=implementation)
  widths = ((0, 0), (0, padded - tokens), (0, 0), (0, 0))
  query, key, value = (jnp.pad(x, widths) for x in (query, key, value))
  lengths = jnp.full((batch,), tokens, jnp.int32)
  return jax.nn.dot_product_attention(
      query, key, value, scale=scale, query_seq_lengths=lengths,
      key_value_seq_lengths=lengths, implementation=implementation)[:, :tokens]
