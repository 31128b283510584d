"""`python -m vit_jax.analyze` on trained runs and a released checkpoint."""

import json
import shutil
import subprocess

from absl import flags
from absl.testing import flagsaver
import numpy as np
import pytest

from tests import helpers
from vit_jax import analysis
from vit_jax import analyze
from vit_jax import models
from vit_jax.analysis import subjects
from vit_jax.errors import AnalysisError
from vit_jax.errors import CheckpointError
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib

FIGURES = ('cls_attention.png', 'cls_attention_layers.png',
           'attention_rollout.png', 'attention_distance.png',
           'position_embeddings.png', 'embedding_filters.png')

COUNTS = dict(num_images=2, distance_images=20, components=5)


@pytest.fixture(scope='module', name='analyzed')
def _analyzed(trained_vit_run, tmp_path_factory):
  """(workdir, out, numbers) of a copy of the trained run, analyzed."""
  root = tmp_path_factory.mktemp('analyzed')
  workdir = shutil.copytree(trained_vit_run[0], root / 'run')
  return workdir, root / 'out', analyze.analyze(root / 'out', workdir=workdir,
                                                **COUNTS)


def _written(out):
  return sorted(p.name for p in out.glob('*.png'))


def _contents(folder) -> dict:
  return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_writes_every_figure_and_the_numbers(analyzed):
  workdir, out, result = analyzed
  for figure in FIGURES:
    assert (out / figure).stat().st_size > 1000, figure
  assert _written(out) == sorted(FIGURES)
  assert json.loads((out / 'analysis.json').read_text()) == result
  assert result['step'] == 6 and result['workdir'] == str(workdir)
  assert result['grid'] == [3, 3] and result['patch_size'] == 8
  assert result['distance_images'] == 20
  per_head = result['mean_attention_distance_per_head']
  assert [len(layer) for layer in per_head] == [2, 2]  # 2 layers, 2 heads
  # Patch centres on a 3x3 grid of 8-pixel patches are 0 to 22.6 px apart.
  assert all(0 < d < 22.7 for layer in per_head for d in layer)
  assert -1 <= result['position_similarity_distance_correlation'] <= 1
  assert len(result['embedding_filter_explained_variance']) == 5
  # The figures beside the run's curves in TensorBoard, at the step analyzed;
  # not those of other images.
  (out.parent / 'photos').mkdir()
  (out.parent / 'photos' / 'x.png').write_bytes(
      helpers.png(np.zeros((9, 9, 3), np.uint8)))
  on_photos = analyze.analyze(out.parent / 'on_photos', workdir=workdir,
                              images=[str(out.parent / 'photos')], **COUNTS)
  # Its top 5 named by the run's classes.json.
  (top5,) = on_photos['top5'].values()
  assert {name for name, _ in top5} < set(helpers.CIFAR10_CLASSES)
  events = list((workdir / 'tensorboard' / 'analysis').glob('events.out.*'))
  assert len(events) == 1 and events[0].stat().st_size > 10_000


def test_a_stop_signal_leaves_the_earlier_analysis_whole(analyzed, tmp_path):
  """Ctrl-C while an analysis replaces an earlier one in --out."""
  workdir, earlier, _ = analyzed
  figures = shutil.copytree(earlier, tmp_path / 'out')
  # Once it draws the new one; --verbosity=1 shows the libraries' records.
  stderr = helpers.interrupted(
      'vit_jax.analyze', f'--workdir={workdir}', f'--out={figures}', '--step=6',
      '--num_images=2', '--distance_images=20', '--components=5',
      '--verbosity=1', ready=(tmp_path / 'out.partial').exists)
  assert stderr.strip().splitlines()[-1] == (
      'Ctrl-C: stopped the analysis; --out is as it was.')
  assert any(line.startswith('I') for line in stderr.splitlines())  # INFO
  assert _contents(figures) == _contents(earlier)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['out']


