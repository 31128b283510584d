"""Config files of `vit_jax.main --config=configs/NAME.py[:ARGUMENT]`; a
package so that one config can build on another
(`from configs import cifar_small`)."""
