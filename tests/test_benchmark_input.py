"""The streaming-input benchmark on a tiny image folder."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import write_image_folder
from vit_jax import benchmark_input


def test_reports_the_images_per_second_of_the_streaming_input(tmp_path):
  write_image_folder(
      tmp_path, {'train': 12, 'test': 1}, ['a'],
      lambda rng, *_: rng.integers(0, 256, (30, 40, 3), np.uint8))
  config = benchmark_input.loader_config('image_folder', str(tmp_path), 4, 24,
                                         steps=2)
  results = benchmark_input.run_benchmark(config, steps=2, workers=[0, 1],
                                          rounds=1)
  assert [(r['input_workers'], r['loader'])
          for r in results] == [(0, f'{len(os.sched_getaffinity(0))} threads'),
                                (1, '1 worker processes')]
  threads, worker = results
  assert threads['images_per_second_per_core'] == pytest.approx(
      threads['images_per_second'] / len(os.sched_getaffinity(0)))
  assert worker['images_per_second_per_core'] == worker['images_per_second']
  for r in results:
    assert r['images_per_second'] > 0 and r['first_batch_seconds'] > 0
  config.batch_size = 8
  with pytest.raises(ValueError, match='need 16 training images'):
    benchmark_input.run_benchmark(config, steps=1, workers=[0], rounds=1)


def test_a_count_below_one_is_one_clear_line():
  # (batch_size=0 was a ZeroDivisionError traceback; steps, rounds and
  # image_size have the same bound.)
  flag = '--batch_size=0'
  out = subprocess.run([sys.executable, '-m', 'vit_jax.benchmark_input', flag],
                       cwd=pathlib.Path(__file__).parent.parent,
                       capture_output=True, text=True, check=False)
  assert out.returncode == 1
  assert f'flag {flag}: 0 is not a positive integer' in out.stderr
  assert 'Traceback' not in out.stderr
