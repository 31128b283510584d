"""The ViT against the official linen model's parameter tree and forward pass."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import attention_weights
from vit_jax.models import create_model
from vit_jax.models import VisionTransformer
from vit_jax.models.vit import DropPath
from vit_jax.models.vit import drop_path_rates
from vit_jax.models.vit import logits_and_attention
from vit_jax.models.vit import MultiHeadSelfAttention
from vit_jax.models.vit import posemb_sincos_2d
from vit_jax.models.vit import shifted_patch_tokens

SMALL = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4,
             mlp_dim=64)


def _flat(tree):
  return flax.traverse_util.flatten_dict(tree, sep='/')


def official_param_shapes(*, patch, hidden, layers, heads, mlp, tokens,
                          num_classes, classifier='token',
                          representation_size=None):
  """Path -> shape of google-research/vision_transformer's linen ViT."""
  head_dim = hidden // heads
  shapes = {
      'embedding/kernel': (patch, patch, 3, hidden),
      'embedding/bias': (hidden,),
      'Transformer/posembed_input/pos_embedding': (1, tokens, hidden),
      'Transformer/encoder_norm/scale': (hidden,),
      'Transformer/encoder_norm/bias': (hidden,),
  }
  if classifier == 'token':
    shapes['cls'] = (1, 1, hidden)
  for i in range(layers):
    block = f'Transformer/encoderblock_{i}'
    for norm in ('LayerNorm_0', 'LayerNorm_1'):
      shapes[f'{block}/{norm}/scale'] = (hidden,)
      shapes[f'{block}/{norm}/bias'] = (hidden,)
    attention = f'{block}/MultiHeadDotProductAttention_0'
    for projection in ('query', 'key', 'value'):
      shapes[f'{attention}/{projection}/kernel'] = (hidden, heads, head_dim)
      shapes[f'{attention}/{projection}/bias'] = (heads, head_dim)
    shapes[f'{attention}/out/kernel'] = (heads, head_dim, hidden)
    shapes[f'{attention}/out/bias'] = (hidden,)
    mlp_block = f'{block}/MlpBlock_0'
    shapes[f'{mlp_block}/Dense_0/kernel'] = (hidden, mlp)
    shapes[f'{mlp_block}/Dense_0/bias'] = (mlp,)
    shapes[f'{mlp_block}/Dense_1/kernel'] = (mlp, hidden)
    shapes[f'{mlp_block}/Dense_1/bias'] = (hidden,)
  width = hidden
  if representation_size is not None:
    shapes['pre_logits/kernel'] = (hidden, representation_size)
    shapes['pre_logits/bias'] = (representation_size,)
    width = representation_size
  shapes['head/kernel'] = (width, num_classes)
  shapes['head/bias'] = (num_classes,)
  return shapes


def _layer_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  var = x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * p['scale'] + p['bias']


