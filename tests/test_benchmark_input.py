"""The streaming-input benchmark on a tiny image folder."""

import os

import numpy as np
import pytest

from tests import helpers
from vit_jax import benchmark_input


def test_reports_the_images_per_second_of_the_streaming_input(tmp_path):
  helpers.write_image_folder(
      tmp_path, {'train': 6, 'test': 1}, ['a', 'b'],
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


@pytest.mark.parametrize('flag,error', [
    ('--batch_size=0', 'flag --batch_size=0: 0 is not a positive integer'),
    ('--workers=0,x', "flag --workers=['0', 'x']: each must be an integer"),
    ('--data_dir=.', 'No image folder found in .: expected ./train/<class>'),
    ('--dataset=image_folder', 'image_folder is read from a local directory: '
     'pass --data_dir=DIR'),
])
def test_a_bad_flag_is_one_error_line(flag, error):
  out = helpers.run_module('vit_jax.benchmark_input', flag, status=1,
                           env={**os.environ, 'VIT_JAX_DATA_DIR': ''})
  assert out.stderr.splitlines()[0].startswith(f'error: {error}'), out.stderr
