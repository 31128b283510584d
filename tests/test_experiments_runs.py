"""experiments/runs.py: what the sweeps and summaries share."""

import errno
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

from experiments import runs
from experiments.data_efficiency import budgets
from experiments.data_efficiency import summary as data_efficiency
from experiments.data_scaling import summary as data_scaling
from tests import helpers
from vit_jax.training import provenance


def test_records_of_the_planned_finished_runs(tmp_path, capsys):
  helpers.finished_run(tmp_path / 'b', model='small_resnet', finished='1')
  helpers.finished_run(tmp_path / 'c', device='NVIDIA H100 80GB HBM3')
  helpers.finished_run(tmp_path / 'not_planned')
  (tmp_path / 'interrupted').mkdir()
  results = tmp_path / 'results.json'
  planned = {
      name: {'recipe': 'study', 'train_examples': 5000}
      for name in ('a', 'b', 'c', 'interrupted')
  }
  name = lambda r: r['name']
  results.write_text(json.dumps([{'name': 'a'}, {'name': 'b'}]))
  records = runs.load_records(tmp_path, planned, results, name)
  assert sorted(records) == ['a', 'b', 'c']
  # A run the workdir holds is its own record, not the committed one.
  assert records['a'] == {'name': 'a'}
  assert (records['b'], records['c']['device']) == (dict(
      model='small_resnet', recipe='study', train_examples=5000, epochs=30,
      seed=3, best_test_accuracy=0.514, best_epoch=28.0,
      final_test_accuracy=0.513, final_train_accuracy=0.57, finished='1',
      wall_minutes=16.5, device='cpu'), 'NVIDIA H100 80GB HBM3')
  # Trained again, a run's record keeps the one it replaces.
  name_b = lambda r: 'b'
  record_b = lambda: runs.load_records(tmp_path, planned, results, name_b)['b']
  results.write_text(json.dumps([records['b']]))
  assert 'earlier_runs' not in record_b()
  # and the per-epoch logs of that run, labelled with its `finished`.
  helpers.finished_run(tmp_path / 'b', history=[{'step': 2, 'seconds': 9}],
                       best_test_accuracy=0.6, finished='2')
  (tmp_path / 'metrics.jsonl').write_text('{"run": "b", "step": 1}\n')
  again = record_b()
  assert again['best_test_accuracy'] == 0.6
  assert again['earlier_runs'] == [records['b']]
  logs = runs.logged_metrics(tmp_path, tmp_path, ['b'], name_b)
  runs.metrics_file(logs, name_b)([again], tmp_path / 'metrics.jsonl')
  assert runs.history(tmp_path) == [{'run': 'b', 'step': 2},
                                    {'run': 'b', 'finished': '1', 'step': 1}]
  results.write_text(json.dumps([again]))  # summarized again: kept
  assert record_b() == again
  logs = runs.logged_metrics(tmp_path, tmp_path, ['b'], name_b)
  assert [logs(again), logs(records['b'])] == [[{'step': 2}], [{'step': 1}]]
  # A copy of the run it replaced, gathered from elsewhere, changes nothing;
  # one without its logs is one line.
  helpers.finished_run(tmp_path / 'b', finished='1')
  assert record_b() == again
  assert 'b: left out, as a later run of it is' in capsys.readouterr().err
  with pytest.raises(SystemExit, match='b has no metrics.jsonl: copy its run'):
    runs.logged_metrics(tmp_path, tmp_path, ['b'], name_b)
  results.write_text(json.dumps([records['b']]))
  # A run cut short, or of other epochs or choices than planned: left out,
  # saying why, its committed record kept.
  planned['b'].update(epochs=30, chosen_on='test')
  for config, summary, why in (
      ({'total_steps': 2}, {}, 'as it ran config.total_steps=2, which no sweep '
       'sets'), ({}, {'epochs': 0.2}, 'as its epochs is 0, not the 30 planned'),
      ({}, {'chosen_on': 'validation'},
       'as its chosen_on is validation, not the test planned')):
    helpers.finished_run(tmp_path / 'b', config=config, **summary)
    assert record_b() == records['b']
    assert f'{tmp_path / "b"}: left out, {why}; its sweep' in capsys.readouterr(
    ).err
  # A student whose teacher here was trained again after it read one.
  learned = {'workdir': '/elsewhere/c', 'finished': '2026-01-01T00:00:00'}
  helpers.finished_run(tmp_path / 'd',
                       runs_read={'distillation_teacher': learned})
  planned['d'] = {}
  assert 'd' in runs.load_records(tmp_path, planned, results, name_b)
  (tmp_path / 'c' / 'summary.json').write_text(
      json.dumps({'epochs': 30, 'train_seconds': 9, 'finished': '2026-02-01'}))
  assert 'd' not in runs.load_records(tmp_path, planned, results, name_b)
  assert (f'{tmp_path / "d"}: left out, as it read c finished at 2026-01-01'
          'T00:00:00, which finished again at 2026-02-01.'
         ) in capsys.readouterr().err
  # Its record committed earlier is left out alike.
  results.write_text(json.dumps([runs.record(tmp_path / 'd', {})]))
  shutil.rmtree(tmp_path / 'd')
  assert 'd' not in runs.load_records(tmp_path, planned, results, lambda r: 'd')
  # A run that read another unfinished.
  helpers.finished_run(tmp_path / 'e',
                       runs_read={'init_from': {'workdir': 'a'}})
  assert 'e' not in runs.load_records(tmp_path, {'e': {}}, results, str)
  assert 'e: left out, as it read a before a finished.' in capsys.readouterr(
  ).err
  runs.load_records(tmp_path / 'typo', {}, results, str)
  assert 'typo: no such folder; the committed' in capsys.readouterr().err
  # What a run records of the runs it read: a run's summary, none of a file.
  for kept in ('best_checkpoint', 'checkpoints'):
    (tmp_path / 'e' / kept).mkdir()
  config = helpers.schema_config(
      init_from=str(tmp_path / 'c'),
      distillation_teacher=str(tmp_path / 'e' / 'best_checkpoint'))
  assert provenance.runs_read(config) == dict(
      init_from={'workdir': str(tmp_path / 'c'), 'finished': '2026-02-01'},
      distillation_teacher=dict(workdir=str(tmp_path / 'e'), checkpoint='best',
                                best_test_accuracy=0.514))
  (tmp_path / 'hf').mkdir()
  (tmp_path / 'hf' / 'config.json').write_text('{"model_type": "vit"}')
  for released in (tmp_path / 'c' / 'summary.json', tmp_path / 'hf'):
    config.init_from = str(released)
    assert 'init_from' not in provenance.runs_read(config)
  results.write_text('[{"name": "a", "se')  # cut off mid-write
  with pytest.raises(
      SystemExit, match=r'^error: .*results.json is not JSON '
      r'\(.*\); restore it with `git checkout -- results.json`'):
    runs.landed(results, name)


