"""matplotlib set up to draw into files, and figures saved whole."""

import pathlib

from vit_jax.runtime import files


def pyplot():
  """matplotlib's pyplot drawing to files (no display on a cluster)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def save_figure(fig, path: pathlib.Path, dpi: int = 120) -> None:
  """`fig` as a PNG at `path`, written atomically, and closed."""
  files.replace_atomically(
      path, lambda partial: fig.savefig(partial, dpi=dpi, format='png'))
  pyplot().close(fig)