def _gelu(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def reference_logits(params, images, *, classifier):
  """The official ViT forward pass in NumPy, written from the paper's equations."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  x = np.asarray(images, np.float64)
  kernel = p['embedding']['kernel']
  patch, hidden = kernel.shape[0], kernel.shape[-1]
  b, h, w, c = x.shape
  x = x.reshape(b, h // patch, patch, w // patch, patch, c)
  x = x.transpose(0, 1, 3, 2, 4, 5).reshape(b, -1, patch * patch * c)
  x = x @ kernel.reshape(-1, hidden) + p['embedding']['bias']
  if classifier == 'token':
    x = np.concatenate([np.broadcast_to(p['cls'], (b, 1, hidden)), x], axis=1)
  t = p['Transformer']
  x = x + t['posembed_input']['pos_embedding']
  i = 0
  while f'encoderblock_{i}' in t:
    block = t[f'encoderblock_{i}']
    att = block['MultiHeadDotProductAttention_0']
    y = _layer_norm(x, block['LayerNorm_0'])
    q, k, v = (np.einsum('bnd,dhe->bnhe', y, att[n]['kernel']) + att[n]['bias']
               for n in ('query', 'key', 'value'))
    logits = np.einsum('bqhe,bkhe->bhqk', q, k) / np.sqrt(q.shape[-1])
    y = np.einsum('bhqk,bkhe->bqhe', _softmax(logits), v)
    x = x + np.einsum('bqhe,hed->bqd', y, att['out']['kernel']) + att['out'][
        'bias']
    mlp = block['MlpBlock_0']
    y = _layer_norm(x, block['LayerNorm_1'])
    y = _gelu(y @ mlp['Dense_0']['kernel'] + mlp['Dense_0']['bias'])
    x = x + y @ mlp['Dense_1']['kernel'] + mlp['Dense_1']['bias']
    i += 1
  x = _layer_norm(x, t['encoder_norm'])
  x = x[:, 0] if classifier == 'token' else x.mean(1)
  if 'pre_logits' in p:
    x = np.tanh(x @ p['pre_logits']['kernel'] + p['pre_logits']['bias'])
  return x @ p['head']['kernel'] + p['head']['bias']


def _randomized(params, seed=0):
  """Every parameter random (heads and biases included), so nothing is zero."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(treedef, [
      0.3 * jax.random.normal(k, a.shape, a.dtype) + (a.ndim == 1)
      for k, a in zip(keys, leaves)
  ])


def _images(batch=2, size=16, seed=1):
  return jax.random.normal(jax.random.key(seed), (batch, size, size, 3))


def test_vit_b16_tree_matches_official_key_for_key():
  model = create_model('ViT-B_16', 1000)
  variables = jax.eval_shape(
      lambda: model.init(jax.random.key(0), jnp.zeros((1, 224, 224, 3)),
                         train=False))
  assert set(variables) == {'params'}
  ours = {k: v.shape for k, v in _flat(variables['params']).items()}
  official = official_param_shapes(
      patch=16, hidden=768, layers=12, heads=12, mlp=3072, tokens=197,
      num_classes=1000)
  assert ours == official


@pytest.mark.parametrize('classifier,representation_size', [('token', None),
                                                            ('gap', 24)])
def test_tree_and_logits_match_the_official_model(classifier,
                                                  representation_size):
  model = VisionTransformer(num_classes=5, classifier=classifier,
                            representation_size=representation_size, **SMALL)
  images = _images()
  params = model.init(jax.random.key(0), images, train=False)['params']
  shapes = {k: v.shape for k, v in _flat(params).items()}
  assert shapes == official_param_shapes(
      patch=4, hidden=32, layers=2, heads=4, mlp=64,
      tokens=16 + (classifier == 'token'), num_classes=5,
      classifier=classifier, representation_size=representation_size)

  params = _randomized(params)
  logits = model.apply({'params': params}, images, train=False)
  np.testing.assert_allclose(
      logits, reference_logits(params, images, classifier=classifier),
      rtol=1e-4, atol=1e-4)


def test_initialisation_follows_the_official_model():
  model = VisionTransformer(num_classes=5, **SMALL)
  params = model.init(jax.random.key(0), _images(), train=False)['params']
  assert not np.any(params['cls'])
  assert not np.any(params['head']['kernel'])
  pos = params['Transformer']['posembed_input']['pos_embedding']
  assert 0.01 < float(np.std(pos)) < 0.03


def test_head_bias_init():
  model = VisionTransformer(num_classes=5, head_bias_init=-3.0, **SMALL)
  logits, _ = model.init_with_output(
      jax.random.key(0), _images(), train=False)
  np.testing.assert_allclose(logits, -3.0)


@pytest.mark.parametrize('classifier', ['token', 'gap', 'map'])
def test_output_shape(classifier):
  model = VisionTransformer(num_classes=7, classifier=classifier, **SMALL)
  logits, variables = model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False)
  assert logits.shape == (3, 7)
  assert logits.dtype == jnp.float32
  assert ('cls' in variables['params']) == (classifier == 'token')


