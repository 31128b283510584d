"""SIGTERM as a request to stop, read by the loop."""

import os
import signal

from vit_jax import preemption


def test_sigterm_is_a_request_to_stop_that_the_loop_reads():
  signals = preemption.Preemption()
  try:
    assert not signals.reached(1)
    os.kill(os.getpid(), signal.SIGTERM)
    assert signals.reached(2)
  finally:
    signals.close()
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
