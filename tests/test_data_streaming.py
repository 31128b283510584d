"""Streaming input: host-side batches from any position, sharded."""

import hashlib
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import helpers
from vit_jax import data
from vit_jax.data import input as input_lib
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.data import streaming
from vit_jax.runtime import sharding

# The test split of every streaming input here: 13 images, 2 batches of 8.
TEST_SPLIT = helpers.random_cifar(13, 10, 2)


def _array_input(train_split, **overrides):
  config = helpers.tiny_config('', seed=3, batch_size=8, eval_batch_size=8,
                               augment=False, input_pipeline='streaming',
                               input_workers=0)
  config.update(overrides)
  dataset = sources.Dataset(sources.ArraySource(*train_split),
                            sources.ArraySource(*TEST_SPLIT), 10)
  return streaming.StreamingInput(dataset, config, sharding.make_mesh())


def test_batches_follow_the_seeded_shuffle_from_any_position():
  train_split = helpers.random_cifar(20, 10, 1)
  inputs = _array_input(train_split)  # 2 batches an epoch
  batches = inputs.train_batches({'epoch': 2, 'batch': 1})
  epochs = [input_lib.epoch_batches(3, epoch, 20, 8) for epoch in (2, 3)]
  expected = np.concatenate(epochs)[1:]  # from epoch 2's second batch on
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

  # Augmented, a batch is the same from any starting position.
  inputs = _array_input(train_split, augment=True, image_size=16)
  from_start = inputs.train_batches(inputs.position(0))
  for _ in range(3):
    third = next(from_start)
  for a, b in zip(third, next(inputs.train_batches(inputs.position(2)))):
    np.testing.assert_array_equal(a, b)

  # The eval batches cover the test set once, resized.
  seen = []
  for (images, labels), mask in inputs.eval_batches('test'):
    assert images.shape == (8, 16, 16, 3)
    seen += [int(label) for label, m in zip(labels, mask) if m]
  assert seen == TEST_SPLIT[1].tolist()
  first = next(iter(inputs.eval_batches('test')))[0][0][0]
  np.testing.assert_array_equal(first, preprocess.resize(TEST_SPLIT[0][0], 16))


def test_streaming_feeds_the_model_what_the_on_device_input_does(cifar10_dir):
  """Unaugmented at the stored size, both inputs give the same model inputs."""
  inputs = [
      data.create_input(
          helpers.tiny_config(cifar10_dir, augment=False,
                              validation_examples=12,
                              input_pipeline=pipeline, input_workers=0),
          sharding.make_mesh()) for pipeline in ('on_device', 'streaming')
  ]
  model_inputs = [jax.jit(i.model_inputs) for i in inputs]
  batches = [i.train_batches(i.position(4)) for i in inputs]  # 6 an epoch
  for _ in range(4):  # across the epoch's end, as the loop takes them
    steps = [
        jax.tree.map(lambda x: x[0], i.stack([next(b)], 1))
        for i, b in zip(inputs, batches)
    ]
    x, y = (f(i.train_data, step, jax.random.key(0))
            for f, i, step in zip(model_inputs, inputs, steps))
    jax.tree.map(np.testing.assert_array_equal, x, y)
  for split, count in (('test', 37), ('validation', 12)):
    evaluated = [list(i.eval_batches(split)) for i in inputs]
    assert len(evaluated[0]) == len(evaluated[1]) == -(-count // 16)
    for (indices, mask), (batch, streamed_mask) in zip(*evaluated):
      np.testing.assert_array_equal(mask, streamed_mask)
      x, y = (f(i.eval_data, b, None)
              for f, i, b in zip(model_inputs, inputs, (indices, batch)))
      jax.tree.map(np.testing.assert_array_equal, x, y)
    assert sum(float(mask.sum()) for _, mask in evaluated[1]) == count


def _loaded_batches(workers: int):
  """The eval batches and 4 training batches from mid-epoch on, loaded by
  `workers` processes (0: threads); and the training batches, still open."""
  inputs = _array_input(helpers.random_cifar(40, 10, 1), augment=True,
                        image_size=16, input_workers=workers)
  assert inputs.workers == workers
  loaded = [batch for batch, _ in inputs.eval_batches('test')]
  train = inputs.train_batches(inputs.position(3))  # 5 batches an epoch
  return loaded + [next(train) for _ in range(4)], train


def _digest(batches) -> str:
  leaves = jax.tree.leaves(batches)
  return hashlib.sha256(b''.join(
      np.ascontiguousarray(a).tobytes() for a in leaves)).hexdigest()


_WORKERS_SCRIPT = '''
import multiprocessing, time
from tests.test_data_streaming import _digest, _loaded_batches

if __name__ == '__main__':
  batches, train = _loaded_batches(workers=2)
  workers = [p.pid for p in multiprocessing.active_children()]
  print(_digest(batches), *workers, flush=True)
  time.sleep(600)
'''


def _running(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


@pytest.mark.skipif(not os.path.isdir('/proc'), reason='reads /proc')
def test_worker_processes_load_what_threads_load_and_exit_with_the_run():
  """A training process's 2 workers, which exit when it is killed."""
  process = subprocess.Popen([sys.executable, '-c', _WORKERS_SCRIPT],
                             cwd=helpers.ROOT, stdout=subprocess.PIPE,
                             text=True)
  try:
    batches, train = _loaded_batches(workers=0)
    train.close()
    digest, *workers = process.stdout.readline().split()
    assert digest == _digest(batches)
  finally:
    process.kill()
    process.wait()
  workers = [int(pid) for pid in workers]
  assert len(workers) == 2 and all(map(_running, workers))
  helpers.wait_until(lambda: not any(map(_running, workers)), 10)
