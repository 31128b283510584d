"""experiments/runs.py: what the experiment runners share."""

import json

import pytest

from experiments import runs
from tests.conftest import finished_run

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
  monkeypatch.setattr(runs.subprocess, 'run',
                      lambda *a, **k: pytest.fail('trained again'))
  runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0})
  assert not runs.finished(tmp_path / 'other')


def test_train_describes_the_run_before_it_starts(tmp_path, monkeypatch):
  started = []
  monkeypatch.setattr(runs.subprocess, 'run', lambda command, **_: (
      started.append(json.loads((tmp_path / 'run/run.json').read_text()))))
  runs.train(tmp_path / 'run', 'configs/cifar_small.py:vit', {'seed': 0},
             DESCRIPTION)
  assert started == [DESCRIPTION]


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


def test_write_summary_writes_results_figure_and_sections(tmp_path):
  readme = tmp_path / 'README.md'
  readme.write_text(''.join(''.join(runs.section_markers(name))
                            for name in ('a', 'b')))
  drawn = []
  runs.write_summary(tmp_path, [{'seed': 0}], 'workdir', 'figure.png',
                     lambda results, path: drawn.append((results, path)),
                     {'a': 'A', 'b': 'B'})
  assert runs.landed(tmp_path / 'results.json', lambda r: 'run') == {
      'run': {'seed': 0}}
  assert drawn == [([{'seed': 0}], tmp_path / 'figure.png')]
  assert '\n\nA\n\n' in readme.read_text()
  assert '\n\nB\n\n' in readme.read_text()
  with pytest.raises(SystemExit, match='^error: no finished runs in workdir'):
    runs.write_summary(tmp_path, [], 'workdir', 'figure.png', None, {})


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

