"""The learning-rate schedule and the optimizer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from vit_jax.training import optimizer
from vit_jax.training import plan


def _plan(config, steps_per_epoch):
  return plan.step_plan(config, steps_per_epoch)


def test_learning_rate_warms_up_then_decays_to_zero():
  config = helpers.tiny_config('', num_epochs=10, warmup_epochs=2)
  schedule = optimizer.create_learning_rate_schedule(config, _plan(config, 5))
  lrs = [float(schedule(step)) for step in range(51)]
  assert lrs[0] == 0.0 and lrs[10] == pytest.approx(config.learning_rate)
  assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))
  assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
  assert lrs[50] == pytest.approx(0.0, abs=1e-12)


def test_linear_decay_after_a_warmup_counted_in_steps():
  config = helpers.tiny_config('', num_epochs=10, warmup_epochs=2,
                               warmup_steps=4, lr_decay='linear')
  schedule = optimizer.create_learning_rate_schedule(config, _plan(config, 5))
  peak = config.learning_rate
  np.testing.assert_allclose(
      [float(schedule(step)) for step in (0, 2, 4, 27, 50)],
      [0.0, peak / 2, peak, peak / 2, 0.0], rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize('optimizer_name', ['adamw', 'sgd'])
@pytest.mark.parametrize('decay_on,decayed',
                         [('all', {'kernel', 'bias', 'scale', 'pos_embedding'}),
                          ('kernels', {'kernel'}),])
def test_weight_decay_applies_to_the_parameters_named(optimizer_name, decay_on,
                                                      decayed):
  """With zero gradients, a step moves exactly the decayed parameters."""
  config = helpers.tiny_config('', optimizer=optimizer_name, weight_decay=0.5,
                               weight_decay_on=decay_on)
  params = dict(Dense_0=dict(kernel=jnp.ones([2, 3]), bias=jnp.ones(3)),
                LayerNorm_0=dict(scale=jnp.ones(3)),
                posembed_input=dict(pos_embedding=jnp.ones((1, 4, 3))))
  tx = optimizer.create_optimizer(config, lambda step: 0.1)
  updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params),
                         params)
  assert set(path[-1].key
             for path, update in jax.tree_util.tree_leaves_with_path(updates)
             if np.any(np.asarray(update) != 0)) == decayed


def test_decay_on_every_parameter_keeps_the_optimizer_state_of_old_runs():
  config = helpers.tiny_config('', weight_decay=0.05)
  params = {'Dense_0': {'kernel': jnp.ones((2, 3))}}
  state = optimizer.create_optimizer(config, lambda step: 0.1).init(params)
  assert 'Masked' not in repr(jax.tree.structure(state))
