"""experiments/runs.py: what the experiment runners share."""

import errno
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from experiments import runs
from tests.helpers import ROOT
from tests.helpers import finished_run
from tests.helpers import random_cifar
from tests.helpers import wait_for_step
from tests.helpers import write_cifar_binary
from tests.helpers import write_process_config
from vit_jax.checkpoints import run_checkpoints
from vit_jax.runtime import preemption
from vit_jax.runtime import stop_signals

DESCRIPTION = {'recipe': 'study', 'train_examples': 5000}


def test_record_of_a_finished_run(tmp_path):
  finished_run(tmp_path / 'run', model='small_resnet', description=DESCRIPTION)
  assert runs.finished(tmp_path / 'run')
  assert runs.record(tmp_path / 'run') == {
      'model': 'small_resnet', 'recipe': 'study', 'train_examples': 5000,
      'epochs': 30, 'seed': 3, 'best_test_accuracy': 0.514,
      'best_epoch': 28.0, 'final_test_accuracy': 0.513,
      'final_train_accuracy': 0.57, 'wall_minutes': 16.5, 'device': 'cpu'}


def test_a_run_is_read_from_its_files_not_its_directory_name(tmp_path):
  finished_run(tmp_path / 'vit_e100', model='simple_cnn', seed=1,
               description={'recipe': 'b', 'train_examples': 10})
  record = runs.record(tmp_path / 'vit_e100')
  assert (record['model'], record['recipe'], record['epochs'],
          record['seed'], record['train_examples']) == (
              'simple_cnn', 'b', 30, 1, 10)


def test_record_names_the_accelerator_that_trained_the_run(tmp_path):
  finished_run(tmp_path / 'run', description=DESCRIPTION)
  summary = json.loads((tmp_path / 'run/summary.json').read_text())
  (tmp_path / 'run/summary.json').write_text(
      json.dumps({**summary, 'device': 'NVIDIA H100 80GB HBM3'}))
  assert runs.record(tmp_path / 'run')['device'] == 'NVIDIA H100 80GB HBM3'


def test_wall_time_cell_per_device():
  cpu = {'device': 'cpu', 'wall_minutes': 16.4}
  h100 = {'device': 'NVIDIA H100 80GB HBM3', 'wall_minutes': 1.24}
  assert runs.wall_time_cell([cpu, {**cpu, 'wall_minutes': 17.6}]) == '17'
  assert runs.wall_time_cell([h100]) == '1.2 on H100 80GB HBM3'
  assert runs.wall_time_cell([cpu, h100]) == '16, 1.2 on H100 80GB HBM3'


def test_train_skips_a_finished_run(tmp_path, monkeypatch):
  finished_run(tmp_path / 'run')
  monkeypatch.setattr(runs, 'run_to_its_end',
                      lambda *a, **k: pytest.fail('trained again'))
  runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0})
  assert not runs.finished(tmp_path / 'other')


def test_train_describes_the_run_before_it_starts(tmp_path, monkeypatch):
  started = []
  monkeypatch.setattr(runs, 'run_to_its_end', lambda command, log: (
      started.append(json.loads((tmp_path / 'run/run.json').read_text())),
      0)[-1])
  runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0},
             DESCRIPTION)
  assert started == [DESCRIPTION]


def test_a_failed_run_is_one_line_naming_its_log(tmp_path, monkeypatch):
  monkeypatch.setattr(runs, 'run_to_its_end', lambda command, log: 1)
  with pytest.raises(SystemExit, match='^error: run stopped with exit status '
                     f'1; its log says why: {tmp_path / "run" / "log.txt"}$'):
    runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0})


def test_a_run_that_exits_130_unasked_is_a_failure_naming_its_log(
    tmp_path, monkeypatch):
  monkeypatch.setattr(runs, 'run_to_its_end', lambda command, log: (
      stop_signals.INTERRUPTED_EXIT_STATUS))
  with pytest.raises(SystemExit, match='^error: run stopped with exit status '
                     '130; its log says why'):
    runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0})


def test_a_run_interrupted_again_stops_the_runner_in_one_line(
    tmp_path, monkeypatch, capsys):
  interrupted = []  # Ctrl-C once while it trained, then again

  def run_to_its_end(command, log):
    interrupted.append('Ctrl-C')
    return stop_signals.INTERRUPTED_EXIT_STATUS

  monkeypatch.setattr(runs, 'run_to_its_end', run_to_its_end)
  monkeypatch.setattr(stop_signals, 'received',
                      lambda: interrupted[0] if interrupted else None)
  with pytest.raises(SystemExit) as stopped:
    runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0})
  assert stopped.value.code == stop_signals.INTERRUPTED_EXIT_STATUS
  assert capsys.readouterr().err == (
      'stopped: run was interrupted again, at once, without saving; rerun the '
      'same command to resume it from its newest complete checkpoint.\n')


_RUNNER = '''
import sys
sys.path.insert(0, {root!r})
from experiments import runs
# No checkpoint is scheduled before step 100: only the signal saves one.
runs.train(runs.pathlib.Path({workdir!r}), {config!r},
           {{'checkpoint_every_steps': 100}})
'''


