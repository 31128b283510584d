"""metrics.jsonl and TensorBoard files."""

import json

import pytest

from tests import helpers
from vit_jax.training.metric_writer import MetricWriter


def test_writes_strict_json_lines_and_groups_tensorboard_tags(tmp_path):
  """One line per logged step, null if not finite; train and test together."""
  writer = MetricWriter(tmp_path, history=[])
  writer.write({'epoch': 1, 'step': 1, 'test_loss': float('nan')})
  record = dict(step=5, epoch=1.0, train_loss=2.0, train_accuracy=0.2,
                learning_rate=1e-3, images_per_second=float('inf'),
                flops_per_second=1e9, test_loss=2.1, test_accuracy=0.25,
                test_examples=37, seconds=3.0)
  writer.write(record)
  writer.close()
  lines = (tmp_path / 'metrics.jsonl').read_text().splitlines()
  assert [json.loads(line, parse_constant=pytest.fail)
          for line in lines] == [{'epoch': 1, 'step': 1, 'test_loss': None},
                                 {**record, 'images_per_second': None}]
  events = helpers.tensorboard_events(tmp_path)
  assert {v.tag for e in events for v in e.summary.value} == {
      'accuracy/train', 'accuracy/test', 'loss/train', 'loss/test',
      'optimizer/learning_rate', 'speed/images_per_second',
      'speed/flops_per_second'
  }


def test_a_resumed_run_rewrites_both_from_the_checkpointed_history(tmp_path):
  """Records trained again are dropped; other runs' event files stay."""
  writer = MetricWriter(tmp_path, history=[])
  for step in (10, 20, 30):
    writer.write({'step': step, 'train_loss': 1.0})
  writer.close()
  figures = tmp_path / 'tensorboard' / 'analysis' / 'events.out.tfevents.x'
  figures.parent.mkdir()
  figures.write_text('figures')
  # The run died after logging step 30 but before checkpointing it.
  writer = MetricWriter(tmp_path, history=[{'step': 10}, {'step': 20}])
  writer.write({'step': 30, 'again': True})
  writer.close()
  assert helpers.history(tmp_path) == [{'step': 10}, {'step': 20},
                                       {'step': 30, 'again': True}]
  events = list((tmp_path / 'tensorboard' / 'training').glob('events.out.*'))
  assert len(events) == 1 and events[0].stat().st_size > 0
  assert figures.read_text() == 'figures'
