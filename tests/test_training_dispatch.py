"""Several train steps a compiled call: the same run, calls of a second."""

import re
import signal
import time

import jax
import numpy as np
import pytest

from tests import helpers
from tests.test_training_train import final_state
from vit_jax.runtime import preemption
from vit_jax.training import dispatch
from vit_jax.training import steps
from vit_jax.training import train


def test_many_steps_per_call_train_as_one_step_per_call(cifar10_dir, tmp_path,
                                                        monkeypatch):
  """However the steps are split into calls, logs and state are the same."""
  # 6 steps an epoch: calls cross epochs
  monkeypatch.setattr(dispatch, 'MAX_SECONDS', 1e9)  # no time limit
  made = {}
  run = dispatch.Dispatcher.run
  monkeypatch.setattr(
      dispatch.Dispatcher, 'run', lambda self, state, sums, batches:
      (made[name].append(len(batches)), run(self, state, sums, batches))[1])
  for name, per_call, log_every in (('one', 1, 7), ('many', 5, 7), ('split', 5,
                                                                    1)):
    config = helpers.tiny_config(cifar10_dir, total_steps=18,
                                 log_every_steps=log_every, eval_every_steps=8,
                                 checkpoint_every_steps=16,
                                 steps_per_dispatch=per_call)
    made[name] = []
    train.train_and_evaluate(config, tmp_path / name)
  # To steps 1, 2 (nothing timed yet: the first still in flight), 7 (log),
  # 8 (eval), 13, 14 (log), 16 (checkpoint), 18.
  assert (made['many'], made['split']) == ([1, 1, 5, 1, 5, 1, 2, 2], [1] * 18)
  assert helpers.untimed_history(tmp_path / 'many') == helpers.untimed_history(
      tmp_path / 'one')
  jax.tree.map(np.testing.assert_array_equal,
               final_state(tmp_path / 'many', 18),
               final_state(tmp_path / 'split', 18))


class _Device:
  """A compiled call's result that is ready `seconds` after the call."""

  def __init__(self, seconds: float):
    self.ready_at = time.perf_counter() + seconds

  def block_until_ready(self):
    time.sleep(max(0.0, self.ready_at - time.perf_counter()))
    return self


class _Input:
  train_data = ()

  def stack(self, batches, count):
    return batches


def _dispatcher(seconds_per_step: float, per_call: int = 32):
  queue = []  # when each call in flight will have finished

  def train(state, sums, data, stacked, count, key):
    start = max([time.perf_counter(), *(d.ready_at for d in queue)])
    done = _Device(start - time.perf_counter() + count * seconds_per_step)
    queue.append(done)
    return state, sums, done

  compiled = steps.CompiledSteps(train, None, 0.0, per_call)
  return dispatch.Dispatcher(compiled, _Input(), None)


def test_calls_grow_to_what_fits_in_a_second_of_steps(monkeypatch):
  monkeypatch.setattr(dispatch, 'MAX_SECONDS', 0.5)
  dispatcher = _dispatcher(seconds_per_step=0.05)
  counts = []
  for _ in range(4):
    counts.append(dispatcher.next_call_steps(until_event=100))
    dispatcher.run(None, None, [None] * counts[-1])
  dispatcher.drain()
  # One step, then what 0.5 s holds at 0.05 s a step (10, give or take what
  # a loaded machine's timer makes of it), never more than the event allows
  # or a call holds.
  assert counts[0] == 1 and all(7 <= c <= 13 for c in counts[2:]), counts
  assert dispatcher.next_call_steps(until_event=3) == 3
  assert _dispatcher(0.001, per_call=4).next_call_steps(100) == 1
  slow = _dispatcher(seconds_per_step=0.5)
  slow.run(None, None, [None])
  slow.drain()
  assert slow.next_call_steps(until_event=100) == 1


def test_at_most_two_calls_are_in_flight():
  dispatcher = _dispatcher(seconds_per_step=0.1)
  start = time.perf_counter()
  for _ in range(4):
    dispatcher.run(None, None, [None])
  # The fourth call returned once the third had finished, not the fourth
  # (0.4 s; a loaded machine's sleeps run late, never early).
  assert 0.3 <= time.perf_counter() - start < 0.4 + 0.15
  dispatcher.drain()
  assert time.perf_counter() - start >= 0.4


@pytest.mark.parametrize(
    'resumed',
    [False, pytest.param(True, marks=pytest.mark.slow)])  # +25 s: two runs
def test_a_stop_signal_ends_the_run_within_its_calls_in_flight(
    tmp_path, resumed):
  """SIGTERM acts once the calls in flight end; the rerun ends the same."""
  config_file = helpers.write_process_config(
      tmp_path, helpers.cifar10_release(tmp_path / 'data', 80))
  flags = ('--config.total_steps=600', '--config.steps_per_dispatch=600',
           '--config.checkpoint_every_steps=600',
           '--config.log_every_steps=600', '--config.eval_every_steps=600')
  process = helpers.start_main(config_file, tmp_path / 'run',
                               tmp_path / 'run.log', *flags)
  helpers.wait_until(
      lambda: 'steps of batch 16' in (tmp_path / 'run.log').read_text(), 120,
      process)
  time.sleep(2)  # training (about 10 ms a step), in calls of a second's steps
  sent = time.perf_counter()
  process.send_signal(signal.SIGTERM)
  assert process.wait(timeout=60) == preemption.PREEMPTED_EXIT_STATUS
  waited = time.perf_counter() - sent
  log = (tmp_path / 'run.log').read_text()
  assert 'Traceback' not in log
  # Saved mid-run, where no event was due: a loop that read the signal only
  # at the next log, evaluation or checkpoint would have finished (exit 0).
  saved = re.search(r'saved a checkpoint of step (\d+)', log)
  assert saved and 0 < int(saved.group(1)) < 600, log[-2000:]
  # Two calls of at most a second of steps, the save, the exit.
  assert waited < 2 * dispatch.MAX_SECONDS + 8, waited
  if not resumed:
    return
  for name in ('run', 'whole'):
    rerun = helpers.start_main(config_file, tmp_path / name,
                               tmp_path / f'{name}.log', *flags)
    assert rerun.wait(timeout=300) == 0
  assert helpers.untimed_history(tmp_path / 'run') == helpers.untimed_history(
      tmp_path / 'whole')
