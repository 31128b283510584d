"""experiments/data_efficiency: recipes, the sweep's stages, the summary."""

import functools
import shlex
import warnings

import pytest

from configs import cifar_small
from configs import data_efficient
from experiments import runs
from experiments.data_efficiency import budgets
from experiments.data_efficiency import recipes
from experiments.data_efficiency import summary
from experiments.data_efficiency import sweep
from vit_jax import config_schema
from vit_jax import models

_recipe_config = functools.partial(recipes.recipe_config, epochs=100)


def _assert_same_training(config, reference):
  """The same model (a default set counts as unset), the rest but a teacher's."""
  assert models.from_config(config, 10) == models.from_config(reference, 10)
  config, reference = config.to_dict(), reference.to_dict()
  for key in ('model_overrides', *recipes.TEACHER_OVERRIDES):
    del config[key], reference[key]
  assert config == reference


def _value(config, key):
  """The config's value of `key`, or for an unset model field the model's."""
  try:
    return functools.reduce(getattr, key.split('.'), config)
  except AttributeError:
    return models.default_fields(config.model)[key.split('.')[-1]]


def test_the_recipes_configs():
  for model, ingredients in [(recipes.TEACHER, ()), *recipes.TEACHERS.values()]:
    assert _recipe_config(model, ingredients).keep_best_checkpoint
  assert not _recipe_config('small_resnet', ()).keep_best_checkpoint
  assert not _recipe_config('vit', recipes.BEST).keep_best_checkpoint
  config = _recipe_config('vit', recipes.BEST + ('best_teacher',))
  assert config.teacher_checkpoint == 'best'
  # Stochastic depth grows with the budget.
  assert [
      _recipe_config('vit', ('budget_stochastic_depth',),
                     epochs=epochs).model_overrides.stochastic_depth_rate
      for epochs in (30, 100, 300, 1000)
  ] == [0.048, 0.1, 0.148, 0.2]
  # The study recipe is the study's config at batch 128, and
  # configs/data_efficient.py the full recipe without distillation.
  for model in ('vit', 'simple_cnn', 'small_resnet'):
    study = cifar_small.get_config(model)
    study.batch_size = 128
    _assert_same_training(_recipe_config(model, ()), study)
    _assert_same_training(
        _recipe_config(
            model, recipes.CUMULATIVE[-2]
            if model == 'vit' else recipes.CNN_AUGMENTED),
        data_efficient.get_config(model))
  # Each ingredient turns on what the study leaves off.
  study = _recipe_config('vit', ())
  for ingredient in recipes.INGREDIENTS:
    for key, value in recipes.changes(ingredient, epochs=100).items():
      assert _value(study, key) != value, (ingredient, key)
  # Round three adds levers to the best recipe.
  best = _recipe_config('vit', recipes.BEST)
  for levers in recipes.ROUND_THREE:
    config = _recipe_config('vit', levers)
    # The teachers the runner names (`SOURCES`).
    config.distillation_teacher = config.locality_guidance_teacher = '/teacher'
    config_schema.validate(config, num_devices=4)
    # Only what the recipes override can differ.
    changed = set(
        key for key in {
            **recipes.recipe_overrides('vit', levers, 100),
            **recipes.recipe_overrides('vit', recipes.BEST, 100)
        } if _value(config, key) != _value(best, key))
    assert levers[:len(recipes.BEST)] == recipes.BEST
    # A teacher of other stages changes the widths guidance imitates.
    assert changed == {
        key for lever in levers[len(recipes.BEST):]
        for key in recipes.changes(lever, epochs=100)
    } | ({'model_overrides.guidance_widths'} if recipes.teacher(levers)
         != recipes.teacher(recipes.BEST) else set()), levers


def _sweep(capsys, *flags) -> dict[str, dict]:
  """The sweep's runs: name -> {'model': ..., 'config.FIELD': value}."""
  sweep.main(['--workdir=/w', '--data_dir=/d', *flags])
  printed = {}
  for line in capsys.readouterr().out.splitlines():
    python, _, main, config, workdir, *overrides = shlex.split(line)
    assert (python, main) == ('python', 'vit_jax.main')
    printed[workdir.removeprefix('--workdir=/w/')] = {
        'model': config.removeprefix('--config=configs/data_efficient.py:'),
        **dict(o.removeprefix('--').split('=', 1) for o in overrides)
    }
  return printed


