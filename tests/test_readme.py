"""The README's Python runs as written."""

import pathlib
import re

import jax

from vit_jax.formats import npz

README = pathlib.Path(__file__).resolve().parents[1] / 'README.md'


def test_the_use_section_runs_as_written(tmp_path):
  use = README.read_text().split('\n## Use\n', 1)[1]
  make, load = re.findall(r'```python\n(.*?)```', use, re.S)
  names = {}
  exec(make, names)  # pylint: disable=exec-used
  assert names['logits'].shape == (8, 10)
  assert [m.shape for m in names['maps']] == [(8, 4, 65, 65)] * 6

  # The first run's workdir stands in as the model just made, saved as the
  # official .npz: the same reader.
  checkpoint = tmp_path / 'model.npz'
  npz.save_npz(names['variables']['params'], checkpoint)
  load = load.replace("'/tmp/w'", repr(str(checkpoint)))
  exec(load, names)  # pylint: disable=exec-used
  assert names['size'] == 32 and names['logits'].shape == (8, 10)
  assert (jax.tree.structure(
      names['loaded'].variables['params']) == jax.tree.structure(
          names['variables']['params']))
