"""The train state and the `jax.jit` train and eval steps over the mesh."""

from collections.abc import Callable
import concurrent.futures
import functools
import threading
import time
from typing import Any, NamedTuple

from absl import logging
import flax
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax

from vit_jax import models
from vit_jax.data import mixing
from vit_jax.errors import ConfigError
from vit_jax.objectives import losses
from vit_jax.runtime import sharding
from vit_jax.training import compilation_cache

# Running sums of an interval; the train sums, saved in checkpoints, keep
# their keys, so top-5 is counted in evaluations alone.
METRIC_SUMS = {'loss': jnp.float32, 'correct': jnp.int32, 'count': jnp.float32}
EVAL_SUMS = {**METRIC_SUMS, 'correct_top5': jnp.int32}


class TrainState(train_state.TrainState):
  """flax's, with BatchNorm statistics."""

  batch_stats: Any = None

  @property
  def variables(self) -> dict:
    """What the model applies outside training: a moving average's if kept."""
    return models.model_variables(getattr(self, 'ema_params', self.params),
                                  self.batch_stats)


class AveragedTrainState(TrainState):
  """Plus the weights' moving average; a subclass, so others keep their tree."""

  ema_params: Any = None
  ema_decay: float = flax.struct.field(pytree_node=False, default=0.0)

  def apply_gradients(self, *, grads, **kwargs) -> 'AveragedTrainState':
    state = super().apply_gradients(grads=grads, **kwargs)
    # As TensorFlow's ExponentialMovingAverage with num_updates: a smaller
    # early decay, so that the average soon leaves the initialization.
    step = state.step.astype(jnp.float32)
    decay = jnp.minimum(self.ema_decay, (1 + step) / (10 + step))
    return state.replace(ema_params=optax.incremental_update(
        state.params, state.ema_params, step_size=1 - decay))


def _init(model, tx, image_size: int, ema_decay: float, key) -> TrainState:
  variables = model.init(key, jnp.zeros((1, image_size, image_size, 3)),
                         train=False)
  params = variables['params']
  averaged = (dict(ema_params=params, ema_decay=ema_decay) if ema_decay else {})
  return (AveragedTrainState if ema_decay else TrainState).create(
      apply_fn=model.apply, params=params, tx=tx,
      batch_stats=variables.get('batch_stats'), **averaged)


def state_shapes(key, model, tx, image_size: int, mesh: jax.sharding.Mesh,
                 ema_decay: float = 0.0) -> TrainState:
  """The train state's shapes and shardings on `mesh`, computing nothing."""
  shapes = jax.eval_shape(
      functools.partial(_init, model, tx, image_size, ema_decay), key)
  return jax.tree.map(
      lambda s, placement: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=
                                                placement), shapes,
      sharding.state_shardings(shapes, mesh))


def initializer(key, model, tx, image_size: int, mesh: jax.sharding.Mesh,
                ema_decay: float = 0.0) -> Callable[[jax.Array], TrainState]:
  """key -> a fresh state laid out on `mesh`, compiled now (on a thread)."""
  init = functools.partial(_init, model, tx, image_size, ema_decay)
  shardings = sharding.state_shardings(jax.eval_shape(init, key), mesh)
  vit = getattr(model, 'vit', model)  # a wrapper's (MAE, guidance) ViT
  if getattr(vit, 'mimetic_init', False) and jax.default_backend() == 'cpu':
    # Its SVDs deadlock XLA's CPU runtime when partitioned over host
    # devices: one device initializes, then the state is laid out.
    return lambda key: jax.device_put(jax.jit(init)(key), shardings)
  return jax.jit(init, out_shardings=shardings).lower(key).compile()


def initial_state(key, model, tx, image_size: int, mesh: jax.sharding.Mesh,
                  ema_decay: float = 0.0) -> TrainState:
  return initializer(key, model, tx, image_size, mesh, ema_decay)(key)


def sum_shapes(placement, sums: dict = METRIC_SUMS) -> dict:
  return jax.tree.map(
      lambda dtype: jax.ShapeDtypeStruct((), dtype, sharding=placement), sums)


def zero_sums(placement, sums: dict = METRIC_SUMS) -> dict:
  return jax.tree.map(
      lambda dtype: sharding.replicate(np.zeros((), dtype), placement), sums)


def averages(sums) -> dict[str, float]:
  """The mean loss and accuracies of `sums`, and their count."""
  sums = jax.device_get(sums)
  means = dict(loss=float(sums['loss'] / sums['count']),
               accuracy=float(sums['correct'] / sums['count']),
               count=int(sums['count']))
  if 'correct_top5' in sums:
    means['top5_accuracy'] = float(sums['correct_top5'] / sums['count'])
  return means