def test_attention_weights_are_probabilities_per_layer():
  model = VisionTransformer(num_classes=5, **SMALL)
  images = _images(batch=3)
  variables = model.init(jax.random.key(0), images, train=False)
  variables = {'params': _randomized(variables['params'])}
  maps = attention_weights(model, variables, images)
  assert len(maps) == SMALL['num_layers']
  for a in maps:
    assert a.shape == (3, SMALL['num_heads'], 17, 17)
    assert np.all(a >= 0)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)
  # Sowing leaves the parameters alone.
  assert set(model.init(jax.random.key(0), images, train=False)) == {'params'}


def test_eval_is_deterministic_and_train_applies_dropout():
  model = VisionTransformer(num_classes=5, dropout_rate=0.3,
                            attention_dropout_rate=0.3, **SMALL)
  images = _images()
  variables = {'params': _randomized(
      model.init(jax.random.key(0), images, train=False)['params'])}

  def run(train, seed):
    return model.apply(variables, images, train=train,
                       rngs={'dropout': jax.random.key(seed)})

  np.testing.assert_array_equal(run(False, 1), run(False, 2))
  np.testing.assert_array_equal(run(False, 1),
                                model.apply(variables, images, train=False))
  assert not np.allclose(run(True, 1), run(True, 2))


def test_bfloat16_compute_with_float32_parameters():
  images = _images(batch=4)
  f32 = VisionTransformer(num_classes=5, **SMALL)
  bf16 = VisionTransformer(num_classes=5, dtype=jnp.bfloat16, **SMALL)
  params = bf16.init(jax.random.key(0), images, train=False)['params']
  assert {a.dtype for a in jax.tree.leaves(params)} == {jnp.dtype('float32')}

  params = _randomized(params)
  low = bf16.apply({'params': params}, images, train=False)
  high = f32.apply({'params': params}, images, train=False)
  assert low.dtype == jnp.float32
  assert np.all(np.isfinite(low))
  np.testing.assert_allclose(low, high, atol=0.05 * np.abs(high).max())


def test_image_size_not_divisible_by_patch_is_a_clear_error():
  model = VisionTransformer(num_classes=5, **SMALL)
  with pytest.raises(ValueError, match='not divisible by the patch size 4'):
    model.init(jax.random.key(0), jnp.zeros((1, 18, 18, 3)), train=False)


def test_other_image_size_than_at_init_is_a_clear_error():
  model = VisionTransformer(num_classes=5, **SMALL)
  variables = model.init(jax.random.key(0), _images(size=16), train=False)
  with pytest.raises(ValueError, match='position embedding was made for 17'):
    model.apply(variables, _images(size=32), train=False)


def test_invalid_configurations_are_clear_errors():
  with pytest.raises(ValueError, match="classifier='cls'"):
    VisionTransformer(num_classes=5, classifier='cls', **SMALL)
  with pytest.raises(ValueError, match='not divisible by num_heads=5'):
    VisionTransformer(num_classes=5, **{**SMALL, 'num_heads': 5})


@pytest.mark.parametrize('attention', ['einsum', 'dot_product_attention'])
def test_attention_is_flax_multi_head_attention_in_another_layout(attention):
  x = jax.random.normal(jax.random.key(0), (3, 17, 32))
  flax_attention = flax.linen.MultiHeadDotProductAttention(
      num_heads=4, kernel_init=flax.linen.initializers.xavier_uniform())
  ours = MultiHeadSelfAttention(num_heads=4, attention=attention)
  flax_params = flax_attention.init(jax.random.key(1), x, x)
  our_params = ours.init(jax.random.key(1), x, deterministic=True)
  # Same names, shapes and initial values: the init rngs follow the names.
  jax.tree.map(np.testing.assert_array_equal, our_params, flax_params)

  params = {'params': _randomized(flax_params['params'])}
  np.testing.assert_allclose(
      ours.apply(params, x, deterministic=True),
      flax_attention.apply(params, x, x), rtol=1e-5, atol=1e-5)


