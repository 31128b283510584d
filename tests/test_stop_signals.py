"""SIGTERM and Ctrl-C as requests to stop, caught from a command's start; a
second Ctrl-C exits at once."""

import os
import signal
import subprocess
import sys

from vit_jax import stop_signals


def test_signals_are_recorded_until_released():
  assert stop_signals.catch()
  try:
    assert not stop_signals.catch()  # caught already: not the caller's
    assert stop_signals.received() is None
    os.kill(os.getpid(), signal.SIGINT)
    assert stop_signals.received() == 'Ctrl-C'
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop_signals.received() == 'Ctrl-C'  # the first one counts
  finally:
    stop_signals.release()
  assert stop_signals.received() is None
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_exits_at_once_in_one_line():
  process = subprocess.run(
      [sys.executable, '-c',
       'import os, signal, time\n'
       'from vit_jax import stop_signals\n'
       'stop_signals.catch()\n'
       'os.kill(os.getpid(), signal.SIGINT)\n'
       'print(stop_signals.received(), flush=True)\n'
       'os.kill(os.getpid(), signal.SIGINT)\n'
       'time.sleep(60)\n'],
      capture_output=True, text=True, timeout=60, check=False)
  assert process.returncode == stop_signals.INTERRUPTED_EXIT_STATUS == 130
  assert process.stdout == 'Ctrl-C\n'
  assert process.stderr.strip() == (
      'error: Interrupted again: stopped at once, without saving; rerun the '
      'same command to resume from the newest complete checkpoint.')
