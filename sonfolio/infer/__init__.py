"""Using a trained model: `sonfolio read`, `sonfolio transcribe` and the service's operations.

inputs: files or uploads -> images / 16 kHz audio, with errors that say what is wrong;
page: a page image -> staff system boxes; audio: long audio -> chunks that fit the model's
window; run: a loaded variant (sonfolio.variants) -> texts, and the output formats.
docs/inference.md describes the commands and the service.
"""
