"""The streaming-input benchmark on a tiny image folder."""

import ml_collections
import numpy as np
import pytest

from tests.conftest import png
from vit_jax import benchmark_input


def _config(data_dir, batch_size):
  return ml_collections.ConfigDict(dict(
      dataset='image_folder', data_dir=str(data_dir), train_split='train',
      test_split='test', train_examples=0, test_examples=0, seed=0,
      batch_size=batch_size, eval_batch_size=batch_size, image_size=24,
      augment=True, input_threads=2))


def test_reports_the_images_per_second_of_the_streaming_input(tmp_path):
  rng = np.random.default_rng(0)
  for split, count in (('train', 12), ('test', 1)):
    (tmp_path / split / 'a').mkdir(parents=True)
    for i in range(count):
      (tmp_path / split / 'a' / f'{i}.png').write_bytes(
          png(rng.integers(0, 256, (30, 40, 3), np.uint8)))
  result = benchmark_input.run_benchmark(_config(tmp_path, 4), steps=2)
  assert (result['image_size'], result['batch_size'], result['threads']) == (
      24, 4, 2)
  assert result['images_per_second'] > 0
  with pytest.raises(ValueError, match='need 16 training images'):
    benchmark_input.run_benchmark(_config(tmp_path, 8), steps=1)
