"""The greedy loop's one decoder (sonfolio.export.decoder_step): the with-past step with its
self-attention fused gives the same outputs as the step as exported, one MultiHeadAttention
node a layer, and no fusion where a block or the step's inputs are not what the fusion
assumes; the merged decoder with that step as its with-past branch gives the merged decoder's
outputs on both branches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from export.hub_whisper import TINY  # tests/ is on sys.path

from sonfolio.export.decoder_step import fuse_self_attention, joint_decoder
from sonfolio.export.layout import DECODER
from sonfolio.export.with_past import with_past_decoder

HEADS = TINY["decoder_attention_heads"]  # hub_whisper's (it has 2 decoder layers)


@pytest.fixture(scope="module")
def hub_whisper_int8(hub_whisper_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Its int8 variant, as the export stage quantizes it."""
    from export.hub_whisper import ROOT  # tests/ is on sys.path

    from sonfolio.config.params import load_params
    from sonfolio.export.int8 import quantize_int8

    out = tmp_path_factory.mktemp("hub_whisper_int8") / "int8_ptq"
    quantize_int8(hub_whisper_onnx, out, load_params(ROOT / "params.yaml").export)
    return out


def _step(folder: Path) -> onnx.ModelProto:
    return with_past_decoder(onnx.load(str(folder / DECODER)))


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime

    sess = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    outputs = sess.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(names, outputs, strict=True))


def _feeds(model: onnx.ModelProto, batch: int, new: int, past: int) -> dict[str, np.ndarray]:
    """Random token ids, past keys / values and cached encoder keys / values."""
    rng = np.random.default_rng(new * 10 + past)
    feeds = {}
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(5, 100, (batch, new)).astype(np.int64)
        elif ".encoder." in i.name:
            feeds[i.name] = rng.standard_normal((batch, dims[1], 7, dims[3])).astype(np.float32)
        else:
            feeds[i.name] = rng.standard_normal((batch, dims[1], past, dims[3])).astype(np.float32)
    return feeds


@pytest.mark.parametrize("variant", ["hub_whisper_onnx", "hub_whisper_int8"])
@pytest.mark.parametrize(("batch", "new", "past"), [(1, 1, 3), (3, 1, 6), (2, 4, 5), (2, 1, 0)])
def test_the_fused_step_gives_the_exported_steps_outputs(request, variant, batch, new, past):
    """Logits and every present key / value, FP32 and int8, for one new token (the loop's
    steps) and for several at once (the causal mask, kept by `unidirectional`)."""
    step = _step(request.getfixturevalue(variant))
    fused, count = fuse_self_attention(step, HEADS)
    assert count == 2  # one block a decoder layer
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("MultiHeadAttention") == 2
    # what the fusion removes: the mask, the self-attention's Softmax (the cross-attention
    # keeps its own), the IsNaN guard
    assert ops.count("Softmax") == 2 and "IsNaN" not in ops and "LessOrEqual" not in ops
    feeds = _feeds(step, batch, new, past)
    want, got = _run(step, feeds), _run(fused, feeds)
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("variant", ["hub_whisper_onnx", "hub_whisper_int8"])
def test_the_joint_decoder_gives_the_merged_decoders_outputs_on_both_branches(request, variant):
    """The first step (no past) and a later one, FP32 and int8; what only the first step reads
    (int8: the encoder states' quantization) runs inside its branch, not on every step."""
    folder = request.getfixturevalue(variant)
    merged = onnx.load(str(folder / DECODER))
    joint = joint_decoder(onnx.load(str(folder / DECODER)))
    onnx.checker.check_model(joint)
    quantizes = [n.op_type for n in merged.graph.node].count("DynamicQuantizeLinear")
    assert quantizes == (variant == "hub_whisper_int8")
    top = [n.op_type for n in joint.graph.node]
    assert top.count("If") == 1 and "DynamicQuantizeLinear" not in top
    branches = {a.name: a.g for a in joint.graph.node[-1].attribute}
    assert [n.op_type for n in branches["then_branch"].node].count("MultiHeadAttention") == 2
    assert [i.name for i in joint.graph.input] == [i.name for i in merged.graph.input]
    rng = np.random.default_rng(7)
    states = rng.standard_normal((2, 50, TINY["d_model"])).astype(np.float32)  # (B, T, d)
    for later, new, past in ((False, 3, 0), (True, 1, 5)):
        feeds = _feeds(_step(folder), 2, new, past)
        feeds |= {"encoder_hidden_states": states, "use_cache_branch": np.array([later])}
        want, got = _run(merged, feeds), _run(joint, feeds)
        assert set(got) == set(want)
        for name, value in want.items():
            if later:
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
            else:  # the no-past branch as exported
                np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_a_step_fed_an_attention_mask_is_left_as_it_is(hub_whisper_onnx):
    """The fusion drops the block's mask: only right when it is the causal one, so a step
    that reads any other input (a padding mask) is not fused."""
    step = _step(hub_whisper_onnx)
    step.graph.input.append(
        onnx.helper.make_tensor_value_info("attention_mask", onnx.TensorProto.INT64, [1, 1])
    )
    assert fuse_self_attention(step, HEADS) == (step, 0)


