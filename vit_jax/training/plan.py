"""The run in steps: when the loop logs, evaluates and checkpoints."""

import dataclasses

from absl import logging


@dataclasses.dataclass(frozen=True)
class StepPlan:
  """Length, warmup and intervals (each also at the last step), in steps."""
  steps_per_epoch: int
  total_steps: int
  warmup_steps: int
  log_every: int
  eval_every: int
  checkpoint_every: int

  def epoch(self, step: int) -> float:
    return round(step / self.steps_per_epoch, 4)

  def steps_to_next_event(self, step: int) -> int:
    """Steps from `step` to the next log, evaluation, checkpoint or end."""
    intervals = (self.log_every, self.eval_every, self.checkpoint_every)
    return min(self.total_steps - step, *(n - step % n for n in intervals))


def step_plan(config, steps_per_epoch: int) -> StepPlan:
  """Epoch-counted fields converted to steps, once."""
  total = config.total_steps or config.num_epochs * steps_per_epoch
  if config.total_steps and config.num_epochs:
    logging.info(
        'config.total_steps=%d sets the length; config.num_epochs=%d '
        'is not used.', config.total_steps, config.num_epochs)
  warmup = config.warmup_steps or config.warmup_epochs * steps_per_epoch
  if warmup >= total:
    logging.warning(
        'The warmup (%d steps) is not shorter than the run (%d steps): the '
        'learning rate rises all run, to its peak.', warmup, total)
    warmup = total
  return StepPlan(
      steps_per_epoch=steps_per_epoch, total_steps=total, warmup_steps=warmup,
      log_every=config.log_every_steps or steps_per_epoch,
      eval_every=config.eval_every_steps or steps_per_epoch,
      checkpoint_every=config.checkpoint_every_steps or steps_per_epoch)


def checkpoint_min_seconds(config) -> float:
  """Seconds an epoch's checkpoint waits after the newest started writing."""
  return 0.0 if config.checkpoint_every_steps else config.checkpoint_min_seconds
