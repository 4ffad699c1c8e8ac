"""The params sections `score_data` and `speech_data`, and what the data stage reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sonfolio.config.base import Fraction01, Positive, Strict
from sonfolio.config.page import PageSplit
from sonfolio.config.sections import Sections
from sonfolio.config.tokenizer import SpeechTokenizer

# the kinds of scan-like degradation (sonfolio/score/common/scan.py), in the order applied
SCAN_KINDS = ("dpi", "jpeg", "threshold", "skew", "perspective", "curl", "light", "bleed", "breaks")
# The kinds a train system image is made scan-like with: those that keep its shape (skew and
# bending are the page's, which the cutter straightens or cuts along)
SYSTEM_SCAN_KINDS = ("dpi", "jpeg", "threshold", "light", "bleed", "breaks")


class ScoreSource(Strict):
    """One collection of music: music21's shipped corpus, a folder, or an archive.

    The collection `name` is what `split.heldout_collections` refers to.
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]
    music21: str | None = Field(
        default=None, description="a folder of music21's corpus, e.g. 'bach' or 'essenFolksong'"
    )
    folder: Path | None = None
    archive: str | None = Field(default=None, description="path or http(s) URL of .zip / .tar.*")
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    max_pieces: Positive | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScoreSource:
        kinds = [k for k in ("music21", "folder", "archive") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"source {self.name!r} must set exactly one of music21, folder, archive "
                f"(it sets {kinds or 'none'})"
            )
        if self.archive is not None and self.sha256 is None:
            raise ValueError(
                f"source {self.name!r}: an archive needs its sha256 (run `sha256sum FILE`), so a "
                "changed or truncated download is caught"
            )
        return self


class Augment(Strict):
    """Scan-like degradation, applied to the train split only, seeded per image."""

    enabled: bool
    noise_std: Annotated[float, Field(ge=0.0, le=0.5)]  # gaussian noise, in units of full white
    blur_radius: Annotated[float, Field(ge=0.0, le=5.0)]  # max gaussian blur radius, px
    rotation_deg: Annotated[float, Field(ge=0.0, le=10.0)]  # max absolute rotation
    ink: Fraction01  # strength of uneven ink (patchy fading), 0 = none
    # share of the train images also made scan-like (score_data.scan, SYSTEM_SCAN_KINDS)
    scan_fraction: Fraction01
    # how many of those kinds one scan-like image gets: drawn uniformly in [least, most]
    scan_kinds: tuple[int, int]
    # a scan-like system's bleed-through (its own print mirrored) moved up or down by a share
    # of its height drawn in [least, most]; None: by at most 2 % (as on a page)
    bleed_shift: tuple[Fraction01, Fraction01] | None

    @model_validator(mode="after")
    def _kinds_range(self) -> Augment:
        least, most = self.scan_kinds
        if not 1 <= least <= most <= len(SYSTEM_SCAN_KINDS):
            raise ValueError(
                f"score_data.augment.scan_kinds {list(self.scan_kinds)}: write [least, most] "
                f"with 1 <= least <= most <= {len(SYSTEM_SCAN_KINDS)} (the kinds that keep a "
                f"system's shape: {', '.join(SYSTEM_SCAN_KINDS)})"
            )
        if self.bleed_shift is not None and self.bleed_shift[0] > self.bleed_shift[1]:
            raise ValueError(
                f"score_data.augment.bleed_shift {list(self.bleed_shift)}: write [least, most] "
                "with least <= most (shares of the image's height), or null"
            )
        return self


class ScoreSplit(Strict):
    """How the systems are split: shares of val and test, and whole collections held out."""

    val: Annotated[float, Field(ge=0.0, lt=0.5)]
    test: Annotated[float, Field(ge=0.0, lt=0.5)]
    heldout_collections: list[str]
    seed: int


