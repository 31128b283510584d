"""The figures of the measures: their layout and their size in pixels."""

import numpy as np
from PIL import Image

from vit_jax.analysis import figures


def test_mosaic_tiles_each_positions_map_with_a_gap():
  similarity = np.random.default_rng(0).random((2, 3, 2, 3))
  mosaic = figures._mosaic(similarity)
  assert mosaic.shape == (2 * 3, 3 * 4)
  # Position (1, 2)'s map starts at row 1 * (2 + 1), column 2 * (3 + 1).
  np.testing.assert_array_equal(mosaic[3:5, 8:11], similarity[1, 2])
  assert np.isnan(mosaic[2]).all() and np.isnan(mosaic[:, 3]).all()
  # A rollout map over an image: each patch repeated over its pixels.
  np.testing.assert_array_equal(
      figures._upsample(np.array([[1., 2.], [3., 4.]]), 4),
      [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]])


def _pixels(path):
  """(height, width) of a PNG, and that it was written whole."""
  assert not path.with_name(path.name + '.partial').exists()
  with Image.open(path) as image:
    return image.size[::-1]


def test_every_figure_is_a_png_at_its_resolution(tmp_path):
  """The image grids at 100 dpi, the plots at 120."""
  rng = np.random.default_rng(0)
  display = rng.random((2, 16, 16, 3))
  figures.plot_cls_attention(tmp_path / 'cls.png', display,
                             rng.random((2, 2, 4, 4)))
  assert _pixels(tmp_path / 'cls.png') == (320, 480)  # 2 x 3 squares of 1.6 in
  figures.plot_cls_attention(tmp_path / 'layers.png', display[[0] * 3],
                             rng.random((3, 2, 4, 4)), layers=True)
  assert _pixels(tmp_path / 'layers.png') == (520, 480)  # and 0.4 in of title
  figures.plot_rollout(tmp_path / 'rollout.png', display, rng.random((2, 4, 4)))
  assert _pixels(tmp_path / 'rollout.png') == (340, 500)
  figures.plot_attention_distance(tmp_path / 'distance.png',
                                  rng.random((3, 2)) * 10, 16, 6.0)
  assert _pixels(tmp_path / 'distance.png') == (420, 540)
  figures.plot_position_embeddings(tmp_path / 'positions.png',
                                   rng.random((4, 4, 4, 4)), -0.5, 'a title')
  assert _pixels(tmp_path / 'positions.png') == (516, 1080)
  figures.plot_embedding_filters(tmp_path / 'filters.png',
                                 rng.random((9, 4, 4, 3)), np.full(9, 0.1))
  assert _pixels(tmp_path / 'filters.png') == (336, 1092)  # 2 rows of 7
