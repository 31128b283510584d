"""What a run builds before its loop (`train.train_and_evaluate`): the
workdir held and checked, then the mesh, input, model, optimizer, objective
and compiled steps (`build`; none for a finished run), then the newest
checkpoint restored or a fresh state made (`restore_or_initialise`), and
the run's record written (`record_run`). A stop signal between these
phases ends the run with nothing new to save (`stop_if_signalled`).
"""

from collections.abc import Callable
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import pathlib
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from vit_jax import config_schema
from vit_jax import data
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.checkpoints import run_checkpoints
from vit_jax.errors import ConfigError
from vit_jax.errors import WorkdirError
from vit_jax.models import masked_autoencoder
from vit_jax.models import names
from vit_jax.objectives import distillation
from vit_jax.objectives import locality_guidance
from vit_jax.objectives import losses
from vit_jax.runtime import files
from vit_jax.runtime import preemption
from vit_jax.runtime import sharding
from vit_jax.runtime import workdir_lock
from vit_jax.training import finetune
from vit_jax.training import optimizer
from vit_jax.training import plan as plan_lib
from vit_jax.training import steps


def _check_workdir(workdir: pathlib.Path, config,
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


def _parameter_count(params) -> str:
  """'N parameters', and how many more serve only training (locality
  guidance's projections, an MAE's decoder)."""
  def size(tree):
    return sum(x.size for x in jax.tree.leaves(tree))

  total, kept = size(params), size(names.inference_params(params))
  return f'{kept:,} parameters' + (
      f', and {total - kept:,} used only in training' if total > kept else '')


@contextlib.contextmanager
def sole_writer(workdir: pathlib.Path):
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


def stop_if_signalled(signals: preemption.Preemption,
                       checkpoints: run_checkpoints.RunCheckpoints):
  """Between the phases of start-up: a stop signal ends the run here, with
  nothing new to save."""
  if signals.reached():
    raise preemption.Preempted(signals.signal_name, checkpoints.latest_step(),
                               checkpoints.directory, saved=False)


@dataclasses.dataclass
class Run:
  """What start-up builds for the loop: the run's parts, and its steps,
  compiled by `build` or else on first use."""
  config: ml_collections.ConfigDict
  workdir: pathlib.Path
  checkpoints: run_checkpoints.RunCheckpoints
  inputs: data.Input
  plan: plan_lib.StepPlan
  model: Any
  schedule: Any
  state_shapes: Any
  compile_steps: Callable[[], steps.CompiledSteps]
  step_key: Any
  replicated: Any

  @functools.cached_property
  def compiled(self) -> steps.CompiledSteps:
    return self.compile_steps()


@dataclasses.dataclass
class Progress:
  """Where the loop stands: what a checkpoint holds."""
  state: Any
  sums: dict
  history: list[dict]
  step: int
  position: Any


def _trained_model_and_objective(config, model, num_classes: int,
                                 replicated) -> tuple[Any, losses.Objective]:
  """The model the step trains (`model`, or a wrapper of it that adds what
  only training reads) and what it minimises: the classification loss,
  wrapped by each technique the config turns on (a teacher's distillation,
  a CNN's locality guidance, an MAE's reconstruction)."""
  fields = models.training_fields(config)
  try:
    if fields['guided_blocks'] or fields['guidance_widths']:
      model = locality_guidance.GuidedViT(
          model, tuple(fields['guided_blocks']),
          tuple(fields['guidance_widths']))
    if fields['mae_mask_ratio']:
      if isinstance(model, locality_guidance.GuidedViT):
        raise ValueError('guided_blocks imitate a CNN on every patch, which '
                         'mae_mask_ratio > 0 hides: use one or the other.')
      model = masked_autoencoder.MaskedAutoencoder(
          model, fields['mae_mask_ratio'], fields['mae_decoder_depth'],
          fields['mae_decoder_width'])
  except ValueError as e:
    raise ConfigError(str(e)) from e
  objective = losses.classification
  teacher = distillation.load_teacher(config, num_classes, replicated)
  if teacher:
    logging.info('Distilling from the run in %s.', teacher.workdir)
    objective = teacher.objective(objective)
  guide = locality_guidance.load_guide(config, num_classes, replicated)
  if guide:
    logging.info('Guided by the stage features of the CNN run in %s.',
                 guide.workdir)
    objective = guide.objective(objective)
  if fields['mae_mask_ratio']:
    logging.info('Pre-training as a masked autoencoder (%d%% of the patches '
                 'hidden); the accuracy is an online probe\'s.',
                 round(100 * fields['mae_mask_ratio']))
    objective = masked_autoencoder.objective(
        objective, model.vit.effective_patch_size)
  return model, objective


def check_before_data(config, workdir: pathlib.Path,
                      signals: preemption.Preemption):
  """Before any data loads: the run's checkpoints, the fields a resumed run
  changed (`_check_workdir`), and config.init_from read and checked (None
  when the run resumes: it starts from its checkpoint)."""
  checkpoints = run_checkpoints.RunCheckpoints(
      workdir / 'checkpoints', config.keep_checkpoints,
      plan_lib.checkpoint_min_seconds(config))
  changed = _check_workdir(workdir, config, checkpoints)
  pretrained = (finetune.check_init_from(config)
                if config.init_from and not checkpoints.steps() else None)
  stop_if_signalled(signals, checkpoints)
  return checkpoints, changed, pretrained


def build(config, workdir: pathlib.Path,
           checkpoints: run_checkpoints.RunCheckpoints,
           signals: preemption.Preemption):
  """The mesh, the input, the model, its optimizer and objective, and the
  compiled steps (not when the newest checkpoint holds the last step); and
  what makes a fresh state: for a fresh run, an initialiser compiled beside
  the steps."""
  mesh = sharding.make_mesh(config.fsdp)
  replicated = sharding.replicated(mesh)
  inputs = data.create_input(config, mesh)
  stop_if_signalled(signals, checkpoints)
  plan = plan_lib.step_plan(config, inputs.steps_per_epoch)
  model, objective = _trained_model_and_objective(
      config, models.from_config(config, inputs.num_classes),
      inputs.num_classes, replicated)
  schedule = optimizer.create_learning_rate_schedule(config, plan)
  tx = optimizer.create_optimizer(config, schedule)
  init_key, step_key = jax.random.split(jax.random.key(config.seed))
  state_of = (init_key, model, tx, config.image_size, mesh, config.ema_decay)
  state_shapes = steps.state_shapes(*state_of)
  if config.ema_decay and state_shapes.batch_stats:
    raise ConfigError(
        f'config.ema_decay={config.ema_decay} averages the parameters only, '
        f'and {config.model} also keeps BatchNorm statistics, which would not '
        'match the average: set --config.ema_decay=0 for it.')
  run = Run(config, workdir, checkpoints, inputs, plan, model, schedule,
            state_shapes, functools.partial(
                steps.compile_steps, config, inputs, state_shapes, step_key,
                objective), step_key, replicated)
  with concurrent.futures.ThreadPoolExecutor(1) as beside:
    initializer = None if checkpoints.steps() else beside.submit(
        steps.initializer, *state_of)
    # A rerun of a finished run compiles nothing (unless its newest
    # checkpoint fails to restore: the loop compiles on first use).
    if (checkpoints.latest_step() or 0) < plan.total_steps:
      run.compiled = run.compile_steps()
    initialize = initializer and initializer.result()
  if initialize is None:  # for a run whose checkpoints all fail to restore
    initialize = lambda: steps.initializer(*state_of)(init_key)
  else:
    initialize = functools.partial(initialize, init_key)
  stop_if_signalled(signals, checkpoints)
  return run, initialize


def restore_or_initialise(run: Run, initialize, pretrained,
                           changed: dict) -> Progress:
  """The newest checkpoint that restores, or a fresh state (its
  parameters `config.init_from`'s when set)."""
  restored = run.checkpoints.restore_latest(run.state_shapes,
                                            steps.sum_shapes(run.replicated))
  if restored:
    logging.info('Resumed from %s at step %d.',
                 run.checkpoints.directory / str(restored.step),
                 restored.step)
    _record_changes(run.workdir, restored.step, changed)
    return Progress(restored.state, restored.train_sums, restored.history,
                     restored.step, restored.position)
  state = initialize()
  if run.config.init_from:
    params = jax.tree.map(
        lambda x, shape: sharding.replicate(x, shape.sharding),
        finetune.pretrained_params(run.config, state.params, pretrained),
        run.state_shapes.params)
    state = state.replace(params=params)
    if isinstance(state, steps.AveragedTrainState):
      # A copy: the step donates the state, and a buffer cannot be donated
      # twice.
      state = state.replace(ema_params=jax.tree.map(jnp.copy, params))
  return Progress(state, steps.zero_sums(run.replicated), [], 0,
                   run.inputs.position(0))


def record_run(run: Run, at: Progress) -> dict:
  """The workdir's record of its run (config.json, and each checkpoint's
  copy, from which a lost config.json is rebuilt: `_check_workdir`), and
  the log's line of what trains; returns the config as recorded."""
  config, plan, inputs = run.config, run.plan, run.inputs
  run_config = json.loads(config.to_json_best_effort())
  if jax.process_index() == 0:
    run.workdir.mkdir(parents=True, exist_ok=True)
    files.write_atomically(run.workdir / 'config.json',
                           json.dumps(run_config, indent=2))
  processes = (f' in {jax.process_count()} processes'
               if jax.process_count() > 1 else '')
  logging.info(
      '%s (%s) on %d device(s)%s: %d train / %d test examples, '
      '%d steps of batch %d (%d per epoch).', config.model,
      _parameter_count(run.state_shapes.params),
      jax.device_count(), processes, inputs.train_size, inputs.test_size,
      plan.total_steps, config.batch_size, plan.steps_per_epoch)
  if at.step >= plan.total_steps:
    logging.info('%s already holds all %d steps; nothing to train.',
                 run.workdir, plan.total_steps)
  return run_config
