"""The progress line and the throughput the loop reports."""

import re
import time

import pytest

from vit_jax.training import plan
from vit_jax.training import progress

_PLAN = plan.StepPlan(steps_per_epoch=10, total_steps=100, warmup_steps=0,
                      log_every=5, eval_every=10, checkpoint_every=10)


def test_the_progress_line_says_step_losses_speed_and_eta():
  record = dict(step=20, epoch=2.0, train_loss=1.23456, train_accuracy=0.5,
                test_loss=1.5, test_accuracy=0.25, learning_rate=1e-3,
                images_per_second=1234.4, flops_per_second=2.5e12,
                peak_share=0.31)
  assert progress.progress_line(record, _PLAN, eta_seconds=3725) == (
      'step 20/100 (epoch 2)  train loss 1.2346 acc 50.00%  test loss 1.5000 '
      'acc 25.00%  lr 1.00e-03  1234 img/s  2.50 TFLOP/s (31% of peak)  '
      'ETA 1:02:05')
  assert progress.progress_line(
      {'step': 30, 'epoch': 3.0, 'test_loss': 1.0, 'test_accuracy': 0.5}, _PLAN,
      65) == ('step 30/100 (epoch 3)  test loss 1.0000 acc 50.00%  ETA 1:05')


def test_throughput_leaves_out_what_is_not_training_and_times_each_phase():
  throughput = progress.Throughput(start_step=0, batch_size=10,
                                   train_flops_per_image=1e6, peak=None)
  for phase, seconds in (('evaluation', 0.5), ('steps', 0.1)):
    with throughput.timed(phase):
      time.sleep(seconds)
  measured = throughput.interval(step=2)
  assert 20 / 0.4 < measured['images_per_second'] < 20 / 0.1  # sleeps out
  assert measured['flops_per_second'] == measured['images_per_second'] * 1e6
  assert 'peak_share' not in measured
  timed = throughput.since_last_record()
  phases = timed['phase_seconds']
  assert list(phases) == ['evaluation', 'steps', 'other']
  assert phases['evaluation'] >= 0.5 and 0.1 <= phases['steps'] < 0.5
  assert sum(phases.values()) == pytest.approx(timed['seconds'], abs=1e-3)
  assert throughput.since_last_record()['phase_seconds'].keys() == {'other'}


def test_the_startup_clock_times_each_phase_from_the_process_start():
  clock = progress.StartupClock()
  time.sleep(0.1)
  clock.lap('input')
  assert clock.phases['imports'] > 0  # this process began before the test
  assert 0.1 <= clock.phases['input'] < 1
  assert clock.line().startswith('Started in ')
  assert re.search(r', input \d\.\d s$', clock.line())
