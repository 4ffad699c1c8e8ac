"""Speech fixtures: the real params.yaml shrunk to a small dataset, and a local corpus folder
in the layout of the hub's Multilingual LibriSpeech (parquet + README.md), made with espeak-ng."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile
from datasets import Audio, Features, Value

from sonfolio import tracks
from sonfolio.config.data import SpeechData
from sonfolio.config.params import Params
from sonfolio.speech.common.audio import from_pcm16
from sonfolio.speech.data.espeak import synthesize
from tasks.data import run

TINY_UTTERANCES = 80


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network in speech tests, whatever the import order: huggingface_hub, datasets and
    transformers read HF_HUB_OFFLINE once, when first imported (maybe before any fixture)."""
    import datasets.config
    import huggingface_hub.constants
    import transformers.utils.hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(transformers.utils.hub, "_is_offline_mode", True)


@pytest.fixture(scope="session")
def tiny_speech(params: Params) -> Callable[..., SpeechData]:
    """The real speech_data section with 80 clips, 2 workers, no real-voice set (its own tests,
    tests/speech/test_real_voice.py, build it), and any key overridden (`synthetic={...}`
    updates the synthetic subsection)."""

    def shrink(synthetic: dict[str, Any] | None = None, **top: Any) -> SpeechData:
        cfg = params.speech_data
        update = {"utterances": TINY_UTTERANCES, **(synthetic or {})}
        syn = cfg.synthetic.model_copy(update=update)
        real = cfg.real.model_copy(update={"enabled": False})
        return cfg.model_copy(update={"synthetic": syn, "workers": 2, "real": real, **top})

    return shrink


@pytest.fixture(scope="session")
def speech_dataset(
    tiny_speech: Callable[..., SpeechData], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One small synthetic dataset, built once by the real stage; read-only for tests."""
    root = tmp_path_factory.mktemp("speech")
    run(
        tiny_speech(),
        tracks.face("speech", "data"),
        root / "downloads",
        root / "data",
        root / "speech_data.json",
    )
    return root / "data"


def flac_bytes(text: str, variant: str = "m2") -> bytes:
    """Real speech as a FLAC file at espeak-ng's own rate (22,050 Hz), as a corpus stores it."""
    pcm, rate = synthesize(text, variant, 175, 50)
    buf = io.BytesIO()
    soundfile.write(buf, from_pcm16(pcm), rate, format="FLAC")
    return buf.getvalue()


MLS_FEATURES = Features(
    {
        "audio": Audio(sampling_rate=16000),
        "transcript": Value("string"),
        "speaker_id": Value("int64"),
    }
)


def write_corpus(folder: Path, splits: dict[str, list[tuple[str, bytes, str]]]) -> Path:
    """A local copy of a hub dataset repo: `french/<split>-00000-of-00001.parquet` (audio as
    {bytes, path}, transcript, speaker_id) and a README.md whose YAML declares the config,
    as `hf download facebook/multilingual_librispeech --repo-type dataset` leaves it."""
    (folder / "french").mkdir(parents=True)
    audio_type = pa.struct({"bytes": pa.binary(), "path": pa.string()})
    meta = {"huggingface": json.dumps({"info": {"features": MLS_FEATURES.to_dict()}})}
    config = ["---", "configs:", "- config_name: french", "  data_files:"]
    for split, rows in splits.items():
        table = pa.table(
            {
                "audio": pa.array(
                    [{"bytes": data, "path": name} for name, data, _ in rows], type=audio_type
                ),
                "transcript": [text for _, _, text in rows],
                "speaker_id": [100 + i % 2 for i in range(len(rows))],
            }
        ).replace_schema_metadata(meta)
        pq.write_table(table, folder / "french" / f"{split}-00000-of-00001.parquet")
        config += [f"  - split: {split}", f"    path: french/{split}-*"]
    (folder / "README.md").write_text("\n".join([*config, "---", ""]), encoding="utf-8")
    return folder


@pytest.fixture
def local_corpus(tmp_path: Path) -> Callable[..., Path]:
    """Make a corpus folder with good clips per split plus the given bad train rows."""

    def make(bad: list[tuple[str, bytes, str]] = ()) -> Path:
        sentences = [
            "Le chat dort sur le canapé.",
            "Il pleut depuis trois jours à Lyon.",
            "Nous avons mangé chez Hélène hier soir.",
            "L'école ouvre à huit heures.",
        ]
        good = [(f"{i:03d}.flac", flac_bytes(s), s) for i, s in enumerate(sentences)]
        splits = {"train": [*good, *bad], "dev": good[:2], "test": good[2:]}
        return write_corpus(tmp_path / "mls", splits)

    return make
