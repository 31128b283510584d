"""experiments/side_by_side.py: runs trained at once, each waited on by a
thread; a run that reads another after it; a failure or a stop signal
ends the runner once the runs beside it end."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from experiments import runs
from experiments import side_by_side
from experiments.data_efficiency import run
from tests.helpers import finished_run
from tests.helpers import ROOT
from vit_jax.checkpoints import best_checkpoint
from vit_jax.runtime import preemption


@pytest.fixture(autouse=True)
def _memory_fraction_as_it_was():
  """SideBySide sets it for the runs' processes: not for the next test."""
  before = os.environ.get(side_by_side._MEMORY_FRACTION)  # pylint: disable=protected-access
  yield
  if before is None:
    os.environ.pop(side_by_side._MEMORY_FRACTION, None)  # pylint: disable=protected-access
  else:
    os.environ[side_by_side._MEMORY_FRACTION] = before  # pylint: disable=protected-access


class _FakeTraining:
  """A stand-in for `runs.train`: each run takes `seconds`, then finishes
  as the data-efficiency runner reads it; the spans of the runs and the
  threads `after_each_run` ran in are kept."""

  def __init__(self, seconds=0.05, fail=None):
    self.seconds, self.fail = seconds, fail
    self.spans, self.starts, self.lock = {}, [], threading.Lock()
    self.failed_at = None
    self.accuracies = {}  # (model, recipe) -> its best test accuracy

  def __call__(self, directory, config, overrides, description):
    start = time.monotonic()
    self.starts.append((start, directory.name))
    if directory.name == self.fail:
      time.sleep(0.3)  # runs start and finish beside it meanwhile
      self.failed_at = time.monotonic()
      raise SystemExit(f'error: {directory.name} stopped with exit status 1')
    time.sleep(self.seconds)
    model = config.split(':')[1]
    finished_run(directory, seed=overrides['seed'], model=model,
                 description=description,
                 epochs=float(overrides['num_epochs']),
                 best_test_accuracy=self.accuracies.get(
                     (model, description['recipe']), 0.5))
    if overrides.get('keep_best_checkpoint'):
      (directory / best_checkpoint.DIRECTORY / '12').mkdir(parents=True)
    with self.lock:
      self.spans[directory.name] = (start, time.monotonic(), overrides)

  def most_at_once(self) -> int:
    spans = list(self.spans.values())
    return max(sum(s <= start < e for s, e, _ in spans)
               for start, _, _ in spans)


def test_slots_bound_the_runs_at_once_and_each_finish_is_summarised_here(
    tmp_path, monkeypatch):
  training = _FakeTraining()
  monkeypatch.setattr(side_by_side.runs, 'train', training)
  summarised = []
  with side_by_side.SideBySide(
      3, lambda: summarised.append((threading.current_thread(),
                                    time.monotonic()))) as slots:
    for i in range(7):
      slots.start(tmp_path / f'vit_study_e30_seed{i}', 'c.py:vit',
                  {'seed': i, 'num_epochs': 30}, {'recipe': 'study'})
  assert len(training.spans) == 7 and training.most_at_once() == 3
  # Once for the runs that finished together, after the last of them.
  assert 1 <= len(summarised) <= 7
  assert {thread for thread, _ in summarised} == {threading.main_thread()}
  assert summarised[-1][1] >= max(end for _, end, _ in
                                  training.spans.values())


def test_each_run_gets_its_share_of_the_gpus_memory_unless_the_user_set_it(
    monkeypatch):
  monkeypatch.delenv(side_by_side._MEMORY_FRACTION, raising=False)  # pylint: disable=protected-access
  with side_by_side.SideBySide(4, lambda: None):
    assert os.environ[side_by_side._MEMORY_FRACTION] == '0.22'  # pylint: disable=protected-access
  os.environ[side_by_side._MEMORY_FRACTION] = '0.1'  # pylint: disable=protected-access
  with side_by_side.SideBySide(2, lambda: None):
    assert os.environ[side_by_side._MEMORY_FRACTION] == '0.1'  # pylint: disable=protected-access


