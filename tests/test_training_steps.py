"""The compiled train and eval steps."""

import functools
import json

import jax
import numpy as np
import optax
import pytest

from configs import cifar_small
from tests import helpers
from vit_jax import models
from vit_jax.data import mixing
from vit_jax.data import on_device
from vit_jax.data import sources
from vit_jax.objectives import losses
from vit_jax.runtime import sharding
from vit_jax.training import optimizer
from vit_jax.training import steps


def one_device_mesh():
  # The run's axes, so that the initializer is the runs' program (cached).
  return jax.make_mesh((1, 1), ('data', 'fsdp'), devices=jax.devices()[:1],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)


def one_device_train_step(config, images, labels,
                          objective=losses.classification):
  """(jitted train step, initial state, input) of `config` on one device."""
  mesh = one_device_mesh()
  split = sources.ArraySource(images, labels)
  inputs = on_device.OnDeviceInput(sources.Dataset(split, split, 10), config,
                                   mesh)
  model = models.from_config(config, num_classes=10)
  tx = optimizer.create_optimizer(config, lambda step: 1e-3)
  state = steps.initial_state(jax.random.key(0), model, tx, 32, mesh,
                              config.ema_decay)
  step = jax.jit(steps.make_train_step(config, inputs, objective))
  sums = steps.zero_sums(sharding.replicated(mesh))
  return functools.partial(step, sums=sums,
                           data=inputs.train_data), state, inputs


def _averaged_config(**overrides):
  return helpers.tiny_config('', augment=False, ema_decay=0.5,
                             model_fields=dict(dropout_rate=0.0), **overrides)


@pytest.fixture(scope='module')
def averaged_step():
  """One step of 16 images, whole, with a moving average of decay 0.5."""
  return one_device_train_step(_averaged_config(),
                               *helpers.random_cifar(16, 10, seed=0))


def test_the_moving_average_follows_the_parameters(averaged_step):
  # What evaluates it: test_training_evaluation's moving-average run.
  step, state, _ = averaged_step
  jax.tree.map(np.testing.assert_array_equal, state.ema_params, state.params)
  expected = state.params
  for t in range(1, 4):
    state, _ = step(state, batch=np.arange(16, dtype=np.int32),
                    key=jax.random.key(t))
    # TensorFlow's warm-up: min(decay, (1 + t) / (10 + t)) after step t.
    decay = min(0.5, (1 + t) / (10 + t))
    expected = jax.tree.map(lambda e, p, d=decay: d * e + (1 - d) * p, expected,
                            state.params)
  helpers.assert_trees_close(state.ema_params, expected, atol=1e-6)


def test_gradient_accumulation_gives_the_same_step(averaged_step):
  # One step on 16 images, whole or as 4 micro-batches of 4.
  step, state, _ = averaged_step
  accumulated, _, _ = one_device_train_step(
      _averaged_config(grad_accumulation_steps=4),
      *helpers.random_cifar(16, 10, seed=0))
  batch, key = np.arange(16, dtype=np.int32), jax.random.key(1)
  state_1, metrics_1 = step(state, batch=batch, key=key)
  state_4, metrics_4 = accumulated(state, batch=batch, key=key)
  for name in ('loss', 'correct', 'count'):
    np.testing.assert_allclose(metrics_4[name], metrics_1[name], rtol=1e-5)
  helpers.assert_trees_close(state_1, state_4, atol=1e-6)


