"""Fused attention: `jax.nn.dot_product_attention` at any token count,
and where cuDNN's kernel runs. The two fused choices of
`attention.MultiHeadSelfAttention`; neither holds the (tokens x tokens)
probabilities in memory, so neither can sow or drop them out."""

import jax
import jax.numpy as jnp

# cuDNN's fused attention trains only on an even token count (jax: "Unsupported
# sequence length Q 197, KV 197"); `attend` pads the tokens to a multiple of
# this and masks the padding. The least padding is the fastest: ViT-B/16's
# attention (batch 256, forward and backward) took 1.67 ms at 198 tokens
# against 1.78 ms at 256 on an H100 (gpu.py, 2026-11-28).
CUDNN_TOKEN_MULTIPLE = 2

# For each fused choice, the kernel `jax.nn.dot_product_attention` runs (None:
# jax's choice) and the multiple `attend` pads the tokens to.
KERNELS = {'dot_product_attention': (None, 1),
           'cudnn': ('cudnn', CUDNN_TOKEN_MULTIPLE)}


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


def attend(query: jax.Array, key: jax.Array, value: jax.Array, *,
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
