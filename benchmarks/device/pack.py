"""Pack what a lent GPU machine needs for benchmarks/device/run.sh into .gpu/ (git-ignored).

    python -m benchmarks.device.pack [--from .] [--score 320] [--speech 128]

A device call carries at most 64 MiB and its machine installs nothing from a registry, so this
takes a seeded-order subset of the built data (data/score, data/speech: their stages must have
run in `--from`), the two tokenizers, whisper-base's config (run.sh gives it random weights: the
step time depends on the shapes, not the values) and the wheels the machine's image lacks, for
its Python 3.12. Then, on the device: install the wheels into /tmp/site and run
`bash .gpu/run.sh` (docs/gpu-runs.md has the command of the last run).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

# not in the machine's image (KINDS.md of the device tool), or there in another major version
WHEELS = [
    "transformers==4.57.6",
    "huggingface_hub==0.36.2",
    "tokenizers==0.22.2",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "annotated_types",
    "typing_inspection==0.4.5",
    "soundfile==0.14.0",
    "cffi",
    "pycparser",
    "jiwer==4.0.0",
    "rapidfuzz==3.14.6",
    "num2words==0.5.14",
    "torchao==0.18.0",
]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64"]


def subset(src: Path, dst: Path, track: str, quota: dict[str, int]) -> None:
    key = "image" if track == "score" else "audio"
    out = dst / "data" / track
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    taken: collections.Counter[str] = collections.Counter()
    rows = []
    for line in (src / "data" / track / "manifest.jsonl").read_text().splitlines():
        row = json.loads(line)
        if taken[row["split"]] < quota.get(row["split"], 0):
            taken[row["split"]] += 1
            rows.append(line)
            (out / row[key]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / "data" / track / row[key], out / row[key])
    (out / "manifest.jsonl").write_text("\n".join(rows) + "\n")
    print(track, dict(taken))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--from", dest="src", type=Path, default=Path("."))
    parser.add_argument("--score", type=int, default=320, help="score train images")
    parser.add_argument("--speech", type=int, default=128, help="speech train clips")
    args = parser.parse_args()
    dst = Path(".gpu")
    dst.mkdir(exist_ok=True)
    # every split the training setup reads needs rows (an empty one fails its tokenizer call)
    subset(args.src, dst, "score", {"train": args.score, "val": 32, "test": 8, "heldout": 8})
    subset(args.src, dst, "speech", {"train": args.speech, "val": 16, "test": 8})
    for name in ("score_tokenizer", "speech_tokenizer"):
        shutil.copytree(args.src / "models" / name, dst / "models" / name, dirs_exist_ok=True)
    base = dst / "whisper-base"
    base.mkdir(exist_ok=True)
    for name in ("config.json", "generation_config.json", "preprocessor_config.json"):
        shutil.copy(args.src / "models" / "speech_fp32" / name, base / name)
    shutil.copy(Path(__file__).with_name("run.sh"), dst / "run.sh")
    # benchmarks/device/profile_steps.py travels with the tree
    platforms = [x for p in PLATFORMS for x in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms,
         "-d", str(dst / "whl"), *WHEELS],
        check=True,
    )  # fmt: skip
    size = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
    print(f".gpu/: {size / 2**20:.1f} MiB (a call carries at most 64 MiB with the tree)")


if __name__ == "__main__":
    main()