@pytest.mark.parametrize(
    'fault', ['full', pytest.param('read-only', marks=pytest.mark.slow)])
def test_a_full_or_read_only_disk_is_one_line_and_leaves_the_earlier_analysis(
    analyzed, tmp_path, fault):
  workdir, earlier, _ = analyzed
  size = sum(p.stat().st_size for p in earlier.iterdir())
  with helpers.mounted_tmpfs(tmp_path / 'disk',
                             f'{size * 3 // 2 // 1024 + 8}k') as disk:
    shutil.copytree(earlier, disk / 'out')
    if fault == 'read-only':
      subprocess.run(['mount', '-o', 'remount,ro', str(disk)], check=True)
    with pytest.raises(AnalysisError) as error:
      analyze.analyze(disk / 'out', workdir=workdir, step=6, **COUNTS)
    fix = (f'Free space there (df -h {disk})'
           if fault == 'full' else f'Check that {disk} is writable')
    assert str(error.value).startswith(f'Writing {disk / "out"} failed (')
    assert str(error.value).endswith(
        f'--out is as it was. {fix}, or pass another --out.')
    assert '\n' not in str(error.value)
    assert _contents(disk / 'out') == _contents(earlier)
    assert [p.name for p in disk.iterdir()] == ['out']


def test_bad_input_is_one_clear_error(trained_vit_run, tmp_path):
  """An --out of other files or a file, a count below one, no ViT run."""
  (tmp_path / 'notes.txt').write_text('mine')
  (tmp_path / 'cat.png').write_bytes(helpers.png(np.zeros((4, 4, 3), np.uint8)))
  with pytest.raises(AnalysisError) as error:
    analyze.analyze(tmp_path, workdir=trained_vit_run[0])
  assert str(error.value) == (
      f'--out={tmp_path} holds files an analysis does not (cat.png, '
      'notes.txt), which this one would replace: pass a new directory, or '
      'one of an earlier analysis.')
  assert (tmp_path / 'notes.txt').read_text() == 'mine'
  with pytest.raises(AnalysisError, match='notes.txt is a file: pass a new'):
    analyze.analyze(tmp_path / 'notes.txt', workdir=trained_vit_run[0])
  for name in ('num_images', 'distance_images', 'components'):
    with pytest.raises(ValueError, match='^0 is not a positive integer$'):
      flags.FLAGS[name].parser.parse('0')
  with pytest.raises(AnalysisError, match='Pass one of --workdir .* and --'):
    analyze.analyze(tmp_path / 'out')
  with pytest.raises(
      CheckpointError, match='is a run, whose config names its '
      'model: leave out --model=ViT-B_16.$'):
    analyze.analyze(tmp_path / 'out', checkpoint=trained_vit_run[0],
                    model='ViT-B_16')
  cnn_run = shutil.copytree(trained_vit_run[0], tmp_path / 'cnn')
  helpers.edit_json(cnn_run / 'config.json', model='SimpleCNN',
                    model_overrides={})
  with pytest.raises(AnalysisError, match='need.* a ViT run'):
    analyze.analyze(tmp_path / 'out', workdir=cnn_run)


