"""The training loop, counted in steps: train, log, evaluate, checkpoint.

    validate the config (config_schema) -> hold and check the workdir, read
    config.init_from -> build the input, model, objective and compiled
    steps -> restore the newest checkpoint or start (these three:
    `startup`) -> loop:
      train steps, several to a compiled call (dispatch); every
      config.log_every_steps the train metrics, every eval_every_steps an
      evaluation (the best one's state also kept where
      config.keep_best_checkpoint: best_checkpoint), every
      checkpoint_every_steps a checkpoint (run_checkpoints.RunCheckpoints);
      each also at the last step
    -> summary.json.

A checkpoint holds everything the loop needs to go on (state, step, the
input's position, the train-metric sums of an unfinished logging interval,
the history), so a run killed at any step and rerun with the same command
logs exactly what an uninterrupted run logs. On SIGTERM or Ctrl-C the loop
finishes the calls in flight (`dispatch`), saves, and raises
`preemption.Preempted`
(`vit_jax.main` exits with status 75); all processes of a multi-process job
stop at the same step. A signal during start-up stops the run before it
trains, with nothing new to save.

Several processes (multi-host, `distributed.initialize_distributed`): every
process runs this same loop on the same global arrays; all take part in
checkpointing (orbax coordinates them), while config.json, summary.json,
metrics.jsonl and TensorBoard files are written by process 0 alone. The
workdir must be on a filesystem all processes share.
"""

import json
import math
import pathlib
import time

from absl import logging
import jax
import ml_collections

from vit_jax import config_schema
from vit_jax import models
from vit_jax.checkpoints import best_checkpoint
from vit_jax.errors import TrainingDivergedError
from vit_jax.runtime import files
from vit_jax.runtime import preemption
from vit_jax.training import compilation_cache
from vit_jax.training import dispatch
from vit_jax.training import evaluation
from vit_jax.training import flops
from vit_jax.training import metric_writer
from vit_jax.training import progress
from vit_jax.training import startup
from vit_jax.training import steps


def summarize(history: list[dict]) -> dict:
  tested = [r for r in history if 'test_accuracy' in r]
  trained = [r for r in history if 'train_accuracy' in r]
  best = max(tested, key=lambda r: r['test_accuracy'])
  return {
      'best_test_accuracy': best['test_accuracy'],
      'best_step': best['step'],
      'best_epoch': best['epoch'],
      'final_test_accuracy': tested[-1]['test_accuracy'],
      'final_train_accuracy': trained[-1]['train_accuracy'],
      'steps': history[-1]['step'],
      'epochs': history[-1]['epoch'],
      'train_seconds': sum(r['seconds'] for r in history),
  }


def _check_finite(record: dict, step: int, checkpoints, history: list[dict]):
  """Raises TrainingDivergedError if a logged loss is not finite, saying
  what is kept (and the loss it had) and how to go on from it."""
  for name in ('train_loss', 'test_loss'):
    if name in record and not math.isfinite(record[name]):
      raise TrainingDivergedError(
          f'The {name.replace("_", " ")} became {record[name]} by step '
          f'{step}; stopped without saving. '
          f'{_what_is_kept(checkpoints, history)}')


