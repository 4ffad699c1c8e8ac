"""French speech from espeak-ng, through ctypes on the library that `espeakng-loader` ships.

No system package is needed: the PyPI wheel carries libespeak-ng and its data (French
included). Voices fr, fr-be and fr-ch sound the same; variety comes from voice variants
(`fr+m3`, `fr+f2`, ...), speaking rate and pitch.

espeak-ng keeps state from one utterance to the next in the library's static data (waveform
phase, noise generators) that no call resets: the same text spoken twice gives different
samples, even a different length. So each `Synthesizer` loads a private copy of the library
(fresh static data) and seeds its random generators: a sequence of utterances spoken by a new
`Synthesizer` is the same, byte for byte, in any process and after anything spoken before.
Loading a copy costs ~10 ms, so a batch of clips shares one.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

import espeakng_loader
import numpy as np

LANGUAGE = "fr"
# speak_lib.h constants
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # report a missing data folder instead of exiting the process
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_RATE, _PITCH = 1, 3

_Callback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class EspeakError(RuntimeError):
    """espeak-ng could not start, or refused a voice or a text."""


@functools.cache
def variants() -> tuple[str, ...]:
    """The voice variants espeak-ng's data ships (m1..m8, f1..f5 and named ones)."""
    folder = Path(espeakng_loader.get_data_path()) / "voices" / "!v"
    return tuple(sorted(p.name for p in folder.iterdir() if p.is_file()))


def voice_name(variant: str) -> str:
    """The espeak-ng voice for a variant: `m3` -> `fr+m3`."""
    return f"{LANGUAGE}+{variant}"


class Synthesizer:
    """A private espeak-ng instance: `with Synthesizer() as s: pcm = s.say(...)`."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.chunks: list[np.ndarray] = []
        self.callback = _Callback(self._collect)  # kept referenced: C holds only the pointer

    def __enter__(self) -> Synthesizer:
        self._dir = tempfile.TemporaryDirectory(prefix="espeak-")
        private = Path(self._dir.name) / "libespeak-ng.so"  # a new path: a new instance
        shutil.copyfile(espeakng_loader.get_library_path(), private)
        lib = ctypes.CDLL(str(private))
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        lib.espeak_Synth.argtypes += [ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
        lib.espeak_Synth.argtypes += [ctypes.c_void_p, ctypes.c_void_p]
        data = espeakng_loader.get_data_path().encode()
        self.sample_rate = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, data, _INITIALIZE_DONT_EXIT
        )  # 22,050 Hz for espeak-ng's own voices
        self.lib = lib
        if self.sample_rate <= 0:
            self.__exit__(None, None, None)
            raise EspeakError(f"espeak-ng failed to start (data folder {data.decode()})")
        lib.espeak_SetSynthCallback(self.callback)
        # its own noise generator, and libc's rand() which its voicing noise also draws from
        lib.espeak_ng_SetRandSeed(self.seed)
        ctypes.CDLL(None).srand(self.seed)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.sample_rate > 0:
            self.lib.espeak_Terminate()
        _ctypes.dlclose(self.lib._handle)  # unload: its static data goes with it
        self._dir.cleanup()

    def _collect(self, wav: ctypes.Array, n: int, _events: int) -> int:
        if n > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0  # 0: go on synthesizing

    def say(self, text: str, variant: str, rate_wpm: int, pitch: int) -> np.ndarray:
        """Speak `text` in French: int16 samples, shape (n,), at `self.sample_rate`.

        Raises:
            EspeakError: the variant is unknown or synthesis failed.
        """
        if variant not in variants():  # espeak-ng would ignore it and use the plain voice
            raise EspeakError(f"espeak-ng has no voice variant {variant!r}; known: {variants()}")
        self.chunks = []
        if self.lib.espeak_SetVoiceByName(voice_name(variant).encode()) != 0:
            raise EspeakError(f"espeak-ng has no voice {voice_name(variant)!r}")
        self.lib.espeak_SetParameter(_RATE, rate_wpm, 0)  # after the voice, which resets them
        self.lib.espeak_SetParameter(_PITCH, pitch, 0)
        buf = text.encode() + b"\0"
        err = self.lib.espeak_Synth(buf, len(buf), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if err != 0 or self.lib.espeak_Synchronize() != 0:
            raise EspeakError(f"espeak-ng failed (error {err}) on {text!r}")
        chunks, self.chunks = self.chunks, []
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


def synthesize(text: str, variant: str, rate_wpm: int, pitch: int) -> tuple[np.ndarray, int]:
    """Speak one text with a new synthesizer: (int16 samples, shape (n,); sample rate, Hz)."""
    with Synthesizer() as synth:
        return synth.say(text, variant, rate_wpm, pitch), synth.sample_rate