@pytest.mark.parametrize('signum', [
    pytest.param(signal.SIGTERM, marks=pytest.mark.slow),  # 17 s
    signal.SIGINT], ids=['SIGTERM', 'Ctrl-C'])
def test_a_signal_to_the_runner_alone_stops_its_run_after_the_save(
    tmp_path, signum):
  write_cifar_binary(tmp_path / 'data' / 'cifar-10-batches-bin', {
      'data_batch_1.bin': random_cifar(80, 10, seed=1),
      'test_batch.bin': random_cifar(37, 10, seed=3)})
  config = write_process_config(tmp_path, tmp_path / 'data')
  workdir = tmp_path / 'run'
  runner = subprocess.Popen(
      [sys.executable, '-c', _RUNNER.format(
          root=str(ROOT), workdir=str(workdir), config=str(config))],
      cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  wait_for_step(runner, workdir, 5)
  # As `kill PID` sends it: to the runner, not to its run.
  runner.send_signal(signum)
  _, errors = runner.communicate(timeout=60)
  assert runner.returncode == preemption.PREEMPTED_EXIT_STATUS
  assert errors.splitlines() == [
      'stopped: run saved its step on the signal; rerun the same command to '
      'resume it.']
  saved = run_checkpoints.RunCheckpoints(workdir / 'checkpoints', 2).steps()
  assert len(saved) == 1 and 5 <= saved[0] < 40
  assert 'Preempted (SIGTERM): saved a checkpoint' in (
      workdir / 'log.txt').read_text()


def test_load_records_reads_the_described_finished_runs(tmp_path):
  committed = {'a': {'name': 'a', 'best_test_accuracy': 0.4},
               'b': {'name': 'b', 'best_test_accuracy': 0.4}}
  finished_run(tmp_path / 'b', description={'name': 'b'})
  finished_run(tmp_path / 'c', description={'name': 'c'})
  finished_run(tmp_path / 'from_before_descriptions')
  (tmp_path / 'interrupted').mkdir()
  (tmp_path / 'interrupted/run.json').write_text('{"name": "d"}')
  records = runs.load_records(tmp_path, committed, lambda r: r['name'])
  assert sorted(records) == ['a', 'b', 'c']
  # A run the workdir holds is its own record, not the committed one.
  assert records['a'] == committed['a']
  assert records['b']['best_test_accuracy'] == 0.514


def test_write_section_replaces_only_the_marked_section(tmp_path):
  readme = tmp_path / 'README.md'
  start, end = runs.section_markers('results table')
  assert (start, end) == ('<!-- results table: written by run.py -->',
                          '<!-- end of results table -->')
  readme.write_text(f'intro\n{start}\n\nold\n\n{end}\nafter\n')
  runs.write_section(readme, 'results table', '| new |')
  assert readme.read_text() == f'intro\n{start}\n\n| new |\n\n{end}\nafter\n'


def test_mean_std():
  assert runs.mean_std([0.514]) == '51.4'
  assert runs.mean_std([0.5, 0.52]) == '51.0 ± 1.4'
  assert runs.mean_std([0.5, 0.52], show_n=True) == '51.0 ± 1.4 (n=2)'


def test_a_directory_without_the_subset_is_one_clear_error(tmp_path):
  with pytest.raises(SystemExit, match='no cifar-10-batches-bin/ in '
                     '--data_dir=.*point it at the 5k/1k'):
    runs.require_cifar10_subset(tmp_path)


def test_missing_runs_lists_the_planned_runs_not_done_in_order():
  assert runs.missing_runs(['c', 'b', 'a'], {'b'}) == (
      '2 of 3 planned runs, in the order `run.py` trains them:\n\n'
      '- `c`\n- `a`')
  assert runs.missing_runs(['b'], {'b'}) == (
      'None: all 1 planned runs have finished.')


def test_missing_runs_give_each_known_time_and_their_sum():
  section = runs.missing_runs(['c', 'b', 'a'], {'b'}, {'c': 30, 'a': None})
  assert section.startswith('2 of 3 planned runs, in the order `run.py` '
                            'trains them; about 30 min on this 2-core '
                            'machine for the 1 with a rate (')
  assert section.endswith(':\n\n- `c` (about 30 min)\n- `a`')
  assert 'about 1.5 h on' in runs.missing_runs(['c', 'a'], set(),
                                                {'c': 30, 'a': 60})


def test_cpu_minutes_scale_the_median_rate_of_the_same_recipe_or_model():
  def record(model, recipe, epochs, minutes, device='cpu'):
    return {'model': model, 'recipe': recipe, 'epochs': epochs,
            'wall_minutes': minutes, 'device': device}
  records = [record('vit', 'study', 30, 15), record('vit', 'study', 30, 21),
             record('vit', 'study', 100, 60), record('vit', 'study+x', 30, 30),
             record('vit', 'study', 30, 0.3, device='NVIDIA H100'),
             record('simple_cnn', 'study', 30, 6)]
  # The study's per epoch: 0.5, 0.7 and 0.6 (the median); the GPU's and the
  # other model's apart.
  assert runs.cpu_minutes(records, 'vit', 'study', 300) == pytest.approx(180)
  assert runs.cpu_minutes(records, 'vit', 'study+x', 100) == pytest.approx(
      100)
  # A recipe without a CPU run yet takes its model's median over all of them
  # (0.5, 0.6, 0.7 and 1.0).
  assert runs.cpu_minutes(records, 'vit', 'study+y', 10) == pytest.approx(6.5)
  assert runs.cpu_minutes(records, 'small_resnet', 'study', 30) is None


def _draw(results, path):
  path.write_bytes(json.dumps(results).encode())


def test_write_summary_writes_results_figure_and_sections(tmp_path):
  readme = tmp_path / 'README.md'
  readme.write_text(''.join(''.join(runs.section_markers(name))
                            for name in ('a', 'b')))
  runs.write_summary(tmp_path, [{'seed': 0}], 'workdir', {'a': 'A', 'b': 'B'},
                     {'figure.png': _draw})
  assert runs.landed(tmp_path / 'results.json', lambda r: 'run') == {
      'run': {'seed': 0}}
  assert (tmp_path / 'figure.png').read_bytes() == b'[{"seed": 0}]'
  assert '\n\nA\n\n' in readme.read_text()
  assert '\n\nB\n\n' in readme.read_text()
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      'README.md', 'figure.png', 'results.json']
  with pytest.raises(SystemExit, match='^error: no finished runs in workdir'):
    runs.write_summary(tmp_path, [], 'workdir', {})


