"""What a run checkpoint's contents hash to, saved with it and checked on
every restore (`run_checkpoints.RunCheckpoints`): one number per array,
computed where the arrays are, and a sha256 of each JSON item.

The trainer restores a checkpoint into its TrainState; a reader (analysis,
fine-tuning, a distillation teacher) has no model to give the state its
structure and restores the nested dicts orbax saved, whose arrays flatten in
another order. So a state's array digests are compared as a multiset: damage
changes the digest of every array it hits, and no reordering hides that.
"""

import hashlib
import json

import jax
import jax.numpy as jnp


class DigestMismatchError(ValueError):
  """A restored checkpoint does not hash to the digest saved with it."""


def _array_digest(x: jax.Array) -> jax.Array:
  """A uint32 of every bit of `x`: its elements' bits (in 32-bit words, or
  bytes and half-words for smaller types), each multiplied by an odd weight
  of its position, summed modulo 2**32, so that a change in any one element
  always changes it."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  word = {1: jnp.uint8, 2: jnp.uint16}.get(x.dtype.itemsize, jnp.uint32)
  bits = jax.lax.bitcast_convert_type(x, word).ravel().astype(jnp.uint32)
  weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(
      2654435761) | jnp.uint32(1)
  return jnp.sum(bits * weights, dtype=jnp.uint32)


@jax.jit
def _tree_digests(tree) -> list[jax.Array]:
  return [_array_digest(x) for x in jax.tree.leaves(tree)]


def _arrays_digest(tree) -> list[int]:
  return [int(d) for d in jax.device_get(_tree_digests(tree))]


def _json_digest(value) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def compute(state, train_sums: dict, history: list[dict], position: dict,
            config: dict | None) -> dict:
  """The digest of a checkpoint's items (nothing is copied to the host but
  one number per array); `config` is None for a checkpoint saved before
  checkpoints held the run's config."""
  contents = {
      'state': _arrays_digest(state),
      'train_sums': _arrays_digest(train_sums),
      'history': _json_digest(history),
      'position': _json_digest(position),
  }
  if config is not None:
    contents['config'] = _json_digest(config)
  return contents


def _comparable(value):
  return sorted(value) if isinstance(value, list) else value


def verify(saved: dict, state, train_sums: dict, history: list[dict],
           position: dict, config: dict | None) -> None:
  """Raises DigestMismatchError naming the items that do not hash to the
  `saved` digest: a damaged file, or an item missing."""
  found = compute(state, train_sums, history, position, config)
  differ = [name for name in {**saved, **found}
            if _comparable(found.get(name)) != _comparable(saved.get(name))]
  if differ:
    raise DigestMismatchError(
        f'its {" and ".join(differ)} {"does" if len(differ) == 1 else "do"} '
        'not match the digest saved with it: a damaged file')


def verify_config(saved: dict, config: dict) -> None:
  """Raises DigestMismatchError unless the `config` item alone hashes to
  the `saved` digest (read without the state it was saved with)."""
  if _json_digest(config) != saved.get('config'):
    raise DigestMismatchError('its config does not match the digest saved '
                              'with it: a damaged file')
