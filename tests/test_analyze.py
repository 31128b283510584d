"""`python -m vit_jax.analyze` on a trained run."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from vit_jax import analyze

FIGURES = ('cls_attention.png', 'attention_rollout.png',
           'attention_distance.png', 'position_embeddings.png',
           'embedding_filters.png')


def _analyze(*flags):
  return subprocess.run([sys.executable, '-m', 'vit_jax.analyze', *flags],
                        cwd=ROOT, capture_output=True, text=True, check=False)


def test_writes_every_figure_and_the_numbers(trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  out = _analyze(f'--workdir={workdir}', f'--out={tmp_path}',
                 '--num_images=2', '--distance_images=20', '--components=5')
  assert out.returncode == 0, out.stderr[-2000:]
  for figure in FIGURES:
    assert (tmp_path / figure).stat().st_size > 1000, figure
  result = json.loads((tmp_path / 'analysis.json').read_text())
  assert json.loads(out.stdout.splitlines()[-1]) == result
  assert result['step'] == 6
  assert result['grid'] == [3, 3] and result['patch_size'] == 8
  assert result['distance_images'] == 20
  per_head = result['mean_attention_distance_per_head']
  assert [len(layer) for layer in per_head] == [2, 2]  # 2 layers, 2 heads
  # Patch centres on a 3x3 grid of 8-pixel patches are 0 to 22.6 px apart.
  assert all(0 < d < 22.7 for layer in per_head for d in layer)
  assert -1 <= result['position_similarity_distance_correlation'] <= 1
  assert len(result['embedding_filter_explained_variance']) == 5


def test_a_missing_run_is_one_clear_line(tmp_path):
  out = _analyze(f'--workdir={tmp_path / "nothing"}', f'--out={tmp_path}')
  assert out.returncode == 1
  assert 'error:' in out.stderr and 'has no config.json' in out.stderr
  assert 'Traceback' not in out.stderr


def test_a_cnn_run_is_refused(trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  cnn_run = shutil.copytree(workdir, tmp_path / 'cnn')
  config = json.loads((cnn_run / 'config.json').read_text())
  config.update(model='SimpleCNN', model_overrides={})
  (cnn_run / 'config.json').write_text(json.dumps(config))
  with pytest.raises(analyze.AnalysisError, match='need.* a ViT run'):
    analyze.analyze(cnn_run, tmp_path / 'out')
