"""vit_jax.runtime.job: a command's work as one process, and how it ends."""

from absl import flags
import pytest

from vit_jax.errors import ConfigError
from vit_jax.runtime import job


@pytest.fixture(autouse=True)
def a_process_alone(monkeypatch):
  """Flags parsed for the test; CPU devices as this process's JAX set them (a
  command sets them first); no job to join, whatever the environment says."""
  was_parsed = flags.FLAGS.is_parsed()
  if not was_parsed:
    flags.FLAGS.mark_as_parsed()
  monkeypatch.setattr(job.distributed, 'set_cpu_devices', lambda count: None)
  monkeypatch.setattr(job.distributed, 'initialize_distributed',
                      lambda *args: False)
  yield
  if not was_parsed:
    flags.FLAGS.unparse_flags()


def test_work_that_returns_exits_0():
  done = []
  with pytest.raises(SystemExit) as exit_:
    job.run(lambda: done.append(True), cpu_devices=None)
  assert exit_.value.code == 0 and done == [True]


# A problem the message explains, and a full disk (at `tmp`).
@pytest.mark.parametrize('error, line', [
    (lambda tmp: ConfigError('config.batch_size=0 must be positive: set it to '
                             '128.'),
     'error: config.batch_size=0 must be positive: set it to 128.'),
    (lambda tmp: OSError(28, 'No space left on device', f'{tmp}/log.jsonl'),
     "error: Writing {tmp}/log.jsonl failed (OSError: [Errno 28] No space "
     "left on device: '{tmp}/log.jsonl'); every checkpoint saved is kept. "
     'Free space there (df -h {tmp}).'),
], ids=['explained', 'full_disk'])
def test_a_problem_is_one_line_and_status_1(capsys, tmp_path, error, line):

  def work():
    raise error(tmp_path)

  with pytest.raises(SystemExit) as exit_:
    job.run(work, cpu_devices=None)
  assert exit_.value.code == 1
  assert capsys.readouterr().err.splitlines()[-1] == line.format(tmp=tmp_path)


def test_a_bug_keeps_its_traceback():

  def work():
    raise KeyError('a bug')

  with pytest.raises(KeyError):
    job.run(work, cpu_devices=None)