class ScoreLimits(Strict):
    """score_data.limits: bounds on what one source file or archive may cost (hostile or
    careless input: docs/security.md). A file over a limit is skipped and counted with its
    reason; an archive over one is refused before anything is written."""

    max_file_mb: Annotated[float, Field(gt=0.0)]  # a MusicXML file (an .mxl: unpacked)
    max_kern_mb: Annotated[float, Field(gt=0.0)]  # a kern file (costs ~1-2 KB a byte to parse)
    max_abc_mb: Annotated[float, Field(gt=0.0)]  # an ABC file (~2.6 KB a byte, tune by tune)
    parse_timeout_s: Annotated[float, Field(gt=0.0)]  # a piece parsing longer is killed
    # address space one parse may add to its worker (RLIMIT_AS): a piece needing more is skipped
    parse_memory_mb: Annotated[float, Field(ge=64.0)]
    archive_max_mb: Annotated[float, Field(gt=0.0)]  # an archive's total unpacked size
    archive_max_members: Positive  # files and folders in an archive
    archive_max_ratio: Annotated[float, Field(ge=1.0)]  # unpacked bytes / archive bytes


class ScorePages(Strict):
    """score_data.pages: pieces also engraved as whole pages in LilyPond's default layout,
    cut by the page cutter `read --page` uses, each line stored with its text
    (sonfolio/score/data/page_data.py)."""

    fraction: Fraction01  # share of the pieces (seeded by piece) engraved as pages too
    dpi: Annotated[int, Field(ge=50, le=600)]  # the pages' resolution before cutting
    staff_sizes: Annotated[list[Annotated[float, Field(ge=11.0, le=26.0)]], Field(min_length=1)]
    papers: Annotated[list[Literal["a4", "letter"]], Field(min_length=1)]
    credits_fraction: Fraction01  # share of pieces with a title and composer above them
    timeout_s: Annotated[float, Field(gt=0.0)]  # one piece's engraving (both passes)
    max_bars: Annotated[int, Field(ge=1)]  # a longer part is not engraved (counted)
    # share of the train split's pages (seeded per page) that show the back's print through
    # (score_data.scan.bleed's darkness) before they are cut
    bleed: Fraction01
    # share of the train split's pages (seeded per page) made scan-like whole before they are
    # cut: score_data.scan's kinds that keep a page's shape, as many as augment.scan_kinds draws
    scan: Fraction01 = 0.0
    cut: PageSplit  # keep equal to infer.score.page: train on the crops `read --page` makes


VerovioFont = Literal["Leipzig", "Bravura", "Gootville", "Leland", "Petaluma"]


class ScoreEngravers(Strict):
    """score_data.engravers: who engraves each piece's system images, drawn per piece (seeded):
    LilyPond (its font, Emmentaler) for a `lilypond` share, else Verovio in one of `verovio_fonts`
    (sonfolio/score/common/verovio.py). `heldout_font` is never drawn: the engraving training
    never sees, which score_eval.pages reads as the held-out engraving."""

    lilypond: Fraction01
    verovio_fonts: list[VerovioFont]
    heldout_font: VerovioFont

    @model_validator(mode="after")
    def _fonts(self) -> ScoreEngravers:
        if self.heldout_font in self.verovio_fonts:
            raise ValueError(
                f"score_data.engravers: the held-out font {self.heldout_font} is also in "
                f"verovio_fonts {self.verovio_fonts}: take it out of one of them"
            )
        if self.lilypond < 1 and not self.verovio_fonts:
            raise ValueError(
                f"score_data.engravers: lilypond is {self.lilypond}, so the rest goes to "
                "Verovio, but verovio_fonts is empty: name a font or set lilypond to 1.0"
            )
        return self


class Scan(Strict):
    """score_data.scan: how a clean page is made to look scanned or photographed
    (sonfolio/score/common/scan.py), for the held-out scan-like measures."""

    dpi: tuple[
        Annotated[float, Field(ge=30.0, le=1200.0)], Annotated[float, Field(ge=30.0, le=1200.0)]
    ]
    jpeg_quality: tuple[Annotated[int, Field(ge=1, le=100)], Annotated[int, Field(ge=1, le=100)]]
    skew_deg: Annotated[float, Field(ge=0.0, le=10.0)]  # the most a page is turned
    perspective: Annotated[float, Field(ge=0.0, le=0.2)]  # corner shift, a share of the side
    curl: Annotated[float, Field(ge=0.0, le=0.5)]  # lens-like bending of the page
    light: Annotated[float, Field(ge=0.01, le=0.2)]  # darkening of the unevenly lit part
    bleed: Annotated[float, Field(ge=0.0, le=0.5)]  # darkness of the print from the back
    breaks: Annotated[int, Field(ge=0, le=200)]  # thin gaps cut through the print, per A4 width

    @model_validator(mode="after")
    def _ranges(self) -> Scan:
        _check_range("score_data.scan.dpi", self.dpi)
        _check_range("score_data.scan.jpeg_quality", self.jpeg_quality)
        return self


