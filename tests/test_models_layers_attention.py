"""Self-attention against flax's, locality attention, mimetic init."""

import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import VisionTransformer
from vit_jax.models import attention_weights
from vit_jax.models.layers.attention import MultiHeadSelfAttention
from vit_jax.models.layers.attention import mimetic_kernels
from tests import helpers
from tests.test_models_vit import _softmax
from tests.test_models_vit import _assert_close_trees
from tests.test_models_vit import _logits_and_grads


@pytest.mark.parametrize('attention', ['einsum', 'dot_product_attention'])
def test_attention_is_flax_multi_head_attention_in_another_layout(attention):
  x = helpers.normal((3, 17, 32), 0)
  flax_attention = flax.linen.MultiHeadDotProductAttention(
      num_heads=4, kernel_init=flax.linen.initializers.xavier_uniform())
  ours = MultiHeadSelfAttention(num_heads=4, attention=attention)
  # One program each, not one per operation.
  flax_params = jax.jit(flax_attention.init)(jax.random.key(1), x, x)
  our_params = helpers.compiled(ours.init, jax.random.key(1), x,
                                deterministic=True)
  # Same names, shapes and initial values: the init rngs follow the names.
  jax.tree.map(np.testing.assert_array_equal, our_params, flax_params)

  params = {'params': helpers.randomized(flax_params['params'])}
  np.testing.assert_allclose(
      helpers.compiled(ours.apply, params, x, deterministic=True),
      jax.jit(flax_attention.apply)(params, x, x), rtol=1e-5, atol=1e-5)


# ViT-Tiny-CIFAR_4's head_dim (128 / 4 = 32) on a small model: 17 tokens.
HEAD_DIM_32 = dict(patch_size=4, hidden_size=64, num_layers=2, num_heads=2,
                   mlp_dim=128)


