"""Runs trained side by side on one machine: a small run (the study's
ViT-Tiny on 5,000 images) leaves most of a GPU idle, so several at once may
finish sooner than one after another.

Each run is a `vit_jax.main` process (`runs.train`), waited on by a thread
of its own. The runner asks for a free slot before it picks the next run,
so a runner that chooses what to train from the runs finished so far
(`data_efficiency/order.py`) sees every run that could finish first; with
one slot it trains exactly as one run after another. A stop signal goes on
to every run in flight (`stop_signals.sent_on_to`), each saves its step,
and the runner exits 75 once all have and every run that finished is
recorded (`stop_signals.waited_for`, from a run's start until its record
is written: the stop does not end the runner at once between a run's end
and its record); a failed run stops the runner from starting more, and it
exits with that run's error once those beside it end.
"""

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import pathlib
import sys
import time
from typing import Callable

from experiments import runs
from vit_jax.runtime import preemption
from vit_jax.runtime import stop_signals

# jax preallocates 75% of a GPU's memory per process; side by side, each run
# takes its share of 90%.
_MEMORY_FRACTION = 'XLA_PYTHON_CLIENT_MEM_FRACTION'


@dataclasses.dataclass
class _Run:
  """A run started here: what the runner describes it as, the `waited_for`
  block open until it is recorded, its thread's future, and when its
  training began and ended (`time.monotonic`, set by that thread)."""
  description: dict
  unrecorded: contextlib.ExitStack
  future: concurrent.futures.Future | None = None
  began: float | None = None
  ended: float | None = None


class SideBySide:
  """Up to `slots` runs training at once; `after_each_run` called in the
  runner's thread as runs finish (once for those that finish together). A
  context manager: leaving it waits for the runs in flight."""

  def __init__(self, slots: int, after_each_run: Callable[[], None]):
    if slots < 1:
      raise ValueError(f'slots={slots}: at least 1')
    self._slots = slots
    self._after_each_run = after_each_run
    self._pool = concurrent.futures.ThreadPoolExecutor(slots)
    self._in_flight: dict[pathlib.Path, _Run] = {}
    self._started: list[_Run] = []  # every run, for how many ran at once
    self._failure: BaseException | None = None
    if slots > 1:  # the runs' processes inherit it; a user's value stays
      os.environ.setdefault(_MEMORY_FRACTION,
                            f'{max(1, math.floor(90 / slots)) / 100:.2f}')

  def __enter__(self) -> 'SideBySide':
    return self

  def __exit__(self, exc_type, *unused_exc_info):
    self._wait(concurrent.futures.ALL_COMPLETED)
    self._pool.shutdown()
    if self._failure is not None and exc_type is None:
      raise self._failure

  def free_slot(self):
    """Returns once a run can start: fewer than `slots` in flight. Raises
    the error of a run that failed (or stopped on a signal), once the runs
    beside it have ended."""
    while len(self._in_flight) >= self._slots and self._failure is None:
      self._wait(concurrent.futures.FIRST_COMPLETED)
    say_stopped = False
    if self._failure is None and stop_signals.received():
      # The runs in flight save, stop and say so; start none after them.
      self._failure = SystemExit(preemption.PREEMPTED_EXIT_STATUS)
      say_stopped = all(run.future.done()
                        for run in self._in_flight.values())
    if self._failure is not None:
      self._wait(concurrent.futures.ALL_COMPLETED)
      if say_stopped:
        print('stopped: the runs that finished are recorded; rerun the same '
              'command to go on.', file=sys.stderr, flush=True)
      raise self._failure

  def start(self, directory: pathlib.Path, config: str, overrides: dict,
            description: dict):
    """`runs.train`'s arguments, trained in a free slot."""
    self.free_slot()
    run = _Run(description, contextlib.ExitStack())
    run.unrecorded.enter_context(stop_signals.waited_for())
    try:
      run.future = self._pool.submit(self._train, run, directory, config,
                                     overrides, description)
    except BaseException:
      run.unrecorded.close()
      raise
    self._in_flight[directory] = run
    self._started.append(run)

  def settle(self):
    """Returns once no run trains (the next choice reads them all)."""
    self._wait(concurrent.futures.ALL_COMPLETED)
    if self._failure is not None:
      raise self._failure

  def wait_for(self, directory: pathlib.Path):
    """Returns once the run in `directory` is not training here (a run
    that reads it needs it finished)."""
    while directory in self._in_flight and self._failure is None:
      self._wait(concurrent.futures.FIRST_COMPLETED)
    if self._failure is not None:
      self.free_slot()  # raises it

  @staticmethod
  def _train(run: _Run, *train_args):
    run.began = time.monotonic()
    try:
      runs.train(*train_args)
    finally:
      run.ended = time.monotonic()

  def _at_once(self, run: _Run) -> float:
    """The mean number of runs that trained while `run` did, itself
    included, weighted by time: a run that met three others for a minute
    and then trained alone for nine counts 1.3, not 4."""
    shared = 0.0
    for other in self._started:
      if other.began is not None:
        end = other.ended if other.ended is not None else run.ended
        shared += max(0.0, min(end, run.ended) - max(other.began, run.began))
    return round(shared / max(run.ended - run.began, 1e-9), 1)

  def _wait(self, return_when: str):
    if not self._in_flight:
      return
    done, _ = concurrent.futures.wait(
        [run.future for run in self._in_flight.values()],
        return_when=return_when)
    ended = {directory: run for directory, run in self._in_flight.items()
             if run.future in done}
    for directory in ended:
      del self._in_flight[directory]
    try:
      finished = False
      for directory, run in ended.items():
        error = run.future.exception()
        # A run that finished as a stop signal came stops the runner all
        # the same (`runs.run_to_its_end`), and is recorded.
        if error is None or runs.finished(directory):
          finished = True
          if self._slots > 1:  # whether it was faster: from the records
            runs.describe(directory, {**run.description,
                                      'side_by_side': self._at_once(run)},
                          'the run is kept, finished; rerun the same command '
                          'to record it')
        if error is not None:
          self._fail(error)
      if finished:
        # Not cut in two by a stop signal: the runs' workdirs may be thrown
        # away with the machine (a lent GPU's), their records kept.
        with stop_signals.not_stopped_within():
          self._after_each_run()
    finally:
      for run in ended.values():
        run.unrecorded.close()

  def _fail(self, error: BaseException):
    """Keeps the first error, to raise; says the others here, but for a
    stop's status: those runs said it already (`runs.train`)."""
    if self._failure is None:
      self._failure = error
    elif not (isinstance(error, SystemExit) and isinstance(error.code, int)):
      print(f'also: {error}', file=sys.stderr, flush=True)
