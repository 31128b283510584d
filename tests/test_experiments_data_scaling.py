"""experiments/data_scaling/run.py: its nested subsets, where it finds a
crossover, and the table it writes."""

import math

import pytest

from experiments.data_scaling import run
from tests.helpers import finished_run


def _jpeg_dir(root, per_class=3, classes=('airplane', 'cat')):
  for name in classes:
    (root / 'train' / name).mkdir(parents=True)
    for i in range(per_class):
      (root / 'train' / name / f'{i:04d}.jpg').write_bytes(b'jpeg')
  (root / 'test').mkdir()
  return root


def test_subsets_are_class_balanced_nested_and_link_the_images(tmp_path):
  jpeg = _jpeg_dir(tmp_path / 'jpeg')
  small = run.subset(jpeg, tmp_path / 'subsets', 10)
  larger = run.subset(jpeg, tmp_path / 'subsets', 20)
  for name in ('airplane', 'cat'):
    assert sorted(p.name for p in (small / 'train' / name).iterdir()) == [
        '0000.jpg']
    assert sorted(p.name for p in (larger / 'train' / name).iterdir()) == [
        '0000.jpg', '0001.jpg']
  assert (larger / 'train/cat/0001.jpg').resolve() == (
      jpeg / 'train/cat/0001.jpg').resolve()
  assert (small / 'test').resolve() == (jpeg / 'test').resolve()
  # A finished subset is reused as it is.
  (jpeg / 'train/cat/0000.jpg').unlink()
  assert run.subset(jpeg, tmp_path / 'subsets', 10) == small


def test_a_subset_larger_than_a_class_is_one_clear_error(tmp_path):
  jpeg = _jpeg_dir(tmp_path / 'jpeg')
  with pytest.raises(SystemExit, match='has 3 images, fewer than the 4'):
    run.subset(jpeg, tmp_path / 'subsets', 40)


def test_planned_runs_go_size_by_size_then_seed_by_seed():
  assert list(run.planned_runs([5000, 10000], [0, 1], ['vit', 'simple_cnn'])
              ) == [(model, size, seed) for size in (5000, 10000)
                    for seed in (0, 1) for model in ('vit', 'simple_cnn')]


def test_crossover_interpolates_in_log_size():
  curves = {'vit': {1000: [0.4], 4000: [0.7]},
            'simple_cnn': {1000: [0.5], 4000: [0.6]},
            'small_resnet': {1000: [0.8], 4000: [0.9]}}
  [(model, size)] = run.crossovers(curves)
  # The gap goes from -10 to +10 points: halfway between, in log(size).
  assert model == 'simple_cnn'
  assert size == pytest.approx(math.sqrt(1000 * 4000))


def test_no_crossover_where_the_vit_stays_behind():
  curves = {'vit': {1000: [0.4, 0.5], 4000: [0.6]},
            'small_resnet': {1000: [0.5], 4000: [0.61]}}
  assert not run.crossovers(curves)


def _finished(directory, model, size, accuracy):
  finished_run(directory, seed=0, model=model, best_test_accuracy=accuracy,
               description={'recipe': 'study', 'train_examples': size})


def test_load_runs_and_the_table(tmp_path):
  for name, model, size, accuracy in (('a', 'vit', 5000, 0.45),
                                      ('b', 'vit', 10000, 0.52),
                                      ('c', 'small_resnet', 5000, 0.61)):
    _finished(tmp_path / name, model, size, accuracy)
  (tmp_path / 'vit_study_n25000_seed0').mkdir()  # interrupted
  records = run.load_runs(tmp_path)
  assert [(r['model'], r['train_examples'], r['recipe']) for r in records] == [
      ('small_resnet', 5000, 'study'), ('vit', 5000, 'study'),
      ('vit', 10000, 'study')]
  assert run.table(records).splitlines() == [
      '| Model | 5,000 | 10,000 |', '|---|---|---|',
      '| ViT-Tiny | 45.0 | 52.0 |',
      '| SmallResNet | 61.0 | not run yet |']


def test_each_run_trains_the_study_recipe_on_its_subset(tmp_path,
                                                        monkeypatch):
  jpeg = _jpeg_dir(tmp_path / 'jpeg')
  trained = []
  monkeypatch.setattr(run.runs, 'train', lambda *args: trained.append(args))
  run.train(tmp_path / 'work', jpeg, [('vit', 10, 0), ('simple_cnn', 20, 1)])
  assert [(directory.name, config, overrides['seed'], overrides['data_dir'],
           description)
          for directory, config, overrides, description in trained] == [
              ('vit_study_n10_seed0', 'configs/cifar_small.py:vit', 0,
               tmp_path / 'work/data/cifar10_10',
               {'recipe': 'study', 'train_examples': 10}),
              ('simple_cnn_study_n20_seed1',
               'configs/cifar_small.py:simple_cnn', 1,
               tmp_path / 'work/data/cifar10_20',
               {'recipe': 'study', 'train_examples': 20})]
  assert trained[0][2]['dataset'] == 'image_folder'


def test_runs_the_committed_records_hold_do_not_train_again(tmp_path,
                                                          monkeypatch):
  jpeg = _jpeg_dir(tmp_path / 'jpeg')
  trained = []
  monkeypatch.setattr(run.runs, 'train', lambda *args: trained.append(args))
  landed = {'vit_study_n10_seed0': {'model': 'vit', 'train_examples': 10,
                                    'seed': 0, 'best_test_accuracy': 0.4}}
  run.train(tmp_path / 'work', jpeg, [('vit', 10, 0), ('simple_cnn', 20, 1)],
            landed)
  assert [directory.name for directory, *_ in trained] == [
      'simple_cnn_study_n20_seed1']
  assert run.load_runs(tmp_path / 'work', landed) == list(landed.values())
  # A run the workdir holds is its own record, not the committed one.
  _finished(tmp_path / 'work/vit_study_n10_seed0', 'vit', 10, 0.45)
  assert [r['best_test_accuracy'] for r in run.load_runs(
      tmp_path / 'work', landed)] == [0.45]


def test_the_committed_records_name_their_runs():
  records = run.runs.landed(run.HERE / 'results.json', run.record_name)
  assert set(records) == {
      run.run_name(*r) for r in run.planned_runs(
          [5000, 10000, 25000, 50000], [0], list(run.runs.NAMES))}
