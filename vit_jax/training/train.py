"""The training run, counted in steps, top to bottom in `train_and_evaluate`."""

# A checkpoint holds everything the loop needs to go on, so a run killed at any
# step and rerun logs exactly what an uninterrupted run logs.

import concurrent.futures
import contextlib
import functools
import json
import math
import pathlib

from absl import logging
import jax
import ml_collections

from vit_jax import config_schema
from vit_jax import data
from vit_jax.checkpoints import best_checkpoint
from vit_jax.checkpoints import digests
from vit_jax.checkpoints import reading
from vit_jax.checkpoints import run_checkpoints
from vit_jax.errors import TrainingDivergedError
from vit_jax.errors import WorkdirError
from vit_jax.runtime import files
from vit_jax.runtime import preemption
from vit_jax.runtime import sharding
from vit_jax.training import compilation_cache
from vit_jax.training import dispatch
from vit_jax.training import evaluation
from vit_jax.training import finetune
from vit_jax.training import flops
from vit_jax.training import metric_writer
from vit_jax.training import optimizer
from vit_jax.training import plan as plan_lib
from vit_jax.training import progress
from vit_jax.training import provenance
from vit_jax.training import startup
from vit_jax.training import steps


def _check_finite(record: dict, step: int, checkpoints, history: list[dict]):
  for name in ('train_loss', 'validation_loss', 'test_loss'):
    if name in record and not math.isfinite(record[name]):
      raise TrainingDivergedError(
          f'The {name.replace("_", " ")} became {record[name]} by step {step}; '
          f'stopped without saving. {_what_is_kept(checkpoints, history)}')


def _what_is_kept(checkpoints, history: list[dict]) -> str:
  """The newest checkpoint, its train loss, and advice this workdir allows."""
  if (latest := checkpoints.latest_step()) is None:
    return ('No checkpoint had been saved yet: rerun with a lower '
            'config.learning_rate or with config.grad_clip_norm set.')
  kept = f'Kept: the newest checkpoint, step {latest} in {checkpoints.directory}'
  logged = [r for r in history if r['step'] <= latest and 'train_loss' in r]
  lower = '--config.learning_rate=LOWER (or --config.grad_clip_norm=1).'
  afresh = ('start afresh in a new workdir with a lower learning rate or '
            f'gradient clipping: --workdir=NEW_DIR {lower}')
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
          f'{checkpoints.directory.parent} {lower}')


def train_and_evaluate(config: ml_collections.ConfigDict,
                       workdir: str | pathlib.Path) -> dict:
  """Trains `config` in `workdir` from its newest checkpoint; the summary."""
  if not str(workdir).strip():
    raise WorkdirError('--workdir is empty: pass the folder the run writes to.')
  workdir = pathlib.Path(workdir).absolute()
  signals = preemption.Preemption()  # first: a SIGTERM while loading counts
  clock = progress.StartupClock()
  try:
    config_schema.validate(config, jax.device_count())
    for name in config_schema.DATA_PATHS:
      config[name] = config_schema.absolute(config[name])
      if config[name] and workdir.resolve() == pathlib.Path(
          config[name]).resolve():
        raise WorkdirError(f'--workdir={workdir} is config.{name}, which the '
                           'run reads: pass a folder of its own.')
    compilation_cache.use(config.compilation_cache_dir)
    clock.lap('backend')
    with startup.sole_writer(workdir):
      return _train_and_evaluate(config, workdir, signals, clock)
  finally:
    signals.close()


