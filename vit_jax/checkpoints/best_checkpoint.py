"""The checkpoint of the best evaluation, `workdir/best_checkpoint/<step>/`."""

import math
import pathlib

from absl import logging

from vit_jax.checkpoints import run_checkpoints

DIRECTORY = 'best_checkpoint'


def ranked_on(record: dict) -> str | None:
  """The accuracy an evaluation is ranked on, validation's first; or None."""
  ranked = [n for n in ('validation_accuracy', 'test_accuracy') if n in record]
  return ranked[0] if ranked else None


def best_evaluation(history: list[dict]) -> dict | None:
  """The most accurate evaluation of `history` (the first of equals)."""
  evaluated = [r for r in history if ranked_on(r)]
  return max(evaluated, key=lambda r: r[ranked_on(r)], default=None)


# Its newest step is the history's best evaluation, for any regular checkpoint
# a run may resume from: hence `wait` and `prune`.
class BestCheckpoint:
  """Saves each evaluation that beats the run's earlier ones."""

  def __init__(self, workdir: pathlib.Path, keep: bool, history: list[dict],
               step: int, regular_steps: list[int], keep_regular: int,
               trains: bool = True):
    """`history`, `step`: where the run resumes; not `trains`: read only."""
    self._checkpoints = run_checkpoints.RunCheckpoints(
        workdir / DIRECTORY, keep=run_checkpoints.KEEP_ALL)
    self._keep = keep and trains
    if not trains:
      return
    self._regular, self._keep_regular = list(regular_steps), keep_regular
    # Listed by every process before any deletes.
    self._held = self._checkpoints.steps_every_process_lists()
    best = best_evaluation(history)
    self._accuracy = best[ranked_on(best)] if best else -math.inf
    kept = [s for s in self._held if s <= step]
    if not keep:
      if self._held:
        logging.warning(
            'config.keep_best_checkpoint is off: deleted %s, which this run '
            'would no longer keep up to date.', self._checkpoints.directory)
      kept = []
    elif kept and (best is None or kept[-1] != best['step']):
      # Left while the field was off for a while, or by another history.
      logging.warning(
          '%s holds step %d, not the best evaluation of this '
          "run's history (step %s): deleted.", self._checkpoints.directory,
          kept[-1], best and best['step'])
      kept = []
    elif len(kept) < len(self._held):
      logging.info(
          'Deleted the best checkpoints of steps %s, after the step this run '
          'resumes from; saved again when reached.', self._held[len(kept):])
    self._checkpoints.delete([s for s in self._held if s not in kept])
    self._held = kept

  def offer(self, record: dict, state, train_sums: dict, history: list[dict],
            position: dict, config: dict):
    """Saves `record`'s state if it is the run's best evaluation."""
    accuracy = record[ranked_on(record)] if ranked_on(record) else -math.inf
    if not self._keep or accuracy <= self._accuracy:
      return
    self._accuracy = accuracy
    self._checkpoints.save(record['step'], state, train_sums, history, position,
                           config)
    self._held.append(record['step'])

  def wait(self):
    """Before a regular checkpoint: the best before it is complete."""
    if self._keep:
      self._checkpoints.check(wait=True)

  def prune(self, saved_step: int):
    """Deletes the bests no kept regular checkpoint (`saved_step`) needs."""
    if not self._keep:
      return
    self.wait()  # orbax deletes nothing during a save
    # orbax rotates the regular steps only once this save completes.
    self._regular.append(saved_step)
    needed = {
        max((b for b in self._held if b <= regular), default=None)
        for regular in self._regular
    }
    self._checkpoints.delete([b for b in self._held if b not in needed])
    self._held = [b for b in self._held if b in needed]
    self._regular = self._regular[-self._keep_regular:]

  def close(self, quietly: bool = False):
    self._checkpoints.close(quietly)
