"""experiments/headline: the sweep's stages and choices, the summary."""

import json
import os
import re
import shutil

import pytest

from experiments import runs
from experiments.data_efficiency import recipes
from experiments.headline import summary
from experiments.headline import sweep
from tests import helpers

# Stages 1 and 2 of the headline at a seed: (model, ingredients, epochs),
# validation accuracy, FLOPs. The ViT fine-tuned from the 300-epoch
# pre-training and the SmallResNet are best on validation.
FINISHED = [(('small_resnet', ('trivial_augment',), 100), 0.75, 2e15),
            (('simple_cnn', ('trivial_augment',), 100), 0.70, 1e15),
            (('vit', ('mae_pretraining',), 300), 0.4, 6e15),
            (('vit', ('mae_pretraining',), 100), 0.3, 2e15),
            *((('vit', ingredients, 100), 0.74 + 0.01 * (i == 2), 3e15)
              for i, ingredients in enumerate(sweep.VITS)),]

# The runs a seed outside --choose_on trains: the chosen SmallResNet and
# the chosen ViT's chain.
CHOSEN = [FINISHED[i] for i in (0, 2, 6)]


def _fake_run(workdir, run, validation, flops, test=0.5):
  """A finished run of 10 minutes, one evaluation logged, its best state."""
  model, _, epochs, seed = run
  directory = workdir / recipes.run_name(*run)
  logged = dict(step=9, validation_accuracy=validation, train_seconds=600)
  helpers.finished_run(directory, seed, model, history=[logged],
                       best_validation_accuracy=validation, train_flops=flops,
                       test_accuracy_at_best_step=test, epochs=epochs,
                       best_step=9, train_seconds=600)
  (directory / 'best_checkpoint' / '9').mkdir(parents=True)


def _stages_1_and_2(workdir):
  """Every candidate at seeds 0 and 1, the chosen rows alone at seed 2."""
  # On test the ViTs score 0.76, the SmallResNets 0.73, 2 points more a seed.
  for seed in (0, 1, 2):
    for run, accuracy, flops in (CHOSEN if seed == 2 else FINISHED):
      test = {'vit': 0.76, 'small_resnet': 0.73}.get(run[0], 0.5) + 0.02 * seed
      _fake_run(workdir, (*run, seed), accuracy, flops, test)


def _emitted(capsys, workdir, stage, seeds, *flags):
  """What the headline sweep's `stage` at `seeds` prints and says."""
  sweep.main([
      '--validation_dir=/v', '--study=/s', '--jpeg=/j', f'--workdir={workdir}',
      f'--stage={stage}', f'--seeds={seeds}', *flags
  ])
  return capsys.readouterr()


def _headline(capsys, workdir, stage, seeds, *flags):
  """The commands of the headline sweep's `stage` at `seeds`."""
  return _emitted(capsys, workdir, stage, seeds, *flags).out.splitlines()


