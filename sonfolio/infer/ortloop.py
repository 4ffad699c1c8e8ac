"""A plain greedy decoding loop over a model's ONNX Runtime sessions, for the CPU.

Used by `sonfolio read` / `transcribe` / `serve` and the eval stages (through
sonfolio.variants) and measured by the bench stages (sonfolio.bench.loop_runtime) as `ort_loop`.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sonfolio.ctc_format import CTC_OUTPUT, collapse
from sonfolio.prompt import DecoderPrompt

if TYPE_CHECKING:
    from collections.abc import Callable

    from sonfolio.score.decode.constraint import GreedyConstraint


def set_spinning(options: Any, spin: bool) -> None:
    """ORT's idle intra-op threads spin (its default) or sleep. Sleeping is far faster on a
    shared machine: a spinning thread of the encoder's pool steals the core the decoder
    needs (measured 2-3x slower per token with the trainer running; docs/export.md)."""
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")


# the config entry that makes a session allocate from the process's shared CPU arena
SHARED_ARENA = "session.use_env_allocators"


@functools.cache
def _register_shared_arena() -> None:
    """One CPU arena for every session of the process, registered with ORT's environment once.

    Each session otherwise grows an arena of its own for its activations and keeps it: the
    encoder's (+20 MB for whisper-base's 8-s window) sat beside the decoder's (+23 MB), while
    the two never run at once in a loop. Shared, the decoder reuses what the encoder freed:
    whisper-base int8 read clip by clip, peak 214 -> 204 MB, the same time (docs/export.md)."""
    import onnxruntime

    info = onnxruntime.OrtMemoryInfo(
        "Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, onnxruntime.OrtMemType.DEFAULT
    )
    onnxruntime.create_and_register_allocator(info, onnxruntime.OrtArenaCfg(0, -1, -1, -1))


def session(
    model: str | bytes, threads: int, spin: bool, provider: str = "CPUExecutionProvider"
) -> Any:
    """An ORT session as the loops run them: `threads` intra-op threads, one inter-op, every
    graph optimization, spinning as asked; on the CPU, its memory from the process's shared
    arena (`_register_shared_arena`)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    set_spinning(options, spin)
    if provider == "CPUExecutionProvider":
        _register_shared_arena()
        options.add_session_config_entry(SHARED_ARENA, "1")
    return onnxruntime.InferenceSession(model, options, providers=[provider])


