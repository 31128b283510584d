"""notebooks/vit_jax.ipynb, run top to bottom on a made checkpoint."""

import json

import nbclient
import nbformat
import numpy as np

from tests.helpers import ROOT
from tests.helpers import cifar10_files
from tests.helpers import png
from tests.helpers import random_cifar
from tests.helpers import random_vit_params
from tests.helpers import tiny_config
from tests.helpers import write_cifar_binary
from vit_jax import models
from vit_jax.checkpoints import run_checkpoints

NOTEBOOK = ROOT / 'notebooks' / 'vit_jax.ipynb'
FIGURES = 6  # what its cells `show`


def _made_run(workdir, data_dir):
  """The workdir of a 1-layer ViT run at 16x16 (a 2x2 patch grid), untrained."""
  config = tiny_config(data_dir, image_size=16)
  params = random_vit_params(models.from_config(config, 10), 16)
  workdir.mkdir()
  (workdir / 'config.json').write_text(config.to_json_best_effort())
  checkpoints = run_checkpoints.RunCheckpoints(workdir / 'checkpoints', keep=1)
  checkpoints.save(0, {'params': params}, {'count': np.zeros(())}, [], {},
                   json.loads(config.to_json_best_effort()))
  checkpoints.close()


def test_the_notebook_runs_and_draws_every_figure(tmp_path):
  data_dir, workdir, photos = (tmp_path / name
                               for name in ('data', 'run', 'photos'))
  write_cifar_binary(
      data_dir / 'cifar-10-batches-bin',
      cifar10_files(random_cifar(32, 10, seed=1), random_cifar(8, 10, seed=2)))
  _made_run(workdir, data_dir)
  photos.mkdir()
  rng = np.random.default_rng(0)
  for name in ('cat', 'dog'):
    (photos / f'{name}.png').write_bytes(
        png(rng.integers(0, 256, (20, 30, 3), np.uint8)))
  (tmp_path / 'classes.txt').write_text(''.join(f'class {c}\n'
                                                for c in range(10)))
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  [parameters] = [
      cell for cell in notebook.cells
      if 'parameters' in cell.metadata.get('tags', [])
  ]
  parameters.source = '\n'.join(f'{name} = {value!r}' for name, value in dict(
      checkpoint=str(workdir), model_name=None, images=[str(
          photos)], class_names=str(tmp_path / 'classes.txt'),
      finetune_dataset='cifar10', finetune_data=str(data_dir), finetune_steps=2,
      finetune_batch_size=8, out=str(tmp_path / 'out')).items())
  # A cell that raises fails the test with the cell and its traceback.
  nbclient.NotebookClient(notebook, timeout=120, kernel_name='python3',
                          resources={'metadata': {'path': str(tmp_path)}
                                    }).execute()
  outputs = [
      output for cell in notebook.cells for output in cell.get('outputs', [])
  ]
  assert sum('image/png' in output.get('data', {})
             for output in outputs) == FIGURES
  text = ''.join(output.get('text', '') for output in outputs)
  assert 'cat.png: class ' in text and 'not drawn' not in text
  summary = json.loads(
      (tmp_path / 'out' / 'finetuned' / 'summary.json').read_text())
  assert summary['steps'] == 2
  assert f"test accuracy {summary['final_test_accuracy']:.1%}" in text