# ViT-Tiny-CIFAR_4's head_dim (128 / 4 = 32) on a small model: 17 tokens.
HEAD_DIM_32 = dict(patch_size=4, hidden_size=64, num_layers=2, num_heads=2,
                   mlp_dim=128)


@pytest.mark.slow  # 14 s; the forward pass is checked against flax's in
# test_attention_is_flax_multi_head_attention_in_another_layout
def test_fused_attention_has_the_same_parameters_logits_and_gradients():
  images = _images(batch=3)
  einsum = VisionTransformer(num_classes=5, **HEAD_DIM_32)
  fused = VisionTransformer(num_classes=5, attention='dot_product_attention',
                            **HEAD_DIM_32)
  params = einsum.init(jax.random.key(0), images, train=False)['params']
  jax.tree.map(np.testing.assert_array_equal, params,
               fused.init(jax.random.key(0), images, train=False)['params'])

  params = {'params': _randomized(params)}
  labels = jnp.arange(3) % 5

  def loss(model, variables):
    logits = model.apply(variables, images, train=False)
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(3), labels]), logits

  (ours, ours_logits), (theirs, their_logits) = (
      jax.jit(jax.grad(lambda v, m=m: loss(m, v), has_aux=True))(params)
      for m in (einsum, fused))
  np.testing.assert_allclose(their_logits, ours_logits, rtol=1e-5, atol=1e-5)
  # Relative to the largest gradient: the key bias's is zero but for rounding.
  largest = max(float(np.abs(g).max()) for g in jax.tree.leaves(ours))
  jax.tree.map(
      lambda a, b: np.testing.assert_allclose(b, a, rtol=1e-4,
                                              atol=1e-5 * largest),
      ours, theirs)


def test_fused_attention_trains_with_dropout_and_gives_attention_maps():
  model = VisionTransformer(num_classes=5, dropout_rate=0.3,
                            attention='dot_product_attention', **SMALL)
  images = _images()
  variables = {'params': _randomized(
      model.init(jax.random.key(0), images, train=False)['params'])}

  def run(seed):
    return model.apply(variables, images, train=True,
                       rngs={'dropout': jax.random.key(seed)})

  assert np.all(np.isfinite(run(1)))
  assert not np.allclose(run(1), run(2))
  # No probabilities come out of the fused kernel: collecting them computes
  # the einsum way, with the same results.
  einsum = model.clone(attention='einsum')
  np.testing.assert_allclose(attention_weights(model, variables, images),
                             attention_weights(einsum, variables, images),
                             rtol=1e-5, atol=1e-6)


def test_attention_choice_is_a_checked_model_field():
  model = create_model('ViT-Tiny-CIFAR_4', 10,
                       attention='dot_product_attention')
  assert model.attention == 'dot_product_attention'
  assert create_model('ViT-Tiny-CIFAR_4', 10).attention == 'einsum'
  with pytest.raises(ValueError, match="attention='flash'; use one of"):
    VisionTransformer(num_classes=5, attention='flash', **SMALL)
  with pytest.raises(ValueError, match="cannot drop attention probabilities.*"
                     "use attention='einsum'"):
    VisionTransformer(num_classes=5, attention='cudnn',
                      attention_dropout_rate=0.1, **SMALL)


@pytest.mark.parametrize('head_dim', [
    16, 32,  # one of each case; 48 and 64 repeat them (9 s, op by op)
    pytest.param(48, marks=pytest.mark.slow),
    pytest.param(64, marks=pytest.mark.slow)])