class ScoreData(Strict):
    """score_data: where the music comes from and how each staff system is rendered."""

    sources: Annotated[list[ScoreSource], Field(min_length=1)]
    synthetic_fraction: Annotated[float, Field(ge=0.0, lt=1.0)]
    triplets: Fraction01  # share of train systems of real music given eighth triplets
    dotted: Fraction01  # share of train systems of real music given dotted eighth pairs
    cut_time: Fraction01  # share of train systems of real music printing 4/4 made 2/2
    bars_per_system: Annotated[int, Field(ge=1, le=16)]
    engravers: ScoreEngravers
    pages: ScorePages
    scan: Scan
    image_long_side: Annotated[int, Field(ge=64, le=4096)]
    resolution_dpi: Annotated[int, Field(ge=50, le=1200)]
    augment: Augment
    split: ScoreSplit
    max_skip_fraction: Fraction01
    limits: ScoreLimits
    systems_per_process: Annotated[int, Field(ge=1, le=2000)]
    workers: Annotated[int, Field(ge=0)]  # 0: one per CPU core
    lilypond: str | None  # null: the binary from `pip install lilypond`, else PATH
    seed: int

    @model_validator(mode="after")
    def _heldout_known(self) -> ScoreData:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"score_data.sources: collection names repeat: {names}")
        unknown = set(self.split.heldout_collections) - set(names)
        if unknown:
            raise ValueError(
                f"score_data.split.heldout_collections names {sorted(unknown)}, which no source "
                f"defines; known collections: {names}"
            )
        if self.split.val + self.split.test >= 0.9:
            raise ValueError("score_data.split: val + test must leave at least 10% for train")
        return self


VoiceVariant = Annotated[str, Field(pattern=r"^[A-Za-z0-9_ -]+$")]  # espeak-ng's voices/!v/


def _check_range(key: str, pair: tuple[float, float]) -> None:
    if pair[0] > pair[1]:
        raise ValueError(
            f"{key} = {list(pair)}: write [minimum, maximum], e.g. {[pair[1], pair[0]]}"
        )


