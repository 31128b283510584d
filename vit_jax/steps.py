"""The train state and the compiled steps: model, loss, optimizer, schedule,
and one `jax.jit` train step and eval step over the mesh.

The batch is split over every device of the mesh; parameters and optimizer
state are replicated, or split over its `fsdp` axis (`parallel`), so the
same code serves 1 CPU, N GPUs, many hosts, or a model larger than one
device's memory. Gradients
and metric sums are reduced across all devices by the compiler. Both steps
reach the data only through the input's `model_inputs` (`data.Input`), so
one compiled step serves every input. Each step adds its metrics to running
sums that stay on the devices until the loop logs them, and the state and
the sums are donated. `compile_steps` compiles ahead of time from shapes
alone, so a config that cannot compile fails before anything is written.
"""

import functools
import time
from typing import Any, NamedTuple

from absl import logging
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax

from vit_jax import distillation
from vit_jax import models
from vit_jax import parallel
from vit_jax.data import mixing
from vit_jax.errors import ConfigError

# Running sums of a train or eval interval: summed losses, correct
# predictions and examples.
METRIC_SUMS = {'loss': jnp.float32, 'correct': jnp.int32,
               'count': jnp.float32}


class TrainState(train_state.TrainState):
  batch_stats: Any = None


def create_learning_rate_schedule(config, plan):
  """Linear warmup from 0 over `plan.warmup_steps`, then `config.lr_decay`
  ('cosine' or 'linear') to 0 at `plan.total_steps`."""
  total, warmup = plan.total_steps, plan.warmup_steps
  if config.lr_decay == 'cosine':
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.learning_rate,
        warmup_steps=warmup, decay_steps=max(total, warmup + 1),
        end_value=0.0)
  return optax.join_schedules([
      optax.linear_schedule(0.0, config.learning_rate, warmup),
      optax.linear_schedule(config.learning_rate, 0.0,
                            max(total - warmup, 1)),
  ], [warmup])


def create_optimizer(config, schedule) -> optax.GradientTransformation:
  if config.optimizer == 'adamw':
    tx = optax.adamw(schedule, b1=config.adam_b1, b2=config.adam_b2,
                     weight_decay=config.weight_decay)
  else:
    tx = optax.chain(optax.add_decayed_weights(config.weight_decay),
                     optax.sgd(schedule, momentum=config.momentum))
  if config.grad_clip_norm:
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
  return tx


def _init(key, model, tx, image_size: int) -> TrainState:
  variables = model.init(
      key, jnp.zeros((1, image_size, image_size, 3)), train=False)
  return TrainState.create(
      apply_fn=model.apply, params=variables['params'], tx=tx,
      batch_stats=variables.get('batch_stats'))


def _shapes(key, model, tx, image_size: int) -> TrainState:
  return jax.eval_shape(functools.partial(
      _init, model=model, tx=tx, image_size=image_size), key)


def initial_state(key, model, tx, image_size: int,
                  mesh: jax.sharding.Mesh) -> TrainState:
  """Freshly initialised parameters and optimizer state, laid out on `mesh`
  as `parallel.state_shardings` says (each device initialises only its
  shards)."""
  shardings = parallel.state_shardings(_shapes(key, model, tx, image_size),
                                       mesh)
  return jax.jit(functools.partial(_init, model=model, tx=tx,
                                   image_size=image_size),
                 out_shardings=shardings)(key)


def state_shapes(key, model, tx, image_size: int,
                 mesh: jax.sharding.Mesh) -> TrainState:
  """The train state's shapes and shardings on `mesh`, computing nothing:
  what the steps compile for and what a checkpoint restores into (whatever
  layout it was saved from)."""
  shapes = _shapes(key, model, tx, image_size)
  return jax.tree.map(
      lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype,
                                               sharding=sharding),
      shapes, parallel.state_shardings(shapes, mesh))


def sum_shapes(sharding) -> dict:
  return {name: jax.ShapeDtypeStruct((), dtype, sharding=sharding)
          for name, dtype in METRIC_SUMS.items()}


def zero_sums(sharding) -> dict:
  return {name: parallel.replicate(np.zeros((), dtype), sharding)
          for name, dtype in METRIC_SUMS.items()}


def cross_entropy(logits, labels, label_smoothing: float):
  targets = optax.smooth_labels(
      jax.nn.one_hot(labels, logits.shape[-1]), label_smoothing)
  return optax.softmax_cross_entropy(logits, targets)


def model_variables(params, batch_stats) -> dict:
  if batch_stats is None:
    return {'params': params}
  return {'params': params, 'batch_stats': batch_stats}


def mixes_batches(config) -> bool:
  return config.mixup_alpha > 0 or config.cutmix_alpha > 0