def test_a_released_npz_is_analysed_on_your_own_images(tmp_path, caplog):
  """Photos resized to its position embeddings, in [-1, 1], named top-5."""
  released = tmp_path / 'vit.npz'
  npz.save_npz(
      helpers.random_vit_params(models.create_model('ViT-Tiny-CIFAR_4', 3), 32),
      released)
  rng = np.random.default_rng(0)
  (tmp_path / 'photos').mkdir()
  for name, shape in (('cat', (40, 60, 3)), ('dog', (90, 50, 3))):
    (tmp_path / 'photos' / f'{name}.png').write_bytes(
        helpers.png(rng.integers(0, 256, shape, np.uint8)))
  (tmp_path / 'classes.txt').write_text('cat\ndog\nbird\n')
  (tmp_path / 'two.txt').write_text('cat\ndog\n')
  (tmp_path / 'latin1.txt').write_bytes(b'caf\xe9\ndog\nbird\n')
  images = [str(tmp_path / 'photos')]
  with pytest.raises(AnalysisError, match='--checkpoint needs --images'):
    analyze.analyze(tmp_path / 'out', checkpoint=released)
  with pytest.raises(AnalysisError, match='is no run: pass it as --checkpoint'):
    analyze.analyze(tmp_path / 'out', workdir=released)
  for names, said in (('two.txt', 'two.txt has 2 lines; the model has 3'),
                      ('nope.txt', 'nope.txt: No such file .*; pass a text'),
                      ('latin1.txt', 'latin1.txt: not UTF-8 text; pass a')):
    with pytest.raises(AnalysisError, match=said):
      analyze.analyze(tmp_path / 'out', checkpoint=released, images=images,
                      class_names=tmp_path / names)
  with pytest.raises(CheckpointError, match='--model=SimpleCNN is not a ViT'):
    analyze.analyze(tmp_path / 'out', checkpoint=released, model='SimpleCNN')
  result = analyze.analyze(tmp_path / 'out', checkpoint=released, images=images,
                           class_names=tmp_path / 'classes.txt', components=5)
  assert _written(tmp_path / 'out') == sorted(
      (*FIGURES, 'rollout_cat.png', 'rollout_dog.png'))
  for figure in ('embedding_filters.png', 'rollout_cat.png'):
    assert (tmp_path / 'out' / figure).stat().st_size > 1000, figure
  assert result['checkpoint'] == str(released) and result['format'] == 'npz'
  assert result['model'] == 'ViT-Tiny-CIFAR_4' and result['patch_size'] == 4
  assert result['image_size'] == 32 and result['grid'] == [8, 8]
  assert result['distance_images'] == 2
  predictions = result['top5'][str(tmp_path / 'photos' / 'cat.png')]
  assert sorted(name for name, _ in predictions) == ['bird', 'cat', 'dog']
  assert sum(p for _, p in predictions) == pytest.approx(1, abs=1e-3)
  # Scaled to [-1, 1] as the released models expect; shown in [0, 1].
  subject, _ = subjects.load(released)
  inputs, display = subjects.model_inputs(
      np.full((1, 16, 16, 3), 255, np.uint8), subject)
  assert inputs.shape == (1, 32, 32, 3)
  np.testing.assert_allclose(inputs, 1.0)
  np.testing.assert_allclose(display, 1.0)
  # Two images of one name: a rollout each, numbered by their place and
  # never named as a third; hidden files (a Mac's ._ files) left out.
  (tmp_path / 'more').mkdir()
  for name in ('cat.png', 'cat_0.png'):
    (tmp_path / 'more' / name).write_bytes(
        helpers.png(rng.integers(0, 256, (9, 9, 3), np.uint8)))
  (tmp_path / 'more' / '._cat.png').write_bytes(b'resource fork')
  (tmp_path / 'more' / 'notes.txt').write_text('not an image')
  caplog.set_level('INFO', logger='absl')
  analyze.analyze(tmp_path / 'out', checkpoint=released,
                  images=[*images, str(tmp_path / 'more')], components=5)
  assert f'--images: skipped {tmp_path}/more/notes.txt, not .jpg' in caplog.text
  assert [n for n in _written(tmp_path / 'out') if 'rollout_' in n] == [
      'rollout_cat_0.png', 'rollout_cat_0_.png', 'rollout_cat_2.png',
      'rollout_dog.png'
  ]


# ------------------------------- runs of VisionTransformer's techniques -----