def _train_and_evaluate(config, workdir: pathlib.Path,
                        signals: preemption.Preemption,
                        clock: progress.StartupClock) -> dict:
  # The code this process runs (the checkout may move while it trains), the
  # same as every other process's; the workdir: a run there must be this
  # config's; config.init_from is read and checked before any data loads.
  code = provenance.commit()
  startup.check_processes_agree(config, code, workdir)
  checkpoints = run_checkpoints.RunCheckpoints(
      workdir / 'checkpoints', config.keep_checkpoints,
      plan_lib.checkpoint_min_seconds(config))
  # Listed alike by every process, so that each takes the branches below alike.
  checkpoints.steps_every_process_lists()
  if not checkpoints.steps() and (workdir / 'summary.json').exists():
    raise WorkdirError(
        f'{workdir} holds the summary.json of a finished run but none of its '
        'checkpoints (it trained on another machine, or they were deleted): '
        'training again would overwrite its record. Pass a new --workdir, or '
        'move summary.json away to train it again.')
  changed = (config_schema.check_resumable(reading.saved_config(workdir),
                                           config, workdir)
             if checkpoints.steps() else {})
  pretrained = (finetune.check_init_from(config)
                if config.init_from and not checkpoints.steps() else None)
  signals.stop_before_training(checkpoints)

  # Mesh, input, model, optimizer, objective.
  mesh = sharding.make_mesh(config.fsdp)
  replicated = sharding.replicated(mesh)
  inputs = data.create_input(config, mesh)
  clock.lap('input')
  signals.stop_before_training(checkpoints)
  plan = plan_lib.step_plan(config, inputs.steps_per_epoch)
  model, objective, teachers = startup.trained_model_and_objective(
      config, inputs.num_classes, replicated)
  for field in ('distillation_teacher', 'locality_guidance_teacher'):
    if teacher := config[field]:  # a label means one class to both runs
      inputs.check_class_names(
          reading.class_names(reading.run_directory(teacher)),
          f'config.{field}={teacher}', 'train the teacher on these classes.')
  read = startup.runs_read(config, workdir, bool(checkpoints.steps()))
  schedule = optimizer.create_learning_rate_schedule(config, plan)
  tx = optimizer.create_optimizer(config, schedule)
  init_key, step_key = jax.random.split(jax.random.key(config.seed))
  init_args = (init_key, model, tx, config.image_size, mesh, config.ema_decay)
  state_shapes = steps.state_shapes(*init_args)
  sum_shapes = steps.sum_shapes(replicated)
  startup.check_ema(config, state_shapes)
  if config.ema_decay:
    logging.info(
        'Evaluations, and the commands that read this run, use the '
        "parameters' moving average (config.ema_decay=%g).", config.ema_decay)
  clock.lap('model')

  # Compile the steps, unless the newest checkpoint holds the last step; a
  # fresh run's initializer and the checkpoints' digest compile beside them
  # (experiments/benchmarks/README.md, Attempts, rows 21 and 31).
  compile_steps = functools.partial(steps.compile_steps, config, inputs,
                                    state_shapes, step_key, objective)
  compiled = initializer = None
  with concurrent.futures.ThreadPoolExecutor(1) as thread:
    if not checkpoints.steps():
      initializer = thread.submit(steps.initializer, *init_args)
    digest = thread.submit(digests.compile_ahead, state_shapes, sum_shapes)
    if (checkpoints.latest_step() or 0) < plan.total_steps:
      compiled = compile_steps()
    initializer = initializer and initializer.result()
    digest.result()
  clock.lap('compile')
  signals.stop_before_training(checkpoints)

  # Restore the newest checkpoint that restores, or initialize.
  if restored := checkpoints.restore_latest(state_shapes, sum_shapes):
    inputs.check_resumable(restored.position, workdir,
                           reading.class_names(workdir))
    logging.info('Resumed from %s at step %d.',
                 checkpoints.directory / str(restored.step), restored.step)
    if changed:
      startup.record_changes(workdir, restored.step, changed)
    state, sums, history, step = (restored.state, restored.train_sums,
                                  restored.history, restored.step)
    position = restored.position
  else:  # a fresh run: checkpoints that fail to restore raise instead
    state = initializer(init_key)
    if config.init_from:
      state = startup.pretrained_state(config, state, state_shapes, pretrained)
    sums, history, step = steps.zero_sums(replicated), [], 0
    position = inputs.position(0)
  del pretrained  # host memory the run needs no more
  run_config = startup.record_run(config, workdir, inputs, plan,
                                  state_shapes.params, read)
  clock.lap('restore')
  trains = step < plan.total_steps
  if not trains:
    logging.info('%s already holds all %d steps; nothing to train.', workdir,
                 plan.total_steps)
  elif compiled is None:  # the newest checkpoint failed, an older restored
    compiled = compile_steps()
    clock.lap('compile')

  # The loop: train steps, several to a compiled call (`dispatch`); log,
  # evaluate and checkpoint at their intervals and at the last step.
  best = best_checkpoint.BestCheckpoint(workdir, config.keep_best_checkpoint,
                                        history, step, checkpoints.steps(),
                                        config.keep_checkpoints, trains=trains)
  writer = metric_writer.MetricWriter(workdir, history)
  flops_per_image = flops.train_flops_per_image(model, state_shapes.variables,
                                                config.image_size, teachers)
  batches = inputs.train_batches(position)
  with contextlib.ExitStack() as closing:  # in reverse order, even on errors
    closing.callback(writer.close)
    closing.push(lambda error, *_: best.close(quietly=error is not None))
    closing.push(lambda error, *_: checkpoints.close(quietly=error is not None))
    closing.callback(batches.close)
    if trains:
      dispatcher = dispatch.Dispatcher(compiled, inputs, step_key)
      signals.training()
      signals.stop_before_training(checkpoints)  # restoring was the last phase
    clock.lap('setup')
    logging.info('%s.', clock.line())
    peak = flops.peak_flops(jax.devices()[0].device_kind, config.dtype)
    throughput = progress.Throughput(step, config.batch_size, flops_per_image,
                                     peak and peak * jax.device_count())
    while step < plan.total_steps:
      count = dispatcher.next_call_steps(plan.steps_to_next_event(step))
      with throughput.timed('input'):
        called = [next(batches) for _ in range(count)]
      with throughput.timed('steps'):
        state, sums = dispatcher.run(state, sums, called)
      step += count
      checkpoints.check()  # a failed background save stops the run now
      last = step == plan.total_steps
      record = {}
      if step % plan.log_every == 0 or last:
        with throughput.timed('steps'):
          dispatcher.drain()  # the steps' time is training time
        train, sums = steps.averages(sums), steps.zero_sums(replicated)
        # The learning rate the last step trained at.
        record.update(train_loss=train['loss'],
                      train_accuracy=train['accuracy'],
                      learning_rate=float(schedule(step - 1)),
                      **throughput.interval(step))
      if step % plan.eval_every == 0 or last:
        with throughput.timed('steps'):
          dispatcher.drain()  # the train steps count as training
        for split in inputs.eval_sizes:
          with throughput.timed('evaluation'):
            result = evaluation.over_split(compiled.eval, state, inputs, split,
                                           f'step {step}')
          record[f'{split}_loss'] = result['loss']
          record[f'{split}_accuracy'] = result['accuracy']
          record[f'{split}_examples'] = result['count']
      if record:
        _check_finite(record, step, checkpoints, history)
        record = dict(step=step, epoch=plan.epoch(step), **record,
                      **throughput.since_last_record())
        history.append(record)
        writer.write(record)
        eta = throughput.eta(step, plan.total_steps)
        logging.info('%s', progress.progress_line(record, plan, eta))
        with throughput.timed('checkpoint'):
          best.offer(record, state, sums, history, inputs.position(step),
                     run_config)
      preempted = signals.reached()
      if last or preempted or (step % plan.checkpoint_every == 0 and
                               checkpoints.due(step)):
        with throughput.timed('steps'):
          dispatcher.drain()
        if 'train_loss' not in record:  # never save a diverged state
          _check_finite({'train_loss': float(jax.device_get(sums['loss']))},
                        step, checkpoints, history)
        with throughput.timed('checkpoint'):
          best.wait()
          checkpoints.save(step, state, sums, history, inputs.position(step),
                           run_config)
          best.prune(step)
      if preempted and not last:
        checkpoints.close()  # waits until the checkpoint is complete
        raise preemption.Preempted(signals.signal_name, step,
                                   checkpoints.directory, saved=True)

  # The summary; a run that trained no step here keeps its own as it was:
  # the machine, the FLOPs rule and the checkout that trained it.
  if not trains and (earlier := workdir / 'summary.json').is_file():
    return _said_done(json.loads(earlier.read_text()))
  source = {**provenance.describe(read, code), 'startup_seconds': clock.phases}
  return _said_done(
      _write_summary(workdir, history, config.batch_size * flops_per_image,
                     source))


