"""experiments/runs.py: what the experiment runners share."""

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.conftest import finished_run
from tests.conftest import load_file

runs = load_file('experiments/runs.py')


def test_record_of_a_finished_run(tmp_path):
  finished_run(tmp_path / 'run')
  assert runs.finished(tmp_path / 'run')
  assert runs.record(tmp_path / 'run') == {
      'epochs': 30, 'seed': 3, 'best_test_accuracy': 0.514,
      'best_epoch': 28.0, 'final_test_accuracy': 0.513,
      'final_train_accuracy': 0.57, 'wall_minutes': 16.5, 'device': 'cpu'}


def test_record_names_the_accelerator_that_trained_the_run(tmp_path):
  finished_run(tmp_path / 'run')
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
  monkeypatch.setattr(runs.subprocess, 'run',
                      lambda *a, **k: pytest.fail('trained again'))
  runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0})
  assert not runs.finished(tmp_path / 'other')


def test_write_between_replaces_only_the_marked_table(tmp_path):
  readme = tmp_path / 'README.md'
  readme.write_text('intro\n<!-- a -->\n\nold\n\n<!-- b -->\nafter\n')
  runs.write_between(readme, '<!-- a -->', '<!-- b -->', '| new |')
  assert readme.read_text() == ('intro\n<!-- a -->\n\n| new |\n\n'
                                '<!-- b -->\nafter\n')


def test_mean_std():
  assert runs.mean_std([0.514]) == '51.4'
  assert runs.mean_std([0.5, 0.52]) == '51.0 ± 1.4'
  assert runs.mean_std([0.5, 0.52], show_n=True) == '51.0 ± 1.4 (n=2)'


def test_a_directory_without_the_subset_is_one_clear_error(tmp_path):
  with pytest.raises(SystemExit, match='no cifar-10-batches-bin/ in '
                     '--data_dir=.*point it at the 5k/1k'):
    runs.require_cifar10_subset(tmp_path)


def test_write_missing_lists_the_planned_runs_not_done_in_order(tmp_path):
  readme = tmp_path / 'README.md'
  readme.write_text(f'{runs.MISSING_START}\n{runs.MISSING_END}\n')
  runs.write_missing(readme, ['c', 'b', 'a'], {'b'})
  assert readme.read_text() == (
      f'{runs.MISSING_START}\n\n2 of 3 planned runs, in the order `run.py` '
      f'trains them:\n\n- `c`\n- `a`\n\n{runs.MISSING_END}\n')
  runs.write_missing(readme, ['b'], {'b'})
  assert 'None: all 1 planned runs have finished.' in readme.read_text()


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


def test_a_runner_killed_while_writing_its_results_leaves_a_whole_file(
    tmp_path):
  # Rewrites a 7 MB results.json, old and new records in turn, until killed
  # with -9, as a session's end kills a runner.
  results = tmp_path / 'results.json'
  writer = subprocess.Popen([sys.executable, '-c', f"""
import json, pathlib, sys
sys.path.insert(0, {str(ROOT / 'experiments')!r})
import runs
results = pathlib.Path({str(results)!r})
texts = [json.dumps([{{'seed': seed}}] * 2 ** 19) for seed in (0, 1)]
for i in range(10**6):
  runs.write_atomically(results, texts[i % 2])
"""])
  deadline = time.monotonic() + 60
  while not results.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  time.sleep(0.5)
  writer.send_signal(signal.SIGKILL)
  assert writer.wait() == -signal.SIGKILL
  records = json.loads(results.read_text())
  assert len(records) == 2 ** 19 and len({r['seed'] for r in records}) == 1
