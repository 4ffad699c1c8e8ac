"""The `real` evaluation set: one real French voice, for measuring only (never trained on).

Source: Debian's asterisk-core-sounds-fr-g722 1.6.1-1 (the prompts of the Asterisk telephone
system read by June Wallack, Canadian French; G.722 at 16 kHz) and asterisk-core-sounds-fr
1.6.1-1 (their transcripts, `id: text` lines), both CC-BY-SA-3.0. Used where installed, else
fetched without root (sonfolio.speech.data.debian); where neither works the set is skipped
with a warning that names what to install, and the stats say it is absent.

Kept: prompts whose transcript has no bracket or parenthesis (`[ascending tones]`, `(beep)`:
non-speech the text cannot separate from the words), at least `min_words` words (tokens holding
a letter or digit: a lone "..." is no word) and at most `max_duration_s` seconds; on 1.6.1-1
with 5 words and 30 s that is 212 of 521 prompts (1.5 to 29.2 s, 17 min). Some transcripts are
misspelt; FIXES, below, is the one place where they are corrected.

Written apart from the dataset's manifest.jsonl, which every training stage reads: <data>/real/
holds audio/NNNNNN.wav (16 kHz mono PCM) and manifest.jsonl (rows as the main manifest's, split
`real`, with the prompt's id and the file's sha256). Only eval@speech reads them.
"""

from __future__ import annotations

import gzip
import logging
import re
import shutil
import statistics
import subprocess
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sonfolio.io import file_sha256, write_jsonl
from sonfolio.speech.common.audio import SAMPLE_RATE, write_wav
from sonfolio.speech.common.normalize import normalize, unify
from sonfolio.speech.data.debian import (
    DebPackage,
    PackageUnavailable,
    fetch,
    installed_version,
    unpacked,
)

if TYPE_CHECKING:
    from sonfolio.config.data import SpeechReal

log = logging.getLogger(__name__)

FOLDER = "real"  # <data>/real/ (sonfolio.speech.eval.real reads the same folder)
SPLIT = "real"
LICENSE = "CC-BY-SA-3.0"
VOICE = "June Wallack, Canadian French"
# The sums are those the Debian archive lists for the .deb files (bookworm, 2026-11-28).
PACKAGES = (
    DebPackage(
        "asterisk-core-sounds-fr-g722",
        "1.6.1-1",
        "7add61d5e42279ecff1bbdf842a5a946ac3644fac9a0fe44384731aa7270c8e0",
    ),
    DebPackage(
        "asterisk-core-sounds-fr",
        "1.6.1-1",
        "04c82c78c570c43a7136cbc5e2488d0c470b775468dff9fbce4a131b18cf1056",
    ),
)
# <id>.g722 in the pinned package's voice folder (another French voice may sit beside it in
# sounds/, e.g. a `fr` link or another package's prompts: only this one is read)
SOUNDS = "usr/share/asterisk/sounds/fr_CA_f_June"
TRANSCRIPTS = "usr/share/doc/asterisk-core-sounds-fr/core-sounds-fr.txt.gz"
INSTALL_HINT = (
    "apt-get install asterisk-core-sounds-fr-g722 asterisk-core-sounds-fr (Debian, Ubuntu), "
    "or run where `apt-get download` reaches a Debian mirror; speech_data.real.enabled: false "
    "turns the set off"
)

