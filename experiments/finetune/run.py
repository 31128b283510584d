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

import pathlib

from absl import app
from absl import flags

from experiments import runs

HERE = pathlib.Path(__file__).resolve().parent

_PRETRAINED = flags.DEFINE_string('pretrained', None,
                                  'A configs/cifar_small.py ViT run.')
_DATA_DIR = flags.DEFINE_string('data_dir', '../shared/data/cifar10-5k',
                                'The 5k/1k CIFAR-10 subset.')
_WORKDIR = flags.DEFINE_string('workdir', '/tmp/finetune',
                               'One sub-directory per run; never committed.')
_IMAGE_SIZES = flags.DEFINE_list('image_sizes', ['48', '32'],
                                 'Fine-tuning resolutions.')
flags.mark_flags_as_required(['pretrained'])


def main(argv):
  del argv
  runs.catch_stop_signals()
  pretrained = pathlib.Path(_PRETRAINED.value).absolute()
  summary = runs.read_json(pretrained / 'summary.json')
  rows = [('pre-trained (configs/cifar_small.py)', 32, summary, None)]
  for size in _IMAGE_SIZES.value:
    workdir = pathlib.Path(_WORKDIR.value).absolute() / f'finetune_{size}'
    runs.train(workdir, 'configs/finetune.py', {
        'init_from': pretrained, 'image_size': size,
        'data_dir': pathlib.Path(_DATA_DIR.value).absolute()})
    history = runs.history(workdir)
    rows.append(('fine-tuned (configs/finetune.py)', int(size),
                 runs.read_json(workdir / 'summary.json'),
                 sum(r['seconds'] for r in history) / 60))

  results = [{'run': name, 'image_size': size, 'wall_minutes': minutes,
              **summary} for name, size, summary, minutes in rows]
  lines = ['| run | image size | epochs | best test acc | final test acc | '
           'final train acc | wall time (min) |', '|---|---|---|---|---|---|---|']
  for r in results:
    minutes = f'{r["wall_minutes"]:.1f}' if r['wall_minutes'] else ''
    lines.append(
        f'| {r["run"]} | {r["image_size"]}x{r["image_size"]} | {r["epochs"]:g} | '
        f'{100 * r["best_test_accuracy"]:.1f}% | '
        f'{100 * r["final_test_accuracy"]:.1f}% | '
        f'{100 * r["final_train_accuracy"]:.1f}% | {minutes} |')
  runs.write_summary(HERE, results, str(pretrained),
                     {'results table': '\n'.join(lines)})
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main)
