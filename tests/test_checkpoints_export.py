"""vit_jax.checkpoints.export: any checkpoint written as npz, timm or hf."""

import json
import os

import jax
import numpy as np
import pytest

from tests import helpers
from tests.test_formats_npz import assert_trees_identical
from vit_jax.checkpoints import export
from vit_jax.checkpoints import reading
from vit_jax.formats import npz
from configs import cifar_small
from vit_jax.errors import CheckpointError
from vit_jax.formats import vit_model


@pytest.fixture
def umask_022():
  umask = os.umask(0o022)
  yield
  os.umask(umask)


@pytest.mark.usefixtures('umask_022')
def test_a_run_converts_to_every_format_and_back_exactly_in_the_umasks_modes(
    trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  run = reading.load_run(workdir)
  images = np.random.default_rng(0).uniform(-1, 1, (2, 24, 24, 3))
  logits = {}
  for format_name in ('npz', 'timm', 'hf'):
    dest = tmp_path / ('run.npz' if format_name == 'npz' else format_name)
    line = export.convert(workdir, dest, format_name)
    assert line.startswith(f'Wrote {dest} ({format_name}): a ViT with hidden '
                           'size 16, 2 layers of 2 heads')
    assert f'from the workdir {workdir} (step {run.step}).' in line
    # Said where the format cannot hold it (the run's CIFAR-10 statistics).
    mean, std = (','.join(f'{x:g}' for x in p)
                 for p in (cifar_small.CIFAR10_MEAN, cifar_small.CIFAR10_STD))
    assert line.endswith(
        f'--config.pixel_mean={mean} --config.pixel_std='
        f'{std}; analyze {workdir} instead.') == (format_name == 'npz')
    loaded = reading.load(dest)
    assert loaded.kind == format_name and loaded.image_size == 24
    if format_name != 'npz':  # so are their weights alone
      assert reading.source_kind(dest / 'model.safetensors') == format_name
    # The normalization the run trained with travels with the folders; an
    # .npz has no place for it.
    assert loaded.pixels == (vit_model.RELEASED_PIXELS if format_name == 'npz'
                             else (cifar_small.CIFAR10_MEAN,
                                   cifar_small.CIFAR10_STD))
    assert_trees_identical(loaded.params, jax.device_get(run.params))
    logits[format_name] = loaded.model.apply(loaded.variables, images,
                                             train=False)
  # And on through the formats: timm -> hf -> npz.
  export.convert(tmp_path / 'timm', tmp_path / 'hf2', 'hf')
  export.convert(tmp_path / 'hf2', tmp_path / 'again.npz', 'npz')
  assert_trees_identical(npz.load_npz(tmp_path / 'again.npz'),
                         jax.device_get(run.params))
  np.testing.assert_array_equal(logits['timm'], logits['npz'])
  np.testing.assert_array_equal(logits['hf'], logits['npz'])
  folders = ('timm', 'hf', 'hf2')
  files = [
      'run.npz', 'again.npz', 'hf/preprocessor_config.json',
      'hf2/preprocessor_config.json',
      *(f'{folder}/{name}' for folder in folders
        for name in ('model.safetensors', 'config.json'))
  ]
  assert {
      p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777
      for p in tmp_path.rglob('*')
  } == {**dict.fromkeys(files, 0o644), **dict.fromkeys(folders, 0o755)}


def test_a_destination_that_would_lose_something_is_one_line(
    trained_vit_run, tmp_path):
  workdir, _ = trained_vit_run
  with pytest.raises(
      CheckpointError, match='is a vit_jax.main workdir, whose '
      'config.json the export would overwrite'):
    export.convert(workdir, workdir, 'hf')
  (tmp_path / 'file').write_text('')
  with pytest.raises(CheckpointError, match='is a file; --format=timm writes '
                     'a folder'):
    export.convert(workdir, tmp_path / 'file', 'timm')
  # A user's file kept; the path suggested is an .npz in a folder, else beside.
  for dest, such in ((tmp_path, 'model.npz'), (tmp_path / 'file', 'file.npz')):
    with pytest.raises(CheckpointError, match=f'path such as .*/{such}.$'):
      export.convert(workdir, dest, 'npz')
  assert (tmp_path / 'file').read_text() == ''
  for format_name, dest in (('npz', 'x.npz'), ('hf', 'hf')):
    with pytest.raises(CheckpointError,
                       match='/file is a file, not a folder: move it, or pass'):
      export.convert(workdir, tmp_path / 'file' / dest, format_name)
  # A folder export replaces DEST whole: never a folder of your files.
  dest = tmp_path / 'mine'
  dest.mkdir()
  for name in ('notes.txt', 'config.json', *(f'{i}.png' for i in range(6))):
    (dest / name).write_text(name)
  with pytest.raises(CheckpointError) as error:
    export.convert(workdir, dest, 'timm')
  assert str(error.value) == (
      f'{dest} holds files a timm folder does not (0.png, 1.png, 2.png, '
      '3.png, 4.png ...), which the export would replace: pass a new or '
      'empty directory.')
  assert sorted(p.read_text() for p in dest.iterdir()) == sorted(
      p.name for p in dest.iterdir())  # untouched


def test_model_names_the_architecture_or_says_it_differs(tmp_path):
  npz.save_npz(helpers.one_block_vit('ViT-Ti_16')[1], tmp_path / 'ti.npz')
  with pytest.raises(CheckpointError) as error:
    export.convert(tmp_path / 'ti.npz', tmp_path / 'out', 'timm',
                   model_name='ViT-S_16')
  assert str(error.value) == (
      f'{tmp_path / "ti.npz"} holds a ViT with hidden size 192, 1 layer of 3 '
      'heads, MLP 768, patch 16x16, but --model=ViT-S_16 is a ViT with hidden '
      'size 384, 12 layers of 6 heads, MLP 1536, patch 16x16: leave out '
      '--model, or pass the checkpoint of that model.')


def test_a_released_hybrid_converts_to_timm_and_back_exactly(tmp_path):
  """The official R50+ViT-B_16 (one narrow block), told by its shapes alone."""
  _, params = helpers.one_block_vit('R50+ViT-B_16', hidden_size=192,
                                    num_heads=3, mlp_dim=768)  # at 32x32
  npz.save_npz(params, tmp_path / 'r50.npz')
  export.convert(tmp_path / 'r50.npz', tmp_path / 'timm', 'timm')
  config = json.loads((tmp_path / 'timm' / 'config.json').read_text())
  assert config['architecture'] == 'vit_base_r50_s16_224'
  export.convert(tmp_path / 'timm', tmp_path / 'back.npz', 'npz')
  back = reading.load(tmp_path / 'back.npz')
  assert_trees_identical(back.params, params)
  assert (back.model.resnet_stages, back.image_size) == ((3, 4, 9), 32)
  # hf has no stem to write: tests/test_formats.py.