def open_file(path: Path, threads: int, spin: bool, provider: str = "CPUExecutionProvider") -> Any:
    """`session` over an ONNX file, or an error that names it. ONNX Runtime's own parse is the
    check: onnx's checker read the whole file again first (~0.3 s and a transient copy of the
    weights for whisper-base, paid at every start-up).

    Raises:
        OnnxFileError: the file is missing, or ONNX Runtime cannot load it.
    """
    from sonfolio.export.layout import OnnxFileError, invalid_file

    if not path.is_file():
        raise OnnxFileError(f"{path} is missing: rerun the export stage that writes it")
    try:
        return session(str(path), threads, spin, provider)
    except Exception as err:  # onnxruntime's pybind errors (InvalidProtobuf, Fail, ...)
        raise invalid_file(path, err) from None


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing).

    Loading a decoder without the export's fused file builds its ONNX protos in Python (the
    merged decoder, its with-past branch, the fused step, the bytes ORT reads): ~200 MB for
    whisper-base int8 that glibc keeps after they are freed, in small blocks it does not unmap
    by itself. The loop's resident memory after loading, whisper-base int8: 764 -> 563 MB with
    this (docs/export.md)."""
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # no glibc (macOS, musl): the heap stays as it is
        return
    trim(0)


class OrtGreedy:
    """The same ONNX files run by a plain greedy loop over ORT sessions (no HF generate),
    giving HF greedy `generate`'s tokens.

    It decodes from the model's DecoderPrompt (sonfolio.prompt.read): the prompt's ids (one
    start token, or a Whisper's <|startoftranscript|><|fr|><|transcribe|><|notimestamps|>)
    go in at once on the first step, the logits of the last position pick the first token;
    `suppress` tokens are never picked, `begin_suppress` ones not first. Only the new tokens
    are returned.

    Our own loop because neither optimum nor onnxruntime ships a greedy loop for these
    models (onnxruntime-genai does not run them here, STACK.md): HF generate's per-step
    Python work (logits processors, stopping criteria, cache objects) costs several ms per
    token, more than these small decoders' matmuls. What keeps a step cheap (docs/export.md
    has the measurements):
    - IO binding: the past key/values stay OrtValues that ORT allocated; each step's
      `present.*` outputs are bound as the next step's `past_key_values.*` inputs, with no
      numpy copy of the cache. The token ids are a numpy array that its bound OrtValue shares
      (CPU OrtValues from numpy do not copy), written in place; the logits land in a
      preallocated array.
    - one decoder session, one copy of the weights, runs every step: the merged decoder with
      its with-past branch's self-attention blocks fused into MultiHeadAttention nodes
      (sonfolio.export.decoder_step.joint_decoder; the export writes it as
      decoder_fused_model.onnx, a folder without it has it built when opened). The first step
      runs the no-past branch (the whole prompt, logits into a (B, prompt length, vocab)
      array); later steps run the with-past branch through a second IO binding of the same
      session, `use_cache_branch` bound once. The `If` costs ~35 us a step against a session
      of the with-past step alone, which held the weights a second time (+76 MB resident,
      whisper-base int8; docs/export.md); what only the first step reads (int8: the
      quantized encoder states) runs inside its branch.
    - the decoder session runs `decoder_threads` intra-op threads (1 in params) at batch 1: a
      step's ops are too small to split; the encoder keeps `threads`. From `batch_threads`
      samples a batch up, a second decoder session with `threads` threads runs it (made on
      first use): there the ops are big enough to share.
    """

    # a batch of at least this many decodes with `threads` threads: the score eval's 32 gained
    # (fp32 29.5 -> 40.4 systems/s on 2 cores), the speech eval's 16 lost (84 -> 63 clips/s)
    batch_threads = 32
    # the with-past branch's self-attention fused (benchmarks.decoder_step compares without)
    fuse_attention = True
    # samples a batch's encoder run takes at once (0: the whole batch; `encode`)
    encode_group = 1

    def __init__(
        self, folder: Path, threads: int, decoder_threads: int, spin: bool, prompt: DecoderPrompt
    ) -> None:
        """Sessions over the folder's encoder and its decoder (`_open_decoder`).

        Raises:
            OnnxFileError: a file is missing or corrupt.
            ValueError: a token of the prompt is outside the decoder's vocabulary.
        """
        import onnxruntime

        from sonfolio.export.layout import ENCODER

        self.ort, self.spin = onnxruntime, spin
        self.folder, self.threads, self.decoder_threads = folder, threads, decoder_threads
        # the decoder first: the transient peak of its opening (its weights prepacked beside
        # the originals) then comes before the encoder's session is resident (whisper-base
        # int8 read clip by clip: peak 228 -> 214 MB)
        self.decoder = self._open_decoder(decoder_threads)
        self.enc = open_file(folder / ENCODER, threads, spin)
        release_freed_memory()
        self._decoders = {decoder_threads: self.decoder}
        self._opening = threading.Lock()
        self.enc_input = self.enc.get_inputs()[0].name
        self.past = [i for i in self.decoder.get_inputs() if i.name.startswith("past_key_values")]
        self.presents = [o.name for o in self.decoder.get_outputs()][1:]
        # Whisper's cross-attention keys/values come from the first step only: the with-past
        # branch returns placeholders for them
        step0_only = {n for n in self.presents if ".encoder." in n}
        # what a with-past step outputs and the next one reads: the cross-attention's cached
        # keys / values are bound once, from the first step (rebinding the placeholders cost
        # ~30 us a whisper-base step in Python)
        self.step_presents = [n for n in self.presents if n not in step0_only]
        self.vocab = self.decoder.get_outputs()[0].shape[-1]
        self.prompt, self.eos = prompt, prompt.eos
        tokens = [*prompt.ids, prompt.eos, *prompt.suppress, *prompt.begin_suppress]
        bad = [t for t in tokens if isinstance(self.vocab, int) and not 0 <= t < self.vocab]
        if bad:
            raise ValueError(
                f"{folder}: the decoder prompt names tokens {bad} outside the decoder's "
                f"{self.vocab}-token vocabulary: its generation_config.json is not this model's"
            )
        # columns of the logits set to -inf: every step, and the first generated token
        self.suppress = np.unique(np.array(prompt.suppress, dtype=np.intp))
        self.suppress_first = np.union1d(self.suppress, np.array(prompt.begin_suppress, np.intp))

    def _decoder_for(self, batch: int) -> Any:
        """The decoder session for a batch of this size."""
        threads = self.threads if batch >= self.batch_threads else self.decoder_threads
        if (opened := self._decoders.get(threads)) is not None:  # no lock once it is open
            return opened
        with self._opening:  # two threads decoding at once open it once
            if threads not in self._decoders:
                self._decoders[threads] = self._open_decoder(threads)
                release_freed_memory()
        return self._decoders[threads]

    def _open_decoder(self, threads: int) -> Any:
        """A session over the export's fused decoder file (DECODER_FUSED) as it is, or, in a
        folder without one (an older export, optimum's own), the same graph built from the
        merged decoder now (sonfolio.export.decoder_step.joint_decoder); without
        `fuse_attention`, built with the with-past branch's attention as exported."""
        from sonfolio.export.layout import DECODER, DECODER_FUSED, load_onnx

        stored = self.folder / DECODER_FUSED
        if self.fuse_attention and stored.is_file():
            return open_file(stored, threads, self.spin)
        # imported only here: it imports onnx (~70 ms of a cold start), which the stored file
        # does not need
        from sonfolio.export.decoder_step import joint_decoder

        # parsed here rather than kept since start-up: a large decoder's proto is GBs
        joint = joint_decoder(load_onnx(self.folder / DECODER), fuse=self.fuse_attention)
        data = joint.SerializeToString()
        del joint  # a copy of the weights: gone before the session makes its own
        return self._session(data, threads)

    def _session(self, model: str | bytes, threads: int) -> Any:
        return session(model, threads, self.spin)

    def encode(self, x: np.ndarray) -> Any:
        """Encoder hidden states as an OrtValue, (B, encoder positions, d_model).

        A batch larger than `encode_group` runs through the encoder `encode_group` samples at
        a time, each group's states written into one (B, ...) array: the encoder's activations
        are then a group's, not the batch's (whisper-base int8, 8 clips of 8 s: +104 MB peak
        at once, +0 in groups of 1; docs/export.md)."""
        x = np.ascontiguousarray(x)
        name = self.enc.get_outputs()[0].name
        step = self.encode_group or len(x)
        io = self.enc.io_binding()
        io.bind_cpu_input(self.enc_input, x[:step])
        io.bind_output(name, "cpu")
        self.enc.run_with_iobinding(io)
        first = io.get_outputs()[0]
        if step >= len(x):
            return first
        head = first.numpy()
        states = np.empty((len(x), *head.shape[1:]), dtype=head.dtype)
        states[:step] = head
        del first, head, io
        for start in range(step, len(x), step):
            part = states[start : start + step]  # contiguous rows: ORT writes them in place
            io = self.enc.io_binding()
            io.bind_cpu_input(self.enc_input, x[start : start + step])
            io.bind_output(name, "cpu", 0, part.dtype, list(part.shape), part.ctypes.data)
            self.enc.run_with_iobinding(io)
        return self.ort.OrtValue.ortvalue_from_numpy(states)  # shares `states`, keeps it alive

    def generate(
        self,
        x: np.ndarray,
        new: int,
        forced: bool,
        constraint: GreedyConstraint | None = None,
    ) -> list[list[int]]:
        """At most `new` tokens a sample after the prompt (which is not returned); `forced`:
        the end token is never picked, so every sample gets `new` (the bench's fixed length).
        A finished sample is padded with the end token. `constraint` (a track's grammar,
        sonfolio.score.decode.constraint): each step picks the best token the grammar allows,
        and a sample that ends incomplete is cut back to its last complete point (no
        padding)."""
        return self.decode(self.encode(x), len(x), new, forced, constraint)

    def decode(
        self,
        enc: Any,
        batch: int,
        new: int,
        forced: bool = False,
        constraint: GreedyConstraint | None = None,
    ) -> list[list[int]]:
        """`generate` from encoder states already computed (`encode`'s OrtValue for `batch`
        samples). Safe to call from several threads at once: each call has its own bindings
        and arrays, and the session runs concurrent calls (at `decoder_threads` threads each,
        on the calling thread where that is 1: sonfolio.speech.decode.transcribe decodes two
        batches at once so)."""
        width = len(self.prompt.ids)
        value = self.ort.OrtValue.ortvalue_from_numpy
        prompt = np.tile(np.array(self.prompt.ids, dtype=np.int64), (batch, 1))  # (B, P)
        ids = np.empty((batch, 1), dtype=np.int64)  # shared with its OrtValue, written per step
        # the first step's logits cover every prompt position; the last one is read
        first_logits = np.empty((batch, width, self.vocab), dtype=np.float32)  # (B, P, vocab)
        logits = np.empty((batch, 1, self.vocab), dtype=np.float32)  # (B, 1, vocab)
        decoder = self._decoder_for(batch)
        # two bindings of the one session: the first step's (no-past branch) and the rest's
        first, io = decoder.io_binding(), decoder.io_binding()
        for binding, tok, out, later in (
            (first, prompt, first_logits, False),
            (io, ids, logits, True),
        ):
            binding.bind_ortvalue_input("input_ids", value(tok))
            binding.bind_ortvalue_input("encoder_hidden_states", enc)
            binding.bind_ortvalue_input("use_cache_branch", value(np.array([later])))
            binding.bind_output("logits", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
        for i in self.past:  # (B, heads, 0, head dim): ignored by the no-past branch
            empty = np.zeros((batch, i.shape[1], 0, i.shape[3]), dtype=np.float32)
            first.bind_ortvalue_input(i.name, value(empty))
        tokens = np.full((batch, new), self.eos, dtype=np.int64)
        done = np.zeros(batch, dtype=bool)
        binding, out, banned = first, first_logits, self.suppress_first
        presents = self.presents
        for step in range(new):
            for name in presents:  # unbound: ORT allocates them at their new length
                binding.bind_output(name, "cpu")
            decoder.run_with_iobinding(binding)
            last = out[:, -1]  # (B, vocab), a view: written in place
            if banned.size:
                last[:, banned] = -np.inf
            if forced:
                last[:, self.eos] = -np.inf
            best = last.argmax(-1) if constraint is None else constraint.choose(last)
            nxt = np.where(done, self.eos, best)
            tokens[:, step] = nxt
            done |= nxt == self.eos
            if done.all():
                tokens = tokens[:, : step + 1]
                break
            for name, past in zip(presents, binding.get_outputs()[1:], strict=True):
                io.bind_ortvalue_input(name.replace("present", "past_key_values", 1), past)
            ids[:, 0] = nxt
            binding, out, banned = io, logits, self.suppress
            presents = self.step_presents
        return tokens.tolist() if constraint is None else constraint.finish(tokens.tolist())


class OrtCtc:
    """Greedy CTC reading over an exported encoder that carries the CTC head (its `ctc_logits`
    output, sonfolio.export.fp32.add_ctc_output): one encoder run a batch, the best label per
    position, repeats merged, blanks dropped. The decoder files are not used.

    The same `encode` / `generate` as OrtGreedy, so eval, read, serve and bench run either.
    Made over any encoder session with that output (optimum's, in the bench), or with `open`.
    """

    def __init__(self, encoder: Any, blank: int) -> None:
        self.enc, self.blank = encoder, blank
        self.enc_input = encoder.get_inputs()[0].name

    @classmethod
    def open(
        cls,
        folder: Path,
        threads: int,
        spin: bool,
        blank: int,
        provider: str = "CPUExecutionProvider",
    ) -> OrtCtc:
        """Over the folder's encoder_model.onnx.

        Raises:
            OnnxFileError: the file is missing or corrupt, or has no ctc_logits output.
        """
        from sonfolio.export.layout import ENCODER, OnnxFileError

        encoder = open_file(folder / ENCODER, threads, spin, provider)
        if CTC_OUTPUT not in {o.name for o in encoder.get_outputs()}:
            raise OnnxFileError(
                f"{folder / ENCODER} has no {CTC_OUTPUT} output although config.json says the "
                "model reads with its CTC head: rerun the export stage"
            )
        return cls(encoder, blank)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """The head's logits, (B, encoder positions, vocabulary)."""
        return self.enc.run([CTC_OUTPUT], {self.enc_input: np.ascontiguousarray(x)})[0]

    def generate(
        self,
        x: np.ndarray,
        new: int,
        forced: bool = False,
        decode: Callable[[np.ndarray, int], list[list[int]]] | None = None,
    ) -> list[list[int]]:
        """At most `new` tokens a sample (`forced` is moot: CTC has no end token to hold off).
        `decode(logits, new)`: another decoding of the head's (B, T, V) logits than the greedy
        collapse (sonfolio.score.decode.search.ctc_decode, bound to its grammar)."""
        if decode is not None:
            return decode(self.encode(x), new)
        return collapse(self.encode(x).argmax(-1), self.blank, new)
