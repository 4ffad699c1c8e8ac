"""`sonfolio read`, `sonfolio transcribe` and `sonfolio serve` (registered by sonfolio.cli).

Each command validates params.yaml and every input file before it loads a model, and exits
with 2 and a message naming the file (or key) and the fix on bad input. Logs go to stderr, so
stdout holds only the result. Heavy imports (torch, transformers) happen when a command runs,
not when the CLI starts.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sonfolio import tracks

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2
COMMANDS = ("read", "transcribe", "serve")


class CommandError(Exception):
    """Ends a command with exit code 2 and this message on stderr."""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: a GPU if any"
    )


def add_commands(sub: Any) -> None:
    """Register the three commands on the CLI's subparsers; each sets `handler`."""
    read = sub.add_parser("read", help="read staff systems (or whole pages) into LilyPond")
    read.add_argument("images", nargs="+", type=Path, help="PNG / JPEG / ... images")
    read.add_argument("--model", type=Path, help="score model folder (default: see docs)")
    read.add_argument(
        "--page",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split into systems first (default: when more than one staff is found)",
    )
    read.add_argument("--format", choices=("text", "ly", "json", "musicxml"), default="text")
    read.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    _common(read)
    read.set_defaults(handler=run_read)

    tr = sub.add_parser("transcribe", help="transcribe French speech (long audio is chunked)")
    tr.add_argument("audio", nargs="+", type=Path, help="WAV / FLAC / OGG / MP3 files")
    tr.add_argument("--model", type=Path, help="speech model folder (default: see docs)")
    tr.add_argument("--format", choices=("text", "json"), default="text")
    tr.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    _common(tr)
    tr.set_defaults(handler=run_transcribe)

    serve = sub.add_parser("serve", help="the HTTP service: POST /read, POST /transcribe")
    serve.add_argument("--host", help="default: serve.host (127.0.0.1)")
    serve.add_argument("--port", type=int, help="default: serve.port")
    serve.add_argument("--score-model", type=Path, help="score model folder")
    serve.add_argument("--speech-model", type=Path, help="speech model folder")
    serve.add_argument("--max-upload-mb", type=float, help="default: serve.max_upload_mb")
    _common(serve)
    serve.set_defaults(handler=run_serve)