def test_bfloat16_attention_scales_float32_logits_unless_folding_is_exact(
    head_dim):
  # Folding 1/sqrt(head_dim) into the bfloat16 query kernel is exact only for
  # a power-of-4 head_dim (a power-of-two scale); otherwise the logits are
  # scaled in float32. Either way the result is the one of scaling the
  # float32 logits, bit for bit.
  heads = 2
  x = jax.random.normal(jax.random.key(0), (2, 9, heads * head_dim))
  attention = MultiHeadSelfAttention(num_heads=heads, dtype=jnp.bfloat16)
  params = {'params': _randomized(
      attention.init(jax.random.key(1), x, deterministic=True)['params'])}
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
  assert np.array_equal(folded, jax.nn.softmax(
      logits * np.float32(head_dim**-0.5))) == (head_dim in (16, 64))

  # And within bfloat16 rounding of the float32 computation (the random
  # parameters make some rows sharp, and sensitive to it).
  _, state = MultiHeadSelfAttention(num_heads=heads).apply(
      params, x, deterministic=True, mutable=['intermediates'])
  np.testing.assert_allclose(
      np.asarray(ours, np.float32),
      state['intermediates']['attention_weights'][0], atol=0.06)


@pytest.mark.skipif(jax.default_backend() != 'gpu', reason='needs a GPU')
def test_cudnn_attention_matches_einsum_in_bfloat16_on_gpu():
  images = _images(batch=4)
  einsum = VisionTransformer(num_classes=5, dtype=jnp.bfloat16, **HEAD_DIM_32)
  cudnn = einsum.clone(attention='cudnn')
  params = {'params': _randomized(
      einsum.init(jax.random.key(0), images, train=False)['params'])}
  high = VisionTransformer(num_classes=5, **HEAD_DIM_32).apply(
      params, images, train=False)
  low = jax.jit(lambda v: cudnn.apply(v, images, train=False))(params)
  np.testing.assert_allclose(low, high, atol=0.05 * np.abs(high).max())
  grads = jax.jit(jax.grad(
      lambda v: cudnn.apply(v, images, train=False).sum()))(params)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


# Data-efficiency techniques: each a field whose default is off.

TECHNIQUES_OFF = dict(posemb='learned', stochastic_depth_rate=0.0,
                      shifted_patches=False, locality_attention=False,
                      distillation_token=False)


def _shapes(model, images):
  variables = jax.eval_shape(
      lambda: model.init(jax.random.key(0), images, train=False))
  assert set(variables) == {'params'}
  return {k: v.shape for k, v in _flat(variables['params']).items()}


def test_techniques_are_off_by_default_and_leave_the_official_tree():
  model = VisionTransformer(num_classes=5, **SMALL)
  assert {f: getattr(model, f) for f in TECHNIQUES_OFF} == TECHNIQUES_OFF
  assert model.classifier == 'token'
  explicit = VisionTransformer(num_classes=5, **SMALL, **TECHNIQUES_OFF)
  official = official_param_shapes(patch=4, hidden=32, layers=2, heads=4,
                                   mlp=64, tokens=17, num_classes=5)
  assert _shapes(model, _images()) == _shapes(explicit, _images()) == official


def _permute_patches(images, patch, permutation):
  """The image with its patch grid's patches moved: patch permutation[i] of
  the row-major grid goes to place i."""
  b, h, w, c = images.shape
  rows, cols = h // patch, w // patch
  x = images.reshape(b, rows, patch, cols, patch, c).transpose(0, 1, 3, 2, 4, 5)
  x = x.reshape(b, rows * cols, patch, patch, c)[:, permutation]
  x = x.reshape(b, rows, cols, patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, h, w, c)


@pytest.mark.parametrize('posemb,classifier', [('none', 'gap'),
                                               ('none', 'map'),
                                               ('learned', 'gap')])
