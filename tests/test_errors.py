"""vit_jax.errors: what a user sees of a library's error."""

from vit_jax import errors


def test_a_library_errors_first_line_is_cut_to_a_line_a_person_reads():
  spec = '{"driver": "ocdbt", "base": "' + 'x' * 2000 + '"}'
  line = errors.first_line(ValueError(f'NOT_FOUND: {spec}\nmore\nlines'))
  assert len(line) == 300 and line.endswith('...')
  assert line.startswith('ValueError: NOT_FOUND: {"driver": "ocdbt"')
  assert errors.first_line(OSError('short\nsecond')) == 'OSError: short'
