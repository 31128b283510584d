"""SIGTERM and Ctrl-C as a request to stop, read by the loop."""

import os
import pathlib
import signal

import pytest

from vit_jax import preemption


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_is_a_request_that_the_loop_reads(signum):
  signals = preemption.Preemption()
  try:
    assert not signals.reached(1) and not signals.before_training()
    os.kill(os.getpid(), signum)
    assert signals.reached(2) and signals.before_training()
    assert signals.signal_name == {signal.SIGTERM: 'SIGTERM',
                                   signal.SIGINT: 'Ctrl-C'}[signum]
  finally:
    signals.close()
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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
