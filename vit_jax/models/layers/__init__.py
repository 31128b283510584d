"""The ViT's layers; the small-data options sit in the layer they change."""
