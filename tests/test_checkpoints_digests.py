"""What a checkpoint's contents hash to: every bit, any order, items named."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.checkpoints import digests
from vit_jax.checkpoints.digests import DigestMismatchError


@flax.struct.dataclass
class _State:
  """Fields out of alphabetical order, as a TrainState's are."""
  step: jnp.ndarray
  params: dict


def _contents(**changes):
  return dict(
      dict(state=_State(step=jnp.array(3), params={'w': jnp.arange(6.0)}),
           train_sums={'loss': jnp.array(1.5)}, history=[{'step': 3}],
           position={'epoch': 1}, config={'model': 'ViT-B_16'}), **changes)


def test_any_flipped_bit_of_any_array_changes_the_digest():
  bits = np.arange(6, dtype=np.float32).view(np.uint32)
  saved = digests.compute(**_contents())
  for position in range(6):
    for bit in (0, 31):
      flipped = bits.copy()
      flipped[position] ^= np.uint32(1 << bit)
      state = _State(step=jnp.array(3),
                     params={'w': jnp.asarray(flipped.view(np.float32))})
      with pytest.raises(DigestMismatchError, match='its state does not match'):
        digests.verify(saved, **_contents(state=state))


def test_every_item_that_differs_is_named():
  saved = digests.compute(**_contents())
  # A reader restores the state as the dicts orbax saved: its arrays come in
  # another order (params before step) than the dataclass's.
  as_dicts = {'params': {'w': jnp.arange(6.0)}, 'step': jnp.array(3)}
  digests.verify(saved, **_contents(state=as_dicts))
  with pytest.raises(DigestMismatchError,
                     match='its history and position do not match'):
    digests.verify(saved, **_contents(history=[], position={'epoch': 2}))
  # A config item lost from a checkpoint that saved one.
  with pytest.raises(DigestMismatchError, match='its config does not match'):
    digests.verify(saved, **_contents(config=None))
  # A checkpoint that holds no config of the run.
  digests.verify(digests.compute(**_contents(config=None)),
                 **_contents(config=None))


def test_a_digest_compiled_ahead_compiles_nothing_when_a_checkpoint_saves():
  contents = _contents(train_sums={'loss': jnp.array(1.5), 'n': jnp.array(2)})
  digests.compile_ahead(*jax.eval_shape(lambda *items: items, contents['state'],
                                        contents['train_sums']))
  compiled = []

  def listen(event: str, seconds: float, **_):
    if event == '/jax/core/compile/backend_compile_duration':
      compiled.append(seconds)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    digests.compute(**contents)
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  assert not compiled