def test_only_a_position_embedding_makes_patch_order_matter(posemb,
                                                            classifier):
  # The property: without position information a pooling head sees a
  # set of patches, so permuting them changes nothing; the (random, nonzero)
  # learned embedding ties each patch to its place.
  model = VisionTransformer(num_classes=5, posemb=posemb,
                            classifier=classifier, **SMALL)
  images = _images()
  params = _randomized(model.init(jax.random.key(0), images,
                                  train=False)['params'])
  permutation = np.random.default_rng(0).permutation(16)
  assert np.any(permutation != np.arange(16))
  permuted = _permute_patches(images, 4, permutation)
  assert not np.allclose(permuted, images)
  np.testing.assert_array_equal(  # The helper moves patches, nothing else.
      np.sort(np.asarray(permuted).ravel()), np.sort(np.asarray(images).ravel()))
  logits, permuted_logits = (model.apply({'params': params}, x, train=False)
                             for x in (images, permuted))
  invariant = np.allclose(permuted_logits, logits, rtol=1e-5, atol=1e-5)
  assert invariant == (posemb == 'none')
  if posemb == 'none':
    assert 'posembed_input' not in params['Transformer']


def test_sincos2d_posemb_matches_a_numpy_reference():
  # 2x2 grid, width 8: two frequencies, 1 and 1 / 10000.
  omega = np.array([1.0, 1e-4])
  rows = []
  for y in range(2):
    for x in range(2):
      rows.append(np.concatenate([np.sin(x * omega), np.cos(x * omega),
                                  np.sin(y * omega), np.cos(y * omega)]))
  np.testing.assert_allclose(posemb_sincos_2d(2, 2, 8), np.array(rows)[None],
                             rtol=1e-6, atol=1e-7)


def test_sincos2d_model_has_no_posemb_parameter_and_zero_for_cls():
  images = _images()
  sincos = VisionTransformer(num_classes=5, posemb='sincos2d', **SMALL)
  learned = VisionTransformer(num_classes=5, **SMALL)
  params = _randomized(learned.init(jax.random.key(0), images,
                                    train=False)['params'])
  transformer = dict(params['Transformer'])
  del transformer['posembed_input']
  sincos_params = {**params, 'Transformer': transformer}
  assert _shapes(sincos, images) == {
      k: v.shape for k, v in _flat(sincos_params).items()}
  # The same as the learned embedding set to [0 for cls; sincos of 4x4].
  fixed = jnp.concatenate([jnp.zeros((1, 1, 32)), posemb_sincos_2d(4, 4, 32)],
                          axis=1)
  transformer = {**transformer, 'posembed_input': {'pos_embedding': fixed}}
  np.testing.assert_allclose(
      sincos.apply({'params': sincos_params}, images, train=False),
      learned.apply({'params': {**params, 'Transformer': transformer}},
                    images, train=False), rtol=1e-6, atol=1e-6)


def test_posemb_choices_are_checked():
  with pytest.raises(ValueError, match="posemb='sincos2d' needs a hidden_size "
                     'divisible by 4, got 30'):
    VisionTransformer(num_classes=5, posemb='sincos2d',
                      **{**SMALL, 'hidden_size': 30, 'num_heads': 3})
  with pytest.raises(ValueError, match="posemb='learn'; use one of"):
    VisionTransformer(num_classes=5, posemb='learn', **SMALL)


def test_map_head_pools_with_a_probe_and_no_cls_token():
  model = VisionTransformer(num_classes=7, classifier='map', **SMALL)
  logits, variables = model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False)
  assert logits.shape == (3, 7)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  assert 'cls' not in shapes
  assert shapes['Transformer/posembed_input/pos_embedding'] == (1, 16, 32)
  head = {k[len('MAPHead_0/'):]: v for k, v in shapes.items()
          if k.startswith('MAPHead_0/')}
  attention = 'MultiHeadDotProductAttention_0'
  assert head == {
      'probe': (1, 1, 32),
      **{f'{attention}/{p}/kernel': (32, 4, 8)
         for p in ('query', 'key', 'value')},
      **{f'{attention}/{p}/bias': (4, 8) for p in ('query', 'key', 'value')},
      f'{attention}/out/kernel': (4, 8, 32), f'{attention}/out/bias': (32,),
      'LayerNorm_0/scale': (32,), 'LayerNorm_0/bias': (32,),
      'MlpBlock_0/Dense_0/kernel': (32, 64), 'MlpBlock_0/Dense_0/bias': (64,),
      'MlpBlock_0/Dense_1/kernel': (64, 32), 'MlpBlock_0/Dense_1/bias': (32,),
  }