def _untrained_run(workdir, data_dir, **techniques):
  """An untrained 2-layer ViT run with `techniques` on a 4x4 patch grid."""
  config = helpers.tiny_config(
      data_dir, image_size=16, model_fields=dict(patch_size=4, num_layers=2,
                                                 **techniques))
  model = models.from_config(config, 10)
  # A scanned run starts from the unscanned one's parameters, stacked, so
  # that the two compare.
  params = helpers.random_vit_params(model.clone(scan=False), 16)
  if model.scan:
    params = params_lib.stack_blocks(params)
  return helpers.untrained_run(workdir, config, params)


def _analyze_run(workdir):
  return analyze.analyze(f'{workdir}_out', workdir=workdir, num_images=2,
                         distance_images=8, components=5)


def test_a_scanned_distillation_token_sincos_run_is_analysed_as_unscanned(
    cifar10_dir, tmp_path):
  runs = {'plain': {}, 'scanned': dict(scan=True, remat='full')}
  plain, scanned = (_analyze_run(
      _untrained_run(tmp_path / name, cifar10_dir, distillation_token=True,
                     posemb='sincos2d', **scan)) for name, scan in runs.items())
  for out in ('plain_out', 'scanned_out'):
    assert _written(tmp_path / out) == sorted((*FIGURES, 'dist_attention.png'))
  assert [scanned[k] for k in ('prefix_tokens', 'grid', 'position_embedding')
         ] == [['cls', 'dist'], [4, 4], 'sincos2d']
  assert 'not_drawn' not in scanned and scanned.keys() == plain.keys()
  assert scanned['position_similarity_distance_correlation'] < -0.5
  per_head = scanned['mean_attention_distance_per_head']
  assert [len(layer) for layer in per_head] == [2, 2]
  # Patch centres on a 4x4 grid of 4-pixel patches are 0 to 17 px apart.
  assert all(0 < d < 17 for layer in per_head for d in layer)
  for key in ('mean_attention_distance_per_head', 'uniform_attention_distance',
              'position_similarity_distance_correlation',
              'embedding_filter_explained_variance'):
    # Rounded to 3 or 4 places: equal unless float32 rounding crosses one.
    np.testing.assert_allclose(scanned[key], plain[key], atol=2e-3, err_msg=key)


def test_a_gap_run_without_position_embedding_says_what_it_did_not_draw(
    cifar10_dir, tmp_path, capsys):
  """An old figure of the same name is removed; the rest is drawn."""
  workdir = _untrained_run(tmp_path / 'run', cifar10_dir, posemb='none',
                           classifier='gap', shifted_patches=True,
                           locality_attention=True)
  figures = tmp_path / 'out'
  figures.mkdir()
  (figures / 'position_embeddings.png').write_bytes(b'from another model')
  flags.FLAGS.mark_as_parsed()
  with flagsaver.flagsaver(workdir=str(workdir), out=str(figures), num_images=2,
                           distance_images=8, components=5):
    analyze.main(['analyze'])
  assert capsys.readouterr().out.splitlines() == [
      f'Wrote into {figures}:', f'  {figures / "analysis.json"}',
      f'  {figures / "attention_distance.png"}',
      f'  {figures / "embedding_filters.png"}',
      "no position embedding (posemb='none'): position_embeddings.png not "
      'drawn', "no class token (classifier='gap'): cls_attention.png, "
      'cls_attention_layers.png, attention_rollout.png not drawn'
  ]
  result = json.loads((figures / 'analysis.json').read_text())
  assert (result['prefix_tokens'], result['position_embedding']) == ([], 'none')
  assert 'position_similarity_distance_correlation' not in result
  assert len(result['embedding_filter_explained_variance']) == 5
  distances = np.array(result['mean_attention_distance_per_head'])
  assert distances.shape == (2, 2) and (distances > 0).all()
  # Without itself, a uniform head's patches are farther on average.
  assert result['uniform_attention_distance'] == pytest.approx(
      analysis.uniform_attention_distance((4, 4), 4) * 16 / 15, abs=1e-3)