def _accumulated(gradients, micro_batches: int):
  """`gradients` averaged over `micro_batches` slices of the batch."""

  def accumulate(state, batch_stats, data, batch, key):

    def one(carry, inputs):
      batch_stats, grad_sum, metric_sum = carry
      i, micro_batch = inputs
      batch_stats, grads, metrics = gradients(state, batch_stats, data,
                                              micro_batch,
                                              jax.random.fold_in(key, i))
      return (batch_stats, jax.tree.map(jnp.add, grad_sum, grads),
              jax.tree.map(jnp.add, metric_sum, metrics)), None

    zeros = (jax.tree.map(jnp.zeros_like, state.params),
             {name: jnp.zeros((), dtype) for name, dtype in METRIC_SUMS.items()})
    # Strided, not in blocks: every device's rows feed each micro-batch, so
    # that none is gathered onto devices that do not hold it.
    slices = jax.tree.map(
        lambda a: a.reshape(-1, micro_batches, *a.shape[1:]).swapaxes(0, 1),
        batch)
    (batch_stats, grads,
     metrics), _ = jax.lax.scan(one, (batch_stats, *zeros),
                                (jnp.arange(micro_batches), slices))
    return (batch_stats, jax.tree.map(lambda g: g / micro_batches,
                                      grads), metrics)

  return accumulate


def make_train_step(config, inputs, objective: losses.Objective):
  """(state, sums, data, batch, key) -> (state, sums): one optimizer step."""

  def gradients(state: TrainState, batch_stats, data, batch, key):
    """(new batch statistics, gradients, metric sums) of one batch."""
    augment_key, dropout_key = jax.random.split(key)
    x, y = inputs.model_inputs(data, batch, augment_key)
    targets = losses.soft_targets(y, inputs.num_classes, config.label_smoothing)
    x, targets = mixing.mix(jax.random.fold_in(key, 2), x, targets,
                            mixup_alpha=config.mixup_alpha,
                            cutmix_alpha=config.cutmix_alpha)

    def loss_fn(params):
      variables = models.model_variables(params, batch_stats)
      (logits, outputs), updates = state.apply_fn(
          variables, x, train=True, return_out=True, mutable=['batch_stats'],
          rngs={'dropout': dropout_key})
      return objective(logits, outputs, targets, x).mean(), (logits, updates)

    (loss, (logits, updates)), grads = jax.value_and_grad(
        loss_fn, has_aux=True)(state.params)
    # Against each image's own label, mixed or not.
    metrics = dict(loss=loss * y.shape[0],
                   correct=jnp.sum(jnp.argmax(logits, -1) == y),
                   count=jnp.asarray(y.shape[0], jnp.float32))
    return updates.get('batch_stats'), grads, metrics

  if config.grad_accumulation_steps > 1:
    gradients = _accumulated(gradients, config.grad_accumulation_steps)

  def train_step(state: TrainState, sums: dict, data, batch, key):
    key = jax.random.fold_in(key, state.step)
    batch_stats, grads, metrics = gradients(state, state.batch_stats, data,
                                            batch, key)
    with jax.named_scope('optimizer'):  # its kernels' name in a profile
      state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
    return state, jax.tree.map(jnp.add, sums, metrics)

  return train_step


def make_train_steps(config, inputs, per_call: int,
                     objective: losses.Objective = losses.classification):
  """(state, sums, data, stacked, count, key) -> (state, sums, step): the
  first `count` of `per_call` stacked batches in one compiled loop."""
  train_step = make_train_step(config, inputs, objective)

  def train_steps(state: TrainState, sums: dict, data, stacked, count, key):

    def one(i, carry):
      batch = jax.tree.map(lambda x: x[i], stacked)
      return train_step(*carry, data, batch, key)

    if per_call == 1:  # no loop: faster on a CPU (experiments/benchmarks)
      state, sums = one(0, (state, sums))
    else:
      state, sums = jax.lax.fori_loop(0, count, one, (state, sums))
    return state, sums, state.step  # for the loop to wait on, state donated

  return train_steps


