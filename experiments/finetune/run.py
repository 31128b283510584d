r"""Fine-tuning the small-data study's ViT-Tiny at a higher resolution.

  python experiments/finetune/run.py --pretrained=/tmp/small_data/vit_augment_seed0 \
      --data_dir=../shared/data/cifar10-5k --workdir=/tmp/finetune

--pretrained is a finished 30-epoch run of configs/cifar_small.py at 32x32
(experiments/small_data/run.py makes one). It is fine-tuned with
configs/finetune.py (the paper's recipe: SGD momentum 0.9, batch 512 in 4
micro-batches, no weight decay, clipping at 1, warmup + cosine) at 48x48, and,
as a control that separates the resolution from the extra training, with the
same recipe at 32x32. Writes results.json and the table in README.md next to
this file. Reruns resume.
"""

import json
import pathlib
import subprocess
import sys

from absl import app
from absl import flags

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]

_PRETRAINED = flags.DEFINE_string('pretrained', None,
                                  'A configs/cifar_small.py ViT run.')
_DATA_DIR = flags.DEFINE_string('data_dir', '../shared/data/cifar10-5k',
                                'The 5k/1k CIFAR-10 subset.')
_WORKDIR = flags.DEFINE_string('workdir', '/tmp/finetune',
                               'One sub-directory per run; never committed.')
_IMAGE_SIZES = flags.DEFINE_list('image_sizes', ['48', '32'],
                                 'Fine-tuning resolutions.')
flags.mark_flags_as_required(['pretrained'])

TABLE_START = '<!-- results table: written by run.py -->'
TABLE_END = '<!-- end of results table -->'


def main(argv):
  del argv
  pretrained = pathlib.Path(_PRETRAINED.value).absolute()
  summary = json.loads((pretrained / 'summary.json').read_text())
  rows = [('pre-trained (configs/cifar_small.py)', 32, summary, None)]
  for size in _IMAGE_SIZES.value:
    workdir = pathlib.Path(_WORKDIR.value).absolute() / f'finetune_{size}'
    if not (workdir / 'summary.json').exists():
      workdir.mkdir(parents=True, exist_ok=True)
      print(f'fine-tuning at {size}x{size} in {workdir}', flush=True)
      with open(workdir / 'log.txt', 'a') as log:
        subprocess.run([
            sys.executable, '-m', 'vit_jax.main',
            f'--config={REPO / "configs/finetune.py"}',
            f'--config.init_from={pretrained}',
            f'--config.image_size={size}',
            f'--config.data_dir={pathlib.Path(_DATA_DIR.value).absolute()}',
            f'--workdir={workdir}'
        ], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    history = [json.loads(line) for line in
               (workdir / 'metrics.jsonl').read_text().splitlines()]
    rows.append(('fine-tuned (configs/finetune.py)', int(size),
                 json.loads((workdir / 'summary.json').read_text()),
                 sum(r['seconds'] for r in history) / 60))

  results = [{'run': name, 'image_size': size, 'wall_minutes': minutes,
              **summary} for name, size, summary, minutes in rows]
  (HERE / 'results.json').write_text(json.dumps(results, indent=1) + '\n')
  lines = ['| run | image size | epochs | best test acc | final test acc | '
           'final train acc | wall time (min) |', '|---|---|---|---|---|---|---|']
  for r in results:
    minutes = f'{r["wall_minutes"]:.1f}' if r['wall_minutes'] else ''
    lines.append(
        f'| {r["run"]} | {r["image_size"]}x{r["image_size"]} | {r["epochs"]:g} | '
        f'{100 * r["best_test_accuracy"]:.1f}% | '
        f'{100 * r["final_test_accuracy"]:.1f}% | '
        f'{100 * r["final_train_accuracy"]:.1f}% | {minutes} |')
  readme = HERE / 'README.md'
  content = readme.read_text()
  start, end = content.index(TABLE_START), content.index(TABLE_END)
  readme.write_text(content[:start + len(TABLE_START)] + '\n\n' +
                    '\n'.join(lines) + '\n\n' + content[end:])
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main)
