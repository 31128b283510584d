"""The run in steps: epochs to steps, intervals an epoch, paced saves."""

from tests import helpers
from vit_jax.training import plan


def test_epochs_become_steps_and_intervals_default_to_an_epoch():
  assert plan.step_plan(helpers.tiny_config('', num_epochs=3, warmup_epochs=1),
                        7) == plan.StepPlan(7, 21, 7, 7, 7, 7)
  steps = plan.step_plan(
      helpers.tiny_config('', total_steps=100, warmup_steps=10,
                          log_every_steps=5, eval_every_steps=20,
                          checkpoint_every_steps=50), 7)
  assert (steps, steps.epoch(14)) == (plan.StepPlan(7, 100, 10, 5, 20, 50), 2.0)


def test_an_epochs_checkpoint_waits_its_seconds_one_set_in_steps_does_not():
  assert plan.checkpoint_min_seconds(helpers.tiny_config('')) == 30
  assert plan.checkpoint_min_seconds(
      helpers.tiny_config('', checkpoint_min_seconds=0)) == 0
  assert plan.checkpoint_min_seconds(
      helpers.tiny_config('', checkpoint_every_steps=50)) == 0