def test_each_run_records_how_many_runs_trained_beside_it_over_time(
    tmp_path, monkeypatch):
  training = _FakeTraining(seconds=0.1)

  def train(directory, config, overrides, description):
    time.sleep(0.5 if overrides['seed'] == 0 else 0)  # 0.6 s against 0.1
    training(directory, config, overrides, description)

  monkeypatch.setattr(side_by_side.runs, 'train', train)
  with side_by_side.SideBySide(3, lambda: None) as slots:
    for i in range(2):
      slots.start(tmp_path / f'vit_study_e30_seed{i}', 'c.py:vit',
                  {'seed': i, 'num_epochs': 30}, {'recipe': 'study'})
    slots.settle()
    slots.start(tmp_path / 'vit_study_e30_seed2', 'c.py:vit',
                {'seed': 2, 'num_epochs': 30}, {'recipe': 'study'})
  at_once = {r['seed']: r['side_by_side']
             for r in map(runs.record, tmp_path.iterdir())}
  # Not the 3 slots, nor the 2 that met: seed 0 trained alone after 0.1 s.
  assert 1.1 <= at_once[0] <= 1.3
  assert 1.8 <= at_once[1] <= 2.0
  assert at_once[2] == 1.0


def test_a_run_that_finished_as_the_signal_came_is_recorded(tmp_path,
                                                           monkeypatch):
  """`runs.train` stops the runner (75) after a run that finished as a
  stop signal came: its record is written all the same."""
  training = _FakeTraining()

  def finished_then_stopped(directory, *args):
    training(directory, *args)
    raise SystemExit(preemption.PREEMPTED_EXIT_STATUS)

  monkeypatch.setattr(side_by_side.runs, 'train', finished_then_stopped)
  summarised = []
  with pytest.raises(SystemExit) as stopped:
    with side_by_side.SideBySide(2, lambda: summarised.append(1)) as slots:
      for i in range(3):
        slots.start(tmp_path / f'vit_study_e30_seed{i}', 'c.py:vit',
                    {'seed': i, 'num_epochs': 30}, {'recipe': 'study'})
  assert stopped.value.code == preemption.PREEMPTED_EXIT_STATUS
  assert summarised and len(training.spans) == 2  # none after the stop


_STOPPED_BEFORE_ITS_RECORD = '''
import os, pathlib, signal, sys, time
sys.path.insert(0, {root!r})
from experiments import runs, side_by_side
from vit_jax.runtime import stop_signals

folder = pathlib.Path({folder!r})

def train(directory, config, overrides, description):
  # Its process has ended and is no child a stop goes on to any more; the
  # stop comes before the runner has written its record.
  (folder / directory.name).touch()
  os.kill(os.getpid(), signal.SIGTERM)
  while not stop_signals.received():
    time.sleep(0.01)
  time.sleep(0.3)

runs.train = train
runs.catch_stop_signals()
with side_by_side.SideBySide(1, (folder / 'recorded').touch) as slots:
  for i in range(2):
    slots.start(folder / f'run{{i}}', '', {{}}, {{}})
'''


def test_a_stop_between_a_runs_end_and_its_record_waits_for_the_record(
    tmp_path):
  runner = tmp_path / 'runner.py'
  runner.write_text(_STOPPED_BEFORE_ITS_RECORD.format(root=str(ROOT),
                                                      folder=str(tmp_path)))
  process = subprocess.run([sys.executable, str(runner)], timeout=60,
                           stderr=subprocess.PIPE, text=True, check=False)
  assert process.returncode == preemption.PREEMPTED_EXIT_STATUS
  assert (tmp_path / 'recorded').exists()
  assert not (tmp_path / 'run1').exists()  # none started after the stop
  assert process.stderr.splitlines()[-1] == (
      'stopped: the runs that finished are recorded; rerun the same command '
      'to go on.')


def test_a_run_starts_only_once_the_runs_it_reads_have_finished(
    tmp_path, monkeypatch):
  training = _FakeTraining()
  monkeypatch.setattr(side_by_side.runs, 'train', training)
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=12, side_by_side=4)
  assert training.most_at_once() == 4
  readers = 0
  for start, _, overrides in training.spans.values():
    for field in ('distillation_teacher', 'locality_guidance_teacher',
                  'init_from'):
      if field in overrides:
        readers += 1
        assert training.spans[overrides[field].name][1] <= start
  assert readers and len(training.spans) == 12