@pytest.mark.slow  # 20 s; the forward pass is checked against flax's in
# test_attention_is_flax_multi_head_attention_in_another_layout
def test_fused_attention_is_einsum_attention_in_training_and_its_maps():
  """Same parameters, logits and gradients; maps computed the einsum way."""
  images = helpers.images(batch=3)
  einsum = VisionTransformer(num_classes=5, **HEAD_DIM_32)
  fused = einsum.clone(attention='dot_product_attention')
  params = einsum.init(jax.random.key(0), images, train=False)['params']
  jax.tree.map(np.testing.assert_array_equal, params,
               fused.init(jax.random.key(0), images, train=False)['params'])
  variables = {'params': helpers.randomized(params)}
  _assert_close_trees(_logits_and_grads(fused, variables['params'], images),
                      _logits_and_grads(einsum, variables['params'], images))

  dropped = jax.jit(
      fused.clone(dropout_rate=0.3).apply, static_argnames='train')
  first, second = (dropped(variables, images, train=True,
                           rngs={'dropout': jax.random.key(seed)})
                   for seed in (1, 2))
  assert np.all(np.isfinite(first)) and not np.allclose(first, second)
  np.testing.assert_allclose(attention_weights(fused, variables, images),
                             attention_weights(einsum, variables, images),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('head_dim', [16, 32])  # one of each case
def test_bfloat16_attention_scales_float32_logits_unless_folding_is_exact(
    head_dim):
  # Folding 1/sqrt(head_dim) into the bfloat16 query kernel is exact only for
  # a power-of-4 head_dim (a power-of-two scale); otherwise the logits are
  # scaled in float32. Either way the result is the one of scaling the
  # float32 logits, bit for bit.
  heads = 2
  x = helpers.normal((2, 9, heads * head_dim), 0)
  attention = MultiHeadSelfAttention(num_heads=heads, dtype=jnp.bfloat16)
  params = {'params': helpers.random_params(attention, x, deterministic=True)}
  _, state = attention.apply(params, x, deterministic=True,
                             mutable=['intermediates'])
  ours = state['intermediates']['attention_weights'][0]

  p = params['params']
  x16 = x.astype(jnp.bfloat16)
  q, k = (jnp.einsum('btd,dhe->bhte', x16, p[n]['kernel'].astype(jnp.bfloat16))
          + p[n]['bias'].astype(jnp.bfloat16)[:, None, :]
          for n in ('query', 'key'))
  logits = jnp.einsum('bhqe,bhke->bhqk', q, k).astype(jnp.float32)
  reference = jax.nn.softmax(logits * np.float32(head_dim**-0.5))
  np.testing.assert_array_equal(ours, reference.astype(jnp.bfloat16))
  # Folding the rounded scale into the rounded query kernel would not be.
  scale = jnp.asarray(head_dim**-0.5, jnp.bfloat16)
  folded_q = (jnp.einsum('btd,dhe->bhte', x16,
                         p['query']['kernel'].astype(jnp.bfloat16) * scale) +
              p['query']['bias'].astype(jnp.bfloat16)[:, None, :] * scale)
  folded = jax.nn.softmax(
      jnp.einsum('bhqe,bhke->bhqk', folded_q, k).astype(jnp.float32))
  assert np.array_equal(folded, reference) == (head_dim == 16)
  # Close to float32 throughout: test_models_vit's bfloat16 logits.


@pytest.mark.skipif(jax.default_backend() != 'gpu', reason='needs a GPU')
def test_cudnn_attention_matches_einsum_in_bfloat16_on_gpu():
  images = helpers.images(batch=4)
  einsum = VisionTransformer(num_classes=5, dtype=jnp.bfloat16, **HEAD_DIM_32)
  cudnn = einsum.clone(attention='cudnn')
  params = {'params': helpers.random_params(einsum, images, train=False)}
  high = VisionTransformer(num_classes=5,
                           **HEAD_DIM_32).apply(params, images, train=False)
  low = jax.jit(lambda v: cudnn.apply(v, images, train=False))(params)
  np.testing.assert_allclose(low, high, atol=0.05 * np.abs(high).max())
  grads = jax.jit(
      jax.grad(lambda v: cudnn.apply(v, images, train=False).sum()))(params)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


# Data-efficiency techniques: each a field whose default is off.


def test_locality_attention_learns_a_temperature_and_masks_self():
  x = helpers.normal((2, 5, 32), 0)
  attention = MultiHeadSelfAttention(num_heads=4, locality=True)
  params = helpers.compiled(attention.init, jax.random.key(1), x,
                            deterministic=True)['params']
  np.testing.assert_allclose(params['temperature'], [8**-0.5] * 4)
  temperature = np.float32([0.7, 0.3, 1.1, 0.5])  # one per head
  params = dict(helpers.randomized(params),
                temperature=jnp.asarray(temperature))
  out, state = helpers.compiled(attention.apply, {'params': params}, x,
                                deterministic=True, mutable=['intermediates'])
  weights = state['intermediates']['attention_weights'][0]

  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  q, k, v = (np.einsum('btd,dhe->bthe', x, p[n]['kernel']) + p[n]['bias']
             for n in ('query', 'key', 'value'))
  logits = np.einsum('bqhe,bkhe->bhqk', q, k) * temperature[:, None, None]
  logits[..., np.arange(5), np.arange(5)] = -np.inf
  probabilities = _softmax(logits)
  np.testing.assert_allclose(weights, probabilities, rtol=1e-5, atol=1e-6)
  expected = np.einsum('bhqk,bkhe,hed->bqd', probabilities, v,
                       p['out']['kernel']) + p['out']['bias']
  np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_locality_attention_in_the_model():
  model, images = helpers.small_vit(locality_attention=True), helpers.images()
  variables = helpers.compiled(model.init, jax.random.key(0), images,
                               train=False)
  for i in range(helpers.SMALL['num_layers']):
    block = variables['params']['Transformer'][f'encoderblock_{i}']
    assert block['MultiHeadDotProductAttention_0']['temperature'].shape == (4,)
  for a in jax.jit(functools.partial(attention_weights, model))(variables,
                                                                images):
    assert a.shape == (2, 4, 17, 17)
    np.testing.assert_array_equal(np.diagonal(a, axis1=-2, axis2=-1), 0.0)


# One program, not one per operation.
_mimetic_kernels = jax.jit(mimetic_kernels, static_argnums=(1, 2))


def _off_diagonal(matrix):
  return matrix[~np.eye(len(matrix), dtype=bool)]


def test_mimetic_products_are_the_papers_with_one_head():
  """W_q W_k^T = 0.7 Z + 0.7 I, W_v W_proj = 0.4 Z - 0.4 I, Z ~ N(0, 1/d)."""
  d = 256
  kernels = _mimetic_kernels(jax.random.key(1), d, 1)
  query_key = np.asarray(kernels['query'][:, 0] @ kernels['key'][:, 0].T,
                         np.float64)
  value_out = np.asarray(
      kernels['value'].reshape(d, d) @ kernels['out'].reshape(d, d), np.float64)
  for product, (noise, identity) in ((query_key, (0.7, 0.7)), (value_out,
                                                               (0.4, -0.4))):
    z = (product - identity * np.eye(d)) / noise * np.sqrt(d)
    # Standard normal entries: mean 0, std 1 (65,536 of them).
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert abs(np.diag(product).mean() - identity) < 0.01


def test_mimetic_heads_are_each_the_best_rank_approximation():
  """Each head's W_q W_k^T approximates 0.7 Z + 0.7 I of a Z of its own."""
  d, heads = 128, 4
  kernels = _mimetic_kernels(jax.random.key(2), d, heads)
  assert kernels['query'].shape == kernels['key'].shape == (d, heads, 32)
  assert kernels['out'].shape == (heads, 32, d)
  products = [
      np.asarray(kernels['query'][:, h] @ kernels['key'][:, h].T)
      for h in range(heads)
  ]
  for h, product in enumerate(products):
    assert np.linalg.matrix_rank(product) == 32
    # Its diagonal well above its off-diagonal noise.
    assert np.diag(product).mean() > 4 * _off_diagonal(product).std()
    # Balanced factors of a truncated SVD: W_q^T W_q = W_k^T W_k = the top
    # singular values on the diagonal, largest first.
    query, key = (np.asarray(kernels[n][:, h], np.float64)
                  for n in ('query', 'key'))
    gram = query.T @ query
    np.testing.assert_allclose(gram, key.T @ key, atol=1e-5)
    singular = np.diag(gram)
    np.testing.assert_allclose(gram, np.diag(singular), atol=1e-5)
    assert np.all(np.diff(singular) <= 1e-6)
    np.testing.assert_allclose(singular,
                               np.linalg.svd(product, compute_uv=False)[:32],
                               rtol=1e-4)
  assert not np.allclose(products[0], products[1])
  # W_v W_proj does not depend on the heads: the test above.


@pytest.mark.parametrize(
    'scan', [False, pytest.param(True, marks=pytest.mark.slow)])  # 7 s
def test_mimetic_init_changes_only_the_attention_kernels(scan):
  images, plain = helpers.images(), helpers.small_vit(scan=scan)
  mimetic = plain.clone(mimetic_init=True)
  params, before = (helpers.compiled(m.init, jax.random.key(0), images,
                                     train=False)['params']
                    for m in (mimetic, plain))
  assert helpers.shapes(before) == helpers.shapes(params)
  before, after = helpers.flat(before), helpers.flat(params)
  assert {k for k in before if not np.array_equal(before[k], after[k])} == set(
      k for k in before
      if 'MultiHeadDotProductAttention_0' in k and k.endswith('kernel'))

  def kernel(name, layer):
    if scan:  # stacked: (layers, ...)
      return after[f'Transformer/encoderblock/MultiHeadDotProductAttention_0/'
                   f'{name}/kernel'][layer]
    return after[f'Transformer/encoderblock_{layer}/'
                 f'MultiHeadDotProductAttention_0/{name}/kernel']

  for layer in (0, 1):
    product = kernel('query', layer)[:, 0] @ kernel('key', layer)[:, 0].T
    # head_dim 8 of 32: a rank-8 approximation, its diagonal still clear.
    assert np.diag(product).mean() > 2 * _off_diagonal(product).std()
  assert not np.allclose(kernel('query', 0), kernel('query', 1))
  logits = helpers.compiled(mimetic.apply, {'params': params}, images,
                            train=False)
  assert np.isfinite(logits).all()