def test_the_sweep_chooses_on_validation_and_matches_the_chains_flops(
    tmp_path, capsys):
  first = _headline(capsys, tmp_path, 1, '0,1')
  assert len(first) == 6  # a teacher and two pre-trainings per seed
  # A run that reads one not finished here (cut short, failed, yet to run)
  # is left out, saying so.
  early = _emitted(capsys, tmp_path / 'early', 2, '0')
  assert re.fullmatch(
      r'Left out: 3 runs that read a run not finished here \(one: vit_study\S+'
      r'_seed0, which reads \S+_seed0\)\.\n', early.err)
  assert len(early.out.splitlines()) == 1 and 'simple_cnn' in early.out
  for run in sweep.stage_runs(1, [0], [0, 1], tmp_path):
    _fake_run(tmp_path / 'early', run, 0.7, 1e15)
  second = _headline(capsys, tmp_path / 'early', 2, '0')
  # Each run of a row chooses on validation; a pre-training holds none out.
  assert [
      '--config.validation_examples=5000' in line and
      '--config.validation_dir=/v' in line and
      '--config.keep_best_checkpoint=True' in line for line in first + second
  ] == [True, False, False] * 2 + [True] * 4
  assert all('validation' not in line for line in first
             if 'mae_pretraining' in line)
  # Every run trains on the study's images as JPEG.
  assert all('--config.data_dir=/s ' in line and
             '--config.dataset=image_folder' in line for line in first + second)
  # A student reads its teacher at the epoch validation chose.
  assert [
      'distillation_teacher' in line and
      '--config.teacher_checkpoint=best' in line for line in second
  ] == [True, True, True, False]
  assert all('teacher_checkpoint' not in line for line in first)
  with pytest.raises(
      SystemExit, match=r'^error: 10 of the 10 candidate runs of '
      r'--choose_on=0,1 have no summary\.json .*gather their summaries there'):
    _headline(capsys, tmp_path, 1, '2')
  _stages_1_and_2(tmp_path)
  # Seed 2's first ViT is best there, but seed 2 does not choose.
  _fake_run(tmp_path, ('vit', sweep.VITS[0], 100, 2), 0.9, 3e15)
  third = _headline(capsys, tmp_path, 3, '2')
  # The chain's 11e15 FLOPs at the CNN's 2e13 an epoch; the chosen ViT
  # recipe without what the CNN teaches.
  assert '/vit_study+trivial_augment+long_mae_e100_seed2 ' in third[0]
  assert 'teacher' not in third[0]
  assert '/small_resnet_study+trivial_augment_e550_seed2 ' in third[1]
  assert '--config.num_epochs=550 ' in third[1]
  # Evaluated and logged every 550 * 39 // 100 steps: 100 times over its run
  # (and at its last step), as a row of 100 epochs, once an epoch.
  assert third[1].endswith(
      ' --config.eval_every_steps=214 --config.log_every_steps=214')
  assert all('every_steps' not in line for line in first + second + third[:1])
  # A finished run, trained here or gathered from elsewhere, is not run again.
  _fake_run(tmp_path, ('vit', ('trivial_augment', 'long_mae'), 100, 2), 0.7,
            3e15)
  assert _headline(capsys, tmp_path, 3, '2') == third[1:]
  seed_3 = _headline(capsys, tmp_path, 1, '3')
  for (model, ingredients, epochs), accuracy, flops in CHOSEN[:2]:
    _fake_run(tmp_path, (model, ingredients, epochs, 3), accuracy, flops)
  # A seed's controls come as the runs they read finish: the no-CNN ViT after
  # its pre-training, the FLOPs-matched CNN after the whole chain.
  assert [
      line.split(' --workdir=')[1].split()[0]
      for line in _headline(capsys, tmp_path, 3, '2,3')
  ] == [
      f'{tmp_path}/vit_study+trivial_augment+long_mae_e100_seed3',
      f'{tmp_path}/small_resnet_study+trivial_augment_e550_seed2'
  ]
  seed_3 += _headline(capsys, tmp_path, 2, '3')
  assert [line.split(' --workdir=')[1].split()[0] for line in seed_3] == [
      str(tmp_path / recipes.run_name(*run, 3)) for run, _, _ in CHOSEN
  ]
  # A finished student that read a run trained again since: named, to delete.
  student, teacher = (tmp_path / recipes.run_name(*run, 2)
                      for run, _, _ in (CHOSEN[2], CHOSEN[0]))
  for folder, fields in ((teacher, {'finished': '2'}), (student, {
      'runs_read': {'teacher': {'workdir': str(teacher), 'finished': '1'}}
  })):
    helpers.edit_json(folder / 'summary.json', **fields)
  assert _emitted(capsys, tmp_path, 2, '2').err.startswith(
      f'Stale: 1 finished run(s) of this stage read a run unfinished or '
      f'trained again since (one: {student.name}, as it read {teacher.name} '
      'finished at 1, which finished again at 2): delete their folders')


