"""SIGTERM and Ctrl-C as requests to stop; a second Ctrl-C exits at once."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests import helpers
from vit_jax.runtime import stop_signals


def _wait_until_received(count: int):
  # The watcher's records.
  # pylint: disable-next=protected-access
  helpers.wait_until(lambda: len(stop_signals._received) >= count, 5)


def _send(signum, training: bool = False):
  """Sends `signum` to this process while caught, in a loop if `training`."""
  stop_signals.catch()
  try:
    stop_signals.set_training(training)
    os.kill(os.getpid(), signum)
    _wait_until_received(1)
  finally:
    stop_signals.release()


def test_signals_are_recorded_until_released_and_said_in_one_line(capfd):
  before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
  assert stop_signals.catch()
  try:
    assert not stop_signals.catch()  # caught already: not the caller's
    assert stop_signals.received() is None
    os.kill(os.getpid(), signal.SIGINT)
    _wait_until_received(1)
    assert stop_signals.received() == 'Ctrl-C'
    os.kill(os.getpid(), signal.SIGTERM)
    _wait_until_received(2)
    assert stop_signals.received() == 'Ctrl-C'  # the first one counts
  finally:
    stop_signals.release()
  assert stop_signals.received() is None
  assert {s: signal.getsignal(s) for s in before} == before
  assert capfd.readouterr().err == (
      '\nCtrl-C: stopping before training starts; press Ctrl-C again to stop '
      'at once.\n')
  # Once training, the first signal says the steps are saved; a command
  # that catches them again starts before training.
  for signum, line in (
      (signal.SIGTERM, 'SIGTERM: stopping once the steps in flight are saved.'),
      (signal.SIGINT, 'Ctrl-C: stopping once the steps in flight are saved; '
       'press Ctrl-C again to stop at once, without saving.')):
    _send(signum, training=True)
    assert capfd.readouterr().err == f'\n{line}\n'
    _send(signal.SIGTERM)
    assert capfd.readouterr().err == (
        '\nSIGTERM: stopping before training starts.\n')


def test_a_second_ctrl_c_exits_at_once_in_one_line():
  """Even inside one long native call (XLA compiling), where no handler runs."""
  process = subprocess.Popen([
      sys.executable, '-c', 'import numpy as np\n'
      'from vit_jax.runtime import stop_signals\n'
      'stop_signals.catch()\n'
      'a = np.ones((6000, 6000))\n'
      'print("caught", flush=True)\n'
      'a @ a\n'
  ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert process.stdout.readline() == 'caught\n'
  process.send_signal(signal.SIGINT)
  time.sleep(0.2)
  process.send_signal(signal.SIGINT)
  assert process.wait(timeout=10) == stop_signals.INTERRUPTED_EXIT_STATUS
  assert process.stderr.read().strip().splitlines()[-1] == (
      'error: Interrupted again: stopped at once, without saving; rerun the '
      'same command to resume from the newest complete checkpoint.')


@pytest.mark.parametrize('command, flags, what', [
    ('vit_jax.benchmark', ('--model=ViT-Tiny-CIFAR_4', '--image_size=32',
                           '--batch_size=8', '--steps=100'), 'the benchmark'),
    ('vit_jax.benchmark_input',
     ('--dataset=image_folder', '--image_size=16', '--batch_size=2',
      '--steps=200', '--rounds=1000'), 'the input benchmark'),
])
def test_a_command_with_nothing_to_save_stops_at_once_in_one_line(
    tmp_path, command, flags, what):
  """Ctrl-C while it measures: one line, status 130, no traceback."""
  if command.endswith('input'):  # an image folder to read
    helpers.write_image_folder(tmp_path, {'train': 201, 'test': 1}, ['a', 'b'])
    flags += (f'--data_dir={tmp_path}',)
  stderr = helpers.interrupted(command, *flags)  # once jax has started
  assert stderr.strip().splitlines()[-1] == (
      f'Ctrl-C: stopped {what}; it measured nothing.')
  assert 'Traceback' not in stderr


# A command started as `nohup cmd &` starts it: Ctrl-C ignored.
_CTRL_C_IGNORED = ['sh', '-c', 'trap "" INT; exec "$@"', 'sh']
_AT_ONCE = (
    'from vit_jax.runtime import stop_signals\n'
    "stop_signals.catch(at_once='stopped the test; it wrote nothing')\n")


def _stop_at_once(script: str, ready: str, ctrl_c_ignored: bool = False):
  """Runs `script` after `catch(at_once=...)`, SIGTERMs it once it prints
  `ready` and checks status 75 and the stop line last; returns stderr."""
  command = ((_CTRL_C_IGNORED if ctrl_c_ignored else []) +
             [sys.executable, '-c', _AT_ONCE + script])
  process = subprocess.Popen(command, cwd=helpers.ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  assert process.stdout.readline() == ready + '\n'
  if ctrl_c_ignored:
    process.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
      process.wait(timeout=1)
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=30)
  assert process.returncode == stop_signals.STOPPED_EXIT_STATUS
  assert stderr.splitlines()[-1] == (
      'SIGTERM: stopped the test; it wrote nothing.')
  return stderr


def test_the_stop_line_is_the_last_while_the_main_thread_logs():
  """However long the interpreter takes to exit (here 0.3 s)."""
  _stop_at_once(
      'import os, time\n'
      'exit_now = os._exit\n'
      'os._exit = lambda status: (time.sleep(0.3), exit_now(status))\n'
      'print("caught", flush=True)\n'
      'while True:\n'
      '  os.write(2, b"a log line\\n")\n'
      '  time.sleep(0.001)\n', 'caught')


def test_a_stop_at_once_waits_for_a_block_and_passes_an_ignored_ctrl_c_by(
    tmp_path):
  """Nested blocks end first; started as `nohup cmd &`, Ctrl-C passes it by."""
  done = tmp_path / 'done'
  # The ignored Ctrl-C and the SIGTERM come within the inner block's 2 s.
  stderr = _stop_at_once(
      'import pathlib, time\n'
      'with stop_signals.not_stopped_within():\n'
      '  with stop_signals.not_stopped_within():\n'
      '    print("inside", flush=True)\n'
      '    time.sleep(2)\n'
      f'  pathlib.Path({str(done)!r}).touch()\n'
      'time.sleep(60)\n', 'inside', ctrl_c_ignored=True)
  assert done.exists()
  assert stderr == '\nSIGTERM: stopped the test; it wrote nothing.\n'


def test_the_ctrl_c_tests_pass_in_a_suite_started_with_ctrl_c_ignored():
  suite = subprocess.run(
      _CTRL_C_IGNORED + [
          sys.executable, '-m', 'pytest', '-q', '-n', '0', '-p',
          'no:cacheprovider', '-k', 'until_released or SIGINT or ctrl_c_exits',
          'tests/test_runtime_stop_signals.py',
          'tests/test_runtime_preemption.py'
      ], cwd=helpers.ROOT, capture_output=True, text=True, timeout=300,
      check=False)
  assert suite.returncode == 0, suite.stdout[-3000:]
