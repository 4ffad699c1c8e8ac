"""ONNX export with the KV cache, and ONNX Runtime quantization into variant folders.

Each variant is a folder that optimum's `ORTModelForVision2Seq` / `ORTModelForSpeechSeq2Seq`
load as is (layout: its names and checks). Routes (docs/export.md says why):
- `fp32` (fp32): optimum-onnx `main_export`, task `*-with-past`, merged decoder only; a model
  read by its CTC head gets the head in its encoder graph, as the output `ctc_logits`.
- `int8` (int8): ORT `quantize_dynamic` of MatMul and Gather, then `compact_int8`.
- `int4` (int4): ORT's `MatMulNBitsQuantizer`, block-wise weight-only; it walks subgraphs.

Both quantizers see a prepared copy of the graph (prepare). check counts the MatMul weights a
variant keeps in FP32; with_past cuts the merged decoder's with-past branch out for the greedy
loop (sonfolio.infer.ortloop); track runs it all for one track: sources, variant folders,
model cards, metrics.
"""
