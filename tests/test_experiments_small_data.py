"""experiments/small_data and experiments/finetune: sweeps and summaries."""

import json
import shlex

from configs import cifar_small
from experiments.finetune import summary as finetune_summary
from experiments.finetune import sweep as finetune_sweep
from experiments.small_data import summary
from experiments.small_data import sweep
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
