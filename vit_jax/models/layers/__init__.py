"""The ViT's layers; the options for training on little data sit in the
layer they change (shifted patches, sine-cosine positions, locality
attention, mimetic init, MAP pooling, drop-path)."""