# Transcript errors of 1.6.1-1, corrected: (prompt id, as written, as said). Each is a
# misspelling whose spoken form is not in doubt (the same sounds spelt right: "veuillez
# composez" is said "veuillez composer"), a symbol read out as its word, a word split in two,
# or the next prompt's line run into this one. A fix that no longer matches is logged.
FIXES: tuple[tuple[str, str, str], ...] = (
    ("agent-alreadyon", "présentemnet", "présentement"),
    ("agent-incorrect", "Veuillez recomposez", "Veuillez recomposer"),
    ("conf-getconfno", "Veuillez composez", "Veuillez composer"),
    ("enter-num-blacklist", "Veuillez entrez", "Veuillez entrer"),
    ("followme/pls-hold-while-try", "Veuillez demeurez", "Veuillez demeurer"),
    ("followme/pls-hold-while-try", "j'essai ", "j'essaie "),
    ("queue-periodic-announce", "presentement occupes", "présentement occupés"),
    ("queue-periodic-announce", "Veuillez demeurez", "Veuillez demeurer"),
    ("vm-intro", "Veuillez laissez", "Veuillez laisser"),
    ("conf-adminmenu-menu8", "veuillez appuyez", "veuillez appuyer"),
    ("conf-adminmenu-menu8", "ce tte", "cette"),
    ("conf-usermenu-162", "veuillez appuyez", "veuillez appuyer"),
    ("conf-usermenu", "veuillez appuyez", "veuillez appuyer"),
    ("conf-adminmenu-162", "vérrouiller ou dévérouiller", "verrouiller ou déverrouiller"),
    ("conf-adminmenu-18", "vérrouiller ou dévérouiller", "verrouiller ou déverrouiller"),
    ("conf-adminmenu", "vérrouiller ou dévérouiller", "verrouiller ou déverrouiller"),
    ("conf-lockednow", "verouillée", "verrouillée"),
    ("conf-unlockednow", "déverouillée", "déverrouillée"),
    ("confbridge-lock-extended", "vérouiller", "verrouiller"),
    ("confbridge-lock-extended", "est verouillée, seul les", "est verrouillée, seuls les"),
    ("confbridge-lock-in", "vérouiller", "verrouiller"),
    ("confbridge-lock-no-join", "verouillée", "verrouillée"),
    ("confbridge-locked", "vérouillée", "verrouillée"),
    ("confbridge-unlocked", "dévérouillée", "déverrouillée"),
    ("conf-kicked", "avez étez", "avez été"),
    ("tt-monkeysintro", "ont étés", "ont été"),
    ("conf-waitforleader", "l'arrivé ", "l'arrivée "),
    ("confbridge-begin-glorious-a", "l'arrivé ", "l'arrivée "),
    ("confbridge-begin-glorious-b", "l'arrivé ", "l'arrivée "),
    ("confbridge-begin-glorious-c", "l'arrivé ", "l'arrivée "),
    ("demo-congrats", "Felicitation,", "Félicitations,"),
    ("demo-congrats", "pouvez utilisez", "pouvez utiliser"),
    ("demo-echotest", "Vous etes", "Vous êtes"),
    ("demo-nogo", "démontration", "démonstration"),
    ("demo-nogo", "des information ", "des informations "),
    ("dir-firstlast", "premieres", "premières"),
    ("dir-last", "premieres", "premières"),
    ("dictate/truncating_audio", "Mise a jour", "Mise à jour"),
    ("pm-invalid-option", "essayer a nouveau", "essayer à nouveau"),
    ("privacy-to-blacklist-last-caller", "etait", "était"),
    ("queue-thereare", "l'appellant", "l'appelant"),
    ("simul-call-limit-reached", "simultane a ete", "simultanés a été"),
    ("sorry-youre-having-problems", "Desole,", "Désolé,"),
    ("sorry-youre-having-problems", "problemes", "problèmes"),
    ("speed-dial-empty", "abregée que vous avez accédez", "abrégée que vous avez accédé"),
    ("unidentified-no-callback", "pas etre rappler", "pas être rappelé"),
    ("vm-advopts", "options avancés", "options avancées"),
    ("vm-dialout", "j'établi ", "j'établis "),
    ("vm-mismatch", "mots de passes", "mots de passe"),
    ("vm-msginstruct", "répétér", "répéter"),
    ("vm-msginstruct", "vous pouvez appuyez sur * pour", "vous pouvez appuyer sur étoile pour"),
    ("vm-msginstruct", "sur # pour", "sur dièse pour"),
    ("vm-opts-full", "d'acceuil", "d'accueil"),
    ("vm-opts-full", "des mot de passes", "des mots de passe"),
    ("vm-rec-unv", "n'etes pas", "n'êtes pas"),
    ("vm-tmpexists", "d'acceuil", "d'accueil"),
    ("pbx-parkingfailed", "d'appel échoué", "d'appel échouée"),
    # the line runs into the next prompt's ("...dièse.vm-review-nonurgent: Pour enlever ...")
    (
        "vm-record-prepend",
        "dièse.vm-review-nonurgent: Pour enlever ce message d'urgent, veuillez faire 4.",
        "dièse.",
    ),
)
BRACKETS = re.compile(r"[\[\]()]")


