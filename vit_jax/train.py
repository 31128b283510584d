"""The training loop, counted in steps: train, log, evaluate, checkpoint.

    validate the config (config_schema) -> check the workdir and the run in
    it -> the input (data) -> compile the steps (steps) -> restore the newest
    checkpoint or start -> loop:
      one train step; every config.log_every_steps the train metrics,
      every eval_every_steps an evaluation, every checkpoint_every_steps a
      checkpoint (checkpoint.RunCheckpoints); each also at the last step.

A checkpoint holds everything the loop needs to go on (state, step, the
input's position, the train-metric sums of an unfinished logging interval,
the history), so a run killed at any step and rerun with the same command
logs exactly what an uninterrupted run logs. On SIGTERM the loop finishes
the step in flight, saves, and raises `preemption.Preempted` (`vit_jax.main`
exits with status 75); all processes of a multi-process job stop at the same step.

Several processes (multi-host, `distributed.initialize_distributed`): every
process runs this same loop on the same global arrays; all take part in
checkpointing (orbax coordinates them), while config.json, summary.json,
metrics.jsonl and TensorBoard files are written by process 0 alone. The
workdir must be on a filesystem all processes share.
"""

import json
import math
import os
import pathlib
import tempfile
import time

from absl import logging
import jax
import ml_collections

from vit_jax import checkpoint
from vit_jax import config_schema
from vit_jax import data
from vit_jax import distillation
from vit_jax import finetune
from vit_jax import flops
from vit_jax import losses
from vit_jax import metric_writer
from vit_jax import optimizer
from vit_jax import preemption
from vit_jax import sharding
from vit_jax import models
from vit_jax import steps
from vit_jax import files
from vit_jax.errors import TrainingDivergedError
from vit_jax.errors import WorkdirError

# Evaluations over this many batches or more log their progress.
_EVAL_PROGRESS_BATCHES = 50


def _averages(sums) -> dict[str, float]:
  sums = jax.device_get(sums)
  return {
      'loss': float(sums['loss'] / sums['count']),
      'accuracy': float(sums['correct'] / sums['count']),
      'count': int(sums['count']),
  }