def _write_summary(workdir: pathlib.Path, history: list[dict],
                   flops_per_step: int, source: dict) -> dict:
  """summary.json: the best evaluation and the last."""
  best = best_checkpoint.best_evaluation(history)
  chosen_on = best_checkpoint.ranked_on(best).removesuffix('_accuracy')
  summary = {
      'chosen_on': chosen_on,
      f'best_{chosen_on}_accuracy': best[f'{chosen_on}_accuracy'],
      'best_step': best['step'], 'best_epoch': best['epoch'],
      'test_accuracy_at_best_step': best['test_accuracy'],
  }
  for split in ('validation', 'test', 'train'):
    for record in history:  # the last evaluation of the split decides
      if f'{split}_accuracy' in record:
        summary[f'final_{split}_accuracy'] = record[f'{split}_accuracy']
  # `device`: so that result tables mixing machines say which trained each
  # run; a resumed run names the machine that finished it.
  summary.update(steps=history[-1]['step'], epochs=history[-1]['epoch'],
                 train_seconds=sum(r['seconds'] for r in history),
                 train_flops=history[-1]['step'] * flops_per_step,
                 device=jax.devices()[0].device_kind, **source)
  if jax.process_index() == 0:
    files.write_json(workdir / 'summary.json', summary, indent=2)
  return summary


def _said_done(summary: dict) -> dict:
  """`summary`, its best and final accuracies logged in one line."""
  on = summary.get('chosen_on', 'test')  # a summary without it chose on test
  at_best = (
      f', test accuracy {100 * summary["test_accuracy_at_best_step"]:.2f}'
      '% there' if on == 'validation' else '')
  logging.info(
      'Done: best %s accuracy %.2f%% at step %d (epoch %g)%s; final '
      'train accuracy %.2f%%.', on, 100 * summary[f'best_{on}_accuracy'],
      summary['best_step'], summary['best_epoch'], at_best,
      100 * summary['final_train_accuracy'])
  return summary
