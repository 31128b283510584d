"""experiments/data_scaling/run.py: its nested subsets, where it finds a
crossover, and the table it writes."""

import json
import math

import pytest

from tests.conftest import load_file

run = load_file('experiments/data_scaling/run.py')


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
  assert sorted(p.name for p in (small / 'train/cat').iterdir()) == [
      '0000.jpg']
  assert sorted(p.name for p in (larger / 'train/cat').iterdir()) == [
      '0000.jpg', '0001.jpg']
  assert (larger / 'train/cat/0001.jpg').resolve() == (
      jpeg / 'train/cat/0001.jpg').resolve()
  assert (small / 'test').resolve() == (jpeg / 'test').resolve()


def test_a_subset_larger_than_a_class_is_one_clear_error(tmp_path):
  jpeg = _jpeg_dir(tmp_path / 'jpeg')
  with pytest.raises(SystemExit, match='has 3 images, fewer than the 4'):
    run.subset(jpeg, tmp_path / 'subsets', 40)


def test_planned_runs_go_size_by_size():
  assert list(run.planned_runs([5000, 10000], [0], ['vit', 'simple_cnn'])
              ) == [('vit', 5000, 0), ('simple_cnn', 5000, 0),
                    ('vit', 10000, 0), ('simple_cnn', 10000, 0)]


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


def test_load_runs_and_the_table(tmp_path):
  for name, accuracy in (('vit_study_n5000_seed0', 0.45),
                         ('vit_study_n10000_seed0', 0.52),
                         ('small_resnet_study_n5000_seed0', 0.61)):
    (tmp_path / name).mkdir()
    (tmp_path / name / 'config.json').write_text(json.dumps({'seed': 0}))
    (tmp_path / name / 'summary.json').write_text(json.dumps({
        'best_test_accuracy': accuracy, 'best_epoch': 29.0, 'epochs': 30.0,
        'final_test_accuracy': accuracy, 'final_train_accuracy': 0.9,
        'train_seconds': 600.0}))
  (tmp_path / 'vit_study_n25000_seed0').mkdir()  # interrupted
  records = run.load_runs(tmp_path)
  assert [(r['model'], r['train_examples'], r['recipe']) for r in records] == [
      ('small_resnet', 5000, 'study'), ('vit', 5000, 'study'),
      ('vit', 10000, 'study')]
  assert run.table(records).splitlines() == [
      '| Model | 5,000 | 10,000 |', '|---|---|---|',
      '| ViT-Tiny | 45.0 | 52.0 |',
      '| SmallResNet | 61.0 | not run yet |']