def test_drop_path_drops_whole_examples():
  x = jnp.ones((256, 3, 4))
  y = np.asarray(DropPath(0.5).apply({}, x, deterministic=False,
                                     rngs={'dropout': jax.random.key(0)}))
  per_example = y.reshape(256, -1)
  assert np.all(per_example == per_example[:, :1])  # All of it, or none.
  assert set(np.unique(per_example)) == {0.0, 2.0}
  assert 0.35 < np.mean(per_example[:, 0] == 0) < 0.65
  np.testing.assert_array_equal(
      DropPath(0.5).apply({}, x, deterministic=True), x)
  assert drop_path_rates(0.3, 4) == pytest.approx([0.0, 0.1, 0.2, 0.3])
  assert drop_path_rates(0.3, 1) == [0.0]


def test_stochastic_depth_is_train_only_and_adds_no_parameters():
  images = _images(batch=8)
  plain = VisionTransformer(num_classes=5, **SMALL)
  deep = VisionTransformer(num_classes=5, stochastic_depth_rate=0.99,
                           **SMALL)
  assert _shapes(deep, images) == _shapes(plain, images)
  params = {'params': _randomized(
      plain.init(jax.random.key(0), images, train=False)['params'])}
  evaluated = plain.apply(params, images, train=False)

  def run(train, seed):
    return deep.apply(params, images, train=train,
                      rngs={'dropout': jax.random.key(seed)})

  np.testing.assert_array_equal(run(False, 1), evaluated)
  # The last block's branches are dropped, or kept and scaled by 100, so no
  # example comes out as in eval.
  same = np.all(np.isclose(run(True, 1), evaluated, rtol=1e-5, atol=1e-5),
                axis=-1)
  assert not np.any(same)
  with pytest.raises(ValueError, match='stochastic_depth_rate=1.0 must be in'):
    VisionTransformer(num_classes=5, stochastic_depth_rate=1.0, **SMALL)


def _shifted(x, dy, dx):
  """x moved by (dy, dx) pixels, zeros shifted in: out[i, j] = x[i-dy, j-dx]."""
  out = np.zeros_like(x)
  h, w = x.shape[1:3]
  for i in range(h):
    for j in range(w):
      if 0 <= i - dy < h and 0 <= j - dx < w:
        out[:, i, j] = x[:, i - dy, j - dx]
  return out


@pytest.mark.parametrize('patch', [2, 3])
def test_shifted_patch_tokens_match_a_numpy_reference(patch):
  images = np.asarray(_images(batch=1, size=2 * patch))
  s = patch // 2
  # The image, then its copies moved up-left, up-right, down-left, down-right.
  stacked = np.concatenate(
      [images] + [_shifted(images, dy, dx)
                  for dy, dx in ((-s, -s), (-s, s), (s, -s), (s, s))], axis=-1)
  expected = np.stack([
      np.stack([stacked[0, r * patch:(r + 1) * patch,
                        c * patch:(c + 1) * patch].ravel() for c in range(2)])
      for r in range(2)
  ])[None]
  np.testing.assert_array_equal(shifted_patch_tokens(images, patch), expected)


def test_shifted_patches_replace_the_embedding_conv():
  model = VisionTransformer(num_classes=7, shifted_patches=True, **SMALL)
  logits, variables = model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False)
  assert logits.shape == (3, 7)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  features = 4 * 4 * 3 * 5
  assert 'embedding/kernel' not in shapes
  assert {k: v for k, v in shapes.items() if k.startswith('shifted')} == {
      'shifted_patch_norm/scale': (features,),
      'shifted_patch_norm/bias': (features,),
      'shifted_patch_embedding/kernel': (features, 32),
      'shifted_patch_embedding/bias': (32,),
  }
  with pytest.raises(ValueError, match='cannot follow a ResNet stem'):
    VisionTransformer(num_classes=5, shifted_patches=True,
                      resnet_stages=(1,), **{**SMALL, 'patch_size': 2})
  with pytest.raises(ValueError, match='patch_size=1 cannot give'):
    VisionTransformer(num_classes=5, shifted_patches=True,
                      **{**SMALL, 'patch_size': 1})


