"""Export + quantization: variant folders load with optimum, int8 keeps no FP32 MatMul weight
nor FP32 table or Conv weight and stores the tied embedding once, the lean greedy loop gives
optimum's tokens, and bad ONNX files fail by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from sonfolio.config.params import load_params
from sonfolio.export.check import fp32_weight_matmuls
from sonfolio.export.layout import (
    DECODER,
    DECODER_FUSED,
    ENCODER,
    OnnxFileError,
    check_onnx,
    validate_variant,
)
from sonfolio.tracks import face
from tasks.export import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exported(tiny_score_model, tmp_path_factory) -> tuple[Path, dict, Path]:
    model, data = tiny_score_model
    params = load_params(ROOT / "params.yaml")
    out = tmp_path_factory.mktemp("onnx") / "score_onnx"
    metrics = run(
        face("score", "export"),
        params.export,
        params.score_export,
        model,
        None,
        out,
        out.parent / "m.json",
    )
    return out, metrics, data


def _images(data: Path, model: Path) -> torch.Tensor:
    from transformers import AutoConfig

    from sonfolio.io import read_jsonl
    from sonfolio.score.model.batches import load_image, to_pixel_values

    shape = AutoConfig.from_pretrained(str(model)).encoder.image_size
    rows = read_jsonl(data / "manifest.jsonl")
    return to_pixel_values(np.stack([load_image(data / r["image"], *shape) for r in rows]))


def test_int8_folder_loads_with_optimum_and_agrees_with_torch(exported, tiny_score_model):
    from optimum.onnxruntime import ORTModelForVision2Seq
    from transformers import VisionEncoderDecoderModel

    out, _, data = exported
    model_dir, _ = tiny_score_model
    pixels = _images(data, model_dir)
    torch_model = VisionEncoderDecoderModel.from_pretrained(str(model_dir)).eval()
    ort_model = ORTModelForVision2Seq.from_pretrained(str(out / "int8_ptq"))
    kw = {"max_new_tokens": 8, "num_beams": 1, "do_sample": False}
    with torch.inference_mode():
        ref = torch_model.generate(pixels, **kw).tolist()
    got = ort_model.generate(pixels, **kw).tolist()
    assert len({tuple(r) for r in ref}) >= len(ref) // 2, "outputs must differ between images"
    # Seeded, so deterministic: 22 distinct outputs of 40. With 7-bit int8 weights (the
    # default, no saturation on any CPU), measured on an AVX2-only CPU: first tokens 92.5 %
    # equal, whole 8-token sequences 80 % (an early divergence changes the rest: a random
    # model's margins are small). 8-bit weights: 95 % / 72 % with VNNI, 72.5 % / 30 % on
    # AVX2 without it. A broken int8 file scores near 0 on both.
    first = np.mean([a[1] == b[1] for a, b in zip(ref, got, strict=True)])
    whole = np.mean([a == b for a, b in zip(ref, got, strict=True)])
    assert first >= 0.85, f"int8 first token agrees with torch FP32 on {first:.0%} of {len(ref)}"
    assert whole >= 0.6, f"int8 sequences agree with torch FP32 on {whole:.0%} of {len(ref)}"
    for name in ("fp32", "int8_ptq", "int4_ptq"):
        card = (out / name / "README.md").read_text()
        assert card.startswith("---\n") and "pipeline_tag: image-to-text" in card
        assert (out / name / "tokenizer.json").is_file()
        assert (out / name / "preprocessor_config.json").is_file()


def int8_matmul_weights(folder: Path) -> list[np.ndarray]:
    """The constant weight of every MatMulInteger / DynamicQuantizeMatMul, subgraphs included,
    read straight from the files (not through sonfolio.cpu, which the export uses)."""
    from onnx import numpy_helper

    from sonfolio.onnx_graphs import graphs

    found = []
    for path in sorted(folder.glob("*.onnx")):
        model = onnx.load(str(path))
        inits = {i.name: i for g in graphs(model.graph) for i in g.initializer}
        for graph in graphs(model.graph):
            for node in graph.node:
                if node.op_type in ("MatMulInteger", "DynamicQuantizeMatMul"):
                    found.append(numpy_helper.to_array(inits[node.input[1]]))
    return found


def test_int8_weights_keep_to_seven_bits_so_no_cpu_saturates(exported):
    """What keeps int8 accurate on x86 CPUs without VNNI (sonfolio.cpu): every int8 MatMul
    weight within [-64, 64], so ORT's u8 x s8 pairs fit VPMADDUBSW's 16-bit sums. Asserted on
    the files, so CI on a VNNI machine (where 8-bit would still read well) catches a
    regression too."""
    out, metrics, _ = exported
    weights = int8_matmul_weights(out / "int8_ptq")
    assert len(weights) >= 10  # encoder, decoder and both merged-decoder branches
    assert all(w.dtype == np.int8 for w in weights)
    assert max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == 64  # the grid is used
    assert metrics["int8_ptq"]["int8_weights"]["bits"] == 7
    assert "7-bit weights" in metrics["int8_ptq"]["route"]
    card = (out / "int8_ptq" / "README.md").read_text()
    assert "int8 weights: 7-bit (max |w| 64" in card and "Exported on: " in card


def test_int8_with_eight_bit_weights_is_flagged_on_a_cpu_without_vnni(exported, tmp_path):
    """export.int8_weight_bits: 8 gives [-127, 127] weights; sonfolio doctor's check warns for
    it on an AVX2-only CPU and not on a VNNI one (the CPU dicts are given, not read)."""
    from sonfolio import int8_weights
    from sonfolio.export.int8 import quantize_int8

    out, _, _ = exported
    params = load_params(ROOT / "params.yaml")
    eight = params.export.model_copy(update={"int8_weight_bits": 8})
    quantize_int8(out / "fp32", tmp_path / "int8_8bit", eight)
    weights = int8_matmul_weights(tmp_path / "int8_8bit")
    assert max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == 127
    avx2 = {"arch": "x86_64", "model": "test", "known": True, "avx2": True, "avx512": False}
    avx2 |= {"avx512_vnni": False, "avx_vnni": False, "amx_int8": False}
    vnni = avx2 | {"avx512": True, "avx512_vnni": True}
    arm = {"arch": "aarch64", "model": "test", "known": True, "neon": True, "dotprod": True}
    warning = int8_weights.int8_warning(tmp_path / "int8_8bit", avx2)
    assert warning and "127" in warning and "export.int8_weight_bits: 7" in warning
    assert int8_weights.int8_warning(tmp_path / "int8_8bit", vnni) is None
    assert int8_weights.int8_warning(tmp_path / "int8_8bit", arm) is None
    assert int8_weights.int8_warning(out / "int8_ptq", avx2) is None  # the 7-bit default


def test_no_fp32_matmul_weight_left_in_int8_subgraphs_included(exported):
    out, metrics, _ = exported
    fp32 = fp32_weight_matmuls(onnx.load(str(out / "fp32" / DECODER)))
    assert fp32["fp32_weight_matmuls"] > 0  # the checker sees weights inside the If branches
    for name in (ENCODER, DECODER):
        assert (
            fp32_weight_matmuls(onnx.load(str(out / "int8_ptq" / name)))["fp32_weight_matmuls"] == 0
        )
    assert metrics["int8_ptq"]["size_ratio"] < 0.5
    assert metrics["int8_qat"]["status"].startswith("not built")


def _fp32_tables_and_conv_weights(model: onnx.ModelProto) -> list[str]:
    from onnx import TensorProto

    from sonfolio.onnx_graphs import graphs

    floats = {  # tables and weights; 1-D float scales are expected
        i.name
        for i in model.graph.initializer
        if i.data_type == TensorProto.FLOAT and len(i.dims) >= 2
    }
    return [
        f"{node.op_type} {node.input[i]}"
        for graph in graphs(model.graph)
        for node in graph.node
        for i in ({"Gather": [0], "Conv": [1]}.get(node.op_type, []))
        if node.input[i] in floats
    ]


def test_int8_stores_tables_and_conv_weights_in_int8_and_the_tied_embedding_once(exported):
    from onnx import TensorProto

    from sonfolio.onnx_graphs import graphs

    out, _, _ = exported
    fp32 = onnx.load(str(out / "fp32" / DECODER))
    vocab, width = next(tuple(i.dims) for i in fp32.graph.initializer if "wte.weight" in i.name)
    for name in (ENCODER, DECODER, DECODER_FUSED):
        model = onnx.load(str(out / "int8_ptq" / name))
        assert not _fp32_tables_and_conv_weights(model), name
        tables = [i for i in model.graph.initializer if sorted(i.dims) == sorted([vocab, width])]
        if name != ENCODER:  # GPT-2's wte and its transpose, the lm_head: one int8 copy, also
            # in the fused file that ORT saved optimized (it folds a Transpose of the table)
            assert [i.data_type for i in tables] == [TensorProto.INT8], name
        if name != DECODER_FUSED:  # ORT's saved graph lists its inferred shapes
            assert not any(g.value_info for g in graphs(model.graph))


@pytest.fixture(scope="module")
def conv_exported(tiny_conv_model, tmp_path_factory) -> Path:
    model_dir, _ = tiny_conv_model
    params = load_params(ROOT / "params.yaml")
    out = tmp_path_factory.mktemp("conv_onnx") / "score_onnx"
    run(face("score", "export"), params.export, params.score_export, model_dir, None, out,
        out.parent / "m.json")  # fmt: skip
    return out


def test_int8_conv_encoder_stores_every_conv_weight_in_int8_and_reads_as_torch(
    tiny_conv_model, conv_exported
):
    """The default conv encoder's int8 file: each Conv weight (most are under 4,096 values: a
    depthwise 3x3 is 9 a channel) stored int8, and its frames what torch computes, to int8
    rounding (a weight quantized along the wrong axis or a lost scale is far off)."""
    import onnxruntime as ort
    from transformers import VisionEncoderDecoderModel

    model_dir, data = tiny_conv_model
    out = conv_exported
    encoder = onnx.load(str(out / "int8_ptq" / ENCODER))
    assert any(n.op_type == "Conv" for n in encoder.graph.node)
    assert not _fp32_tables_and_conv_weights(encoder)
    pixels = _images(data, model_dir)
    with torch.inference_mode():
        model = VisionEncoderDecoderModel.from_pretrained(str(model_dir)).eval()
        want = model.encoder(pixel_values=pixels).last_hidden_state.numpy()
    session = ort.InferenceSession(str(out / "int8_ptq" / ENCODER))
    got = session.run(None, {"pixel_values": pixels.numpy()})[0]
    cosine = (want * got).sum(-1) / np.linalg.norm(want, axis=-1) / np.linalg.norm(got, axis=-1)
    assert cosine.mean() >= 0.99 and cosine.min() >= 0.9, (cosine.mean(), cosine.min())


def test_with_past_decoder_refuses_a_model_that_is_not_a_merged_decoder(exported):
    from sonfolio.export.with_past import with_past_decoder

    out, _, _ = exported
    with pytest.raises(OnnxFileError, match="not an optimum merged decoder"):
        with_past_decoder(onnx.load(str(out / "int8_ptq" / ENCODER)))


def test_checker_counts_fp32_weights_inside_if_branches():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    branch = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "branch",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
        "top",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[w],
    )
    counts = fp32_weight_matmuls(helper.make_model(graph))
    assert counts == {"fp32_weight_matmuls": 2, "weight_matmuls": 2, "quantized_matmuls": 0}


def test_missing_or_corrupt_onnx_file_is_named(tmp_path):
    from onnx import TensorProto, helper

    folder = tmp_path / "int8_ptq"
    folder.mkdir()
    with pytest.raises(OnnxFileError, match=f"{ENCODER} is missing"):
        validate_variant(folder)
    (folder / ENCODER).write_bytes(b"not a protobuf at all")
    with pytest.raises(OnnxFileError, match=f"{ENCODER} is not a valid ONNX model"):
        validate_variant(folder)
    # a real model cut short (the checker reads the file itself, not a proto built here),
    # and one that parses but names an operator ONNX does not have
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    good = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [x],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        )
    )
    onnx.save(good, str(folder / ENCODER))
    check_onnx(folder / ENCODER)
    (folder / ENCODER).write_bytes((folder / ENCODER).read_bytes()[:-9])
    with pytest.raises(OnnxFileError, match=f"{ENCODER} is not a valid ONNX model"):
        check_onnx(folder / ENCODER)
    good.graph.node[0].op_type = "NoSuchOp"
    onnx.save(good, str(folder / ENCODER))
    with pytest.raises(OnnxFileError, match=f"{ENCODER} is not a valid ONNX model"):
        check_onnx(folder / ENCODER)


def test_lean_greedy_loop_gives_the_tokens_of_optimum_generate(
    exported, tiny_score_model, loop_spec
):
    from sonfolio.bench.loop_runtime import LoopRuntime
    from sonfolio.bench.ort_runtime import OrtRuntime
    from sonfolio.infer.ortloop import SHARED_ARENA

    out, _, data = exported
    pixels = _images(data, tiny_score_model[0]).numpy()[:6]
    spec = loop_spec(out / "int8_ptq", "score")
    loop, hf = LoopRuntime(spec), OrtRuntime(spec)
    # the loop's sessions draw on the process's one CPU arena (optimum's each keep their own)
    for opened in (loop.enc, loop.decoder):
        assert opened.get_session_options().get_session_config_entry(SHARED_ARENA) == "1"
    # optimum encodes the batch at once, and int8 quantizes activations per tensor: the loop
    # does the same here (its default encodes a sample at a time: test_decoder_step.py)
    loop.encode_group = 0
    for forced in (True, False):
        got = loop.generate(pixels, 6, forced)
        want = [ids[1:] for ids in hf.generate(pixels, 6, forced)]  # HF echoes the start token
        trimmed = [g[: g.index(2) + 1] if 2 in g else g for g in got]
        assert trimmed == [w[: w.index(2) + 1] if 2 in w else w for w in want]
        if forced:
            assert all(len(g) == 6 and 2 not in g for g in got)
    # a batch at least loop.batch_threads long runs its own decoder session, with all the
    # loop's threads, and decodes the same tokens
    one_thread = loop.generate(pixels, 6, True)
    loop.threads, loop.batch_threads = 2, 2
    assert loop._decoder_for(2) is not loop.decoder and loop._decoder_for(1) is loop.decoder
    assert loop.generate(pixels, 6, True) == one_thread


def test_the_bench_worker_opens_a_conv_model_in_a_fresh_process(tiny_conv_model, conv_exported):
    """The bench measures each variant in its own interpreter, where nothing has registered the
    conv encoder's model type yet: the worker registers the track's classes before opening any
    runtime (a fresh clone's bench@score failed on "sonfolio-conv", torch and ORT rows alike)."""
    import subprocess
    import sys

    folder, _ = tiny_conv_model
    for runtime, where in (("torch", folder), ("ort", conv_exported / "int8_ptq")):
        code = (
            "from sonfolio.bench.case import Case, Spec\n"
            "from sonfolio.bench.worker import open_runtime\n"
            f"case = Case('{runtime}_variant', {runtime!r}, {str(where)!r})\n"
            "spec = Spec(case=case, track='score', inputs='', threads=1, decoder_threads=1,\n"
            "            spin_wait=False, warmup=0, batch_size=1, decode_tokens=4,\n"
            "            quality_tokens=4, io_binding=False, prompt=[1], eos_id=2, quality=False)\n"
            "print(type(open_runtime(spec)).__name__)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=ROOT)  # fmt: skip
        assert done.returncode == 0, (runtime, done.stderr[-2000:])
