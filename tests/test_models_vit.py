"""The ViT against the official linen model's parameter tree and forward pass."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import cifar_small
from tests import helpers
from tests.test_formats_params import positions
from vit_jax.errors import ConfigError
from vit_jax.formats import params as params_lib
from vit_jax.models import attention_weights
from vit_jax.models import create_model
from vit_jax.models import registry
from vit_jax.models.vit import logits_and_attention


def official_param_shapes(*, patch, hidden, layers, heads, mlp, tokens,
                          num_classes, classifier='token',
                          representation_size=None):
  """Path -> shape of google-research/vision_transformer's linen ViT."""

  dense = lambda fan_in, out: {'kernel': (fan_in, out), 'bias': (out,)}
  norm = {'scale': (hidden,), 'bias': (hidden,)}
  head_dim = hidden // heads
  projection = {'kernel': (hidden, heads, head_dim), 'bias': (heads, head_dim)}
  attention = dict.fromkeys(('query', 'key', 'value'), projection)
  attention['out'] = {'kernel': (heads, head_dim, hidden), 'bias': (hidden,)}
  block = dict(
      LayerNorm_0=norm, LayerNorm_1=norm,
      MultiHeadDotProductAttention_0=attention,
      MlpBlock_0=dict(Dense_0=dense(hidden, mlp), Dense_1=dense(mlp, hidden)))
  blocks = {f'encoderblock_{i}': block for i in range(layers)}
  tree = dict(
      embedding={'kernel': (patch, patch, 3, hidden), 'bias': (hidden,)},
      Transformer=dict(posembed_input={'pos_embedding': (1, tokens, hidden)},
                       encoder_norm=norm, **blocks),
      head=dense(representation_size or hidden, num_classes))
  if classifier == 'token':
    tree['cls'] = (1, 1, hidden)
  if representation_size:
    tree['pre_logits'] = dense(hidden, representation_size)
  return helpers.flat(tree)


def _layer_norm(x, p):
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * p['scale'] + p['bias']


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
    x = x + np.einsum('bqhe,hed->bqd', y,
                      att['out']['kernel']) + att['out']['bias']
    mlp = block['MlpBlock_0']
    y = _layer_norm(x, block['LayerNorm_1'])
    y = y @ mlp['Dense_0']['kernel'] + mlp['Dense_0']['bias']  # tanh GELU:
    y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    x = x + y @ mlp['Dense_1']['kernel'] + mlp['Dense_1']['bias']
    i += 1
  x = _layer_norm(x, t['encoder_norm'])
  x = x[:, 0] if classifier == 'token' else x.mean(1)
  if 'pre_logits' in p:
    x = np.tanh(x @ p['pre_logits']['kernel'] + p['pre_logits']['bias'])
  return x @ p['head']['kernel'] + p['head']['bias']


TECHNIQUES_OFF = dict(posemb='learned', stochastic_depth_rate=0.0,
                      shifted_patches=False, locality_attention=False,
                      mimetic_init=False, distillation_token=False,
                      attention='auto', classifier='token')


@pytest.mark.parametrize('classifier,representation_size', [('token', None),
                                                            ('gap', 24)])
def test_tree_and_logits_match_the_official_model(classifier,
                                                  representation_size):
  model = helpers.small_vit(classifier=classifier,
                            representation_size=representation_size)
  images = helpers.images()
  params = helpers.random_params(model, images, train=False)
  assert helpers.shapes(params) == official_param_shapes(
      patch=4, hidden=32, layers=2, heads=4, mlp=64,
      tokens=16 + (classifier == 'token'), num_classes=5, classifier=classifier,
      representation_size=representation_size)

  np.testing.assert_allclose(
      helpers.compiled(model.apply, {'params': params}, images, train=False),
      reference_logits(params, images, classifier=classifier), rtol=1e-4,
      atol=1e-4)


def test_initialization_follows_the_official_model_and_maps_are_probabilities():
  model, images = helpers.small_vit(7), helpers.images(batch=3)
  logits, variables = helpers.compiled(model.init_with_output,
                                       jax.random.key(0), images, train=False)
  assert logits.shape == (3, 7) and logits.dtype == jnp.float32
  params = variables['params']
  assert not np.any(params['cls']) and not np.any(params['head']['kernel'])
  assert 0.01 < float(np.std(positions(params))) < 0.03
  maps = jax.jit(functools.partial(attention_weights, model))(variables, images)
  assert len(maps) == helpers.SMALL['num_layers']
  for a in maps:
    assert a.shape == (3, helpers.SMALL['num_heads'], 17, 17) and np.all(a >= 0)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)
  with pytest.raises(TypeError, match='^SimpleCNN has no attention: pass a'):
    attention_weights(create_model('SimpleCNN', 7), variables, images)