def test_locality_attention_learns_a_temperature_and_masks_self():
  x = jax.random.normal(jax.random.key(0), (2, 5, 32))
  attention = MultiHeadSelfAttention(num_heads=4, locality=True)
  params = attention.init(jax.random.key(1), x, deterministic=True)['params']
  np.testing.assert_allclose(params['temperature'], [8**-0.5] * 4)
  temperature = np.float32([0.7, 0.3, 1.1, 0.5])  # one per head
  params = {**_randomized(params), 'temperature': jnp.asarray(temperature)}
  out, state = attention.apply({'params': params}, x, deterministic=True,
                               mutable=['intermediates'])
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
  model = VisionTransformer(num_classes=5, locality_attention=True, **SMALL)
  images = _images()
  variables = model.init(jax.random.key(0), images, train=False)
  for i in range(SMALL['num_layers']):
    block = variables['params']['Transformer'][f'encoderblock_{i}']
    assert block['MultiHeadDotProductAttention_0']['temperature'].shape == (4,)
  for a in attention_weights(model, variables, images):
    assert a.shape == (2, 4, 17, 17)
    np.testing.assert_array_equal(np.diagonal(a, axis1=-2, axis2=-1), 0.0)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)
  for fused in ('dot_product_attention', 'cudnn'):
    with pytest.raises(ValueError, match=f"attention='{fused}' cannot mask "
                       ".*use attention='einsum'"):
      VisionTransformer(num_classes=5, locality_attention=True,
                        attention=fused, **SMALL)


def test_distillation_token_has_two_heads_averaged_in_eval():
  model = VisionTransformer(num_classes=5, distillation_token=True, **SMALL)
  images = _images(batch=3)
  variables = model.init(jax.random.key(0), images, train=False)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  assert shapes['dist'] == shapes['cls'] == (1, 1, 32)
  assert shapes['head_dist/kernel'] == (32, 5)
  assert shapes['Transformer/posembed_input/pos_embedding'] == (1, 18, 32)
  assert not np.any(variables['params']['head_dist']['kernel'])

  variables = {'params': _randomized(variables['params'])}
  class_logits, distillation_logits = model.apply(
      variables, images, train=True, rngs={'dropout': jax.random.key(0)})
  assert class_logits.shape == distillation_logits.shape == (3, 5)
  assert not np.allclose(class_logits, distillation_logits)
  evaluated = model.apply(variables, images, train=False)
  np.testing.assert_allclose(evaluated,
                             (class_logits + distillation_logits) / 2,
                             rtol=1e-6, atol=1e-6)
  logits, maps = logits_and_attention(model, variables, images)
  np.testing.assert_array_equal(logits, evaluated)
  assert maps[0].shape == (3, 4, 18, 18)
  with pytest.raises(ValueError, match="distillation_token=True needs "
                     "classifier='token'.*got classifier='gap'"):
    VisionTransformer(num_classes=5, distillation_token=True,
                      classifier='gap', **SMALL)


def test_techniques_are_registry_overrides():
  model = create_model('ViT-Tiny-CIFAR_4', 10, posemb='sincos2d',
                       classifier='map', stochastic_depth_rate=0.1,
                       shifted_patches=True, locality_attention=True)
  assert (model.posemb, model.classifier, model.stochastic_depth_rate,
          model.shifted_patches, model.locality_attention) == (
              'sincos2d', 'map', 0.1, True, True)
  assert create_model('ViT-Tiny-CIFAR_4', 10,
                      distillation_token=True).distillation_token