def _what_is_kept(checkpoints, history: list[dict]) -> str:
  """The newest checkpoint, the train loss logged before it, and advice
  that this workdir, which keeps its run's settings, does not refuse."""
  latest = checkpoints.latest_step()
  if latest is None:
    return ('No checkpoint had been saved yet: rerun with a lower '
            'config.learning_rate or with config.grad_clip_norm set.')
  kept = f'Kept: the newest checkpoint, step {latest} in {checkpoints.directory}'
  logged = [r for r in history if r['step'] <= latest and 'train_loss' in r]
  afresh = ('start afresh in a new workdir with a lower learning rate or '
            'gradient clipping: --workdir=NEW_DIR --config.learning_rate=LOWER '
            '(or --config.grad_clip_norm=1).')
  if not logged:
    return f'{kept}. To go on, {afresh}'
  before, lowest = logged[-1], min(logged, key=lambda r: r['train_loss'])
  kept += (f', saved after a train loss of {before["train_loss"]:.4g} '
           f'(logged at step {before["step"]})')
  if before['train_loss'] > 2 * lowest['train_loss']:
    return (f'{kept}, far above the lowest, {lowest["train_loss"]:.4g} at '
            f'step {lowest["step"]}: the run was diverging already. To go on, '
            f'{afresh}')
  return (f'{kept}. To go on from it with a lower learning rate or gradient '
          'clipping, fine-tune its weights in a new workdir (this one keeps '
          'its run\'s settings; the head, optimizer state and schedule start '
          f'afresh there): --workdir=NEW_DIR --config.init_from='
          f'{checkpoints.directory.parent} --config.learning_rate=LOWER (or '
          '--config.grad_clip_norm=1).')


def train_and_evaluate(config: ml_collections.ConfigDict,
                       workdir: str | pathlib.Path) -> dict:
  """Trains `config` in `workdir`, resuming from its newest checkpoint.

  Returns the summary: best test accuracy and its step, final accuracies.
  Raises preemption.Preempted after saving when SIGTERM arrives.
  """
  workdir = pathlib.Path(workdir).absolute()
  signals = preemption.Preemption()  # early: a SIGTERM while loading counts
  try:
    config_schema.validate(config, jax.device_count())
    compilation_cache.use(config.compilation_cache_dir)
    with startup.sole_writer(workdir):
      return _train_and_evaluate(config, workdir, signals)
  finally:
    signals.close()


def _train_and_evaluate(config, workdir: pathlib.Path,
                        signals: preemption.Preemption) -> dict:
  checkpoints, changed, pretrained = startup.check_before_data(
      config, workdir, signals)
  run, initialize = startup.build(config, workdir, checkpoints, signals)
  at = startup.restore_or_initialise(run, initialize, pretrained, changed)
  del pretrained  # host memory the run needs no more
  run_config = startup.record_run(run, at)
  return _summarise(workdir, _loop(run, at, signals, run_config))


def _throughput(run: startup.Run, step: int) -> progress.Throughput:
  # The model's own, in evaluation: a teacher's forward pass (distillation,
  # locality guidance) is left out, so such a run's FLOP/s undercounts its
  # work; an MAE's counts every patch, so it overcounts.
  train_flops = 3 * flops.forward_flops_per_image(
      run.model, models.model_variables(run.state_shapes.params,
                                       run.state_shapes.batch_stats),
      run.config.image_size)
  device_peak = flops.peak_flops(jax.devices()[0].device_kind,
                                 run.config.dtype)
  return progress.Throughput(
      step, run.config.batch_size, train_flops,
      device_peak and device_peak * jax.device_count())


