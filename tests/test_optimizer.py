"""The learning-rate schedule."""

import numpy as np
import pytest

from tests.conftest import tiny_config
from vit_jax import config_schema
from vit_jax import optimizer


def _plan(config, steps_per_epoch):
  return config_schema.step_plan(config, steps_per_epoch)


def test_learning_rate_warms_up_then_decays_to_zero():
  config = tiny_config('', num_epochs=10, warmup_epochs=2)
  schedule = optimizer.create_learning_rate_schedule(config, _plan(config, 5))
  lrs = [float(schedule(step)) for step in range(51)]
  assert lrs[0] == 0.0
  assert lrs[10] == pytest.approx(config.learning_rate)
  assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))
  assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
  assert lrs[50] == pytest.approx(0.0, abs=1e-12)


def test_linear_decay_after_a_warmup_counted_in_steps():
  config = tiny_config('', num_epochs=10, warmup_epochs=2, warmup_steps=4,
                       lr_decay='linear')
  schedule = optimizer.create_learning_rate_schedule(config, _plan(config, 5))
  peak = config.learning_rate
  np.testing.assert_allclose(
      [float(schedule(step)) for step in (0, 2, 4, 27, 50)],
      [0.0, peak / 2, peak, peak / 2, 0.0], rtol=1e-6, atol=1e-12)