def test_eval_is_deterministic_and_train_applies_dropout():
  model = helpers.small_vit(dropout_rate=0.3, attention_dropout_rate=0.3)
  images = helpers.images()
  variables = {'params': helpers.random_params(model, images, train=False)}
  apply = jax.jit(model.apply, static_argnames='train')
  run = lambda train, seed: apply(variables, images, train=train, rngs=dict(
      dropout=jax.random.key(seed)))
  np.testing.assert_array_equal(run(False, 1), run(False, 2))
  np.testing.assert_array_equal(run(False, 1),
                                apply(variables, images, train=False))
  assert not np.allclose(run(True, 1), run(True, 2))


def test_bfloat16_compute_with_float32_parameters():
  images = helpers.images(batch=4)
  f32, bf16 = helpers.small_vit(), helpers.small_vit(dtype=jnp.bfloat16)
  params = helpers.random_params(bf16, images, train=False)
  assert {a.dtype for a in jax.tree.leaves(params)} == {jnp.dtype('float32')}
  low, high, einsum = (helpers.compiled(m.apply, {'params': params}, images,
                                        train=False)
                       for m in (bf16, f32, bf16.clone(attention='einsum')))
  assert low.dtype == jnp.float32 and np.all(np.isfinite(low))
  np.testing.assert_allclose(low, high, atol=0.05 * np.abs(high).max())
  # 'auto' attention is einsum on this CPU, bit for bit: the XLA kernel
  # rounds differently in bfloat16.
  np.testing.assert_array_equal(low, einsum)


def test_invalid_configurations_and_image_sizes_are_clear_errors():
  # An image size of no whole patches: test_training_train's bad input.
  model = helpers.small_vit()
  params = helpers.random_params(model, helpers.images(size=8), train=False)
  with pytest.raises(ValueError,
                     match='position embedding was made for 5 tokens'):
    model.apply({'params': params}, helpers.images(size=16), train=False)
  with pytest.raises(ValueError, match=r"^scan='yes'; use True or False\.$"):
    helpers.small_vit(scan='yes')
  assert create_model('ViT-B_16', 10, remat='dots', scan=True).scan


@pytest.mark.parametrize(
    'fields,said',
    [(dict(num_heads=0), '^num_heads=0 must be positive'),
     (dict(num_layers=0), '^num_layers=0 must be positive'),
     (dict(mlp_dim=-1), '^mlp_dim=-1 must be positive'),
     (dict(dropout_rate=-0.1), r'^dropout_rate=-0.1 must be in \[0, 1\)'),
     (dict(attention_dropout_rate=1.0),
      r'^attention_dropout_rate=1.0 must be in \[0, 1\)'),
     (dict(stochastic_depth_rate=1.0), 'stochastic_depth_rate=1.0 must be in'),
     (dict(classifier='cls'), "classifier='cls'"),
     (dict(num_heads=5), 'not divisible by num_heads=5'),
     (dict(remat='ful'),
      r"^remat='ful'; use one of \('none', 'full', 'dots'\)\.$"),
     (dict(scan=True, stochastic_depth_rate=0.1),
      r'scan=True .* own drop-path rate \(stochastic_depth_rate=0.1\): set '
      r'scan=False or stochastic_depth_rate=0\.$'),
     (dict(distillation_token=True, classifier='gap'),
      "distillation_token=True needs classifier='token'.*got classifier='gap'"),
     (dict(attention='flash'), "attention='flash'; use one of"),
     (dict(attention='cudnn', attention_dropout_rate=0.1),
      "cannot drop attention probabilities.*use attention='einsum'"),
     *((dict(locality_attention=True, attention=fused),
        f"attention='{fused}' cannot mask .*use attention='einsum'")
       for fused in ('dot_product_attention', 'cudnn')),
     (dict(posemb='sincos2d', hidden_size=30, num_heads=3),
      "posemb='sincos2d' needs a hidden_size divisible by 4, got 30"),
     (dict(posemb='learn'), "posemb='learn'; use one of"),
     (dict(shifted_patches=True, resnet_stages=(1,),
           patch_size=2), 'cannot follow a ResNet stem'),
     (dict(shifted_patches=True, patch_size=1), 'patch_size=1 cannot give'),])
def test_fields_that_make_no_vit_are_one_line(fields, said):
  with pytest.raises(ValueError, match=said):
    helpers.small_vit(**fields)
  # And so they are from the command line's overrides, not a traceback.
  config = cifar_small.get_config('vit')
  config.model_overrides.update(fields)
  with pytest.raises(ConfigError,
                     match=said.replace('^', '^config.model_overrides: ')):
    registry.from_config(config, 10)


