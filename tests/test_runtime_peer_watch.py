"""A job's process killed or frozen mid-training: the other exits 1."""

import random
import re
import signal
import time

import pytest

from tests import helpers

_TIMEOUT = 3  # --lost_process_timeout


def _lose_a_process(data_dir, workdir, tmp_path, victim, signum,
                    stop=None) -> None:
  """`signum` to `victim` mid-run, then `stop` to the other; checks its end."""
  processes, logs = helpers.start_two_processes(
      helpers.write_process_config(tmp_path, data_dir), workdir, tmp_path,
      f'--lost_process_timeout={60 if stop else _TIMEOUT}', devices=4)
  step = random.randint(6, 12)  # after the first checkpoint (step 4)
  try:
    helpers.wait_for_step(processes[0], workdir, step, timeout=180)
    processes[victim].send_signal(signum)
    if stop:  # it cannot reach the lost peer: it ends the other at once
      time.sleep(3)
      processes[1 - victim].send_signal(stop)
    sent = time.monotonic()
    status = processes[1 - victim].wait(timeout=60)
    waited = time.monotonic() - sent
  finally:
    for process in processes:  # the frozen one too
      process.kill()
      process.wait()
  output = logs[1 - victim].read_text()
  at = f'(signalled at step {step}) {output[-3000:]}'
  assert status == 1 and waited < _TIMEOUT + 5, at
  lost = 'process 0 (the coordinator)' if victim == 0 else 'process 1'
  errors = [line for line in output.splitlines() if 'error' in line.lower()]
  assert len(errors) == 1 and re.fullmatch(
      f'error: Process {1 - victim} of 2 lost {re.escape(lost)} of the job '
      r'\(.*\); .* rerun all processes to resume\.', errors[0]), at
  assert not re.search('Traceback|Check failure|Fatal Python|terminate called',
                       output), at


def test_a_killed_process_ends_the_other_in_one_line(tmp_path):
  _lose_a_process(helpers.cifar10_release(tmp_path / 'data', 80),
                  tmp_path / 'run', tmp_path, 1, signal.SIGKILL)


@pytest.mark.slow  # 20 to 50 s each
@pytest.mark.parametrize('victim, signum, stop', [
    pytest.param(0, signal.SIGKILL, None, id='process 0 killed'),
    pytest.param(1, signal.SIGSTOP, None, id='process 1 frozen'),
    pytest.param(0, signal.SIGSTOP, None, id='process 0 frozen'),
    pytest.param(1, signal.SIGSTOP, signal.SIGINT,
                 id='process 1 frozen, Ctrl-C to 0'),
    pytest.param(0, signal.SIGSTOP, signal.SIGTERM,
                 id='process 0 frozen, SIGTERM to 1'),
])
def test_after_a_lost_process_a_rerun_ends_as_an_uninterrupted_run(
    uninterrupted, tmp_path, victim, signum, stop):
  data_dir, reference = uninterrupted
  workdir = tmp_path / 'run'
  _lose_a_process(data_dir, workdir, tmp_path, victim, signum, stop)
  processes, logs = helpers.start_two_processes(
      helpers.write_process_config(tmp_path, data_dir), workdir, tmp_path,
      devices=4)
  assert helpers.wait_all(processes) == [0, 0], logs[0].read_text()[-3000:]
  assert 'Resumed from' in logs[0].read_text()
  records, expected = helpers.history(workdir), helpers.history(reference)
  assert [r['step'] for r in records] == [r['step'] for r in expected]
  for record, want in zip(records, expected):
    for metric in {'train_loss', 'test_loss'} & set(want):
      assert record[metric] == pytest.approx(want[metric], abs=1e-4)