@dataclass(frozen=True)
class RealClip:
    """One row of real/manifest.jsonl (the main manifest's columns, and the prompt's id)."""

    audio: str  # relative to the dataset folder: real/audio/NNNNNN.wav
    text: str
    text_norm: str
    duration: float
    speaker: str
    split: str
    prompt: str  # the Asterisk prompt's id, e.g. vm-intro
    sha256: str


class G722Unavailable(RuntimeError):
    """No decoder for G.722 here (neither PyAV's bundled FFmpeg nor an ffmpeg binary)."""


def parse_transcripts(text: str) -> dict[str, str]:
    """`id: text` lines -> {id: text}; comments (`;`), blank lines and empty texts left out."""
    prompts = {}
    for line in text.splitlines():
        key, sep, said = line.partition(":")
        if line.startswith(";") or not sep or not said.strip():
            continue
        prompts[key.strip()] = unify(said).strip()
    return prompts


def apply_fixes(prompts: dict[str, str]) -> tuple[dict[str, str], int]:
    """The transcripts with FIXES applied, and how many applied."""
    fixed, applied = dict(prompts), 0
    for key, wrong, right in FIXES:
        if wrong in fixed.get(key, ""):
            fixed[key] = fixed[key].replace(wrong, right)
            applied += 1
        else:
            log.warning(
                "speech_data.real: the fix %r -> %r no longer matches %s", wrong, right, key
            )
    return fixed, applied


def words(text: str) -> int:
    """Whitespace-separated tokens holding a letter or digit ("..." is none)."""
    return sum(any(ch.isalnum() for ch in token) for token in text.split())


def _decode_av(path: Path) -> np.ndarray:
    import av

    with av.open(str(path), format="g722") as container:
        stream = container.streams.audio[0]
        if stream.rate != SAMPLE_RATE or stream.channels != 1:
            raise ValueError(f"{path}: {stream.rate} Hz x {stream.channels}, not 16 kHz mono")
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(stream)]  # s16, (n,)
    return np.concatenate(frames).astype(np.int16, copy=False)