def handle(args: argparse.Namespace) -> int:
    """Run the command; bad input or a missing model -> its message on stderr and exit 2."""
    _log_to_stderr()
    try:
        return args.handler(args)
    except CommandError as err:
        print(f"sonfolio {args.command}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _log_to_stderr() -> None:
    from rich.console import Console
    from rich.logging import RichHandler

    handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
    logging.basicConfig(
        level=logging.INFO, format="%(message)s", datefmt="[%X]", handlers=[handler]
    )


def _params(path: Path, serve: bool = False) -> Any:
    """params.yaml as `read` and `transcribe` use it: `paths` and `infer` validated, the other
    sections left unread (as a stage reads only its own: an older or half-edited training
    section does not stop an inference, and their schemas are not built at start-up); `serve`:
    and the `serve` section and score_data.lilypond (its page engraves the readings)."""
    from sonfolio.config.base import ParamsError
    from sonfolio.config.commands import InferParams, ServeParams
    from sonfolio.config.sections import read_sections

    try:
        return read_sections(ServeParams if serve else InferParams, path)
    except ParamsError as err:
        raise CommandError(f"{err}\n(the commands read infer/serve settings from it)") from None


def _model(args_model: Path | None, track: str, params: Any, threads: int | None, device: str):
    from sonfolio.infer.run import ModelUnavailable, check_fit, default_model, load_model

    folder = args_model
    if folder is None:
        folder, why = default_model(track, params.paths, params.infer.variant)
        log.info("%s model: %s, %s", track, folder, why)
    else:
        log.info("%s model: %s (given on the command line)", track, folder)
    try:
        variant = load_model(folder, track, threads, device)
        check_fit(variant, params.infer)
        return variant
    except ModelUnavailable as err:
        raise CommandError(str(err)) from None


def _inputs(paths: list[Path], opener: Any, cfg: Any) -> list[tuple[str, Any]]:
    """Decode every input before a model loads, so a bad file fails at once.
    `opener(path, name, infer settings)`: the settings hold the inputs' limits."""
    from sonfolio.infer.inputs import BadInput, display_name

    out = []
    for path in paths:
        name = display_name(str(path))  # as printed, logged and written: safe text
        try:
            out.append((name, opener(path, name, cfg)))
        except BadInput as err:
            raise CommandError(str(err)) from None
    return out


def _write(text: str, output: Path | None) -> None:
    """`text` to stdout or `output`, which is replaced only once the whole text is written
    (written beside it, then renamed): a failed write never leaves a file that looks done."""
    if output is None:
        sys.stdout.write(text)
        return
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise CommandError(f"cannot write {output}: {err.strerror}") from None
    log.info("wrote %s", output)


def _each_input(
    args: argparse.Namespace,
    track: str,
    paths: list[Path],
    opener: Callable[[Path, str, Any], Any],
    one: Callable[[Any, str, Any, Any], Any],
    render: Callable[[str, list[Any]], str],
) -> int:
    """What `read` and `transcribe` share: params.yaml and every input checked before the
    track's model loads, `one(variant, name, input, infer settings)` per input, then
    `render(model name, results)` written to --output or stdout."""
    params = _params(args.params)
    inputs = _inputs(paths, opener, params.infer)
    variant = _model(args.model, track, params, args.threads, args.device)
    results = [one(variant, name, x, params.infer) for name, x in inputs]
    _write(render(variant.name, results), args.output)
    return 0


def run_read(args: argparse.Namespace) -> int:
    from sonfolio.infer import formats
    from sonfolio.infer.inputs import BadInput, open_image
    from sonfolio.infer.run import read_image

    def opener(path: Path, name: str, cfg: Any) -> Any:
        return open_image(path, name, cfg.score.image)

    def one(variant: Any, name: str, image: Any, cfg: Any) -> tuple[str, Any]:
        try:  # a limit met on the way (the straightened page's size) ends the command
            reading = read_image(variant, image, args.page, cfg)
        except BadInput as err:
            raise CommandError(f"{name}: {err}") from None
        if reading.systems:
            log.info("%s: %d systems", name, len(reading.systems))
        else:  # said, not an empty line that looks like a reading
            log.warning(
                "%s: no staff system found (a page of printed music? the staff finder's "
                "settings are params.yaml infer.score.page)",
                name,
            )
        return name, reading

    engraved: list[int] = []

    def lilypond(_model: str, results: list[Any]) -> str:
        engraved.append(formats.valid_systems(results))
        return formats.read_lilypond(results)

    def musicxml(_model: str, results: list[Any]) -> str:
        from sonfolio.score.common.musicxml import reading_musicxml

        engraved.append(formats.valid_systems(results))
        xml, left_out = reading_musicxml(results)
        for line in left_out:  # marked in the score too, where the system would stand
            log.warning("left out of the MusicXML, not canonical LilyPond: %s", line)
        return xml.decode("utf-8")

    render = {
        "json": formats.read_json,
        "ly": lilypond,
        "musicxml": musicxml,
        "text": lambda _model, results: formats.read_text(results),
    }[args.format]
    code = _each_input(args, "score", args.images, opener, one, render)
    if engraved == [0]:  # a score file that would open as an empty page: say so
        log.error(
            "no system read is valid canonical LilyPond: the %s file holds no music (--format "
            "json has each system's text and reason)",
            args.format,
        )
        return 1
    return code


def run_transcribe(args: argparse.Namespace) -> int:
    from sonfolio.infer import formats
    from sonfolio.infer.inputs import open_audio
    from sonfolio.infer.run import transcribe
    from sonfolio.speech.common.audio import SAMPLE_RATE

    def one(variant: Any, name: str, audio: Any, cfg: Any) -> dict:
        chunks, text = transcribe(variant, audio, cfg)
        result = formats.transcript_result(name, audio.size / SAMPLE_RATE, chunks, text)
        if result["no_speech"]:
            log.warning(
                "%s: no speech heard, so the text is empty (infer.speech.no_speech; set its check "
                "to false to decode it anyway)",
                name,
            )
        return result

    render = {
        "json": formats.transcripts_json,
        "text": lambda _model, results: formats.transcripts_text(results),
    }[args.format]

    def opener(path: Path, name: str, cfg: Any) -> Any:
        return open_audio(path, name, cfg.speech.audio_limits)

    return _each_input(args, "speech", args.audio, opener, one, render)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from sonfolio.infer.run import default_model
    from sonfolio.serve import create_app, return_freed_memory, server_config

    return_freed_memory()  # before any thread starts: see its docstring
    params = _params(args.params, serve=True)
    cfg = params.serve
    host, port = args.host or cfg.host, args.port or cfg.port
    cfg = cfg.model_copy(update={"host": host, "port": port})  # the app hides more off loopback
    models = {}
    for track, given in (("score", args.score_model), ("speech", args.speech_model)):
        if given is None:
            folder, _ = default_model(track, params.paths, params.infer.variant)
            if not folder.is_dir():  # serve what exists; the other endpoint answers 503
                route = tracks.face(track, "infer").command
                log.warning("no %s model at %s: /%s answers 503", track, folder, route)
                models[track] = None
                continue
        models[track] = _model(given, track, params, args.threads, args.device)
    if not any(models.values()):
        raise CommandError("no model to serve: train one, or pass --score-model/--speech-model")
    if args.max_upload_mb is not None:
        if args.max_upload_mb <= 0:
            raise CommandError(f"--max-upload-mb {args.max_upload_mb:g}: give a positive size")
        cfg = cfg.model_copy(update={"max_upload_mb": args.max_upload_mb})
    app = create_app(
        params.infer, cfg, models["score"], models["speech"], lilypond=_lilypond(params)
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("listening on %s: reachable from other machines, with no authentication", host)
    uvicorn.Server(server_config(app, cfg, host, port)).run()
    return 0


def _lilypond(params: Any) -> Path | None:
    """The LilyPond the page's engravings run: score_data.lilypond, the one the pipeline
    renders with; None (POST /engrave answers 503 naming the fix) when it is not there."""
    from sonfolio.score.common.lilypond import LilyPondNotFound, find_lilypond

    try:
        return find_lilypond(params.score_data.lilypond)
    except LilyPondNotFound as err:
        log.warning("no LilyPond: the page cannot engrave readings (%s)", err)
        return None
