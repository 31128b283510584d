"""experiments/small_data and experiments/finetune: sweeps and summaries."""

import json
import shlex

import numpy as np
import pytest

from configs import cifar_small
from experiments import held_out
from experiments.finetune import summary as finetune_summary
from experiments.finetune import sweep as finetune_sweep
from experiments.small_data import summary
from experiments.small_data import sweep
from experiments.study_cnns import summary as cnns_summary
from tests.helpers import finished_run


def test_the_sweeps_print_every_run(capsys):
  sweep.main(['--workdir=/w', '--data_dir=/d'])
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 15
  assert shlex.split(lines[0]) == [
      'python', '-m', 'vit_jax.main', '--config=configs/cifar_small.py:vit',
      '--workdir=/w/vit_augment_seed0', '--config.augment=True',
      '--config.seed=0', '--config.data_dir=/d'
  ]
  assert '--workdir=/w/small_resnet_no_augment_seed0' in lines[5]
  assert '--config.augment=False' in lines[5]
  assert shlex.split(lines[-1])[4:] == [
      '--workdir=/w/small_resnet_augment_batch256_seed0',
      '--config.augment=True', '--config.seed=0', '--config.data_dir=/d',
      '--config.batch_size=256'
  ]
  for line in lines:  # each override is a field of the config it runs
    _, _, _, config, _, *overrides = shlex.split(line)
    fields = cifar_small.get_config(config.split(':')[1])
    assert all(
        o.split('=')[0].removeprefix('--config.') in fields for o in overrides)
  finetune_sweep.main(['--pretrained=/p', '--workdir=/w', '--data_dir=/d'])
  lines = capsys.readouterr().out.splitlines()
  assert [shlex.split(line)[3:] for line in lines] == [[
      '--config=configs/finetune.py', f'--workdir=/w/finetune_{size}',
      '--config.init_from=/p', f'--config.image_size={size}',
      '--config.data_dir=/d'
  ] for size in (48, 32)]


def _finished(directory, model, augment, seed, batch_size, accuracies):
  """A workdir as `vit_jax.main` leaves it, as far as the summary reads it."""
  finished_run(directory, seed, model, best_test_accuracy=max(accuracies),
               best_epoch=float(accuracies.index(max(accuracies)) + 1),
               final_train_accuracy=accuracies[-1] + 0.1,
               epochs=len(accuracies), train_seconds=36.0 * len(accuracies))
  (directory / 'config.json').write_text(
      json.dumps({
          'model': cifar_small.MODELS[model][0], 'seed': seed,
          'augment': augment, 'batch_size': batch_size
      }))
  (directory / 'metrics.jsonl').write_text(''.join(
      json.dumps({'step': 39 * epoch, 'epoch': epoch, **r}) + '\n'
      for epoch, accuracy in enumerate(accuracies, 1)
      for r in ({'train_accuracy': accuracy + 0.1},
                {'test_accuracy': accuracy})))