@pytest.mark.parametrize('summary', [data_efficiency, data_scaling])
def test_a_summary_writes_the_committed_files_from_the_committed_records(
    summary, tmp_path, monkeypatch):
  committed = summary.HERE
  for name in ('README.md', 'results.json'):
    shutil.copy(committed / name, tmp_path)
  monkeypatch.setattr(summary, 'HERE', tmp_path)
  figure = budgets if summary is data_efficiency else summary
  # The figure is drawn in a test of its own.
  monkeypatch.setattr(figure, 'plot', lambda records, path: path.touch())
  # A trial's run of one epoch in the workdir leaves the committed record.
  size = 'e30' if summary is data_efficiency else 'n5000'
  helpers.finished_run(tmp_path / 'runs' / f'vit_study_{size}_seed0',
                       epochs=1.0)
  summary.main([f'--workdir={tmp_path / "runs"}'])
  for name in ('README.md', 'results.json'):
    assert (tmp_path / name).read_text() == (committed / name).read_text()


def test_the_cells_of_a_readme():
  cpu = {'device': 'cpu', 'wall_minutes': 16.4}
  h100 = {'device': 'NVIDIA H100 80GB HBM3', 'wall_minutes': 1.24}
  assert runs.wall_time_cell([cpu, {**cpu, 'wall_minutes': 17.6}]) == '17'
  assert runs.wall_time_cell([h100]) == '1.2 on H100 80GB HBM3'
  assert runs.wall_time_cell([cpu, h100]) == '16, 1.2 on H100 80GB HBM3'
  assert runs.missing_runs(
      ['b'], {'b'}) == ('None: all 1 runs of the sweep have a record.')


def test_a_sweep_prints_vit_jax_main_lines_or_writes_a_slurm_array(
    tmp_path, capsys):
  line = runs.command(tmp_path / 'run one', 'configs/cifar_small.py:vit',
                      {'seed': 0, 'model_overrides.guided_blocks': (0, 3)})
  assert shlex.split(line) == [
      'python', '-m', 'vit_jax.main', '--config=configs/cifar_small.py:vit',
      f'--workdir={tmp_path / "run one"}', '--config.seed=0',
      '--config.model_overrides.guided_blocks=(0, 3)'
  ]
  script = tmp_path / 'jobs' / 'array.sh'  # a folder yet to make
  runs.emit(['echo a', "echo 'b c'", 'echo stopped; exit 75'], script)
  assert '#SBATCH --array=1-3\n#SBATCH --requeue\n' in script.read_text()
  # srun runs the line; a run stopped by SIGTERM (75) is requeued.
  for tool, does in (('srun', 'exec "$@"'), ('scontrol', 'echo scontrol $*')):
    (tmp_path / tool).write_text(f'#!/bin/sh\n{does}\n')
    (tmp_path / tool).chmod(0o755)
  env = {'SLURM_ARRAY_JOB_ID': '7', 'PATH': f'{tmp_path}:/usr/bin:/bin'}
  for task, said, status in ((1, 'a\n', 0), (2, 'b c\n', 0), (4, '', 1),
                             (3, 'stopped\nscontrol requeue 7_3\n', 75)):
    out = subprocess.run(['bash', script], capture_output=True, text=True,
                         env=dict(env, SLURM_ARRAY_TASK_ID=str(task)))
    assert (out.stdout, out.returncode) == (said, status)
  with pytest.raises(SystemExit, match='^error: nothing to write to a SLURM'):
    runs.emit([], script)
  runs.emit([], None)  # stdout empty, for xargs
  assert capsys.readouterr().err == ('Nothing to run: every planned command '
                                     'has run, has a record or is left out.\n')
  with pytest.raises(
      SystemExit, match='no cifar-10-batches-bin/ in '
      '--subset=.*point it at the 5k/1k'):
    runs.require_cifar10_subset(tmp_path, '--subset')


