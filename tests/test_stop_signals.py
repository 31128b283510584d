"""SIGTERM and Ctrl-C as requests to stop, caught from a command's start; a
second Ctrl-C exits at once."""

import os
import signal
import subprocess
import sys
import time

from vit_jax import stop_signals


def _wait_until_received(count: int):
  deadline = time.monotonic() + 5  # the watcher thread records them
  while (len(stop_signals._received) < count and  # pylint: disable=protected-access
         time.monotonic() < deadline):
    time.sleep(0.01)


def test_signals_are_recorded_until_released(capfd):
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
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  assert capfd.readouterr().err == (
      '\nCtrl-C: stopping once the steps in flight are saved (during start-up: '
      'before training); press Ctrl-C again to stop at once, without '
      'saving.\n')


def test_a_second_ctrl_c_exits_at_once_in_one_line():
  """Even while the main thread is inside one long native call, where no
  Python-level handler runs (here: a product of large matrices, as XLA's
  compiler is for a big model)."""
  process = subprocess.Popen(
      [sys.executable, '-c',
       'import numpy as np\n'
       'from vit_jax import stop_signals\n'
       'stop_signals.catch()\n'
       'a = np.ones((6000, 6000))\n'
       'print("caught", flush=True)\n'
       'a @ a\n'],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert process.stdout.readline() == 'caught\n'
  process.send_signal(signal.SIGINT)
  time.sleep(0.2)
  process.send_signal(signal.SIGINT)
  assert process.wait(timeout=10) == stop_signals.INTERRUPTED_EXIT_STATUS
  assert process.stderr.read().strip().splitlines()[-1] == (
      'error: Interrupted again: stopped at once, without saving; rerun the '
      'same command to resume from the newest complete checkpoint.')