def eval_step(state: TrainState, sums: dict, data, batch, mask, *,
              inputs) -> dict:
  """`sums` plus the loss, correct and top-5 counts of unmasked examples."""
  x, y = inputs.model_inputs(data, batch, None)
  # A run with a moving average evaluates the average.
  logits = state.apply_fn(state.variables, x, train=False)
  # The true labels' cross-entropy, whatever the training targets' smoothing.
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
  # As the paper reports; all classes where there are fewer than five.
  _, best5 = jax.lax.top_k(logits, min(5, logits.shape[-1]))
  counted = mask > 0
  counts = dict(
      loss=jnp.sum(loss * mask), count=jnp.sum(mask),
      correct=jnp.sum((jnp.argmax(logits, -1) == y) & counted),
      correct_top5=jnp.sum(jnp.any(best5 == y[:, None], -1) & counted))
  return jax.tree.map(jnp.add, sums, counts)


# On a CPU this pass drops the optimization barriers before CSE, which then
# merges remat's recomputation back into the forward pass.
_KEEP_REMAT_BARRIERS = ('xla_disable_hlo_passes', 'cse_barrier_expander')


def compiler_options(config) -> dict[str, str] | None:
  """XLA options for the steps on a CPU backend; None elsewhere."""
  if jax.default_backend() != 'cpu':
    return None
  options = {k: str(v) for k, v in config.cpu_compiler_options.items()}
  if config.model_overrides.get('remat', 'none') != 'none':
    name, value = _KEEP_REMAT_BARRIERS
    options[name] = ','.join(filter(None, (options.get(name), value)))
  return options or None


def _compiled(config, jitted, *args):
  """`jitted` lowered for `args`, compiled with `compiler_options`."""
  lowered = jitted.lower(*args)
  try:  # where the options are bad: ConfigError
    return lowered.compile(options := compiler_options(config))
  except jax.errors.JaxRuntimeError as e:
    if options is None:
      raise
    raise ConfigError(
        f'config.cpu_compiler_options={options}: {e}. Use XLA option names '
        'this jax version knows, without the leading "--".') from e


def compile_eval(config, inputs, state: TrainState):
  """The eval step compiled for `inputs`' evaluation batches."""
  replicated = sharding.replicated(inputs.mesh)
  _, eval_batch, eval_mask = inputs.batch_specs()
  jitted = jax.jit(functools.partial(eval_step, inputs=inputs),
                   out_shardings=replicated, donate_argnums=1)
  return _compiled(config, jitted, state, sum_shapes(replicated, EVAL_SUMS),
                   inputs.eval_data, eval_batch, eval_mask)


class CompiledSteps(NamedTuple):
  train: Any  # `make_train_steps`'s, compiled
  eval: Any  # (state, sums, data, batch, mask) -> sums; or None
  train_compile_seconds: float  # tracing and compiling the train step
  steps_per_dispatch: int  # the batches stacked for one call


# Compiled from shapes: a config that cannot compile fails before any write.
def compile_steps(config, inputs, state: TrainState, key,
                  objective: losses.Objective = losses.classification,
                  evaluate: bool = True) -> CompiledSteps:
  """Both steps compiled for `inputs`' batches; `state` may be shapes."""
  start = time.perf_counter()
  replicated = sharding.replicated(inputs.mesh)
  per_call = inputs.steps_per_dispatch
  # The state leaves each step where it came in, sharded or not.
  state_out = jax.tree.map(lambda x: x.sharding, state)
  count = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)

  # XLA compiles the eval step on a thread beside the train step
  # (experiments/benchmarks/README.md, Attempts, row 31).
  with (compilation_cache.Hits() as hits,
        concurrent.futures.ThreadPoolExecutor(1) as thread):
    evaluated = (thread.submit(compile_eval, config, inputs, state)
                 if evaluate else None)
    jitted = jax.jit(make_train_steps(config, inputs, per_call, objective),
                     out_shardings=(state_out, replicated, replicated),
                     donate_argnums=(0, 1))
    train = _compiled(config, jitted, state,
                      sum_shapes(replicated), inputs.train_data,
                      inputs.stacked_specs(per_call), count, key)
    train_seconds = time.perf_counter() - start
    evaluated = evaluated and evaluated.result()
    # The thread each step compiled in: this one, and the pool's only one.
    threads = dict(train=threading.get_ident(),
                   eval=thread.submit(threading.get_ident).result())
  cached = [n for n in ('train', 'eval') if hits.by_thread[threads[n]]]
  hit = f' ({" step and ".join(cached)} step from the compilation cache)'
  logging.info('Compiled the %s in %.1fs%s.',
               'train and eval steps' if evaluate else 'train step',
               time.perf_counter() - start, hit if cached else '')
  return CompiledSteps(train, evaluated, train_seconds, per_call)