def test_a_summary_writes_all_or_none(tmp_path, capsys):
  (tmp_path / 'README.md').write_text(''.join(
      ''.join(runs.section_markers(name)) for name in ('a', 'b')))
  figure = lambda results, path: path.write_text(json.dumps(results))
  runs.write_summary(tmp_path, [{'seed': 0}], 'workdir',
                     lambda _: {'a': 'A', 'b': 'B'}, {'figure.png': figure})
  assert capsys.readouterr().out == 'A\n\nB\n'
  assert json.loads((tmp_path / 'results.json').read_text()) == [{'seed': 0}]
  assert (tmp_path / 'figure.png').read_bytes() == b'[{"seed": 0}]'
  assert all(f'\n\n{text}\n\n' in (tmp_path / 'README.md').read_text()
             for text in 'AB')
  written = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
  assert sorted(written) == ['README.md', 'figure.png', 'results.json']
  with pytest.raises(SystemExit, match='^error: no finished runs in workdir'):
    runs.write_summary(tmp_path, [], 'workdir', lambda _: {})

  def fill(results, path):
    path.write_bytes(b'half a figure')
    raise OSError(errno.ENOSPC, 'No space left on device')

  with pytest.raises(
      SystemExit, match=re.escape(
          f'error: Writing {tmp_path / "results.json"} failed (OSError: [Errno '
          '28] No space left on device); results.json, the figures and the README '
          f'are as they were. Free space there (df -h {tmp_path}).')):
    runs.write_summary(tmp_path, [{'seed': 1}], 'workdir',
                       lambda _: {'a': 'new'}, {'figure.png': fill})
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == written

  # Ctrl-C while the figure is drawn, after the new results.json and README
  # were written: one line, status 130, all three as they were.
  summary = subprocess.Popen([
      sys.executable, '-c', f"""
import pathlib, sys, time
sys.path.insert(0, {str(helpers.ROOT)!r})
from experiments import runs

def draw(results, path):
  path.write_bytes(b'half a figure')
  print('drawing', flush=True)
  time.sleep(60)

runs.catch_stop_signals()
runs.write_summary(pathlib.Path({str(tmp_path)!r}), [{{'seed': 1}}], 'w',
                   lambda _: {{'a': 'new'}}, {{'figure.png': draw}})
"""
  ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert summary.stdout.readline() == 'drawing\n'
  summary.send_signal(signal.SIGINT)
  assert summary.wait(timeout=30) == 130 and summary.stderr.read() == (
      '\nCtrl-C: stopped the summary; its results, figures and README are as '
      'the last complete summary left them.\n')
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == written


def test_a_paired_difference_is_said_as_its_interval_allows():
  vit, cnn = {0: 0.70, 1: 0.72, 2: 0.69, 9: 0.5}, {0: 0.68, 1: 0.69, 2: 0.70}
  assert runs.compared('ViT', vit, 'CNN', cnn) == (
      'ViT and CNN are indistinguishable within ±5.2 points (+1.3; 95% '
      'interval, 3 paired seeds)')
  assert runs.compared('ViT', {0: 0.7}, 'CNN',
                       {0: 0.68}) == ('+2.0 points at one seed: no interval')
  assert runs.compared('CNN', {0: 0.6, 1: 0.61}, 'ViT', {
      0: 0.7, 1: 0.7
  }) == ('ViT is better than CNN by 9.5 ± 6.4 points (95% interval, 2 paired '
         'seeds)')
  # Decided as printed: 1.1 ± 1.1 (1.100 ± 1.082) touches zero.
  close_to_cnn = dict(enumerate([.713, .72, .718, .704, .7]))
  assert runs.compared('ViT', close_to_cnn, 'CNN', dict.fromkeys(
      range(5), .7)).startswith('ViT and CNN are indistinguishable within ±1.1')