def train_step(state: TrainState, sums: dict, data, batch, key, *, config,
               inputs, teacher: distillation.Teacher | None = None):
  """One optimizer step on `batch`, its metrics added to `sums`.

  With `config.grad_accumulation_steps` = k > 1 the batch is split into k
  micro-batches whose gradients are averaged before the update: the same step
  in a k-th of the activation memory, as the paper fine-tunes.
  With mixup or cutmix the loss is against the mixed labels, and the
  accuracy counts predictions equal to each image's own (unmixed) label.
  With a `teacher`, the model returns its class and distillation logits
  and each head gets half of the loss (DeiT); the accuracy is that of
  their average, the student's prediction at test time.
  """
  key = jax.random.fold_in(key, state.step)
  accumulation = config.grad_accumulation_steps

  def gradients(batch_stats, micro_batch, micro_key):
    augment_key, dropout_key = jax.random.split(micro_key)
    x, y = inputs.model_inputs(data, micro_batch, augment_key)
    targets = optax.smooth_labels(jax.nn.one_hot(y, inputs.num_classes),
                                  config.label_smoothing)
    if mixes_batches(config):
      x, targets = mixing.mix(
          jax.random.fold_in(micro_key, 2), x, targets,
          mixup_alpha=config.mixup_alpha, cutmix_alpha=config.cutmix_alpha)
    teacher_labels = None if teacher is None else teacher.labels(x)

    def loss_fn(params):
      outputs, updates = state.apply_fn(
          model_variables(params, batch_stats), x, train=True,
          mutable=['batch_stats'], rngs={'dropout': dropout_key})
      if teacher is None:
        logits = outputs
        loss = optax.softmax_cross_entropy(logits, targets).mean()
      else:
        class_logits, distillation_logits = outputs
        logits = (class_logits + distillation_logits) / 2
        loss = (optax.softmax_cross_entropy(class_logits, targets).mean() +
                optax.softmax_cross_entropy_with_integer_labels(
                    distillation_logits, teacher_labels).mean()) / 2
      return loss, (logits, updates)

    (loss, (logits, updates)), grads = jax.value_and_grad(
        loss_fn, has_aux=True)(state.params)
    metrics = {
        'loss': loss * y.shape[0],
        'correct': jnp.sum(jnp.argmax(logits, -1) == y),
        'count': jnp.asarray(y.shape[0], jnp.float32),
    }
    return updates.get('batch_stats'), grads, metrics

  if accumulation == 1:
    batch_stats, grads, metrics = gradients(state.batch_stats, batch, key)
  else:
    def accumulate(carry, step_inputs):
      batch_stats, grad_sum, metric_sum = carry
      i, micro_batch = step_inputs
      batch_stats, grads, metrics = gradients(
          batch_stats, micro_batch, jax.random.fold_in(key, i))
      return (batch_stats, jax.tree.map(jnp.add, grad_sum, grads),
              jax.tree.map(jnp.add, metric_sum, metrics)), None

    zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)
    metric_zeros = {name: jnp.zeros((), dtype)
                    for name, dtype in METRIC_SUMS.items()}
    micro_batches = jax.tree.map(
        lambda a: a.reshape(accumulation, -1, *a.shape[1:]), batch)
    (batch_stats, grads, metrics), _ = jax.lax.scan(
        accumulate, (state.batch_stats, zeros(state.params), metric_zeros),
        (jnp.arange(accumulation), micro_batches))
    grads = jax.tree.map(lambda g: g / accumulation, grads)
  state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
  return state, jax.tree.map(jnp.add, sums, metrics)


def eval_step(state: TrainState, sums: dict, data, batch, mask, *, config,
              inputs) -> dict:
  """`sums` plus the loss and correct count of the unmasked examples."""
  x, y = inputs.model_inputs(data, batch, None)
  logits = state.apply_fn(
      model_variables(state.params, state.batch_stats), x, train=False)
  loss = cross_entropy(logits, y, config.label_smoothing)
  return jax.tree.map(jnp.add, sums, {
      'loss': jnp.sum(loss * mask),
      'correct': jnp.sum((jnp.argmax(logits, -1) == y) & (mask > 0)),
      'count': jnp.sum(mask),
  })


def compiler_options(config) -> dict[str, str] | None:
  """XLA options the steps compile with: `config.cpu_compiler_options` on a
  CPU backend, none elsewhere."""
  if jax.default_backend() != 'cpu' or not config.cpu_compiler_options:
    return None
  return {name: str(value)
          for name, value in config.cpu_compiler_options.items()}


class CompiledSteps(NamedTuple):
  train: Any  # (state, sums, data, batch, key) -> (state, sums)
  eval: Any  # (state, sums, data, batch, mask) -> sums


def compile_steps(config, inputs, state: TrainState, key,
                  teacher: distillation.Teacher | None = None
                  ) -> CompiledSteps:
  """Both steps compiled once for `inputs`' batches; `state` may be shapes
  (`state_shapes`). An XLA option XLA lacks is a ConfigError. A `teacher`'s
  variables are constants of the train step."""
  start = time.perf_counter()
  options = compiler_options(config)
  replicated = parallel.replicated(inputs.mesh)
  step_kwargs = dict(config=config, inputs=inputs)
  train_batch, eval_batch, eval_mask = inputs.batch_specs()
  # The state leaves each step where it came in, sharded or not.
  state_out = jax.tree.map(lambda x: x.sharding, state)
  try:
    train = jax.jit(functools.partial(train_step, **step_kwargs,
                                      teacher=teacher),
                    out_shardings=(state_out, replicated),
                    donate_argnums=(0, 1)).lower(
                        state, sum_shapes(replicated),
                        inputs.train_data, train_batch, key).compile(options)
    evaluate = jax.jit(functools.partial(eval_step, **step_kwargs),
                       out_shardings=replicated,
                       donate_argnums=1).lower(
                           state, sum_shapes(replicated),
                           inputs.test_data, eval_batch,
                           eval_mask).compile(options)
  except jax.errors.JaxRuntimeError as e:
    if options is None:
      raise
    raise ConfigError(
        f'config.cpu_compiler_options={options}: {e}. Use XLA option names '
        'this jax version knows, without the leading "--".') from e
  logging.info('Compiled the train and eval steps in %.1fs.',
               time.perf_counter() - start)
  return CompiledSteps(train, evaluate)
