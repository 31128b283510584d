"""experiments/small_data: the sweep and the summary."""

import json
import shlex
import shutil

import numpy as np
import pytest

from configs import cifar_small
from experiments import held_out
from experiments.small_data import summary
from experiments.small_data import sweep
from tests import helpers


def test_the_sweeps_print_every_run(capsys):
  sweep.main(['--workdir=/w', '--data_dir=/d', '--validation_dir=/v'])
  lines = capsys.readouterr().out.splitlines()
  assert (len(lines), shlex.split(lines[0])) == (22, [
      'python', '-m', 'vit_jax.main', '--config=configs/cifar_small.py:vit',
      '--workdir=/w/vit_seed0', '--config.seed=0', '--config.data_dir=/d',
      '--config.validation_examples=5000', '--config.validation_dir=/v'
  ])
  assert shlex.split(lines[-1])[3:] == [
      '--config=configs/cifar_small.py:small_resnet',
      '--workdir=/w/small_resnet_batch128_stem_pool_seed0', '--config.seed=0',
      '--config.batch_size=128', '--config.model_overrides.stem_pool=True',
      '--config.data_dir=/d', '--config.validation_examples=5000',
      '--config.validation_dir=/v'
  ]
  for line in lines:  # each override is a field of the config it runs
    _, _, _, config, _, *overrides = shlex.split(line)
    fields = cifar_small.get_config(config.split(':')[1])
    assert all(
        o.removeprefix('--config.').split('=')[0].split('.')[0] in fields
        for o in overrides)


def _finished(directory, model, seed, batch_size, validation, test, epochs=30):
  """A run's workdir as the summary reads it: two epochs logged, the second best."""
  history = [
      {'step': 39 * epoch, 'epoch': epoch, **r} for epoch in (1, 2)
      for r in ({'train_accuracy': test, 'seconds': 1.0},
                {'test_accuracy': test, 'validation_accuracy': validation})
  ]
  helpers.finished_run(
      directory, seed, model, history, chosen_on='validation',
      best_validation_accuracy=validation, test_accuracy_at_best_step=test,
      final_test_accuracy=test, final_train_accuracy=test + 0.1, best_epoch=2.0,
      epochs=epochs, train_seconds=72.0, train_flops=2e12, commit='abc',
      cpu='x, 2 cores', config={'batch_size': batch_size})