@pytest.mark.slow  # 8 s; the model's remat test stays in the suite
def test_a_rematerialized_step_is_the_same_step_keeping_less():
  """Dropout masks included; on a CPU, compiler options keep jax's barriers."""
  images, labels = helpers.random_cifar(16, 10, seed=0)
  batch, key = np.arange(16, dtype=np.int32), jax.random.key(1)
  results = {}
  for remat in ('none', 'full'):
    config = helpers.tiny_config(  # dropout 0.1
        '', model_fields=dict(num_layers=2, remat=remat))
    step, state, _ = one_device_train_step(config, images, labels)
    args = dict(state=state, batch=batch, key=key, **step.keywords)
    train = step.func.lower(**args).compile(steps.compiler_options(config))
    state, sums = train(**args)
    results[remat] = (state.params, float(sums['loss']),
                      train.memory_analysis().temp_size_in_bytes,
                      steps.compiler_options(config))
  plain, plain_loss, plain_temp, plain_options = results['none']
  rematted, loss, temp, options = results['full']
  assert loss == pytest.approx(plain_loss, rel=1e-6)
  helpers.assert_trees_close(rematted, plain, atol=1e-6)
  assert plain_options is None
  assert options == {'xla_disable_hlo_passes': 'cse_barrier_expander'}
  assert temp < 0.8 * plain_temp


def test_mixup_and_cutmix_train_on_mixed_targets_and_count_own_labels():
  # The step's loss at the initial parameters equals the cross-entropy of
  # the model on the mixed images against `mixing.mix`'s targets, drawn
  # with the step's own key; the correct count uses each image's label.
  images, labels = helpers.random_cifar(16, 10, seed=0)
  config = helpers.tiny_config('', mixup_alpha=0.8, cutmix_alpha=1.0,
                               model_fields=dict(dropout_rate=0.0))
  step, state, inputs = one_device_train_step(config, images, labels)
  batch, key = np.arange(16, dtype=np.int32), jax.random.key(1)
  _, metrics = step(state, batch=batch, key=key)

  @jax.jit  # one program, not one per operation
  def expected_step(data, params):
    step_key = jax.random.fold_in(key, 0)
    augment_key, _ = jax.random.split(step_key)
    x, y = inputs.model_inputs(data, batch, augment_key)
    mixed, targets = mixing.mix(
        jax.random.fold_in(step_key, 2), x,
        losses.soft_targets(y, 10, config.label_smoothing), mixup_alpha=0.8,
        cutmix_alpha=1.0)
    logits = state.apply_fn({'params': params}, mixed, train=False)
    return x, y, mixed, logits, optax.softmax_cross_entropy(logits,
                                                            targets).sum()

  x, y, mixed, logits, expected = expected_step(inputs.train_data, state.params)
  assert not np.allclose(mixed, x)
  np.testing.assert_allclose(metrics['loss'], expected, rtol=1e-5)
  assert metrics['correct'] == np.sum(np.argmax(logits, -1) == y)


@pytest.mark.slow  # 14 s
def test_bfloat16_training_stays_close_to_float32():
  # Three train steps of the tiny ViT from the same start, on the same batches.
  images, labels = helpers.random_cifar(48, 10, seed=0)
  losses = {}
  for dtype in ('float32', 'bfloat16'):
    step, state, _ = one_device_train_step(helpers.tiny_config('', dtype=dtype),
                                           images, labels)
    losses[dtype] = []
    for i in range(3):
      state, metrics = step(
          state, batch=np.arange(16 * i, 16 * (i + 1), dtype=np.int32),
          key=jax.random.key(1))
      losses[dtype].append(float(metrics['loss'] / metrics['count']))
    # Parameters and optimizer state stay float32.
    assert ({leaf.dtype for leaf in jax.tree.leaves(state.params)}, {
        leaf.dtype for leaf in jax.tree.leaves(state.opt_state) if leaf.ndim
    }) == ({np.dtype('float32')},) * 2
  np.testing.assert_allclose(losses['bfloat16'], losses['float32'], rtol=0.02)


