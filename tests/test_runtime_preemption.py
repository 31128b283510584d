"""SIGTERM and Ctrl-C as a request to stop, read by the loop."""

import os
import pathlib
import signal

import pytest

from tests import helpers
from vit_jax.runtime import preemption


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT],
                         ids=['SIGTERM', 'SIGINT'])
def test_a_stop_signal_is_a_request_that_the_loop_reads(signum):
  """Until the loop closes, which restores the handlers it found."""
  before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
  signals = preemption.Preemption()
  try:
    assert not signals.reached()
    signals.training()
    os.kill(os.getpid(), signum)
    helpers.wait_until(signals.reached, 5)  # the watcher thread records it
    assert signals.signal_name == ('SIGTERM'
                                   if signum == signal.SIGTERM else 'Ctrl-C')
  finally:
    signals.close()
  # The line it prints: test_runtime_stop_signals.
  assert {s: signal.getsignal(s) for s in before} == before


def test_the_message_says_what_was_saved():
  directory = pathlib.Path('/runs/a/checkpoints')
  assert str(preemption.Preempted('Ctrl-C', 12, directory, saved=True)) == (
      'Preempted (Ctrl-C): saved a checkpoint of step 12 in '
      '/runs/a/checkpoints and stopped; rerun the same command to resume.')
  assert str(preemption.Preempted('SIGTERM', 8, directory, saved=False)) == (
      'Preempted (SIGTERM): stopped before training, with nothing new to '
      'save (the checkpoint of step 8 in /runs/a/checkpoints is kept); rerun '
      'the same command to resume.')
  assert str(preemption.Preempted('SIGTERM', 0, directory, saved=False)) == (
      'Preempted (SIGTERM): stopped before training, with nothing to save '
      'yet; rerun the same command to resume.')


def test_a_single_process_that_started_jax_distributed_still_hears_sigterm():
  """As on a Cloud TPU VM: SIGTERM taken back from jax's preemption service."""
  script = (
      'import os, signal, time, jax\n'
      f'jax.distributed.initialize("127.0.0.1:{helpers.free_port()}", 1, 0)\n'
      'from vit_jax.runtime import preemption\n'
      'signals = preemption.Preemption()\n'
      'os.kill(os.getpid(), signal.SIGTERM)\n'
      'deadline = time.monotonic() + 10\n'
      'while not signals.reached() and time.monotonic() < deadline:\n'
      '  time.sleep(0.01)\n'
      'print(signals.reached(), signals.signal_name)\n')
  process = helpers.run_python('-c', script, timeout=120, status=0,
                               env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert process.stdout == 'True SIGTERM\n'