def test_the_summary_chooses_on_validation_and_pairs_by_seed(
    tmp_path, monkeypatch, capsys):
  """Tables paired by seed, every run's logs in metrics.jsonl, the closest."""
  monkeypatch.setattr(summary, 'parameter_count', lambda model: 1000)
  runs_dir = tmp_path / 'runs'
  for seed in (0, 1, 2):
    _finished(runs_dir / f'vit_seed{seed}', 'vit', seed, 128, 0.5 + 0.01 * seed,
              0.5)
    _finished(runs_dir / f'simple_cnn_seed{seed}', 'simple_cnn', seed, 64,
              0.66 + 0.001 * seed, 0.7 + 0.01 * seed)
    _finished(runs_dir / f'simple_cnn_batch128_seed{seed}', 'simple_cnn', seed,
              128, 0.63, 0.66)
  _finished(runs_dir / 'vit_no_augment_seed0', 'vit', 0, 128, 0.47, 0.46)
  (runs_dir / 'small_resnet_seed0').mkdir()  # interrupted
  _finished(runs_dir / 'small_resnet_seed1', 'small_resnet', 1, 128, 0.6, 0.6)
  _finished(runs_dir / 'small_resnet_seed2', 'simple_cnn', 2, 256, 0.6, 0.6)
  # A trial of one epoch: left out, as not the config's 30.
  _finished(runs_dir / 'small_resnet_batch128_seed0', 'small_resnet', 0, 128,
            0.6, 0.6, epochs=1)
  shutil.copy(summary.HERE / 'README.md', tmp_path)
  monkeypatch.setattr(summary, 'HERE', tmp_path)
  with pytest.raises(SystemExit, match='^error: no finished runs in /none'):
    summary.main(['--workdir=/none'])  # nor a results.json
  summary.main([f'--workdir={runs_dir}'])
  assert (f'{runs_dir}/small_resnet_seed1: left out, as its batch_size is 128, '
          'not the 256 planned') in (err := capsys.readouterr().err)
  assert (f'{runs_dir}/small_resnet_seed2: left out, as its model is '
          'simple_cnn, not the small_resnet planned') in err
  text = (tmp_path / 'README.md').read_text()
  assert ('| SimpleCNN | 1,000 | 64 | 3 | 66.1 ± 0.1 | 71.0 ± 1.0 | 71.0 ± 1.0 '
          '| 81.0 ± 1.0 | 2, 2, 2 | 70.8 / 80.2 | 2 | 1 |') in text
  assert ('- SimpleCNN is better than ViT-Tiny by 21.0 ± 2.5 points (95% '
          'interval, 3 paired seeds).') in text
  assert ('| SimpleCNN | batch_size=128 | 3 | 63.0 ± 0.0 | 66.0 ± 0.0 | 76.0 ± '
          "0.0 | the config's is better than this by 3.1 ± 0.2 points (95% "
          'interval, 3 paired seeds) | 70.8 / 80.2 | 2 | 1 |') in text
  assert ('| ViT-Tiny | augment=False | 1 | '
          '47.0 | 46.0 | 56.0 | -3.0 points at one seed: no interval |') in text
  assert ("- SimpleCNN: the config's (batch 64, 3 seeds): validation 66.1 ± "
          "0.1, test 71.0 ± 1.0: +0.2 points from the study's 70.8 (± 2.5, "
          '95% interval).') in text
  # Each run's best test accuracy is its last epoch's, validation's too.
  assert ('lies 0.0 points above the test accuracy at the epoch validation '
          'chose, on average over the 10 runs here') in text
  assert '12 of the 22 runs of the sweep have no record yet' in text
  assert '- `small_resnet_seed0`' in text
  records = json.loads((tmp_path / 'results.json').read_text())
  assert {r['commit'] for r in records} == {'abc'} and len(records) == 10
  logged = helpers.history(tmp_path)
  assert logged[0] == dict(run='simple_cnn_batch128_seed0', step=39, epoch=1,
                           train_accuracy=0.66) and len(logged) == 40
  assert (tmp_path / 'learning_curves.png').stat().st_size > 0
  # A workdir holding some of the runs keeps the others' committed records.
  shutil.rmtree(runs_dir / 'vit_seed0')
  summary.main([f'--workdir={runs_dir}'])
  assert json.loads((tmp_path / 'results.json').read_text()) == records
  assert len((tmp_path / 'metrics.jsonl').read_text().splitlines()) == 40


def test_held_out_matches_each_subset_image_to_its_jpeg_or_refuses():
  jpegs = np.random.default_rng(0).integers(0, 256, (20, 4, 4, 3))
  noisy = np.clip(jpegs[[7, 3]] + 5, 0, 255)  # JPEG's error is small
  np.testing.assert_array_equal(held_out.matched(noisy, jpegs), [7, 3])
  with pytest.raises(SystemExit, match='match no JPEG clearly'):
    held_out.matched(noisy, np.concatenate([jpegs, jpegs[[7]]]))


def test_held_out_links_what_the_study_leaves_out_and_its_own_copies(tmp_path):
  """The JPEG copy of a study whose train and test images are its first."""
  train, test = helpers.random_cifar(40, 10, seed=1), helpers.random_cifar(
      30, 10, seed=2)
  helpers.write_cifar_binary(
      tmp_path / 'subset' / 'cifar-10-batches-bin',
      helpers.cifar10_files((train[0][:20], train[1][:20]),
                            (test[0][:10], test[1][:10])))
  for split, (images, labels) in (('train', train), ('test', test)):
    for i, (image, label) in enumerate(zip(images, labels)):
      folder = tmp_path / 'jpeg' / split / f'class_{label}'
      folder.mkdir(parents=True, exist_ok=True)
      # Read by content.
      (folder / f'{i:04d}.jpg').write_bytes(helpers.png(image))
  linked = lambda folder: sorted(int(p.stem) for p in folder.glob('*/*.jpg'))
  # Then again from a copy moved elsewhere: its links, none dangling.
  for jpeg in ('jpeg', 'moved'):
    (tmp_path / 'jpeg').rename(tmp_path / jpeg)
    held_out.main([
        f'--subset={tmp_path / "subset"}', f'--jpeg={tmp_path / jpeg}',
        f'--out={tmp_path / "held_out"}', f'--study={tmp_path / "study"}'
    ])
    assert linked(tmp_path / 'held_out') == list(range(20, 40))
  assert all(p.exists() for p in (tmp_path / 'held_out').glob('*/*.jpg'))
  assert linked(tmp_path / 'study' / 'train') == list(range(20))
  assert linked(tmp_path / 'study' / 'test') == list(range(10))
