"""Train steps handed to the devices several to one compiled call."""

import time
from typing import NamedTuple

import jax
from jax.experimental import multihost_utils
import numpy as np

from vit_jax.training import steps

# A call's most seconds; with at most two in flight, a stop signal is acted on
# within about 2 x MAX_SECONDS.
MAX_SECONDS = 1.0


class _Call(NamedTuple):
  done: jax.Array  # the state's step count after it, ready when it is
  steps: int
  start: float  # when it could start: made, and the call before it done


class Dispatcher:
  """Runs train steps in calls of `compiled.train` over stacked batches."""

  def __init__(self, compiled: steps.CompiledSteps, inputs, key: jax.Array):
    self._train, self._per_call = compiled.train, compiled.steps_per_dispatch
    self._inputs, self._key = inputs, key
    self._calls: list[_Call] = []  # in flight, oldest first
    self._seconds_per_step = None  # of the newest call finished
    self._agreed = 1  # a multi-process job's steps a call, as of its drain

  def next_call_steps(self, until_event: int) -> int:
    """Steps of the next call, with the next loop event `until_event` away."""
    fit = self._fit() if jax.process_count() == 1 else self._agreed
    return min(self._per_call, until_event, fit)

  def _fit(self) -> int:
    """The steps of `MAX_SECONDS`, as this process timed the last call."""
    per_step = self._seconds_per_step
    return 1 if per_step is None else max(1, int(MAX_SECONDS / per_step))

  def run(self, state: steps.TrainState, sums: dict,
          batches: list) -> tuple[steps.TrainState, dict]:
    """Trains on `batches` in one call; returns once the one before ends."""
    stacked = self._inputs.stack(batches, self._per_call)
    state, sums, done = self._train(state, sums, self._inputs.train_data,
                                    stacked, len(batches), self._key)
    self._calls.append(_Call(done, len(batches), time.perf_counter()))
    while len(self._calls) > 1:
      self._finish_oldest()
    return state, sums

  def drain(self):
    """Waits for every call made; processes agree on the steps of a call."""
    if self._calls:  # else nothing to wait for, nor to agree on
      while self._calls:
        self._finish_oldest()
      if jax.process_count() > 1:
        self._agreed = int(
            multihost_utils.broadcast_one_to_all(np.int32(self._fit())))

  def _finish_oldest(self):
    call = self._calls.pop(0)
    jax.block_until_ready(call.done)
    finished = time.perf_counter()
    self._seconds_per_step = (finished - call.start) / call.steps
    if self._calls:  # the next could not start before this one ended
      self._calls[0] = self._calls[0]._replace(
          start=max(self._calls[0].start, finished))
