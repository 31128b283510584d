"""What a run checkpoint's contents hash to, checked on every restore."""

import hashlib
import json

import jax
import jax.numpy as jnp


class DigestMismatchError(ValueError):
  """A restored checkpoint does not hash to the digest saved with it."""


def _array_digest(x: jax.Array) -> jax.Array:
  """A uint32 of `x`'s bits that any one element's change changes."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  word = {1: jnp.uint8, 2: jnp.uint16}.get(x.dtype.itemsize, jnp.uint32)
  bits = jax.lax.bitcast_convert_type(x, word).ravel().astype(jnp.uint32)
  weights = jnp.arange(
      bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) | jnp.uint32(1)
  return jnp.sum(bits * weights, dtype=jnp.uint32)


@jax.jit
def _arrays_digest(tree) -> jax.Array:
  return jnp.stack([_array_digest(x) for x in jax.tree.leaves(tree)])


def compile_ahead(state, train_sums: dict) -> None:
  """Compiles the digests of a state and sums of these shapes, for a save."""
  _arrays_digest.lower(state).compile()
  _arrays_digest.lower(train_sums).compile()


def _json_digest(value) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def compute(state, train_sums: dict, history: list[dict], position: dict,
            config: dict | None) -> dict:
  """The digest of a checkpoint's items; `config` may be None."""
  contents = dict(state=_arrays_digest(state).tolist(),
                  train_sums=_arrays_digest(train_sums).tolist(),
                  history=_json_digest(history),
                  position=_json_digest(position))
  if config is not None:
    contents['config'] = _json_digest(config)
  return contents


def _comparable(value):
  # A multiset: a reader without the model restores nested dicts, whose arrays
  # flatten in another order.
  return sorted(value) if isinstance(value, list) else value


def verify(saved: dict, state, train_sums: dict, history: list[dict],
           position: dict, config: dict | None) -> None:
  """Raises DigestMismatchError naming the items that do not hash to `saved`."""
  found = compute(state, train_sums, history, position, config)
  differ = [
      name for name in {**saved, **found}
      if _comparable(found.get(name)) != _comparable(saved.get(name))
  ]
  if differ:
    raise DigestMismatchError(
        f'its {" and ".join(differ)} {"does" if len(differ) == 1 else "do"} '
        'not match the digest saved with it: a damaged file')


def verify_config(saved: dict, config: dict) -> None:
  """Raises DigestMismatchError unless `config` alone hashes to `saved`."""
  if _json_digest(config) != saved.get('config'):
    raise DigestMismatchError('its config does not match the digest saved '
                              'with it: a damaged file')