def test_the_summaries_read_the_workdirs_into_their_tables(
    tmp_path, monkeypatch):
  monkeypatch.setattr(summary, 'parameter_count', lambda model: 1000)
  for seed, accuracies in ((0, [0.4, 0.5]), (1, [0.45, 0.52])):
    _finished(tmp_path / f'vit_augment_seed{seed}', 'vit', True, seed, 128,
              accuracies)
  _finished(tmp_path / 'vit_no_augment_seed0', 'vit', False, 0, 128,
            [0.47, 0.46])
  _finished(tmp_path / 'vit_augment_batch64_seed0', 'vit', True, 0, 64,
            [0.5, 0.55])
  (tmp_path / 'vit_augment_seed2').mkdir()  # interrupted
  results = summary.collect(tmp_path)
  assert summary.table(results).splitlines()[2:] == [
      '| ViT-Tiny | 1,000 | augment | 2 | 51.0 ± 1.4 | 61.0 ± 1.4 | 2, 2 | '
      '1.2 | 49.6 / 53.5 |',
      '| ViT-Tiny | 1,000 | no augment | 1 | 47.0 | 56.0 | 1 | 1.2 | '
      '49.6 / 53.5 |'
  ]
  assert summary.batch_size_table(results).splitlines()[2:] == [
      '| ViT-Tiny | 64 | 39 | 55.0 | 65.0 | 2 | 1.2 | 49.6 / 53.5 |',
      '| ViT-Tiny | 128 | 39 | 50.0 | 60.0 | 2 | 1.2 | 49.6 / 53.5 |'
  ]
  assert results['vit']['augment'][1]['test_accuracy'] == [0.45, 0.52]
  summary.plot(results, tmp_path / 'curves.png')
  assert (tmp_path / 'curves.png').stat().st_size > 0
  # The fine-tuning summary: the pre-trained run and each fine-tuned one.
  measured = {
      'epochs': 10, 'best_test_accuracy': 0.52, 'final_test_accuracy': 0.511,
      'final_train_accuracy': 0.606
  }
  for directory, size in ((tmp_path / 'pre', 32), (tmp_path / 'w/finetune_48',
                                                   48)):
    directory.mkdir(parents=True)
    (directory / 'summary.json').write_text(json.dumps(measured))
    (directory / 'config.json').write_text(json.dumps({'image_size': size}))
    (directory / 'metrics.jsonl').write_text('{"seconds": 90}\n' * 2)
  rows = finetune_summary.rows(tmp_path / 'pre', tmp_path / 'w')
  assert finetune_summary.table(rows).splitlines()[2:] == [
      '| pre-trained (configs/cifar_small.py) | 32x32 | 10 | 52.0% | 51.1% | '
      '60.6% |  |',
      '| fine-tuned (configs/finetune.py) | 48x48 | 10 | 52.0% | 51.1% | '
      '60.6% | 3.0 |'
  ]


def test_the_study_cnns_choices_are_chosen_and_compared_on_validation(
    tmp_path, monkeypatch):
  """Paired by seed, in words the interval allows; each run's records land
  in metrics.jsonl; the choice nearest the study is picked on its measure."""
  for choice, shift in (('simple_cnn', 0.0), ('simple_cnn_batch64', 0.03)):
    for seed in (0, 1, 2):
      directory = tmp_path / 'runs' / f'{choice}_seed{seed}'
      finished_run(directory, seed, 'simple_cnn', chosen_on='validation',
                   best_validation_accuracy=0.66 + shift + 0.001 * seed,
                   test_accuracy_at_best_step=0.6 + shift, train_flops=2e12,
                   commit='abc', cpu='x, 2 cores')
      (directory / 'metrics.jsonl').write_text(
          json.dumps({'step': 39, 'validation_accuracy': 0.5, 'seconds': 1}) +
          '\n')
  readme = tmp_path / 'README.md'
  readme.write_text(''.join(
      f'<!-- {name}: written by summary.py -->\n<!-- end of {name} -->\n'
      for name in ('choices table', 'closest')))
  monkeypatch.setattr(cnns_summary, 'HERE', tmp_path)
  cnns_summary.main([f'--workdir={tmp_path / "runs"}'])
  text = readme.read_text()
  assert ('| SimpleCNN | batch_size=64 | 3 | 69.1 ± 0.1 | 63.0 ± 0.0 | 57.0 ± '
          '0.0 | this is better than the config\'s by 3.0 ± 0.0 points (95% '
          'interval, 3 paired seeds) | 70.8 / 80.2 | 2 | 16 |') in text
  assert ('- SimpleCNN: batch_size=64 (3 seeds): validation 69.1 ± 0.1, test '
          "63.0 ± 0.0, 7.8 points under the study's 70.8.") in text
  records = json.loads((tmp_path / 'results.json').read_text())
  assert {r['commit'] for r in records} == {'abc'}
  logged = [
      json.loads(line)
      for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()
  ]
  assert logged[0] == {
      'run': 'simple_cnn_batch64_seed0', 'step': 39, 'validation_accuracy': 0.5
  } and len(logged) == 6


def test_held_out_matches_each_subset_image_to_its_jpeg_or_refuses():
  jpegs = np.random.default_rng(0).integers(0, 256, (20, 4, 4, 3))
  noisy = np.clip(jpegs[[7, 3]] + 5, 0, 255)  # JPEG's error is small
  np.testing.assert_array_equal(held_out.matched(noisy, jpegs), [7, 3])
  with pytest.raises(SystemExit, match='match no JPEG clearly'):
    held_out.matched(noisy, np.concatenate([jpegs, jpegs[[7]]]))