def _fsdp_runs() -> dict:
  """What two train steps leave, the parameters replicated (1) or not (8)."""
  images, labels = helpers.random_cifar(32, 10, seed=0)
  split = sources.ArraySource(images, labels)
  results = {}
  for fsdp in (1, 8):
    config = cifar_small.get_config('vit')  # ViT-Tiny-CIFAR_4, dropout 0.1
    config.update(dict(batch_size=16, eval_batch_size=16, fsdp=fsdp))
    config.model_overrides.num_layers = 1
    mesh = sharding.make_mesh(config.fsdp)
    inputs = on_device.OnDeviceInput(sources.Dataset(split, split, 10), config,
                                     mesh)
    model = models.from_config(config, 10)
    tx = optimizer.create_optimizer(config, lambda step: 1e-3)
    state = steps.initial_state(jax.random.key(0), model, tx, 32, mesh)
    compiled = steps.compile_steps(config, inputs, state, jax.random.key(1),
                                   evaluate=False)
    sums = steps.zero_sums(sharding.replicated(mesh))
    for i in range(2):
      stacked = inputs.stack([np.arange(16 * i, 16 * (i + 1), dtype=np.int32)],
                             compiled.steps_per_dispatch)
      state, sums, _ = compiled.train(state, sums, inputs.train_data, stacked,
                                      1, jax.random.key(1))
    leaves = jax.tree.leaves(state.params) + jax.tree.leaves(state.opt_state)
    results[fsdp] = dict(
        params=[np.asarray(x).tolist() for x in jax.tree.leaves(state.params)
               ], loss=float(sums['loss'] / sums['count']),
        sharded=sum(not x.sharding.is_fully_replicated for x in leaves),
        shard_bytes=sum(x.addressable_shards[0].data.nbytes for x in leaves),
        argument_bytes=compiled.train.memory_analysis().argument_size_in_bytes)
  return results


@pytest.mark.slow  # 27 s
def test_fsdp_step_equals_the_data_parallel_step_on_8_devices(tmp_path):
  # The study's ViT cut to 1 block, two train steps from the same start on 8
  # host devices: parameters replicated, then split over an fsdp axis of 8.
  out = helpers.run_on_host_devices(
      'import json\nfrom tests.test_training_steps import _fsdp_runs\n'
      'print(json.dumps(_fsdp_runs()))', 8, cwd=tmp_path)
  results = json.loads(out.splitlines()[-1])
  replicated, fsdp = results['1'], results['8']
  assert replicated['sharded'] == 0
  assert fsdp['sharded'] == 3 * 6  # the block's 6 kernels; mu and nu
  assert fsdp['loss'] == pytest.approx(replicated['loss'], abs=1e-6)
  for a, b in zip(fsdp['params'], replicated['params']):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
  # What one device holds of the state, and what XLA says the step takes in.
  assert fsdp['shard_bytes'] < replicated['shard_bytes'] / 4
  assert fsdp['argument_bytes'] < replicated['argument_bytes'] / 4


def _print_initial_states():
  """Checks each state's shapes and layout against `steps.state_shapes`."""
  for fsdp, mimetic in ((1, False), (1, True), (4, True)):
    config = helpers.tiny_config('', fsdp=fsdp)
    model = models.from_config(config, 10).clone(mimetic_init=mimetic)
    tx = optimizer.create_optimizer(config, lambda step: 1e-3)
    mesh = sharding.make_mesh(config.fsdp)
    state, shapes = (jax.tree.map(lambda a: (a.shape, a.dtype, a.sharding),
                                  made(jax.random.key(0), model, tx, 32, mesh))
                     for made in (steps.initial_state, steps.state_shapes))
    assert state == shapes
    print('initialized with fsdp', fsdp, 'mimetic' if mimetic else 'plain')


def test_state_shapes_are_the_initial_state_a_mimetic_one_too():
  """On 4 host devices, laid out as the mesh says, replicated or over fsdp."""
  out = helpers.run_on_host_devices(
      'from tests.test_training_steps import _print_initial_states\n'
      '_print_initial_states()', 4, timeout=240)
  assert out.splitlines()[-3:] == [
      'initialized with fsdp 1 plain', 'initialized with fsdp 1 mimetic',
      'initialized with fsdp 4 mimetic'
  ]
