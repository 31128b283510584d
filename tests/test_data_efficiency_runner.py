"""experiments/data_efficiency/run.py: its recipes, the order it trains the
runs in, and the table it writes."""

import json

import pytest

from tests.conftest import load_file
from vit_jax import steps

run = load_file('experiments/data_efficiency/run.py')
MODELS = ('vit', 'simple_cnn', 'small_resnet')


def _recipe_config(model, ingredients):
  """configs/data_efficient.py with a recipe's overrides, as the runner's
  --config.KEY=VALUE flags set them."""
  config = load_file('configs/data_efficient.py').get_config(model)
  config.update_from_flattened_dict(run.recipe_overrides(model, ingredients))
  return config


def _assert_same_training(config, reference):
  """The same model (a field set to its default counts as unset) and the
  same everything else."""
  assert steps.create_model(config, 10) == steps.create_model(reference, 10)
  config, reference = config.to_dict(), reference.to_dict()
  del config['model_overrides'], reference['model_overrides']
  assert config == reference


@pytest.mark.parametrize('model', MODELS)
def test_the_study_recipe_is_the_study_config(model):
  study = load_file('configs/cifar_small.py').get_config(model)
  _assert_same_training(_recipe_config(model, ()), study)


@pytest.mark.parametrize('model', MODELS)
def test_the_full_recipe_is_configs_data_efficient(model):
  full = run.ALL[:-1] if model == 'vit' else run.CNN_AUGMENTED
  _assert_same_training(
      _recipe_config(model, full),
      load_file('configs/data_efficient.py').get_config(model))


def test_each_ingredient_changes_the_config():
  study = _recipe_config('vit', ())
  for ingredient in run.ALL:
    assert _recipe_config('vit', (ingredient,)) != study, ingredient


def _finished(workdir, name, accuracy, epochs=30, seed=0):
  directory = workdir / name
  directory.mkdir(parents=True)
  (directory / 'config.json').write_text(json.dumps({'seed': seed}))
  (directory / 'summary.json').write_text(json.dumps({
      'best_test_accuracy': accuracy, 'best_epoch': epochs - 1,
      'epochs': float(epochs), 'final_test_accuracy': accuracy - 0.01,
      'final_train_accuracy': 0.6, 'train_seconds': 60.0}))


def _seed_zero_runs(workdir, accuracies):
  """Finished seed-0 runs at 30 epochs: (model, ingredients) -> accuracy."""
  for (model, ingredients), accuracy in accuracies.items():
    _finished(workdir, run.run_name(model, ingredients, 30, 0), accuracy)


def test_the_first_runs_are_the_key_rows_at_seed_zero(tmp_path):
  planned = list(run.planned_runs(tmp_path, [30, 100]))
  assert planned[:5] == [
      ('simple_cnn', (), 30, 0), ('vit', (), 30, 0),
      ('vit', run.ALL[:-1], 30, 0), ('vit', run.ALL, 30, 0),
      ('vit', ('distillation',), 30, 0)]
  assert len(planned) == len(set(planned))
  # The ablation's other steps at the longer budget come last.
  assert planned[-1] == ('vit', run.ALL[:-2], 100, 0)


def test_seeds_1_and_2_go_to_the_rows_seed_0_ranks_best(tmp_path):
  _seed_zero_runs(tmp_path, {
      ('simple_cnn', ()): 0.67, ('small_resnet', ()): 0.69,
      ('small_resnet', run.CNN_AUGMENTED): 0.56, ('vit', ()): 0.51,
      ('vit', run.ALL): 0.45, ('vit', ('spt_lsa',)): 0.53})
  seeded = [(model, ingredients, seed) for model, ingredients, epochs, seed
            in run.planned_runs(tmp_path, [30]) if seed]
  rows = [('vit', ()), ('vit', run.ALL), ('vit', ('spt_lsa',)),
          ('small_resnet', ())]
  # The full recipe distils, so the teacher's seeds train first.
  rows.insert(0, ('simple_cnn', ()))
  assert seeded == [(m, i, s) for s in (1, 2) for m, i in rows]


def test_load_runs_reads_model_recipe_and_seed(tmp_path):
  _finished(tmp_path, 'small_resnet_study_e100_seed2', 0.7, epochs=100,
            seed=2)
  _finished(tmp_path, 'vit_study+spt_lsa+distillation_e30_seed0', 0.53)
  (tmp_path / 'vit_study_e30_seed1').mkdir()  # interrupted: no summary
  records = run.load_runs(tmp_path)
  assert [(r['model'], r['recipe'], r['epochs'], r['seed'],
           r['train_examples']) for r in records] == [
               ('vit', 'study+spt_lsa+distillation', 30, 0, 5000),
               ('small_resnet', 'study', 100, 2, 5000)]


def _record(model, recipe, accuracy, seed=0):
  return {'model': model, 'recipe': recipe, 'epochs': 30, 'seed': seed,
          'best_test_accuracy': accuracy, 'final_train_accuracy': 0.5,
          'wall_minutes': 10.0, 'device': 'cpu'}


def test_the_table_gives_each_vit_row_its_share_of_the_gap(tmp_path):
  records = [
      _record('small_resnet', 'study', 0.71),
      _record('simple_cnn', 'study', 0.66),
      *(_record('vit', 'study', a, seed) for seed, a in
        enumerate([0.50, 0.51, 0.52])),
      *(_record('vit', 'study+distillation', a, seed) for seed, a in
        enumerate([0.52, 0.53, 0.54])),
      _record('vit', 'study+spt_lsa', 0.50)]
  rows = {line.split(' | ')[1]: line.split(' | ')
          for line in run.table(records).splitlines()
          if line.startswith('| ViT')}
  assert '(best CNN: SmallResNet, study, 71.0%)' in run.table(records)
  assert rows['study'][2:5] == ['51.0 ± 1.0 (n=3)', '50.0 ± 0.0 (n=3)', '0%']
  # (53 - 51) / (71 - 51) of the gap; the standard error of the difference
  # of two means of three seeds, each with a sample deviation of 1 point.
  assert rows['study+distillation'][4] == '10% (+2.0 ± 0.8)'
  assert rows['study+spt_lsa'][4] == '-5% (-1.0)'


def test_labels_read_alone_when_the_previous_step_is_not_shown():
  full = run.recipe_name(run.ALL)
  without = run.recipe_name(run.ALL[:-1])
  assert run._label(full, ['study', without, full]) == '+ distillation'
  assert run._label(full, ['study', full]) == 'full recipe + distillation'
  assert run._label(without, ['study', without]) == (
      'full recipe without distillation')
  assert run._label('study+distillation', []) == 'study + distillation alone'
