"""The checkpoint of a run's best evaluation (config.keep_best_checkpoint),
`workdir/best_checkpoint/<step>/`, beside the newest ones: what a teacher
read at its best is (config.teacher_checkpoint='best'), and what
`load_run(workdir, best=True)` reads.

Its invariant: it holds the state of the evaluation with the highest test
accuracy in the run's history (the first of equals, as the summary's
best_step), or nothing before the first evaluation. A resumed run trains
again the steps after its checkpoint, so a best saved during those steps
is deleted when it resumes and saved again when it is reached; a regular
checkpoint is saved only once the best before it is complete, so resuming
never finds a best missing.
"""

import math
import pathlib

from absl import logging

from vit_jax.checkpoints import run_checkpoints

DIRECTORY = 'best_checkpoint'


def _best_record(history: list[dict]) -> dict | None:
  tested = [r for r in history if 'test_accuracy' in r]
  return max(tested, key=lambda r: r['test_accuracy']) if tested else None


class BestCheckpoint:
  """Saves the state of each evaluation that beats every earlier one of
  the run, keeping one; does nothing for a run that keeps none.
  Multi-process: every process calls every method with the same records,
  so they decide alike."""

  def __init__(self, workdir: pathlib.Path, keep: bool, history: list[dict],
               step: int):
    """`history` and `step`: where the run resumes (empty and 0 afresh)."""
    self._checkpoints = None
    if not keep:
      return
    self._checkpoints = run_checkpoints.RunCheckpoints(workdir / DIRECTORY,
                                                       keep=1)
    ahead = self._checkpoints.delete_after(step)
    if ahead:
      logging.info('Deleted the best checkpoint of step %d, after the step '
                   'this run resumes from; it is saved again when reached.',
                   ahead[-1])
    best = _best_record(history)
    self._accuracy = best['test_accuracy'] if best else -math.inf
    held = self._checkpoints.steps()
    if held and (best is None or held[-1] != best['step']):
      # Left while the field was off for a while, or by another history.
      logging.warning('%s holds step %d, not the best evaluation of this '
                      "run's history: deleted.",
                      self._checkpoints.directory, held[-1])
      self._checkpoints.delete_after(-1)

  def offer(self, record: dict, state, train_sums: dict,
            history: list[dict], position: dict, config: dict):
    """Saves the state of `record`'s step if its test accuracy is the
    run's best so far."""
    accuracy = record.get('test_accuracy', -math.inf)
    if self._checkpoints is None or accuracy <= self._accuracy:
      return
    self._accuracy = accuracy
    self._checkpoints.save(record['step'], state, train_sums, history,
                           position, config)

  def wait(self):
    """Before a regular checkpoint: the best before it is complete."""
    if self._checkpoints is not None:
      self._checkpoints.wait()

  def close(self, quietly: bool = False):
    if self._checkpoints is not None:
      self._checkpoints.close(quietly)