def _earlier_summary(folder):
  (folder / 'README.md').write_text(''.join(runs.section_markers('a')))
  runs.write_summary(folder, [{'seed': 0}], 'workdir', {'a': 'old'},
                     {'figure.png': _draw})
  return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_summary_on_a_full_disk_is_one_line_and_leaves_the_earlier_one(
    tmp_path):
  earlier = _earlier_summary(tmp_path)

  def fill(results, path):
    path.write_bytes(b'half a figure')
    raise OSError(errno.ENOSPC, 'No space left on device')

  with pytest.raises(SystemExit, match=re.escape(
      f'error: Writing {tmp_path / "results.json"} failed (OSError: [Errno '
      '28] No space left on device); results.json, the figures and the README '
      f'are as they were. Free space there (df -h {tmp_path}).')):
    runs.write_summary(tmp_path, [{'seed': 1}], 'workdir', {'a': 'new'},
                       {'figure.png': fill})
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier


def test_a_stop_signal_to_a_runner_as_it_summarises_leaves_the_earlier_one(
    tmp_path):
  """Ctrl-C while the figure is drawn, after the new results.json and
  README were written: one line, status 130, all three as they were."""
  earlier = _earlier_summary(tmp_path)
  runner = subprocess.Popen([sys.executable, '-c', f"""
import pathlib, sys, time
sys.path.insert(0, {str(ROOT)!r})
from experiments import runs

def draw(results, path):
  path.write_bytes(b'half a figure')
  print('drawing', flush=True)
  time.sleep(60)

runs.catch_stop_signals()
runs.write_summary(pathlib.Path({str(tmp_path)!r}), [{{'seed': 1}}], 'w',
                   {{'a': 'new'}}, {{'figure.png': draw}})
"""], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert runner.stdout.readline() == 'drawing\n'
  runner.send_signal(signal.SIGINT)
  assert runner.wait(timeout=30) == 130
  assert runner.stderr.read() == (
      '\nCtrl-C: stopped the runner; its results, figures and README are as '
      'the last complete summary left them.\n')
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == earlier


def test_landed_records_by_run_name(tmp_path):
  results = tmp_path / 'results.json'
  assert not runs.landed(results, lambda r: r['name'])  # none committed yet
  results.write_text(json.dumps([{'name': 'a', 'seed': 0},
                                 {'name': 'b', 'seed': 1}]))
  assert runs.landed(results, lambda r: r['name']) == {
      'a': {'name': 'a', 'seed': 0}, 'b': {'name': 'b', 'seed': 1}}


def test_a_damaged_results_json_is_one_clear_error(tmp_path):
  results = tmp_path / 'results.json'
  results.write_text('[{"name": "a", "se')  # cut off mid-write
  with pytest.raises(SystemExit, match=r'^error: .*results.json is not JSON '
                     r'\(.*\); restore it with `git checkout -- results.json`'):
    runs.landed(results, lambda r: r['name'])


def test_integers_of_a_list_flag():
  assert runs.integers('seeds', ['0', '2'], minimum=0) == [0, 2]
  assert runs.integers('sizes', ['5000'], multiple_of=10) == [5000]
  with pytest.raises(SystemExit, match=r'^error: --epochs=30,x: use integers '
                     r'of at least 1, e\.g\. --epochs=30,100\.$'):
    runs.integers('epochs', ['30', 'x'], example='30,100')
  with pytest.raises(SystemExit, match='--sizes=15: use integers of at least '
                     '1 that are multiples of 10'):
    runs.integers('sizes', ['15'], multiple_of=10)
  with pytest.raises(SystemExit, match='--epochs=: use'):
    runs.integers('epochs', [])