def test_the_sweeps_stages_and_the_runs_each_reads(capsys):
  first, second = _sweep(capsys, '--stage=1'), _sweep(capsys, '--stage=2')
  runs_ = _sweep(capsys)
  assert list(runs_) == list(first) + list(second) and len(runs_) == 129
  assert list(summary.planned()) == list(runs_)  # the summary's runs
  # Stage one holds every run that another reads, and reads none.
  fields = ('config.distillation_teacher', 'config.locality_guidance_teacher',
            'config.init_from')
  assert set(run[field].removeprefix('/w/') for run in second.values()
             for field in fields if field in run) == set(first)
  assert all(field not in run for run in first.values() for field in fields)
  # Each teacher keeps its best checkpoint, which 'best_teacher' reads.
  assert all(run['config.keep_best_checkpoint'] == 'True'
             for run in first.values() if run['model'] != 'vit')
  # Each run reads the runs of its budget and seed.
  distilled = runs_[f'vit_{recipes.recipe_name(recipes.ALL)}_e30_seed2']
  assert distilled['config.distillation_teacher'] == (
      '/w/simple_cnn_study_e30_seed2')
  assert (distilled['config.num_epochs'], distilled['config.seed'],
          distilled['config.data_dir']) == ('30', '2', '/d')
  # A longer MAE pre-training is the next budget's; 1,000 epochs has none
  # longer, so its row fine-tunes from its own budget's.
  tuned = runs_['vit_study+locality_guidance+long_mae_e30_seed0']
  assert tuned['config.init_from'] == '/w/vit_study+mae_pretraining_e100_seed0'
  whole = ('vit_study+distillation+locality_guidance+trivial_augment+'
           'resnet_teacher+')
  assert runs_[whole + 'long_mae_e100_seed1']['config.init_from'] == (
      '/w/vit_study+mae_pretraining_e300_seed1')
  assert runs_[whole + 'mae_e1000_seed0']['config.init_from'] == (
      '/w/vit_study+mae_pretraining_e1000_seed0')
  assert whole + 'long_mae_e1000_seed0' not in runs_
  # Both teachers the SmallResNet with TrivialAugment of its budget and seed.
  best = runs_[whole + 'long_mae_e100_seed1']
  assert best['config.distillation_teacher'] == best[
      'config.locality_guidance_teacher'] == (
          '/w/small_resnet_study+trivial_augment_e100_seed1')
  assert best['config.model_overrides.guidance_widths'] == str(
      recipes.STAGE_WIDTHS['small_resnet'])

  # The committed records are runs of the sweep; --missing prints the runs
  # without one, and what they read.
  landed = runs.landed(summary.HERE / 'results.json', recipes.record_name)
  assert landed and set(landed) <= set(runs_)
  missing = _sweep(capsys, '--missing')
  missing_second = _sweep(capsys, '--missing', '--stage=2')
  assert set(missing_second) == set(second) - set(landed)
  # A teacher with a record trains again where a missing run reads it.
  assert 'small_resnet_study+trivial_augment_e300_seed0' in landed
  assert 'small_resnet_study+trivial_augment_e300_seed0' in missing
  assert not set(missing) - set(missing_second) - {
      run[field].removeprefix('/w/') for run in missing_second.values()
      for field in run if field.endswith(('_teacher', 'init_from'))
  } - (set(runs_) - set(landed))


_TFLOPS_PER_EPOCH = {'vit': 3, 'simple_cnn': 1, 'small_resnet': 2}


def _seeds(model, recipe, accuracies, epochs=30):
  """A record of each seed's run, as the summary reads it."""
  return [{
      'model': model, 'recipe': recipe, 'epochs': epochs, 'seed': seed,
      'best_test_accuracy': accuracy, 'final_train_accuracy': 0.5,
      'wall_minutes': 10.0, 'device': 'cpu',
      'train_flops': _TFLOPS_PER_EPOCH[model] * epochs * 1e12
  } for seed, accuracy in enumerate(accuracies)]


CNNS = (_seeds('small_resnet', 'study', [0.71]) +
        _seeds('simple_cnn', 'study', [0.66]))

# Two budgets, several ViT recipes.
BUDGETS = [
    *_seeds('small_resnet', 'study', [0.68, 0.67, 0.69]),
    *_seeds('simple_cnn', 'study', [0.66, 0.67, 0.68]),
    *_seeds('vit', 'study', [0.50, 0.51, 0.52]),
    *_seeds('vit', 'study+distillation', [0.60, 0.62, 0.64]),
    # One lucky seed does not displace a mean over three.
    *_seeds('vit', 'study+distillation+ema', [0.65]),
    *_seeds('small_resnet', 'study', [0.73, 0.74, 0.72], 300),
    *_seeds('simple_cnn', 'study', [0.70, 0.70, 0.70], 300),
    *_seeds('vit', 'study', [0.56], 300),
    *_seeds('vit', 'study+distillation', [0.73, 0.74, 0.75], 300)
]