def _loop(run: startup.Run, at: startup.Progress,
          signals: preemption.Preemption, run_config: dict) -> list[dict]:
  """Trains from `at` to the last step: logs, evaluates and checkpoints
  at their intervals and at the end; saves and raises Preempted on a stop
  signal. Returns the history."""
  plan, checkpoints = run.plan, run.checkpoints
  state, sums, history, step = at.state, at.sums, at.history, at.step
  # Start-up compiled the steps, unless the newest checkpoint held the
  # last step and an older one restored: then now, before the clocks start.
  dispatcher = (dispatch.Dispatcher(run.compiled, run.inputs, run.step_key)
                if step < plan.total_steps else None)
  best = best_checkpoint.BestCheckpoint(
      run.workdir, run.config.keep_best_checkpoint, history, step,
      checkpoints.steps(), run.config.keep_checkpoints,
      trains=step < plan.total_steps)
  writer = metric_writer.MetricWriter(run.workdir, history)
  throughput = _throughput(run, step)
  batches = run.inputs.train_batches(at.position)
  try:
    if step < plan.total_steps:
      signals.training()
      startup.stop_if_signalled(signals, checkpoints)  # restoring was the last phase
    while step < plan.total_steps:
      count = dispatcher.next_call_steps(plan.steps_to_next_event(step))
      state, sums = dispatcher.run(state, sums,
                                   [next(batches) for _ in range(count)])
      step += count
      checkpoints.check()  # a failed background save stops the run now
      last = step == plan.total_steps
      record, sums = _measure(run, step, last, state, sums, dispatcher,
                              throughput)
      if record:
        _check_finite(record, step, checkpoints, history)
        record = {'step': step, 'epoch': plan.epoch(step), **record,
                  'seconds': throughput.since_last_record()}
        history.append(record)
        writer.write(record)
        logging.info('%s', progress.progress_line(
            record, plan, throughput.eta(step, plan.total_steps)))
        save_start = time.perf_counter()
        best.offer(record, state, sums, history, run.inputs.position(step),
                   run_config)
        throughput.exclude(time.perf_counter() - save_start)
      preempted = signals.reached()
      if last or preempted or (step % plan.checkpoint_every == 0 and
                               checkpoints.due(step)):
        if 'train_loss' not in record:  # never save a diverged state
          _check_finite({'train_loss': float(jax.device_get(sums['loss']))},
                        step, checkpoints, history)
        dispatcher.drain()
        save_start = time.perf_counter()
        best.wait()
        checkpoints.save(step, state, sums, history,
                         run.inputs.position(step), run_config)
        best.prune(step)
        throughput.exclude(time.perf_counter() - save_start)
      if preempted and not last:
        checkpoints.close()  # waits until the checkpoint is complete
        raise preemption.Preempted(signals.signal_name, step,
                                   checkpoints.directory, saved=True)
  except BaseException:
    checkpoints.close(quietly=True)  # the error in flight says what happened
    best.close(quietly=True)
    raise
  finally:
    batches.close()
    try:
      checkpoints.close()
    finally:
      try:
        best.close()
      finally:
        writer.close()
  return history


def _measure(run: startup.Run, step: int, last: bool, state, sums,
             dispatcher: dispatch.Dispatcher,
             throughput: progress.Throughput) -> tuple[dict, dict]:
  """The train metrics of the interval ending at `step` and the test
  split's, each when its interval ends (and at the last step); returns
  them and the sums to go on with."""
  plan, record = run.plan, {}
  if step % plan.log_every == 0 or last:
    dispatcher.drain()  # the steps' time is training time
    train = steps.averages(sums)
    sums = steps.zero_sums(run.replicated)
    record.update(train_loss=train['loss'],
                  train_accuracy=train['accuracy'],
                  learning_rate=float(run.schedule(step)),
                  **throughput.interval(step))
  if step % plan.eval_every == 0 or last:
    dispatcher.drain()  # the train steps count as training
    eval_start = time.perf_counter()
    test = evaluation.over_test_split(run.compiled.eval, state, run.inputs,
                                      f'step {step}')
    throughput.exclude(time.perf_counter() - eval_start)
    record.update(test_loss=test['loss'], test_accuracy=test['accuracy'],
                  test_examples=test['count'])
  return record, sums


def _summarise(workdir: pathlib.Path, history: list[dict]) -> dict:
  """summary.json, and the log's last line."""
  # So that result tables mixing machines say which trained each run; a
  # resumed run names the machine that finished it.
  summary = {**summarize(history), 'device': jax.devices()[0].device_kind}
  if jax.process_index() == 0:
    files.write_atomically(workdir / 'summary.json',
                           json.dumps(summary, indent=2))
  logging.info(
      'Done: best test accuracy %.2f%% at step %d (epoch %g); final train '
      'accuracy %.2f%%.', 100 * summary['best_test_accuracy'],
      summary['best_step'], summary['best_epoch'],
      100 * summary['final_train_accuracy'])
  return summary
