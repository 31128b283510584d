"""experiments/data_scaling: subsets, the sweep, the summary."""

import json
import shlex
import shutil

import pytest

from experiments.data_scaling import summary
from experiments.data_scaling import sweep
from tests import helpers


def test_the_sweep_trains_the_study_recipe_on_nested_subsets(tmp_path, capsys):
  jpeg, work = tmp_path / 'jpeg', tmp_path / 'work'
  for name in ('airplane', 'cat'):  # two classes of three images each
    (jpeg / 'train' / name).mkdir(parents=True)
    for i in range(3):
      (jpeg / 'train' / name / f'{i:04d}.jpg').write_bytes(b'jpeg')
  (jpeg / 'test').mkdir()
  run_sweep = lambda *flags: sweep.main(
      [f'--jpeg_dir={jpeg}', f'--workdir={work}', *flags])
  run_sweep('--sizes=10,20', '--seeds=0,1', '--models=vit,simple_cnn')
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  assert [line[4] for line in lines] == [
      f'--workdir={work}/{model}_study_n{size}_seed{seed}' for size in (10, 20)
      for seed in (0, 1) for model in ('vit', 'simple_cnn')
  ]
  assert lines[-1] == [
      'python', '-m', 'vit_jax.main',
      '--config=configs/cifar_small.py:simple_cnn',
      f'--workdir={work}/simple_cnn_study_n20_seed1',
      '--config.dataset=image_folder', '--config.train_examples_per_file=0',
      '--config.test_examples=0', '--config.seed=1', '--config.batch_size=128',
      f'--config.data_dir={work}/data/cifar10_20'
  ]
  # Class-balanced, nested subsets of links to the images.
  small, larger = work / 'data/cifar10_10', work / 'data/cifar10_20'
  names = lambda folder: sorted(p.name for p in folder.iterdir())
  for name in ('airplane', 'cat'):
    assert names(small / 'train' / name) == ['0000.jpg']
    assert names(larger / 'train' / name) == ['0000.jpg', '0001.jpg']
  cat = 'train/cat/0001.jpg'
  assert (larger / cat).resolve() == (jpeg / cat).resolve()
  assert (small / 'test').resolve() == (jpeg / 'test').resolve()
  with pytest.raises(SystemExit, match='has 3 images, fewer than the 4'):
    sweep.subset(jpeg, work / 'data', 40)
  # A finished subset is reused as it is.
  (jpeg / 'train/cat/0000.jpg').unlink()
  assert sweep.subset(jpeg, work / 'data', 10) == small
  assert (small / 'train/cat/0000.jpg').is_symlink()
  # --missing: only the runs the committed records lack (all of 10,000's).
  run_sweep('--sizes=20,10000', '--missing')
  assert [line.split()[4] for line in capsys.readouterr().out.splitlines()] == [
      f'--workdir={work}/{model}_study_n20_seed0'
      for model in ('simple_cnn', 'small_resnet', 'vit')
  ]
  for flag, error in {
      '--sizes=15': 'multiples of 10', '--models=vit,mlp': 'some of',
      '--seeds=a': "'a': use distinct integers separated by commas, e.g. 0,1",
      '--seeds=0,1,1': "'0,1,1': use distinct integers"
  }.items():
    with pytest.raises(SystemExit):
      run_sweep(flag)
    assert error in capsys.readouterr().err


def test_the_summary_reads_the_workdirs_into_the_table(tmp_path, monkeypatch):
  workdir, here = tmp_path / 'work', tmp_path / 'here'
  for model, size, accuracy in (('vit', 5000, 0.45), ('vit', 10000, 0.52),
                                ('small_resnet', 5000, 0.61)):
    helpers.finished_run(workdir / sweep.run_name(model, size, 0), seed=0,
                         model=model, best_test_accuracy=accuracy)
  (workdir / 'vit_study_n25000_seed0').mkdir()  # interrupted
  # The committed records fill in what the workdir lacks, not what it has.
  here.mkdir()
  (here / 'results.json').write_text(
      json.dumps([{
          'model': model, 'train_examples': size, 'seed': 0,
          'best_test_accuracy': accuracy
      } for model, size, accuracy in (('vit', 10000, 0.4), ('simple_cnn', 5000,
                                                            0.6))]))
  shutil.copy(summary.HERE / 'README.md', here)
  monkeypatch.setattr(summary, 'HERE', here)
  monkeypatch.setattr(summary, 'plot', lambda records, path: path.touch())
  summary.main([f'--workdir={workdir}', '--sizes=5000,10000,25000'])
  records = json.loads((here / 'results.json').read_text())
  assert [(r['model'], r['train_examples'], r['best_test_accuracy'])
          for r in records] == [('simple_cnn', 5000, 0.6),
                                ('small_resnet', 5000, 0.61),
                                ('vit', 5000, 0.45), ('vit', 10000, 0.52)]
  assert records[1]['recipe'] == 'study'
  readme = (here / 'README.md').read_text()
  assert '\n'.join([
      '| Model | 5,000 | 10,000 |', '|---|---|---|',
      '| ViT-Tiny | 45.0 | 52.0 |', '| SimpleCNN | 60.0 | not run yet |',
      '| SmallResNet | 61.0 | not run yet |'
  ]) in readme
  assert '5 of the 9 runs of the sweep have no record yet:\n\n' + '\n'.join(
      f'- `{model}_study_n{size}_seed0`'
      for size, model in ((10000, 'simple_cnn'), (10000, 'small_resnet'),
                          (25000, 'simple_cnn'), (25000, 'small_resnet'),
                          (25000, 'vit'))) in readme
  assert (here / 'accuracy_vs_size.png').exists()