def test_the_table_and_the_answer_across_budgets():
  records = [
      *CNNS, *_seeds('vit', 'study', [0.50, 0.51, 0.52]),
      *_seeds('vit', 'study+distillation', [0.52, 0.54, 0.53]),
      *_seeds('vit', 'study+spt_lsa', [0.49])
  ]
  rows = {
      line.split(' | ')[1]: line.split(' | ')
      for line in summary.table(records).splitlines()
      if line.startswith('| ViT')
  }
  assert '(best CNN: SmallResNet, study, 71.0%)' in summary.table(records)
  assert rows['study'][2:6] == [
      '51.0 ± 1.0 (n=3)', '50.0 ± 0.0 (n=3)', '0%', '90'
  ]
  # (53 - 51) / (71 - 51) of the gap; the seeds' differences (2, 3 and 1
  # points) give the 95% interval t(0.975, 2) * 1 / sqrt(3).
  assert rows['study+distillation'][4] == '10% (+2.0 ± 2.5)'
  # One seed: its share and points against the same seed's runs, 1 of the
  # (71 - 50) points between the SmallResNet and the study ViT at seed 0.
  assert rows['study+spt_lsa'][4] == '-5% (-1.0)'
  # The answer across budgets compares the best ViT with the best CNN, the
  # table's: three seeds first, then the mean.
  assert '(best CNN: SmallResNet, study, 68.0%)' in summary.table(
      BUDGETS + _seeds('small_resnet', 'study+trivial_augment', [0.9]))  # lucky
  best = budgets.best_rows(BUDGETS)
  assert (list(best), best[30]['vit'][0], best[30]['study'][0],
          best[300]['small_resnet'][0]) == ([30, 300], 'study+distillation',
                                            'study', 'study')
  lines = budgets.answer(BUDGETS).splitlines()
  # Paired by seed, in the words its interval allows; the ViT named for the
  # CNN that teaches it.
  assert lines[0].startswith(
      "- 30 epochs: the ViT's best, `study+distillation` (a ViT distilled from "
      'the SimpleCNN), 62.0 ± 2.0 (n=3), against SmallResNet `study`, 68.0 ± '
      '1.0 (n=3): SmallResNet is better than the ViT by 6.0 ± 4.3 points (95% '
      'interval, 3 paired seeds);')
  # Its cost counts the teacher it learns from.
  cost = ('per seed, 10 min and {} TFLOPs for the ViT, 10 min and {} TFLOPs '
          'for the SimpleCNN `study` it learns from (minutes on this 2-core '
          "CPU unless a GPU is named): the ViT's chain trains {} TFLOPs, 2.0x "
          "the SmallResNet's.")
  assert lines[0].endswith(cost.format(90, 30, 120))
  assert cost.format(900, 300, 1200) in lines[1]
  assert ('the ViT and SmallResNet are indistinguishable within ±4.3 points '
          '(+1.0; 95% interval, 3 paired seeds)') in lines[1]
  assert lines[-1].startswith('Every number here is chosen on the 1,000 test '
                              'images it is reported on')
  # Seeds trained on two machines: each machine's minutes, named.
  on_gpu = dict(BUDGETS[0], device='NVIDIA H100 80GB HBM3', wall_minutes=1.2)
  cost = budgets._cost([BUDGETS[1], on_gpu])
  assert cost == '10 min, 1.2 min on H100 80GB HBM3 and 60 TFLOPs'
  # A chain whose teacher has no record would undercount its cost.
  with pytest.raises(
      SystemExit, match=r'^error: vit_study\+distillation_e30_seed0 reads '
      r'simple_cnn_study_e30_seed0, which has no record: run it'):
    budgets.answer([r for r in BUDGETS if r['model'] != 'simple_cnn'])


def test_a_record_without_flops_is_counted_as_the_trainer_counts_its_recipe():
  """The trainer's counts, from summary.json, of runs of three recipes."""
  counted = summary.counted([
      {'model': model, 'recipe': recipe, 'epochs': 100, 'train_examples': 5000}
      for model, recipe in (('small_resnet', 'study+trivial_augment'),
                            ('vit', 'study+mae_pretraining'))
  ] + _seeds('vit', 'study', [0.5]))
  assert [r['train_flops']
          for r in counted] == [79_844_268_441_600, 147_622_625_280_000, 90e12]
  # Distilled from and guided by one SmallResNet run, whose forward pass
  # the trainer counts once (the student's objective with that run read).
  recipe = 'study+distillation+locality_guidance+trivial_augment+resnet_teacher'
  assert recipes.train_flops('vit', recipe, 100, 5000) == 283_785_216_000_000


def test_the_figure_draws_whole_at_any_number_of_vit_rows(tmp_path):
  """Without and with ViT rows, matplotlib fits (it warns where it cannot)."""
  for records in (CNNS, BUDGETS):
    with warnings.catch_warnings():
      warnings.simplefilter('error')
      budgets.plot(records, tmp_path / 'budgets.png')
    assert (tmp_path / 'budgets.png').stat().st_size > 0
    (tmp_path / 'budgets.png').unlink()


def test_two_committed_rows_compared_by_seed_or_a_line_naming_a_bad_row(capsys):
  """The README's intervals between rows, from the committed results.json."""
  summary.main(['--compare', 'simple_cnn:study:30', 'vit:study:30'])
  assert capsys.readouterr().out == (
      'simple_cnn:study:30 is better than vit:study:30 by 16.0 ± 3.5 points '
      '(95% interval, 3 paired seeds)\n')
  with pytest.raises(
      SystemExit, match=r'^error: results.json has no row vit:'
      r'study: name one as MODEL:RECIPE:EPOCHS'):
    summary.main(['--compare', 'vit:study', 'simple_cnn:study:30'])
