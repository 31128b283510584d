"""Logged metrics to `metrics.jsonl` and TensorBoard event files (process 0)."""

import json
import math
import pathlib

import jax
from tensorboardX import SummaryWriter

# Record fields as TensorBoard tags. TensorBoard groups tags by what comes
# before '/' and sorts the groups by name, so the splits sit side by side
# under accuracy and loss, first, and the speed below. The others (epoch,
# step, seconds, phase_seconds, test_examples) are no curves; metrics.jsonl
# has them.
TENSORBOARD_TAGS = dict(
    train_accuracy='accuracy/train', test_accuracy='accuracy/test',
    validation_accuracy='accuracy/validation', train_loss='loss/train',
    test_loss='loss/test', validation_loss='loss/validation',
    learning_rate='optimizer/learning_rate',
    images_per_second='speed/images_per_second',
    flops_per_second='speed/flops_per_second', peak_share='speed/peak_share')


def _json_line(record: dict) -> str:
  finite = {
      k: None if isinstance(v, float) and not math.isfinite(v) else v
      for k, v in record.items()
  }
  return json.dumps(finite, allow_nan=False) + '\n'


# The checkpoint's history is the truth: a resumed run rewrites both from it.
class MetricWriter:
  """One record per logged step, after `history` (a resumed run's)."""

  def __init__(self, workdir: pathlib.Path, history: list[dict]):
    self._enabled = jax.process_index() == 0
    if not self._enabled:
      return
    self._jsonl_path = workdir / 'metrics.jsonl'
    self._jsonl_path.write_text(''.join(map(_json_line, history)))
    tensorboard_dir = workdir / 'tensorboard' / 'training'
    # Other runs (vit_jax.analyze's) sit beside this one and stay.
    for events in tensorboard_dir.glob('events.out.tfevents.*'):
      events.unlink()
    self._tensorboard = SummaryWriter(str(tensorboard_dir))
    for record in history:
      self._add_scalars(record)
    self._tensorboard.flush()

  def _add_scalars(self, record: dict):
    for name, value in record.items():
      if name in TENSORBOARD_TAGS:
        self._tensorboard.add_scalar(TENSORBOARD_TAGS[name], value,
                                     global_step=record['step'])

  def write(self, record: dict):
    if self._enabled:
      with self._jsonl_path.open('a') as f:
        f.write(_json_line(record))
      self._add_scalars(record)
      self._tensorboard.flush()

  def close(self):
    if self._enabled:
      self._tensorboard.close()
