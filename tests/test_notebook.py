"""notebooks/vit_jax.ipynb, run top to bottom on a made checkpoint."""

import json
import re

import nbclient
import nbformat
import numpy as np

from tests import helpers
from vit_jax import models
from vit_jax.checkpoints import reading


def test_the_notebook_runs_and_draws_every_figure(cifar10_dir, tmp_path):
  # An untrained 1-layer ViT run at 16x16, a 2x2 patch grid.
  config = helpers.tiny_config(cifar10_dir, image_size=16)
  helpers.untrained_run(
      tmp_path / 'run', config,
      helpers.random_vit_params(models.from_config(config, 10), 16))
  (tmp_path / 'run' / reading.CLASS_NAMES_FILE).write_text(
      json.dumps([f'class{i}' for i in range(10)]))  # the run's, as top-5
  (tmp_path / 'cat.png').write_bytes(
      helpers.png(np.zeros((20, 30, 3), np.uint8)))
  notebook = nbformat.read(helpers.ROOT / 'notebooks' / 'vit_jax.ipynb', 4)
  [parameters] = (cell for cell in notebook.cells
                  if 'parameters' in cell.metadata.get('tags', []))
  parameters.source = '\n'.join(f'{name} = {value!r}' for name, value in dict(
      checkpoint=str(tmp_path / 'run'), model_name=None,
      images=[str(tmp_path / 'cat.png')], class_names=None,
      finetune_dataset='cifar10', finetune_data=str(cifar10_dir),
      finetune_steps=2, finetune_batch_size=8, out=str(tmp_path /
                                                       'out')).items())
  # A cell that raises fails the test, with its traceback.
  nbclient.NotebookClient(notebook, timeout=120).execute()
  outputs = [o for cell in notebook.cells for o in cell.get('outputs', [])]
  # Each figure `show` draws, and nothing it says was not drawn.
  assert sum('image/png' in output.get('data', {}) for output in outputs) == 6
  text = ''.join(output.get('text', '') for output in outputs)
  assert re.search(r'cat\.png: class\d ', text) and 'not drawn' not in text
  summary = json.loads(
      (tmp_path / 'out' / 'finetuned' / 'summary.json').read_text())
  assert summary['steps'] == 2
  assert f"test accuracy {summary['final_test_accuracy']:.1%}" in text
