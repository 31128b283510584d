r"""Your own images: a folder `DIR/train/<class>/*.jpg|png` beside
`DIR/test/<class>/*.jpg|png`, every image used, decoded once into memory.

From scratch (the argument after ':' picks; `scratch` is the default), the
study's ViT-Tiny with 8x8-pixel patches at 64x64, or its CNN baselines
(`:simple_cnn`, `:small_resnet`) at 64x64:

  python -m vit_jax.main --config=configs/image_folder.py \
      --config.data_dir=DIR --workdir=/tmp/my_vit
  python -m vit_jax.main --config=configs/image_folder.py:simple_cnn \
      --config.data_dir=DIR --workdir=/tmp/my_cnn

Fine-tuning a released checkpoint of the official code (e.g. ImageNet-21k
ViT-B/16, `gs://vit_models/imagenet21k/ViT-B_16.npz`) at 224x224, with the
paper's fine-tuning recipe (SGD momentum 0.9, no weight decay, clipping at
1, warmup then cosine) and the released models' input scaling to [-1, 1]:

  python -m vit_jax.main --config=configs/image_folder.py:finetune \
      --config.data_dir=DIR --config.init_from=ViT-B_16.npz \
      --workdir=/tmp/my_vit_b16

The head is replaced for the folder's classes and the position embeddings
are resized to the new grid (`vit_jax/training/finetune.py`). `--config.model=` must
name the checkpoint's architecture (ViT-Ti_16, ViT-S_16, ViT-B_16, ...). On
a CPU, ViT-B/16 at 224 is slow: for a first try use ViT-Ti_16 or
`--config.image_size=112`.
"""

from configs import finetune
from vit_jax import config_schema

# mode: the model trained from scratch; 'finetune' fine-tunes ViT-B_16.
SCRATCH = {
    'scratch': 'ViT-Tiny-CIFAR_4', 'simple_cnn': 'SimpleCNN',
    'small_resnet': 'SmallResNet'
}
MODES = (*SCRATCH, 'finetune')


def get_config(mode: str = 'scratch'):
  if mode not in MODES:
    raise ValueError(f'Unknown mode {mode!r} for image_folder.py; use '
                     f'{", ".join(MODES)}.')
  config = config_schema.defaults()
  config.dataset = 'image_folder'
  config.input_pipeline = 'on_device'
  config.augment = True
  config.batch_size = config.eval_batch_size = 32
  # The released models' scaling, and a neutral one from scratch.
  config.pixel_mean, config.pixel_std = config_schema.RELEASED_PIXELS
  if mode in SCRATCH:
    config.model = SCRATCH[mode]
    if mode == 'scratch':
      config.model_overrides.patch_size = 8
    config.image_size = 64
    config.num_epochs = 30
    config.warmup_epochs = 3
  else:
    config.model = 'ViT-B_16'
    finetune.use_paper_recipe(config)
    config.image_size = 224
    config.learning_rate = 0.01
    config.num_epochs = 10
    config.warmup_epochs = 1
  return config