def test_a_block_that_differs_is_left_as_it_is(hub_whisper_onnx):
    """Softmax over another axis than the keys: not attention as the fused node computes it.
    That block stays; the other layer's is fused."""
    step = _step(hub_whisper_onnx)
    softmax = next(
        n
        for n in step.graph.node
        if n.op_type == "Softmax" and any(u.op_type == "IsNaN" for u in _users(step, n))
    )
    softmax.attribute[0].i = 2
    fused, count = fuse_self_attention(step, HEADS)
    assert count == 1
    assert [n.op_type for n in fused.graph.node].count("MultiHeadAttention") == 1


def _users(model: onnx.ModelProto, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if set(n.input) & set(node.output)]


def test_the_benchmark_compares_the_step_as_exported_with_it_fused(hub_whisper_onnx):
    """benchmarks/decoder_step.py: its "plain" loop really runs the step unfused, and both
    loops give an FP32 model's tokens alike."""
    from benchmarks.decoder_step import loops, measure, nodes

    counts = nodes(hub_whisper_onnx)
    assert counts["fused_blocks"] == 2
    assert counts["fused_nodes_after_ort"] < counts["plain_nodes_after_ort"]
    made = loops(hub_whisper_onnx, 1)
    assert not made["plain"].fuse_attention and made["fused"].fuse_attention
    x = np.random.default_rng(0).standard_normal((3, 80, 100)).astype(np.float32)
    result = measure(made, x, new=6, rounds=1)
    assert result["same_tokens_clips"] == result["clips"] == 3
    assert result["fused_ms_p50"] > 0 and result["plain_ms_p50"] > 0


def test_the_export_writes_the_joint_decoder_and_opening_does_no_surgery(
    hub_whisper_int8, tmp_path, monkeypatch
):
    """write_fused stores the joint decoder beside optimum's files (the export stage calls it
    on every variant); the loop opens that file as it is, and gives the tokens it gives with
    the joint decoder built at opening, as a folder without the file still is."""
    import shutil

    from sonfolio import prompt
    from sonfolio.export import decoder_step
    from sonfolio.export.layout import DECODER_FUSED
    from sonfolio.infer.ortloop import OrtGreedy

    stored, built = tmp_path / "stored", tmp_path / "built"
    shutil.copytree(hub_whisper_int8, stored)
    shutil.copytree(hub_whisper_int8, built)
    written = decoder_step.write_fused(stored)
    assert written == stored / DECODER_FUSED
    model = onnx.load(str(written))
    with_past = next(a.g for a in model.graph.node[-1].attribute if a.name == "then_branch")
    assert [n.op_type for n in with_past.node].count("MultiHeadAttention") == 2
    x = np.random.default_rng(1).standard_normal((2, 80, 100)).astype(np.float32)
    read = prompt.read(stored)
    plain = OrtGreedy(built, 1, 1, False, read).generate(x, 6, True)
    # no graph surgery when the file is there
    monkeypatch.setattr(decoder_step, "joint_decoder", lambda *a, **k: pytest.fail("surgery"))
    assert OrtGreedy(stored, 1, 1, False, read).generate(x, 6, True) == plain


