"""metrics.jsonl and TensorBoard files."""

import json

from vit_jax.training.metric_writer import MetricWriter


def _records(path):
  return [json.loads(line) for line in path.read_text().splitlines()]


def test_writes_one_json_line_per_logged_step_and_event_files(tmp_path):
  writer = MetricWriter(tmp_path, history=[])
  writer.write({'epoch': 1, 'step': 10, 'train_loss': 2.0})
  writer.write({'epoch': 2, 'step': 20, 'train_loss': 1.5})
  writer.close()
  assert _records(tmp_path / 'metrics.jsonl') == [{
      'epoch': 1, 'step': 10, 'train_loss': 2.0
  }, {'epoch': 2, 'step': 20, 'train_loss': 1.5}]
  events = list(
      (tmp_path / 'tensorboard' / 'training').glob('events.out.tfevents.*'))
  assert events and events[0].stat().st_size > 0


def test_a_resumed_run_keeps_only_the_checkpointed_history(tmp_path):
  writer = MetricWriter(tmp_path, history=[])
  for step in (10, 20, 30):
    writer.write({'step': step})
  writer.close()
  # The run died after logging step 30 but before checkpointing it.
  writer = MetricWriter(tmp_path, history=[{'step': 10}, {'step': 20}])
  writer.write({'step': 30, 'again': True})
  writer.close()
  assert _records(tmp_path / 'metrics.jsonl') == [{'step': 10}, {'step': 20},
                                                  {'step': 30, 'again': True}]


def test_non_finite_values_are_written_as_null(tmp_path):
  writer = MetricWriter(tmp_path, history=[])
  writer.write({
      'step': 1, 'test_loss': float('nan'), 'images_per_second': float('inf')
  })
  writer.close()
  line = (tmp_path / 'metrics.jsonl').read_text()
  assert json.loads(line, parse_constant=_refuse) == {
      'step': 1, 'test_loss': None, 'images_per_second': None
  }


def _refuse(constant):
  raise AssertionError(f'{constant} is not strict JSON')


def test_a_resumed_run_rewrites_its_event_files_and_keeps_subdirectories(
    tmp_path):
  MetricWriter(tmp_path, history=[]).close()
  (tmp_path / 'tensorboard' / 'analysis').mkdir()
  (tmp_path / 'tensorboard' / 'analysis' /
   'events.out.tfevents.x').write_text('figures')
  writer = MetricWriter(tmp_path, history=[{'step': 10, 'train_loss': 1.0}])
  writer.close()
  assert len(list(
      (tmp_path / 'tensorboard' / 'training').glob('events.out.*'))) == 1
  assert (tmp_path / 'tensorboard' / 'analysis' /
          'events.out.tfevents.x').read_text() == 'figures'


def test_tensorboard_groups_train_and_test_and_draws_no_bookkeeping(tmp_path):
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  writer = MetricWriter(tmp_path, history=[])
  writer.write({
      'step': 5, 'epoch': 1.0, 'train_loss': 2.0, 'train_accuracy': 0.2,
      'learning_rate': 1e-3, 'images_per_second': 100.0,
      'flops_per_second': 1e9, 'test_loss': 2.1, 'test_accuracy': 0.25,
      'test_examples': 37, 'seconds': 3.0
  })
  writer.close()
  tags = set()
  for path in (tmp_path / 'tensorboard' / 'training').glob('events.out.*'):
    data = path.read_bytes()
    while data:
      length = int.from_bytes(data[:8], 'little')
      event = event_pb2.Event.FromString(data[12:12 + length])
      tags.update(value.tag for value in event.summary.value)
      data = data[12 + length + 4:]
  assert tags == {
      'accuracy/train', 'accuracy/test', 'loss/train', 'loss/test',
      'optimizer/learning_rate', 'speed/images_per_second',
      'speed/flops_per_second'
  }
