"""The training loop, counted in steps: train, log, evaluate, checkpoint.

    validate the config (config_schema) -> lock the workdir (workdir_lock)
    and check the run in it -> the input (data) -> compile the steps (steps) -> restore the newest
    checkpoint or start -> loop:
      train steps, several to a compiled call (dispatch); every
      config.log_every_steps the train metrics, every eval_every_steps an
      evaluation, every checkpoint_every_steps a checkpoint
      (run_checkpoints.RunCheckpoints); each also at the last step.

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

import concurrent.futures
import contextlib
import json
import math
import pathlib
import time

from absl import logging
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from vit_jax.checkpoints import reading
from vit_jax.checkpoints import run_checkpoints
from vit_jax.training import compilation_cache
from vit_jax import config_schema
from vit_jax import data
from vit_jax.training import dispatch
from vit_jax.objectives import distillation
from vit_jax.training import evaluation
from vit_jax.training import finetune
from vit_jax.training import flops
from vit_jax.objectives import locality_guidance
from vit_jax.objectives import losses
from vit_jax.training import metric_writer
from vit_jax.training import optimizer
from vit_jax.runtime import preemption
from vit_jax.training import progress
from vit_jax.runtime import sharding
from vit_jax import models
from vit_jax.training import steps
from vit_jax.runtime import files
from vit_jax.runtime import workdir_lock
from vit_jax.models import masked_autoencoder
from vit_jax.errors import TrainingDivergedError
from vit_jax.errors import WorkdirError

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


def check_workdir(workdir: pathlib.Path, config,
                  checkpoints: run_checkpoints.RunCheckpoints) -> dict[str, tuple]:
  """Before any data or model loads: that a run already in `workdir` is
  this config's (else ConfigError), as its config.json says or, when that
  is lost, its newest checkpoint (`reading.saved_config`). Returns the
  fields that changed harmlessly since that run
  (`config_schema.check_resumable`)."""
  if not checkpoints.steps():
    return {}
  return config_schema.check_resumable(reading.saved_config(workdir),
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


def _parameter_count(model, params) -> str:
  """'N parameters', and how many more serve only training (locality
  guidance's projections, an MAE's decoder)."""
  def size(tree):
    return sum(x.size for x in jax.tree.leaves(tree))

  total = size(params)
  kept = size(models.for_inference(model, {'params': params})[1]['params'])
  return f'{kept:,} parameters' + (
      f', and {total - kept:,} used only in training' if total > kept else '')


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
    with _sole_writer(workdir):
      return _train_and_evaluate(config, workdir, signals)
  finally:
    signals.close()


@contextlib.contextmanager
def _sole_writer(workdir: pathlib.Path):
  """The workdir's lock (`workdir_lock`), held by process 0 while the run
  lasts: every process of a job refuses the workdir when another run has
  it. What a killed writer left half written (`*.partial`) is cleared."""
  lock = workdir_lock.WorkdirLock(workdir)
  refusal = None
  if jax.process_index() == 0:
    try:
      lock.acquire()
    except WorkdirError as e:
      refusal = e
  if jax.process_count() > 1 and multihost_utils.broadcast_one_to_all(
      np.int32(refusal is not None)) and refusal is None:
    refusal = WorkdirError(f'The workdir {workdir} cannot be used; process 0 '
                           'of the job says why.')
  if refusal is not None:
    raise refusal
  try:
    if jax.process_index() == 0:
      for partial in workdir.glob('*' + files.PARTIAL_SUFFIX):
        partial.unlink(missing_ok=True)
    yield
  finally:
    lock.release()


def _stop_if_signalled(signals: preemption.Preemption,
                       checkpoints: run_checkpoints.RunCheckpoints):
  """Between the phases of start-up: a stop signal ends the run here, with
  nothing new to save."""
  if signals.reached():
    raise preemption.Preempted(signals.signal_name, checkpoints.latest_step(),
                               checkpoints.directory, saved=False)


def _train_and_evaluate(config, workdir: pathlib.Path,
                        signals: preemption.Preemption) -> dict:
  checkpoints = run_checkpoints.RunCheckpoints(workdir / 'checkpoints',
                                          config.keep_checkpoints)
  changed = check_workdir(workdir, config, checkpoints)
  # A run that resumes starts from its checkpoint, not from init_from.
  pretrained = (finetune.check_init_from(config)
                if config.init_from and not checkpoints.steps() else None)
  _stop_if_signalled(signals, checkpoints)
  mesh = sharding.make_mesh(config.fsdp)
  replicated = sharding.replicated(mesh)
  inputs = data.create_input(config, mesh)
  _stop_if_signalled(signals, checkpoints)
  plan = config_schema.step_plan(config, inputs.steps_per_epoch)
  model = models.from_config(config, inputs.num_classes)
  schedule = optimizer.create_learning_rate_schedule(config, plan)
  tx = optimizer.create_optimizer(config, schedule)
  init_key, step_key = jax.random.split(jax.random.key(config.seed))
  state_shapes = steps.state_shapes(init_key, model, tx, config.image_size,
                                    mesh)
  teacher = distillation.load_teacher(config, inputs.num_classes, replicated)
  objective = teacher.objective if teacher else losses.classification
  if teacher:
    logging.info('Distilling from the run in %s.', teacher.workdir)
  guide = locality_guidance.load_guide(config, inputs.num_classes, replicated)
  if guide:
    logging.info('Guided by the stage features of the CNN run in %s.',
                 guide.workdir)
    objective = guide.objective(objective)
  if getattr(model, 'mae_mask_ratio', 0.0):
    logging.info('Pre-training as a masked autoencoder (%d%% of the patches '
                 'hidden); the accuracy is an online probe\'s.',
                 round(100 * model.mae_mask_ratio))
    objective = masked_autoencoder.objective(objective,
                                             model.effective_patch_size)
  with concurrent.futures.ThreadPoolExecutor(1) as beside:
    # A fresh run's initialisation compiles while the steps do.
    initializer = None if checkpoints.steps() else beside.submit(
        steps.initializer, init_key, model, tx, config.image_size, mesh)
    compiled = steps.compile_steps(config, inputs, state_shapes, step_key,
                                   objective)
    initialize = initializer and initializer.result()
  sum_shapes = steps.sum_shapes(replicated)
  _stop_if_signalled(signals, checkpoints)

  restored = checkpoints.restore_latest(state_shapes, sum_shapes)
  if restored:
    state, sums, history = (restored.state, restored.train_sums,
                            restored.history)
    step, position = restored.step, restored.position
    logging.info('Resumed from %s at step %d.', checkpoints.directory / str(
        step), step)
    _record_changes(workdir, step, changed)
  else:
    if initialize is None:  # a run whose checkpoints all failed to restore
      initialize = steps.initializer(init_key, model, tx, config.image_size,
                                     mesh)
    state = initialize(init_key)
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
      '%s (%s) on %d device(s)%s: %d train / %d test examples, '
      '%d steps of batch %d (%d per epoch).', config.model,
      _parameter_count(model, state_shapes.params),
      jax.device_count(), processes, inputs.train_size, inputs.test_size,
      plan.total_steps, config.batch_size, plan.steps_per_epoch)
  if step >= plan.total_steps:
    logging.info('%s already holds all %d steps; nothing to train.', workdir,
                 plan.total_steps)

  # The model's own, in evaluation: a teacher's forward pass (distillation,
  # locality guidance) is left out, so such a run's FLOP/s undercounts its
  # work; an MAE's counts every patch, so it overcounts.
  train_flops = 3 * flops.forward_flops_per_image(
      model, steps.model_variables(state_shapes.params,
                                   state_shapes.batch_stats),
      config.image_size)
  device_peak = flops.peak_flops(jax.devices()[0].device_kind, config.dtype)
  throughput = progress.Throughput(
      step, config.batch_size, train_flops,
      device_peak and device_peak * jax.device_count())
  batches = inputs.train_batches(position)
  dispatcher = dispatch.Dispatcher(compiled, inputs, step_key)
  try:
    if step < plan.total_steps:
      _stop_if_signalled(signals, checkpoints)  # restoring was the last phase
    while step < plan.total_steps:
      count = dispatcher.next_call_steps(plan.steps_to_next_event(step))
      state, sums = dispatcher.run(state, sums,
                                   [next(batches) for _ in range(count)])
      step += count
      checkpoints.check()  # a failed background save stops the run now
      last = step == plan.total_steps
      record = {}
      if step % plan.log_every == 0 or last:
        dispatcher.drain()  # the steps' time is training time
        train = steps.averages(sums)
        sums = steps.zero_sums(replicated)
        record.update(train_loss=train['loss'],
                      train_accuracy=train['accuracy'],
                      learning_rate=float(schedule(step)),
                      **throughput.interval(step))
      if step % plan.eval_every == 0 or last:
        dispatcher.drain()  # the train steps count as training
        eval_start = time.perf_counter()
        test = evaluation.over_test_split(compiled.eval, state, inputs,
                                          f'step {step}')
        throughput.exclude(time.perf_counter() - eval_start)
        record.update(test_loss=test['loss'], test_accuracy=test['accuracy'],
                      test_examples=test['count'])
      if record:
        _check_finite(record, step, checkpoints, history)
        record = {'step': step, 'epoch': plan.epoch(step), **record,
                  'seconds': throughput.since_last_record()}
        history.append(record)
        writer.write(record)
        logging.info('%s', progress.progress_line(
            record, plan, throughput.eta(step, plan.total_steps)))
      preempted = signals.reached()
      if step % plan.checkpoint_every == 0 or last or preempted:
        if 'train_loss' not in record:  # never save a diverged state
          _check_finite({'train_loss': float(jax.device_get(sums['loss']))},
                        step, checkpoints, history)
        dispatcher.drain()
        save_start = time.perf_counter()
        checkpoints.save(step, state, sums, history, inputs.position(step),
                         run_config)
        throughput.exclude(time.perf_counter() - save_start)
      if preempted and not last:
        checkpoints.close()  # waits until the checkpoint is complete
        raise preemption.Preempted(signals.signal_name, step,
                                   checkpoints.directory, saved=True)
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
