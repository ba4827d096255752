"""The lowest layer of the method: model references and directories, masked-LM heads and
checkpoint layouts, pooling and encoding, the losses, the dual encoder, the sparse (SPLADE)
kind, fingerprints and model cards. Imports nothing of the method but ``mosaic_core.config``."""