class SpeechAugment(Strict):
    """Rooms, phone lines, speeds and coloured noise on the synthetic train clips."""

    enabled: bool
    speed: tuple[Annotated[float, Field(ge=0.5, le=2.0)], Annotated[float, Field(ge=0.5, le=2.0)]]
    reverb_fraction: Fraction01
    rt60_s: tuple[Annotated[float, Field(gt=0.0, le=3.0)], Annotated[float, Field(gt=0.0, le=3.0)]]
    band_fraction: Fraction01
    bands_hz: Annotated[list[tuple[int, int]], Field(min_length=1)]
    noise_colors: Annotated[list[Literal["white", "pink", "brown"]], Field(min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> SpeechAugment:
        key = "speech_data.synthetic.augment"
        for name in ("speed", "rt60_s"):
            _check_range(f"{key}.{name}", getattr(self, name))
        for low, high in self.bands_hz:
            if not 0 < low < high < 8000:
                raise ValueError(
                    f"{key}.bands_hz: [{low}, {high}] must be 0 < low < high < 8000 Hz "
                    "(the clips are 16 kHz), e.g. [300, 3400] for a telephone line"
                )
        return self


class SpeechSynthetic(Strict):
    """French sentences spoken by espeak-ng: the offline default source."""

    utterances: Annotated[int, Field(ge=20)]  # over all splits; one sentence each
    val_fraction: Annotated[float, Field(gt=0.0, lt=0.5)]  # own sentences, train voices
    test_fraction: Annotated[float, Field(gt=0.0, lt=0.5)]  # own sentences AND own voices
    train_voices: Annotated[list[VoiceVariant], Field(min_length=1)]  # train and val splits
    test_voices: Annotated[list[VoiceVariant], Field(min_length=1)]  # test split only
    rate_wpm: tuple[Annotated[int, Field(ge=80, le=450)], Annotated[int, Field(ge=80, le=450)]]
    pitch: tuple[Annotated[int, Field(ge=0, le=99)], Annotated[int, Field(ge=0, le=99)]]
    noise_fraction: Fraction01  # share of clips with added white noise
    snr_db: tuple[Annotated[float, Field(ge=-5, le=60)], Annotated[float, Field(ge=-5, le=60)]]
    digits_fraction: Fraction01  # share of numbers written "12" rather than "douze"
    spoken_fraction: Fraction01  # share of train sentences that are everyday talk (SPOKEN)
    augment: SpeechAugment  # train split only

    @model_validator(mode="after")
    def _consistent(self) -> SpeechSynthetic:
        key = "speech_data.synthetic"
        shared = sorted(set(self.train_voices) & set(self.test_voices))
        if shared:
            raise ValueError(
                f"{key}.test_voices shares {shared} with train_voices: the test split must be "
                "spoken by voices training never hears; list each variant in only one of them"
            )
        for name in ("rate_wpm", "pitch", "snr_db"):
            _check_range(f"{key}.{name}", getattr(self, name))
        if self.val_fraction + self.test_fraction > 0.5:
            raise ValueError(f"{key}: val_fraction + test_fraction must leave half for train")
        for name in ("val_fraction", "test_fraction"):
            if round(self.utterances * getattr(self, name)) < 1:
                raise ValueError(
                    f"{key}.{name} = {getattr(self, name)} of {self.utterances} utterances is "
                    "less than one: raise utterances or the fraction"
                )
        return self


class HubSplits(Strict):
    """The corpus's split for each of ours; null leaves that split empty."""

    train: str
    val: str | None
    test: str | None


class SpeechHub(Strict):
    """A corpus loaded with `datasets.load_dataset(name, config)`: a hub id or a local folder."""

    name: Annotated[str, Field(min_length=1)]
    config: str | None
    splits: HubSplits
    max_samples: Positive | None  # per split; null: all
    streaming: bool
    audio_column: str
    text_column: str
    speaker_column: str | None


class SpeechReal(Strict):
    """speech_data.real: a real French voice for evaluation only (sonfolio.speech.data.real)."""

    enabled: bool  # false: no real set (eval@speech and the report say it is absent)
    min_words: Positive  # prompts with fewer words (tokens holding a letter or digit) are left out
    max_duration_s: Annotated[float, Field(gt=0.0)]  # longer prompts are left out


class SpeechData(Strict):
    """speech_data: the clips' source (espeak-ng or a corpus) and what is kept of it."""

    source: Literal["synthetic", "hub"]
    max_duration_s: Annotated[float, Field(gt=0.0, le=30.0)]  # longer clips are skipped
    max_skip_fraction: Fraction01
    workers: Annotated[int, Field(ge=0)]  # 0: one per CPU core
    seed: int
    synthetic: SpeechSynthetic
    hub: SpeechHub
    real: SpeechReal


def check_clips_fit(data: SpeechData, tokenizer: SpeechTokenizer) -> None:
    """Refuse clips longer than the speech model's input window.

    Checked with the params, before synthesis, not only when the tokenizer stage sees the
    clips.

    Raises:
        ValueError: naming both keys and their values.
    """
    longest, window = data.max_duration_s, tokenizer.chunk_length_s
    if longest > window:  # a base's window is cut to chunk_length_s too
        raise ValueError(
            f"speech_data.max_duration_s = {longest} is longer than the model's input "
            f"window speech_tokenizer.chunk_length_s = {window}: lower the first or raise "
            "the second"
        )


class DataParams(Sections):
    """What stage data reads: `<track>_data`, and the speech model's input window."""

    score_data: ScoreData
    speech_data: SpeechData
    speech_tokenizer: SpeechTokenizer  # the window its clips must fit (check_clips_fit)

    @model_validator(mode="after")
    def _clips_fit_the_window(self) -> DataParams:
        check_clips_fit(self.speech_data, self.speech_tokenizer)
        return self
