"""The learning-rate schedule and the optimizer a config asks for."""

import jax
import optax


def create_learning_rate_schedule(config, plan) -> optax.Schedule:
  """Linear warmup from 0, then `config.lr_decay` to 0 at the last step."""
  total, warmup = plan.total_steps, plan.warmup_steps
  if config.lr_decay == 'cosine':
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.learning_rate, warmup_steps=warmup,
        decay_steps=max(total, warmup + 1), end_value=0.0)
  return optax.join_schedules([
      optax.linear_schedule(0.0, config.learning_rate, warmup),
      optax.linear_schedule(config.learning_rate, 0.0, max(total - warmup, 1)),
  ], [warmup])


def _kernels(params):
  """True for the `kernel`s, False for biases, norms, embeddings, tokens."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], 'key', None) == 'kernel', params)


def create_optimizer(config, schedule) -> optax.GradientTransformation:
  """AdamW, or SGD with momentum and L2 weight decay; gradients clipped."""
  # 'all' masks nothing: its optimizer state is optax's unmasked tree.
  mask = _kernels if config.weight_decay_on == 'kernels' else None
  if config.optimizer == 'adamw':
    tx = optax.adamw(schedule, b1=config.adam_b1, b2=config.adam_b2,
                     weight_decay=config.weight_decay, mask=mask)
  else:
    tx = optax.chain(optax.add_decayed_weights(config.weight_decay, mask),
                     optax.sgd(schedule, momentum=config.momentum))
  if config.grad_clip_norm:
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
  return tx
