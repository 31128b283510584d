"""Fused attention at any token count; cuDNN's path through XLA's kernel."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models.layers import fused_attention
from vit_jax.models.layers.attention import MultiHeadSelfAttention
from tests import helpers


# No padding, one padded token, and 63 (65 tokens padded to 128).
@pytest.mark.parametrize('tokens,token_multiple', [(16, 2), (17, 2), (65, 64)])
def test_padded_fused_attention_is_the_unpadded_function(
    tokens, token_multiple):
  """cuDNN's padding and masking, through the XLA kernel."""
  q, k, v = helpers.normal((3, 2, tokens, 4, 16), seed=tokens)
  scale = 16**-0.5

  def plain(q, k, v):
    logits = jnp.einsum('bqhe,bkhe->bhqk', q, k) * scale
    return jnp.einsum('bhqk,bkhe->bqhe', jax.nn.softmax(logits), v)

  def padded(q, k, v):
    return fused_attention.attend(q, k, v, scale=scale, implementation='xla',
                                  token_multiple=token_multiple)

  def out_and_grads(f):
    out, vjp = jax.vjp(f, q, k, v)
    return out, vjp(helpers.normal(q.shape, seed=1))  # the same for both

  (out, grads), (expected,
                 expected_grads) = (jax.jit(lambda f=f: out_and_grads(f))()
                                    for f in (padded, plain))
  assert out.shape == q.shape
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  for grad, want in zip(grads, expected_grads):
    np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-5)


def test_cudnn_attention_in_the_module_pads_and_slices_before_the_output(
    monkeypatch):
  """The module's cuDNN path on XLA's kernel: 17 tokens padded to 18."""
  monkeypatch.setitem(fused_attention.KERNELS, 'cudnn',
                      ('xla', fused_attention.CUDNN_TOKEN_MULTIPLE))
  x = helpers.normal((2, 17, 32))
  einsum = MultiHeadSelfAttention(num_heads=4, attention='einsum')
  params = {'params': helpers.random_params(einsum, x, deterministic=True)}
  np.testing.assert_allclose(
      einsum.clone(attention='cudnn').apply(params, x, deterministic=True),
      einsum.apply(params, x, deterministic=True), rtol=1e-5, atol=1e-5)


class _Device:
  """What `cudnn_applies` reads of a jax device."""

  def __init__(self, platform, version, capability):
    self.platform, self.compute_capability = platform, capability
    self.client = type('Client', (), {'platform_version': version})


H100 = _Device('gpu', 'cuda 13000', '9.0')


# cuDNN's flash kernel is 16-bit, its head size a multiple of 8.
@pytest.mark.parametrize('device, dtype, head_dim, applies', [
    (H100, jnp.bfloat16, 64, True), (H100, jnp.float16, 256, True),
    (H100, jnp.float32, 64, False), (H100, jnp.bfloat16, 20, False),
    (H100, jnp.bfloat16, 264, False),
    (_Device('gpu', 'cuda 12080', '8.0'), jnp.bfloat16, 256, False),
    (_Device('gpu', 'cuda 12080', '8.0'), jnp.bfloat16, 128, True),
    (_Device('gpu', 'cuda 12080', '7.0'), jnp.bfloat16, 64, False),
    (_Device('gpu', 'rocm 6.3', 'gfx90a'), jnp.bfloat16, 64, False),
    (jax.devices('cpu')[0], jnp.bfloat16, 64, False)
])
def test_auto_attention_is_cudnn_where_cudnn_applies(device, dtype, head_dim,
                                                     applies):
  assert fused_attention.cudnn_applies(device, dtype, head_dim) == applies
