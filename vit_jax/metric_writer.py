"""Logged metrics to `metrics.jsonl` and TensorBoard event files.

TensorBoard files are written with tensorboardX, which needs no TensorFlow.
Only process 0 writes.
"""

import json
import pathlib

import jax
from tensorboardX import SummaryWriter


class MetricWriter:
  """Writes one record per logged step; `history` is what a resumed run
  restored."""

  def __init__(self, workdir: pathlib.Path, history: list[dict]):
    self._enabled = jax.process_index() == 0
    if not self._enabled:
      return
    self._jsonl_path = workdir / 'metrics.jsonl'
    # The checkpoint's history is the truth: steps logged after the last
    # checkpoint of an interrupted run are trained again, so drop them.
    self._jsonl_path.write_text(''.join(json.dumps(r) + '\n' for r in history))
    self._tensorboard = SummaryWriter(str(workdir / 'tensorboard'))

  def write(self, record: dict):
    if not self._enabled:
      return
    with self._jsonl_path.open('a') as f:
      f.write(json.dumps(record) + '\n')
    for name, value in record.items():
      if name not in ('epoch', 'step'):
        self._tensorboard.add_scalar(name, value, global_step=record['step'])
    self._tensorboard.flush()

  def close(self):
    if self._enabled:
      self._tensorboard.close()
