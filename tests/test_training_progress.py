"""The progress line and the throughput the loop reports."""

import time

from vit_jax.training import plan
from vit_jax.training import progress

_PLAN = plan.StepPlan(steps_per_epoch=10, total_steps=100, warmup_steps=0,
                      log_every=5, eval_every=10, checkpoint_every=10)


def test_the_progress_line_says_step_losses_speed_and_eta():
  record = {
      'step': 20, 'epoch': 2.0, 'train_loss': 1.23456, 'train_accuracy': 0.5,
      'test_loss': 1.5, 'test_accuracy': 0.25, 'learning_rate': 1e-3,
      'images_per_second': 1234.4, 'flops_per_second': 2.5e12,
      'peak_share': 0.31
  }
  assert progress.progress_line(record, _PLAN, eta_seconds=3725) == (
      'step 20/100 (epoch 2)  train loss 1.2346 acc 50.00%  test loss 1.5000 '
      'acc 25.00%  lr 1.00e-03  1234 img/s  2.50 TFLOP/s (31% of peak)  '
      'ETA 1:02:05')
  assert progress.progress_line(
      {'step': 30, 'epoch': 3.0, 'test_loss': 1.0, 'test_accuracy': 0.5}, _PLAN,
      65) == ('step 30/100 (epoch 3)  test loss 1.0000 acc 50.00%  ETA 1:05')


def test_throughput_leaves_out_the_time_excluded():
  throughput = progress.Throughput(start_step=0, batch_size=10,
                                   train_flops_per_image=1e6, peak=None)
  with throughput.excluded():
    time.sleep(0.5)
  measured = throughput.interval(step=2)
  assert measured['images_per_second'] > 20 / 0.05  # the sleep left out
  assert measured['flops_per_second'] == measured['images_per_second'] * 1e6
  assert 'peak_share' not in measured