def test_a_damaged_fused_decoder_file_is_named(hub_whisper_onnx, tmp_path):
    import shutil

    from sonfolio import prompt
    from sonfolio.export.layout import DECODER_FUSED, OnnxFileError
    from sonfolio.infer.ortloop import OrtGreedy

    folder = tmp_path / "fp32"
    shutil.copytree(hub_whisper_onnx, folder)
    (folder / DECODER_FUSED).write_bytes(b"\x08\x07garbage")
    with pytest.raises(OnnxFileError, match=DECODER_FUSED):
        OrtGreedy(folder, 1, 1, False, prompt.read(folder))


@pytest.mark.parametrize("group", [1, 2])
def test_a_batch_encoded_in_groups_gives_each_groups_own_states(hub_whisper_int8, group):
    """OrtGreedy.encode runs a batch `encode_group` samples at a time (the last group short)
    into one array: each group's states as the encoder gives them for that group alone (int8
    quantizes activations per tensor, so in groups of 1 a sample reads as it does alone)."""
    from sonfolio import prompt
    from sonfolio.infer.ortloop import OrtGreedy

    x = np.random.default_rng(2).standard_normal((5, 80, 100)).astype(np.float32)
    loop = OrtGreedy(hub_whisper_int8, 1, 1, False, prompt.read(hub_whisper_int8))
    loop.encode_group = 0
    alone = np.concatenate([loop.encode(x[i : i + group]).numpy() for i in range(0, 5, group)])
    loop.encode_group = group
    grouped = loop.encode(x)
    assert grouped.shape() == list(alone.shape)
    np.testing.assert_array_equal(grouped.numpy(), alone)
    assert len(loop.generate(x, 6, True)) == 5


def test_long_audio_decoded_two_batches_at_once_reads_as_one_at_a_time(
    hub_whisper_onnx, params, monkeypatch
):
    """`infer.speech.decode_workers`: a long recording's batches encoded in turn and decoded side by
    side, one thread each, give the texts of decoding one batch at a time, each in its own
    piece's place (pieces are batched by length, so the order is restored)."""
    from sonfolio import prompt
    from sonfolio.infer.ortloop import OrtGreedy
    from sonfolio.model_folder import read_config
    from sonfolio.speech.decode.transcribe import read_pieces
    from sonfolio.variants import Variant

    class Ids:  # the tiny model has no tokenizer: its ids stand for the text
        def batch_decode(self, rows, skip_special_tokens=True):
            return [" ".join(str(i) for i in row if i != loop.eos) for row in rows]

    def features(batch, **_):  # the random model reads any log-mel alike: features drawn
        # from each piece's length instead, which it reads apart
        drawn = [np.random.default_rng(len(p)).standard_normal((80, 100)) * 100 for p in batch]
        return {"input_features": np.stack(drawn).astype(np.float32)}

    folder = hub_whisper_onnx
    loop = OrtGreedy(folder, 2, 1, False, prompt.read(folder))
    variant = Variant(
        "fp32", "onnx", "speech", Ids(), features, folder, "cpu",
        read_config(folder), None, loop,
    )  # fmt: skip
    assert variant.decodes_apart
    rng = np.random.default_rng(3)
    pieces = [rng.standard_normal(n).astype(np.float32) for n in (16000, 4000, 9000, 2000, 12000)]

    def with_workers(n: int):
        speech = params.infer.speech.model_copy(update={"max_tokens": 8, "decode_workers": n})
        return params.infer.model_copy(update={"batch_size": 2, "speech": speech})

    cfg = with_workers(1)
    apart = read_pieces(variant, pieces, with_workers(2))
    in_turn = read_pieces(variant, pieces, cfg)
    with monkeypatch.context() as m:  # one batch in all starts no threads
        m.setattr("sonfolio.variants.ThreadPoolExecutor", None)
        alone = [read_pieces(variant, [p], cfg)[0] for p in pieces]
    assert apart == in_turn == alone
    assert len(set(alone)) > 1  # the pieces read differently: a mixed-up order would show