def _decode_ffmpeg(path: Path) -> np.ndarray:
    done = subprocess.run(
        ["ffmpeg", "-nostdin", "-v", "error", "-f", "g722", "-i", str(path)]
        + ["-ac", "1", "-ar", str(SAMPLE_RATE), "-f", "s16le", "-"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"ffmpeg could not decode {path}: {done.stderr.decode()[-300:]}")
    return np.frombuffer(done.stdout, dtype="<i2")


def g722_decoder() -> tuple[Any, str]:
    """(decode(path) -> int16 samples at 16 kHz, its name): PyAV, else an ffmpeg on PATH.

    Raises:
        G722Unavailable: neither is here.
    """
    try:
        import av

        av.codec.Codec("g722", "r")
        return _decode_av, f"PyAV {av.__version__}"
    except (ImportError, ValueError) as err:  # absent, or its FFmpeg lacks G.722: the binary
        if shutil.which("ffmpeg") is None:
            raise G722Unavailable(
                f"no G.722 decoder: PyAV is unusable ({err}) and no ffmpeg is on PATH; "
                "pip install av (the project pins it) or install ffmpeg"
            ) from err
        log.warning("speech_data.real: PyAV unusable (%s); decoding with ffmpeg", err)
        return _decode_ffmpeg, "ffmpeg"


@dataclass(frozen=True)
class Sources:
    """Where the packages' files are: the sounds folder and the transcripts file."""

    sounds: Path
    transcripts: Path
    how: str  # "installed 1.6.1-1" or "downloaded 1.6.1-1 (apt-get download, sha256-checked)"


def _found(root: Path) -> tuple[Path, Path] | None:
    """(sounds folder, transcripts) of the packages under `root`, when both are there."""
    sounds, transcripts = root / SOUNDS, root / TRANSCRIPTS
    if transcripts.is_file() and sounds.is_dir() and any(sounds.glob("*.g722")):
        return sounds, transcripts
    return None


def _write(clips: list[tuple[str, str, np.ndarray]], speaker: str, out: Path) -> list[RealClip]:
    rows = []
    for i, (key, text, pcm) in enumerate(clips):
        rel = f"{FOLDER}/audio/{i:06d}.wav"
        write_wav(out / rel, pcm)
        duration = round(pcm.size / SAMPLE_RATE, 3)
        sha = file_sha256(out / rel)
        rows.append(RealClip(rel, text, normalize(text), duration, speaker, SPLIT, key, sha))
    return rows


def select(
    prompts: dict[str, str], sounds: Path, cfg: SpeechReal, decode: Any
) -> tuple[list[tuple[str, str, np.ndarray]], Counter[str]]:
    """(id, text, int16 samples) of the prompts kept, in the transcripts' order, and the
    others counted by why they were left out."""
    kept: list[tuple[str, str, np.ndarray]] = []
    left: Counter[str] = Counter()
    for key, text in prompts.items():
        path = sounds / f"{key}.g722"
        if not path.is_file():
            reason = "no_audio"
        elif BRACKETS.search(text):
            reason = "bracketed"
        elif words(text) < cfg.min_words:
            reason = "few_words"
        else:
            pcm = decode(path)
            reason = "too_long" if pcm.size / SAMPLE_RATE > cfg.max_duration_s else ""
            if not reason:
                kept.append((key, text, pcm))
        left.update([reason] if reason else [])
    return kept, left


def summarize(
    rows: list[RealClip], left: Counter[str], sources: Sources, **more: Any
) -> dict[str, Any]:
    durations = sorted(r.duration for r in rows) or [0.0]
    return {
        "source": f"Debian {', '.join(p.name for p in PACKAGES)}: {sources.how}",
        "license": LICENSE,
        "voice": VOICE,
        "utterances": len(rows),
        "hours": round(sum(durations) / 3600, 4),
        "duration_s": {
            "min": round(durations[0], 3),
            "median": round(statistics.median(durations), 3),
            "max": round(durations[-1], 3),
        },
        "left_out": dict(sorted(left.items())),
        **more,
    }


def build_from(sources: Sources, cfg: SpeechReal, out: Path) -> dict[str, Any]:
    """Write the kept prompts of `sources` into out/real/; the set's stats.

    Raises:
        G722Unavailable: no decoder for the recordings.
    """
    decode, decoder = g722_decoder()
    text = gzip.decompress(sources.transcripts.read_bytes()).decode("utf-8")
    prompts, fixed = apply_fixes(parse_transcripts(text))
    kept, left = select(prompts, sources.sounds, cfg, decode)
    rows = _write(kept, sources.sounds.name, out)
    manifest = out / FOLDER / "manifest.jsonl"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(manifest, [asdict(r) for r in rows])
    stats = summarize(
        rows,
        left,
        sources,
        prompts=len(prompts),
        transcript_fixes=fixed,
        decoder=decoder,
        manifest_sha256=file_sha256(manifest),
    )
    log.info(
        "real set: %d of %d prompts, %s h; left out %s",
        len(rows),
        len(prompts),
        stats["hours"],
        stats["left_out"],
    )
    return stats


def build(cfg: SpeechReal, cache: Path, out: Path, root: Path = Path("/")) -> dict[str, Any]:
    """The real set written into out/real/, from the packages installed under `root`, else
    fetched into `cache`; its stats, or {"absent": why} when they cannot be had here.

    Raises:
        PackageMismatch: a downloaded .deb is not the pinned one.
    """
    if not cfg.enabled:
        return {"absent": "speech_data.real.enabled is false"}
    try:
        if found := _found(root):
            system = root == Path("/")  # dpkg knows what it installed under / only
            versions = {p.name: installed_version(p.name) if system else None for p in PACKAGES}
            if any(versions[p.name] not in (None, p.version) for p in PACKAGES):
                pinned = {p.name: p.version for p in PACKAGES}
                log.warning("speech_data.real: installed %s, pinned %s", versions, pinned)
            how = f"installed {versions[PACKAGES[0].name] or '(version unknown)'}"
            return build_from(Sources(*found, how), cfg, out)
        debs = fetch(PACKAGES, cache)
        with unpacked(debs) as tmp:
            if not (found := _found(tmp)):
                raise PackageUnavailable(f"{', '.join(map(str, debs))} hold no {SOUNDS}")
            how = f"downloaded {PACKAGES[0].version} (apt-get download, sha256-checked)"
            return build_from(Sources(*found, how), cfg, out)
    except (PackageUnavailable, G722Unavailable) as err:
        why = f"{err}. To measure a real voice: {INSTALL_HINT}"
        log.warning("speech_data.real: no real set (%s)", why)
        return {"absent": why}