def test_distillation_token_has_two_heads_averaged():
  model = helpers.small_vit(distillation_token=True)
  images = helpers.images(batch=3)
  variables = helpers.compiled(model.init, jax.random.key(0), images,
                               train=False)
  shapes = helpers.shapes(variables['params'])
  assert shapes['dist'] == shapes['cls'] == (1, 1, 32)
  assert shapes['head_dist/kernel'] == (32, 5)
  assert shapes['Transformer/posembed_input/pos_embedding'] == (1, 18, 32)
  assert not np.any(variables['params']['head_dist']['kernel'])

  variables = {'params': helpers.randomized(variables['params'])}
  evaluated, out = helpers.compiled(model.apply, variables, images, train=False,
                                    return_out=True)
  class_logits, distillation_logits = (out['class_logits'],
                                       out['distillation_logits'])
  assert class_logits.shape == distillation_logits.shape == (3, 5)
  assert not np.allclose(class_logits, distillation_logits)
  np.testing.assert_allclose(evaluated,
                             (class_logits + distillation_logits) / 2,
                             rtol=1e-6, atol=1e-6)
  # One return type in training too: the average, the heads sown.
  trained = jax.eval_shape(
      functools.partial(model.apply, train=True,
                        rngs={'dropout': jax.random.key(0)}), variables, images)
  assert trained.shape == (3, 5)
  logits, maps = jax.jit(functools.partial(logits_and_attention,
                                           model))(variables, images)
  np.testing.assert_array_equal(logits, evaluated)
  assert maps[0].shape == (3, 4, 18, 18)


def test_techniques_are_registry_overrides_and_off_by_default():
  overrides = dict(posemb='sincos2d', classifier='map', shifted_patches=True,
                   stochastic_depth_rate=0.1, locality_attention=True,
                   attention='einsum', dtype=jnp.bfloat16,
                   dropout_rate=0.2)  # any other field too
  model = create_model('ViT-Tiny-CIFAR_4', 3, **overrides)
  assert {f: getattr(model, f) for f in overrides} == overrides
  model = helpers.small_vit()
  assert {f: getattr(model, f) for f in TECHNIQUES_OFF} == TECHNIQUES_OFF


# ------------------------------------------- remat and scan (large models) --


@functools.partial(jax.jit, static_argnums=0)
def _logits_and_grads(model, params, images):
  """Eval logits and a training loss's gradient (no dropout: rngs moot)."""
  loss = lambda p: jnp.sum(model.apply({'params': p}, images, train=True)**2)
  return model.apply({'params': params}, images,
                     train=False), jax.grad(loss)(params)


def _assert_close_trees(got, want):
  # Some gradients are zero but for rounding (a key bias shifts every logit
  # of a query alike): tolerances against the largest value, not each one.
  scale = max(float(np.abs(a).max()) for a in jax.tree.leaves(want))
  helpers.assert_trees_close(got, want, rtol=1e-5, atol=1e-5 * scale)


# 'full' takes 13 s, 'dots' runs the same check in the suite.
@pytest.mark.parametrize('remat',
                         [pytest.param('full', marks=pytest.mark.slow), 'dots'])
def test_remat_keeps_the_tree_logits_and_gradients(remat):
  images, model = helpers.images(size=8), helpers.small_vit(num_layers=1)
  rematted = model.clone(remat=remat)
  params, same = (helpers.compiled(m.init, jax.random.key(0), images,
                                   train=False)['params']
                  for m in (model, rematted))
  # Same names, so the official checkpoints load as they are; same
  # initialization too.
  jax.tree.map(np.testing.assert_array_equal, params, same)
  params = helpers.randomized(params)
  _assert_close_trees(_logits_and_grads(rematted, params, images),
                      _logits_and_grads(model, params, images))


@pytest.mark.parametrize('remat', ['none', 'full'])
def test_scan_equals_the_unscanned_model_on_stacked_parameters(remat):
  images, model = helpers.images(size=8), helpers.small_vit()
  scanned = model.clone(scan=True, remat=remat)
  # The tree of the blocks stacked, layer by layer along the first axis
  # (test_formats_params: stack_blocks).
  params = helpers.random_params(model, images, train=False)
  stacked = params_lib.stack_blocks(params)
  assert helpers.shapes(stacked) == helpers.param_shapes(scanned, images)
  logits, grads = _logits_and_grads(scanned, stacked, images)
  _assert_close_trees((logits, params_lib.unstack_blocks(grads)),
                      _logits_and_grads(model, params, images))
  # Every layer's attention map, as the unscanned model gives them.
  got, want = (jax.jit(functools.partial(logits_and_attention,
                                         m))({'params': p}, images)
               for m, p in ((scanned, stacked), (model, params)))
  assert len(got[1]) == helpers.SMALL['num_layers']
  _assert_close_trees(got, want)