def test_one_slot_trains_as_one_run_after_another(tmp_path, monkeypatch):
  training = _FakeTraining(seconds=0)
  monkeypatch.setattr(side_by_side.runs, 'train', training)
  run.train(tmp_path, tmp_path / 'data', [30], max_runs=0)
  assert training.most_at_once() == 1
  spans = sorted(training.spans.values(), key=lambda span: span[0])
  assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_a_failed_run_starts_no_more_and_is_raised_after_those_beside_it(
    tmp_path, monkeypatch):
  training = _FakeTraining(fail='vit_study_e30_seed0')
  monkeypatch.setattr(side_by_side.runs, 'train', training)
  with pytest.raises(SystemExit, match='vit_study_e30_seed0 stopped'):
    run.train(tmp_path, tmp_path / 'data', [30], max_runs=0, side_by_side=2)
  # None started once the runner could see the failure: one whose slot it
  # took while the failing run raised (its thread's clock read after that
  # run's) is the most; those beside it finished.
  late = [name for start, name in training.starts
          if start > training.failed_at]
  assert len(late) <= 1, late
  assert {name for _, name in training.starts} == set(training.spans) | {
      training.fail}
  assert len(training.spans) >= 2


_RUNNER = '''
import pathlib, sys
sys.path.insert(0, {root!r})
from experiments import runs, side_by_side
from vit_jax.checkpoints import best_checkpoint
from vit_jax.runtime import preemption

def train(directory, config, overrides, description):
  # What runs.train does with the status of its process.
  with open(directory.with_suffix('.log'), 'w') as log:
    status = runs.run_to_its_end([sys.executable, {child!r}, str(directory)],
                                 log)
  if status == preemption.PREEMPTED_EXIT_STATUS:
    raise SystemExit(status)

runs.train = train
runs.catch_stop_signals()
folder = pathlib.Path({folder!r})
with side_by_side.SideBySide(2, lambda: None) as slots:
  for i in range(4):
    slots.start(folder / f'run{{i}}', '', {{}}, {{}})
'''

_RUN = '''
import pathlib, signal, sys, time
directory = pathlib.Path(sys.argv[1])
def saved(*_):
  directory.with_suffix('.saved').touch()
  sys.exit(75)
signal.signal(signal.SIGTERM, saved)
directory.with_suffix('.started').touch()
time.sleep(60)
'''


def test_a_stop_signal_stops_every_run_beside_it_and_starts_none(tmp_path):
  child = tmp_path / 'child.py'
  child.write_text(textwrap.dedent(_RUN))
  runner = tmp_path / 'runner.py'
  runner.write_text(_RUNNER.format(root=str(ROOT), child=str(child),
                                   folder=str(tmp_path)))
  process = subprocess.Popen([sys.executable, str(runner)],
                             stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 60
  while len(list(tmp_path.glob('*.started'))) < 2:
    assert time.monotonic() < deadline and process.poll() is None
    time.sleep(0.05)
  process.send_signal(signal.SIGTERM)
  assert process.wait(timeout=60) == preemption.PREEMPTED_EXIT_STATUS
  assert sorted(p.stem for p in tmp_path.glob('*.saved')) == ['run0', 'run1']
  assert sorted(p.stem for p in tmp_path.glob('*.started')) == ['run0', 'run1']
  assert 'Traceback' not in process.stderr.read()


def test_side_by_side_the_seeds_go_to_the_rows_one_after_another_would_pick(
    tmp_path, monkeypatch):
  accuracies = {('small_resnet', 'study'): 0.69, ('vit', 'study+spt_lsa'): 0.6,
                ('vit', 'study+distillation+locality_guidance'): 0.65}
  chosen = {}
  for slots in (1, 4):
    training = _FakeTraining(seconds=0.02)
    training.accuracies = accuracies
    monkeypatch.setattr(side_by_side.runs, 'train', training)
    run.train(tmp_path / str(slots), tmp_path / 'data', [30], max_runs=0,
              side_by_side=slots)
    chosen[slots] = sorted(name for name, (*_, overrides)
                           in training.spans.items() if overrides['seed'])
  assert chosen[4] == chosen[1]
  assert 'vit_study+distillation+locality_guidance_e30_seed2' in chosen[4]