def test_the_summary_pairs_each_row_with_the_vit_by_seed(tmp_path, capsys):
  workdir, out = tmp_path / 'runs', tmp_path / 'out'
  out.mkdir()
  shutil.copy(summary.HERE / 'README.md', out)
  _stages_1_and_2(workdir)  # paired differences of exactly 3 points
  argv = [f'--workdir={workdir}', f'--folder={out}', '--seeds=0,1,2']
  with pytest.raises(SystemExit, match='^error: 6 of the 6 runs of stage 3 '):
    summary.main(argv)
  # Until then --so_far lists the runs finished yet and writes their records,
  # not another experiment's (chosen on test) there.
  helpers.finished_run(workdir / 'vit_study_e30_seed0', history=[],
                       chosen_on='test')
  summary.main(argv + ['--so_far'])
  assert len(runs.read_json(out / 'results.json')) == 2 * len(FINISHED) + 3
  assert len(runs.history(out)) == 2 * len(FINISHED) + 3
  assert ('17 runs have finished (their records: results.json, metrics.jsonl'
          '):\n\n- `simple_cnn_study+trivial_augment_e100_seed0`\n') in (
              out / 'README.md').read_text()
  capsys.readouterr()
  for model, ingredients, epochs, seed in sweep.stage_runs(
      3, [0, 1, 2], [0, 1], workdir):
    _fake_run(workdir, (model, ingredients, epochs, seed), 0.7,
              2e13 * epochs if model == 'small_resnet' else 3e15,
              0.73 + 0.02 * seed)
  with pytest.raises(
      SystemExit, match=r'^error: 12 of the 12 runs of stage 4 '
      r'have no test_1000_exact\.json.*run stage 4 of'):
    summary.main(argv)
  # Every reported run on the study's test images pixel-exact and on the
  # JPEG copy's 10,000; the ViT's class head alone on those and the study's
  # as JPEG.
  fourth = _headline(capsys, workdir, 4, '0,1,2')
  assert len(fourth) == 2 * 12 + 3 * 3
  vit = ('vit', sweep.VITS[2], 100)
  at_1 = f'{workdir / recipes.run_name(*vit, 1)}'
  on_jpeg = '--data_dir=/j --config.test_examples=0'
  assert fourth[25].startswith(
      f'python -m vit_jax.evaluate --checkpoint={at_1}/best_checkpoint '
      f'--split=test --class_head > {at_1}/class_head_test_1000.out ')
  assert ('--config.dataset=cifar10 --data_dir=../shared/data/cifar10-5k '
          in fourth[1] and 'class_head' not in fourth[1])
  assert fourth[13] == (
      f'python -m vit_jax.evaluate --checkpoint={at_1}/best_checkpoint '
      f'--split=test {on_jpeg} > {at_1}/test_10000.out && tail -n 1 '
      f'{at_1}/test_10000.out > {at_1}/test_10000.json.tmp && mv '
      f'{at_1}/test_10000.json.tmp {at_1}/test_10000.json')
  assert f'--class_head {on_jpeg} > {at_1}/class_head_test_10000.out ' in (
      fourth[31])
  # Each run scores 0.9 points less on the 10,000 than on the study's 1,000
  # as JPEG, so 1 point less on the other 9,000, and 10 points less on those
  # 1,000 pixel-exact. The class head 1 point under the two heads' average.
  for row, planned in sweep.reported(workdir, [0, 1, 2], [0, 1]).items():
    for run in planned:
      directory = workdir / recipes.run_name(*run)
      test = runs.read_json(directory /
                            'summary.json')['test_accuracy_at_best_step']
      scored = {'test_10000': test - 0.009, 'test_1000_exact': test - 0.1}
      if row == 'vit':
        scored.update(class_head_test_1000=test - 0.01,
                      class_head_test_1000_exact=test - 0.11,
                      class_head_test_10000=test - 0.019)
      for name, top1 in scored.items():
        examples = 10000 if name.endswith('10000') else 1000
        (directory / f'{name}.json').write_text(
            json.dumps({'top1': top1, 'step': 9, 'examples': examples}))
  # Done at each run's best step: stage 4 has nothing left but one whose
  # best step moved.
  assert _headline(capsys, workdir, 4, '0,1,2') == []
  moved = workdir / recipes.run_name(*vit, 1) / 'class_head_test_10000.json'
  moved.write_text(json.dumps({'top1': 0.75, 'step': 8, 'examples': 10000}))
  with pytest.raises(SystemExit, match="not of the run's best state"):
    summary.main(argv)
  assert _headline(capsys, workdir, 4, '0,1,2') == [fourth[31]]
  moved.write_text(json.dumps({'top1': 0.761, 'step': 9, 'examples': 10000}))
  # A summary.json written again (lost, then its run run again) changes
  # nothing evaluated.
  at_2 = workdir / recipes.run_name(*vit, 2)
  os.utime(at_2 / 'summary.json')
  assert _headline(capsys, workdir, 4, '0,1,2') == []
  # A run trained again after its evaluations, to the same best step, has
  # them made again; an unfinished one is left out, in a line.
  os.utime(at_2 / 'best_checkpoint' / '9')
  for evaluation in at_2.glob('*test_1*.json'):  # a second before the state
    os.utime(evaluation, (evaluation.stat().st_mtime - 1,) * 2)
  with pytest.raises(SystemExit, match="not of the run's best state"):
    summary.main(argv)
  matched = workdir / recipes.run_name(
      *sweep.reported(workdir, [2], [0, 1])['flops_matched_cnn'][0])
  (matched / 'summary.json').rename(matched / 'summary.kept')
  emitted = _emitted(capsys, workdir, 4, '0,1,2')
  assert [line.split()[3] for line in emitted.out.splitlines()
         ] == [f'--checkpoint={at_2}/best_checkpoint'] * 5
  assert emitted.err == (
      'Left out: 1 run without a summary.json and best_checkpoint/ here, '
      f'unfinished or trained elsewhere (one: {matched.name}).\n')
  (matched / 'summary.kept').rename(matched / 'summary.json')
  # A seed whose chain is unfinished has no FLOPs-matched run yet: the other
  # runs are evaluated all the same.
  teacher = workdir / recipes.run_name(
      *sweep.reported(workdir, [2], [0, 1])['cnn'][0])
  (teacher / 'summary.json').rename(teacher / 'summary.kept')
  emitted = _emitted(capsys, workdir, 4, '0,1,2')
  assert len(emitted.out.splitlines()) == 5
  assert f'trained elsewhere (one: {teacher.name})' in emitted.err
  (teacher / 'summary.kept').rename(teacher / 'summary.json')
  # A run gathered from another machine, without its state: its evaluations
  # made there stand; one missing is left out, in a line.
  shutil.rmtree(teacher / 'best_checkpoint')
  retrained = _headline(capsys, workdir, 4, '0,1,2')  # `at_2`'s alone
  assert len(retrained) == 5 and not any(teacher.name in x for x in retrained)
  (teacher / 'test_10000.json').rename(teacher / 'test_10000.kept')
  emitted = _emitted(capsys, workdir, 4, '0,1,2')
  assert emitted.out.splitlines() == retrained
  assert f'(one: {teacher.name})' in emitted.err
  (teacher / 'test_10000.kept').rename(teacher / 'test_10000.json')
  for evaluation in at_2.glob('*test_1*.json'):  # made again
    os.utime(evaluation)
  # A run trained other than as planned is left out, and the summary says so.
  epochs = teacher / 'summary.json'
  epochs.write_text(epochs.read_text().replace('"epochs": 100', '"epochs": 99'))
  left_out = f'the summary needs the runs left out above (one: {teacher.name})'
  with pytest.raises(SystemExit, match=re.escape(f'error: {left_out}')):
    summary.main(argv)
  epochs.write_text(epochs.read_text().replace('"epochs": 99', '"epochs": 100'))
  summary.main(argv)
  readme = (out / 'README.md').read_text()
  for row in (
      '| A ViT distilled from and guided by the SmallResNet | '
      'study+distillation+locality_guidance+trivial_augment+'
      'resnet_teacher+long_mae | 100 | 3 | 75.0 ± 0.0 | 78.0 ± 2.0 | '
      '68.0 ± 2.0 | 77.0 ± 2.0 | 11000 | 30 |',
      '| The SmallResNet | study+trivial_augment | 100 | 3 | 75.0 ± 0.0 '
      '| 75.0 ± 2.0 | 65.0 ± 2.0 | 74.0 ± 2.0 | 2000 | 10 |',
      '| A pure ViT | study+trivial_augment+long_mae | 100 | 3 | 70.0 ± '
      '0.0 | 75.0 ± 2.0 | 65.0 ± 2.0 | 74.0 ± 2.0 | 9000 | 20 |',
      "| The SmallResNet at the ViT chain's FLOPs | "
      'study+trivial_augment | 550 | 3 | 70.0 ± 0.0 | 75.0 ± 2.0 | '
      '65.0 ± 2.0 | 74.0 ± 2.0 | 11000 | 10 |',
      "| The first row's class head alone | study+distillation+"
      'locality_guidance+trivial_augment+resnet_teacher+long_mae | 100 | 3 '
      '|  | 77.0 ± 2.0 | 67.0 ± 2.0 | 76.0 ± 2.0 | 11000 | 30 |'):
    assert row in readme
  assert ('Chosen on the validation accuracy of seeds 0 and 1 (each '
          "candidate's, summed over them); every row is over seeds 0, 1 and "
          '2.') in readme
  better = (
      'a ViT distilled from and guided by the SmallResNet is better than '
      'the SmallResNet by 3.0 ± 0.0 points (95% interval, {} paired seeds)')
  assert (f'- The headline: on the other 9,000 (JPEG), {better.format(3)}; on '
          f"the study's 1,000 pixel-exact, {better.format(3)}.") in readme
  assert ('- What the class head alone predicts: on the other 9,000 (JPEG), '
          'the average of its two heads is better than its class head alone '
          'by 1.0 ± 0.0 points') in readme
  records = json.loads((out / 'results.json').read_text())
  assert len(records) == 23  # seed 2's: its chain and controls
  summary.main(argv[:2] + ['--seeds=0,1'])  # keeps the records of seed 2
  assert json.loads((out / 'results.json').read_text()) == records
  # Each record's logged evaluations beside them, without their seconds.
  logged = (out / 'metrics.jsonl').read_text().splitlines()
  assert [json.loads(line) for line in logged[:1]] == [{
      'run': recipes.record_name(records[0]), 'step': 9,
      'validation_accuracy': records[0]['best_validation_accuracy']
  }] and len(logged) == 23
  assert sum('class_head_test_10000' in r for r in records) == 3
  assert sum('test_1000_exact' in r for r in records) == 12
  # The headline on the seeds that chose no row, where two or more did not.
  assert 'chose nothing' not in readme
  summary.main([*argv, '--choose_on=0'])
  assert ('- The headline on seeds 1 and 2 alone, which chose nothing: on '
          f'the other 9,000 (JPEG), {better.format(2)}') in (
              out / 'README.md').read_text()