def evaluate(eval_step, state, inputs: data.Input, step: int) -> dict:
  """Loss and accuracy over every test example; logs its progress when
  the split is large."""
  sums = steps.zero_sums(sharding.replicated(inputs.mesh))
  total = inputs.num_eval_batches
  report_every = max(total // 10, 1)
  for i, (batch, mask) in enumerate(inputs.eval_batches(), 1):
    sums = eval_step(state, sums, inputs.test_data, batch, mask)
    if (total >= _EVAL_PROGRESS_BATCHES and i % report_every == 0 and
        i < total):
      jax.block_until_ready(sums)
      logging.info('step %d: evaluated %d/%d batches', step, i, total)
  return _averages(sums)


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


def _format_duration(seconds: float) -> str:
  hours, rest = divmod(int(seconds), 3600)
  minutes, seconds = divmod(rest, 60)
  return (f'{hours}:{minutes:02d}:{seconds:02d}' if hours else
          f'{minutes}:{seconds:02d}')


def _format_flops(value: float) -> str:
  for unit, scale in (('PFLOP/s', 1e15), ('TFLOP/s', 1e12),
                      ('GFLOP/s', 1e9)):
    if value >= scale:
      return f'{value / scale:.2f} {unit}'
  return f'{value / 1e6:.0f} MFLOP/s'


def _progress_line(record: dict, plan: config_schema.StepPlan,
                   eta_seconds: float) -> str:
  parts = [f'step {record["step"]}/{plan.total_steps} (epoch '
           f'{record["epoch"]:g})']
  if 'train_loss' in record:
    parts.append(f'train loss {record["train_loss"]:.4f} acc '
                 f'{100 * record["train_accuracy"]:.2f}%')
  if 'test_loss' in record:
    parts.append(f'test loss {record["test_loss"]:.4f} acc '
                 f'{100 * record["test_accuracy"]:.2f}%')
  if 'train_loss' in record:
    throughput = (f'lr {record["learning_rate"]:.2e}  '
                  f'{record["images_per_second"]:.0f} img/s  '
                  f'{_format_flops(record["flops_per_second"])}')
    if 'peak_share' in record:
      throughput += f' ({100 * record["peak_share"]:.0f}% of peak)'
    parts.append(throughput)
  parts.append(f'ETA {_format_duration(eta_seconds)}')
  return '  '.join(parts)


def _check_finite(record: dict, step: int, checkpoints):
  """Raises TrainingDivergedError if a logged loss is not finite."""
  for name in ('train_loss', 'test_loss'):
    if name in record and not math.isfinite(record[name]):
      latest = checkpoints.latest_step()
      kept = (f'The last good checkpoint, step {latest} in '
              f'{checkpoints.directory}, is kept.' if latest is not None else
              'No checkpoint had been saved yet.')
      raise TrainingDivergedError(
          f'The {name.replace("_", " ")} became {record[name]} by step '
          f'{step}; stopped without saving. {kept} Lower '
          'config.learning_rate or set config.grad_clip_norm.')


class _Throughput:
  """Training images/s and FLOP/s over each logging interval, leaving out
  the time spent evaluating and checkpointing; the ETA from the pace since
  the loop (re)started."""

  def __init__(self, start_step: int, batch_size: int,
               train_flops_per_image: float, peak: float | None):
    self._loop_start = self._interval_start = time.perf_counter()
    self._start_step = self._interval_step = start_step
    self._batch_size = batch_size
    self._excluded = 0.0
    self._flops_per_image = train_flops_per_image
    self._peak = peak
    self._last_record = self._loop_start

  def exclude(self, seconds: float):
    self._excluded += seconds

  def interval(self, step: int) -> dict:
    """Over the steps this process trained since the last call (a resumed
    interval's earlier steps were timed by the process that ran them)."""
    now = time.perf_counter()
    seconds = max(now - self._interval_start - self._excluded, 1e-9)
    images = (step - self._interval_step) * self._batch_size
    self._interval_start, self._interval_step = now, step
    self._excluded = 0.0
    rate = images / seconds
    measured = {'images_per_second': rate,
                'flops_per_second': rate * self._flops_per_image}
    if self._peak:
      measured['peak_share'] = measured['flops_per_second'] / self._peak
    return measured

  def since_last_record(self) -> float:
    """Wall seconds since the previous record (training, evaluating and
    checkpointing alike): summed, the loop's wall time."""
    now = time.perf_counter()
    seconds, self._last_record = now - self._last_record, now
    return seconds

  def eta(self, step: int, total_steps: int) -> float:
    done = step - self._start_step
    elapsed = time.perf_counter() - self._loop_start
    return elapsed / max(done, 1) * (total_steps - step)


def check_workdir(workdir: pathlib.Path, config) -> dict[str, tuple]:
  """Before any data or model loads: that `workdir` is a directory this
  process can write, and that a run already in it is this config's (else
  ConfigError), as its config.json says or, when that is lost, its newest
  checkpoint (`checkpoint.saved_config`). Returns the fields that changed
  harmlessly since that run (`config_schema.check_resumable`)."""
  if workdir.exists() and not workdir.is_dir():
    raise WorkdirError(f'The workdir {workdir} is a file: pass a directory '
                       '(new or of this run) as --workdir.')
  if jax.process_index() == 0:
    # Created where the workdir is, or would be: nothing is left behind if
    # the run then stops on bad data.
    existing = next(p for p in (workdir, *workdir.parents) if p.exists())
    try:
      os.rmdir(tempfile.mkdtemp(prefix='.write_test', dir=existing))
    except OSError as e:
      raise WorkdirError(
          f'Cannot write to the workdir {workdir} ({e.strerror or e} in '
          f'{existing}): pass a --workdir where you can create files.') from e
  has_checkpoints = any(p.name.isdigit()
                        for p in (workdir / 'checkpoints').glob('*'))
  if not has_checkpoints:
    return {}
  return config_schema.check_resumable(checkpoint.saved_config(workdir),
                                       config, workdir)


def _record_changes(workdir: pathlib.Path, step: int,
                    changed: dict[str, tuple]):
  """Logs and appends to `config_changes.jsonl` what a resumed run changed:
  config.json holds the latest values only."""
  if not changed:
    return
  logging.info('Resuming with changed %s.', ', '.join(
      f'config.{name} ({old!r} -> {new!r})'
      for name, (old, new) in changed.items()))
  if jax.process_index() == 0:
    with (workdir / 'config_changes.jsonl').open('a') as f:
      f.write(json.dumps({'step': step, 'changed': {
          name: {'before': old, 'after': new}
          for name, (old, new) in changed.items()}}) + '\n')


def train_and_evaluate(config: ml_collections.ConfigDict,
                       workdir: str | pathlib.Path) -> dict:
  """Trains `config` in `workdir`, resuming from its newest checkpoint.

  Returns the summary: best test accuracy and its step, final accuracies.
  Raises preemption.Preempted after saving when SIGTERM arrives.
  """
  workdir = pathlib.Path(workdir).absolute()
  signals = preemption.Preemption()  # early: a SIGTERM while loading counts
  try:
    return _train_and_evaluate(config, workdir, signals)
  finally:
    signals.close()


def _train_and_evaluate(config, workdir: pathlib.Path,
                        signals: preemption.Preemption) -> dict:
  config_schema.validate(config, jax.device_count())
  changed = check_workdir(workdir, config)
  checkpoints = checkpoint.RunCheckpoints(workdir / 'checkpoints',
                                          config.keep_checkpoints)
  # A run that resumes starts from its checkpoint, not from init_from.
  pretrained = (finetune.check_init_from(config)
                if config.init_from and not checkpoints.steps() else None)
  mesh = sharding.make_mesh(config.fsdp)
  replicated = sharding.replicated(mesh)
  inputs = data.create_input(config, mesh)
  plan = config_schema.step_plan(config, inputs.steps_per_epoch)
  model = models.from_config(config, inputs.num_classes)
  schedule = optimizer.create_learning_rate_schedule(config, plan)
  tx = optimizer.create_optimizer(config, schedule)
  init_key, step_key = jax.random.split(jax.random.key(config.seed))
  state_shapes = steps.state_shapes(init_key, model, tx, config.image_size,
                                    mesh)
  teacher = distillation.load_teacher(config, inputs.num_classes, replicated)
  if teacher:
    logging.info('Distilling from the run in %s.', teacher.workdir)
  compiled = steps.compile_steps(
      config, inputs, state_shapes, step_key,
      teacher.objective if teacher else losses.classification)
  sum_shapes = steps.sum_shapes(replicated)

  restored = checkpoints.restore_latest(state_shapes, sum_shapes)
  if restored:
    state, sums, history = (restored.state, restored.train_sums,
                            restored.history)
    step, position = restored.step, restored.position
    logging.info('Resumed from %s at step %d.', checkpoints.directory / str(
        step), step)
    _record_changes(workdir, step, changed)
  else:
    state = steps.initial_state(init_key, model, tx, config.image_size, mesh)
    if config.init_from:
      state = state.replace(params=jax.tree.map(
          lambda x, shape: sharding.replicate(x, shape.sharding),
          finetune.pretrained_params(config, model, state.params,
                                     pretrained),
          state_shapes.params))
      del pretrained  # host memory the run needs no more
    sums, history = steps.zero_sums(replicated), []
    step, position = 0, inputs.position(0)

  # The workdir's record of its run: config.json, and each checkpoint's
  # copy, from which a lost config.json is rebuilt (check_workdir).
  run_config = json.loads(config.to_json_best_effort())
  if jax.process_index() == 0:
    workdir.mkdir(parents=True, exist_ok=True)
    files.write_atomically(workdir / 'config.json',
                           json.dumps(run_config, indent=2))
  writer = metric_writer.MetricWriter(workdir, history)
  processes = (f' in {jax.process_count()} processes'
               if jax.process_count() > 1 else '')
  logging.info(
      '%s (%s parameters) on %d device(s)%s: %d train / %d test examples, '
      '%d steps of batch %d (%d per epoch).', config.model,
      f'{sum(x.size for x in jax.tree.leaves(state_shapes.params)):,}',
      jax.device_count(), processes, inputs.train_size, inputs.test_size,
      plan.total_steps, config.batch_size, plan.steps_per_epoch)
  if step >= plan.total_steps:
    logging.info('%s already holds all %d steps; nothing to train.', workdir,
                 plan.total_steps)

  train_flops = 3 * flops.forward_flops_per_image(
      model, steps.model_variables(state_shapes.params,
                                   state_shapes.batch_stats),
      config.image_size)
  device_peak = flops.peak_flops(jax.devices()[0].device_kind, config.dtype)
  throughput = _Throughput(step, config.batch_size, train_flops,
                           device_peak and device_peak * jax.device_count())
  batches = inputs.train_batches(position)
  try:
    # In a multi-process job, tells jax's preemption service the step this
    # run starts from, so that a SIGTERM received while loading stops it at
    # a step the loop reaches; the checkpoint of `step` exists already.
    if step and step < plan.total_steps and signals.reached(step):
      raise preemption.Preempted(step, checkpoints.directory)
    while step < plan.total_steps:
      state, sums = compiled.train(state, sums, inputs.train_data,
                                   next(batches), step_key)
      step += 1
      checkpoints.check()  # a failed background save stops the run now
      last = step == plan.total_steps
      record = {}
      if step % plan.log_every == 0 or last:
        train = _averages(sums)
        sums = steps.zero_sums(replicated)
        record.update(train_loss=train['loss'],
                      train_accuracy=train['accuracy'],
                      learning_rate=float(schedule(step)),
                      **throughput.interval(step))
      if step % plan.eval_every == 0 or last:
        jax.block_until_ready(state)  # the train steps count as training
        eval_start = time.perf_counter()
        test = evaluate(compiled.eval, state, inputs, step)
        throughput.exclude(time.perf_counter() - eval_start)
        record.update(test_loss=test['loss'], test_accuracy=test['accuracy'],
                      test_examples=test['count'])
      if record:
        _check_finite(record, step, checkpoints)
        record = {'step': step, 'epoch': plan.epoch(step), **record,
                  'seconds': throughput.since_last_record()}
        history.append(record)
        writer.write(record)
        logging.info('%s', _progress_line(
            record, plan, throughput.eta(step, plan.total_steps)))
      preempted = signals.reached(step)
      if step % plan.checkpoint_every == 0 or last or preempted:
        if 'train_loss' not in record:  # never save a diverged state
          _check_finite({'train_loss': float(jax.device_get(sums['loss']))},
                        step, checkpoints)
        jax.block_until_ready(state)
        save_start = time.perf_counter()
        checkpoints.save(step, state, sums, history, inputs.position(step),
                         run_config)
        throughput.exclude(time.perf_counter() - save_start)
      if preempted and not last:
        checkpoints.close()  # waits until the checkpoint is complete
        raise preemption.Preempted(step, checkpoints.directory)
  except BaseException:
    checkpoints.close(quietly=True)  # the error in flight says what happened
    raise
  finally:
    batches.close()
    checkpoints.close()
    writer.close()

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
