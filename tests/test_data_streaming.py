"""Streaming input: host-side batches from any position, sharded."""

import json
import os
import pathlib
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests.helpers import prepare_tfds_array_record
from tests.helpers import random_cifar
from tests.helpers import tiny_config
from vit_jax.data import input as input_lib
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.data import streaming
from vit_jax.runtime import sharding
from vit_jax.training import train


def _array_input(train_split, test_split, **overrides):
  config = tiny_config(
      '', **{
          'seed': 3, 'batch_size': 8, 'eval_batch_size': 8, 'augment': False,
          'input_pipeline': 'streaming', 'input_workers': 0, **overrides
      })
  dataset = sources.Dataset(sources.ArraySource(*train_split),
                            sources.ArraySource(*test_split), 10)
  return streaming.StreamingInput(dataset, config, sharding.make_mesh())


def test_train_batches_follow_the_seeded_shuffle_from_any_position():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(5, 10, 2)
  inputs = _array_input(train_split, test_split)  # 2 batches an epoch
  batches = inputs.train_batches({'epoch': 2, 'batch': 1})
  expected = [
      input_lib.epoch_batches(3, 2, 20, 8)[1],
      *input_lib.epoch_batches(3, 3, 20, 8)
  ]
  taken = [next(batches) for _ in expected]
  batches.close()
  for (images, labels), indices in zip(taken, expected):
    np.testing.assert_array_equal(images, train_split[0][indices])
    np.testing.assert_array_equal(labels, train_split[1][indices])
  # On the devices, a block of them: each step's batch split over them.
  images, labels = inputs.stack(taken[:2], 3)
  assert images.sharding.spec == jax.sharding.PartitionSpec(
      None, ('data', 'fsdp'))
  np.testing.assert_array_equal(images[:2], [i for i, _ in taken[:2]])
  np.testing.assert_array_equal(labels[2], 0)  # a row no step reads


def test_an_augmented_batch_is_the_same_from_any_starting_position():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(5, 10, 2)
  inputs = _array_input(train_split, test_split, augment=True, image_size=16)
  from_start = inputs.train_batches(inputs.position(0))
  for _ in range(3):
    third = next(from_start)
  resumed = next(inputs.train_batches(inputs.position(2)))
  for a, b in zip(third, resumed):
    np.testing.assert_array_equal(a, b)


def test_worker_processes_load_the_batches_threads_load():
  train_split, test_split = random_cifar(40, 10, 1), random_cifar(13, 10, 2)
  outputs = {}
  for workers in (0, 2):
    inputs = _array_input(train_split, test_split, augment=True, image_size=16,
                          input_workers=workers)
    train = inputs.train_batches(inputs.position(3))  # 5 batches an epoch
    outputs[workers] = ([next(train) for _ in range(4)] +
                        [batch for batch, _ in inputs.eval_batches()])
    train.close()
  assert inputs.workers == 2
  for threads_batch, workers_batch in zip(outputs[0], outputs[2]):
    for a, b in zip(threads_batch, workers_batch):
      np.testing.assert_array_equal(a, b)


def test_eval_batches_cover_the_test_set_once_resized():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(13, 10, 2)
  inputs = _array_input(train_split, test_split, image_size=16)
  seen = []
  for (images, labels), mask in inputs.eval_batches():
    assert images.shape == (8, 16, 16, 3)
    seen += [int(label) for label, m in zip(labels, mask) if m]
  assert seen == test_split[1].tolist()
  first = next(iter(inputs.eval_batches()))[0][0][0]
  np.testing.assert_array_equal(first, preprocess.resize(test_split[0][0], 16))


def test_tfds_array_record_streams_variable_size_images(tmp_path):
  name = prepare_tfds_array_record(tmp_path, 'VitJaxStreamedVariableSizeTest',
                                   7, 4, lambda i: (20 + 3 * i, 30 - 2 * i, 3))
  config = tiny_config(tmp_path, dataset=name, batch_size=4, eval_batch_size=4,
                       image_size=16, input_pipeline='streaming')
  inputs = streaming.StreamingInput(sources.open_dataset(config), config,
                                    sharding.make_mesh(), workers=0)
  images, _ = next(inputs.train_batches(inputs.position(0)))
  assert images.shape == (4, 16, 16, 3)


def test_streaming_trains_as_the_on_device_input(cifar10_binary, tmp_path):
  # Without augmentation and at the stored size both feed the same batches.
  data_dir, _ = cifar10_binary
  records = {}
  for pipeline in ('on_device', 'streaming'):
    config = tiny_config(data_dir, num_epochs=1, augment=False,
                         input_pipeline=pipeline, input_workers=0)
    train.train_and_evaluate(config, str(tmp_path / pipeline))
    lines = (tmp_path / pipeline / 'metrics.jsonl').read_text().splitlines()
    records[pipeline] = json.loads(lines[-1])
  for metric in ('train_loss', 'test_loss'):
    assert records['streaming'][metric] == pytest.approx(
        records['on_device'][metric], abs=1e-5)
  assert records['streaming']['test_examples'] == 37


_WORKERS_SCRIPT = '''
import sys, time
sys.path.insert(0, {root!r})
from tests.helpers import random_cifar, tiny_config
from vit_jax.data import sources, streaming
from vit_jax.runtime import sharding

if __name__ == '__main__':
  config = tiny_config('', batch_size=8, input_pipeline='streaming',
                       input_workers=2)
  dataset = sources.Dataset(sources.ArraySource(*random_cifar(40, 10, 1)),
                            sources.ArraySource(*random_cifar(8, 10, 2)), 10)
  inputs = streaming.StreamingInput(dataset, config, sharding.make_mesh())
  batches = inputs.train_batches(inputs.position(0))
  next(batches)
  print('loaded', flush=True)
  time.sleep(600)
'''


def _grain_workers(parent: int) -> list[int]:
  workers = []
  for stat in pathlib.Path('/proc').glob('[0-9]*/stat'):
    try:
      ppid = int(stat.read_text().rsplit(')', 1)[1].split()[1])
      cmdline = (stat.parent / 'cmdline').read_bytes()
    except (FileNotFoundError, ProcessLookupError):
      continue
    if ppid == parent and b'spawn_main' in cmdline:
      workers.append(int(stat.parent.name))
  return workers


def _running(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


@pytest.mark.skipif(not os.path.isdir('/proc'), reason='reads /proc')
def test_worker_processes_exit_when_the_training_process_is_killed(tmp_path):
  script = tmp_path / 'load.py'
  script.write_text(
      _WORKERS_SCRIPT.format(root=str(pathlib.Path(__file__).parent.parent)))
  process = subprocess.Popen([sys.executable, str(script)],
                             stdout=subprocess.PIPE, text=True)
  try:
    assert process.stdout.readline() == 'loaded\n'
    workers = _grain_workers(process.pid)
  finally:
    process.kill()
    process.wait()
  assert len(workers) == 2 and all(map(_running, workers))
  deadline = time.monotonic() + 10
  while any(map(_running, workers)) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not any(map(_running, workers))
