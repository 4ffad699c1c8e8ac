"""The quality section: each variant's quality per split (the eval), a plot and the samples."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sonfolio.report.items import Figure, Gallery, Item, Missing, Section, Table, fmt
from sonfolio.report.plots import bar_chart
from sonfolio.report.samples import VIEWS, SampleSplit, copy_asset
from sonfolio.report.sources import Sources, missing, read_json

if TYPE_CHECKING:
    from sonfolio.config.report import Report
    from sonfolio.faces import ReportFace

log = logging.getLogger(__name__)


def quality_table(track: ReportFace, ev: dict[str, Any]) -> Table:
    rows = []
    for variant, v in ev["variants"].items():
        for split, s in v.get("splits", {}).items():
            rows.append(
                [
                    variant,
                    v.get("kind", "—"),
                    split,
                    *(with_interval(s, k) for k in track.report_quality),
                ]  # fmt: skip
            )
    return Table(
        f"Quality per variant (reference: {ev.get('reference', '—')})",
        ["variant", "runtime", "split", *track.report_quality],
        rows,
        "delta_*: the variant minus the reference model on the same samples (positive = worse "
        "for error rates). In brackets: the headline's 95 % bootstrap interval, over the pieces "
        "(score) or the voices (speech): how far it could move on other samples of the same "
        "kind. Definitions: docs/evaluation.md. Measured on "
        f"{ev.get('cpu', {}).get('summary', 'a CPU not recorded')}.",
    )


def before_after_table(track: ReportFace, ev: dict[str, Any]) -> Table | None:
    """What training changed: each baseline the eval scored (speech: the untouched base,
    zero-shot) beside the trained reference, per split; None when there is none."""
    ref_name, found = ev.get("reference"), ev["variants"]
    if ref_name not in found:
        return None
    keys = track.eval_delta_keys
    rows = []
    for name in ev.get("baselines", []):
        for split, before in found.get(name, {}).get("splits", {}).items():
            after = found[ref_name]["splits"].get(split, {})
            change = [
                fmt(after[k] - before[k]) if k in after and k in before else "—" for k in keys
            ]
            rows += [
                [split, f"{name} (before training)", *(fmt(before.get(k)) for k in keys)],
                [split, f"{ref_name} (trained)", *(fmt(after.get(k)) for k in keys)],
                [split, "change", *change],
            ]
    if not rows:
        return None
    return Table(
        "Before and after training",
        ["split", "model", *keys],
        rows,
        "The same samples, the same decoding; change = trained minus before (negative = fewer "
        "errors).",
    )


def with_interval(figures: dict[str, Any], key: str) -> str:
    """A rate and, where the eval gave one (`<key>_ci95`), its 95 % interval."""
    ci = figures.get(f"{key}_ci95")
    value = fmt(figures.get(key))
    return f"{value} ({fmt(ci[0])} to {fmt(ci[1])})" if ci else value


def pages_table(ev: dict[str, Any]) -> Table | None:
    """Whole pages read end to end (the score eval's `pages`), beside the same variant's note
    error on systems read alone; None when the eval read no pages."""
    pages = ev.get("pages")
    if not pages or not pages.get("pages"):
        return None
    variant, split = pages.get("variant", "—"), pages.get("split", "—")
    splits = ev["variants"].get(variant, {}).get("splits", {})

    def alone(split: str) -> str:
        return fmt(splits.get(split, {}).get("note_error_rate"))

    found = pages.get("systems_found_ratio", {})
    base = pages.get("baseline_most_common_note", {})
    rows = [
        ["pages read (parts)", f"{pages['pages']} ({pages.get('parts', '—')})"],
        ["systems found / true", f"{pages['found_systems']} / {pages['true_systems']}"],
        ["pages with found / true within 0.95-1.05", fmt(found.get("pages_within_0.95_1.05"))],
        ["systems that are valid canonical LilyPond", fmt(pages.get("valid_rate"))],
        ["note error rate (pitch and duration)", with_interval(pages, "note_error_rate")],
        ["note error rate (pitch only)", with_interval(pages, "note_error_rate_pitch")],
        ["the same, systems read alone (test split)", alone("test")],
        ["the same, systems read alone (held-out split)", alone("heldout")],
        ["repeating the page's most common note", fmt(base.get("note_error_rate"))],
        ["pages per second", fmt(pages.get("pages_per_second"))],
    ]  # fmt: skip
    return Table(
        f"Whole pages read as `sonfolio read --page` reads them ({variant}, {split} parts)",
        ["measure", "value"],
        rows,
        "Parts the data stage cut from pages, engraved again whole in LilyPond's default layout "
        "(A4, 20 pt, a title), cut and read end to end, compared note by note with the notes on "
        "each page (docs/evaluation.md). Lower note error is better. In brackets: its 95 % "
        "bootstrap interval over the parts, how far it could move on other parts of the same "
        "collections.",
    )


def engravings_table(ev: dict[str, Any]) -> Table | None:
    """The same held-out parts read as pages of each engraving (the score eval's
    `pages.by_engraving`); None when the eval read them in one engraving only."""
    by = (ev.get("pages") or {}).get("by_engraving") or {}
    if len(by) < 2:
        return None
    rows = []
    for name, f in by.items():
        found = f"{f.get('found_systems', 0)} / {f.get('true_systems', 0)}"
        base = f.get("baseline_most_common_note", {})
        rows.append(
            [
                name,
                str(f.get("pages", 0)),
                found,
                fmt(f.get("valid_rate")),
                with_interval(f, "note_error_rate"),
                with_interval(f, "note_error_rate_pitch"),
                fmt(base.get("note_error_rate")),
            ]
        )
    return Table(
        "Whole pages per engraving",
        ["engraving", "pages", "systems found / true", "valid", "note error", "pitch only",
         "most common note"],
        rows,
        "The same held-out parts engraved by LilyPond (the training engraver) and by Verovio in "
        "a music font (verovio:<font>), clean and made to look scanned or photographed (+scan: "
        "resolution, JPEG, threshold, skew, perspective, curl, light, bleed-through, broken "
        "lines). Each page's truth comes from its engraver's own layout (docs/evaluation.md). "
        "In brackets: the 95 % bootstrap interval over the parts.",
    )  # fmt: skip


def engraving_pages(track: str, src: Sources, out: Path) -> Gallery | None:
    """The first held-out page each engraving was read from (eval@score keeps it under
    samples/pages/ with its cut drawn), its note error and what was read; None when absent."""
    folder = src.evals[track] / "samples" / "pages"
    figures = []
    for info in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        png = info.with_suffix(".png")
        meta = read_json(info) or {}
        if not png.is_file() or not meta:
            continue
        valid = sum(s.get("valid", False) for s in meta.get("systems", []))
        caption = (
            f"{meta.get('engraving', info.stem)}: note error {fmt(meta.get('note_error_rate'))}, "
            f"systems found {meta.get('found_systems')} / {meta.get('true_systems')}, "
            f"{valid} valid; read: "
            + " / ".join(s.get("text", "") for s in meta.get("systems", [])[:2])
        )
        rel = copy_asset(png, out, f"assets/pages/{track}/{png.name}")
        figures.append(Figure(rel, caption))
    if not figures:
        return None
    return Gallery("One held-out page per engraving, as read (boxes: the systems cut)", figures)


def real_items(
    track: ReportFace, ev: dict[str, Any], src: Sources, out: Path, cfg: Report
) -> list[Item]:
    """A real voice, measured only (the speech eval's `real`): each model's figures beside the
    untouched base and the gate, then the sample variant's worst clips; or the set marked
    absent, with why. Nothing when the eval has no `real`."""
    real = ev.get("real")
    if not real:
        return []
    if "absent" in real:
        what = f"{track.name}: the real-voice set is absent ({real['absent']})"
        return [Missing(what, f"dvc repro -f data@{track.name} eval@{track.name}")]
    base, found = real.get("base"), real.get("variants", {})
    rows = [
        [
            name + (" (untouched base)" if name == base else ""),
            m.get("kind", "—"),
            with_interval(m, "wer"),
            fmt(m.get("cer")),
            with_interval(m, "wer_vs_base") if name != base else "—",
            m.get("gate", "—") if name != base else "—",
            fmt(m.get("clips_per_s")),
        ]
        for name, m in found.items()
    ]
    failed = real.get("gate_failures") or []
    note = (
        f"{real.get('clips', '—')} clips ({fmt(real.get('audio_s', 0) / 60)} min) of Asterisk's "
        "French prompts read by one Canadian French speaker (Debian asterisk-core-sounds-fr, "
        "CC-BY-SA-3.0), never trained or tuned on, each read whole as `sonfolio transcribe` "
        "reads a file. Gate: a variant's WER may exceed the untouched base's by at most "
        f"+{real.get('max_wer_increase', '—')} (speech_eval.real). In brackets: 95 % "
        "bootstrap intervals over the clips (WER vs base: paired, the same clips). "
        + ("Past the gate: " + "; ".join(failed) if failed else "No variant is past the gate.")
    )
    items: list[Item] = [
        Table(
            "A real voice (measured only)",
            ["model", "runtime", "WER", "CER", "WER vs base", "gate", "clips/s"],
            rows,
            note,
        )
    ]
    variant = sample_variant(ev, cfg)
    if variant in found:
        at = SampleSplit(track.name, variant, "real", found[variant])
        items.append(VIEWS[track.eval_samples](at, src, out, cfg))
    return items


def quality_plot(track: ReportFace, ev: dict[str, Any], dest: Path, dpi: int) -> None:
    key = track.report_quality[0]
    variants = list(ev["variants"])
    splits = list(dict.fromkeys(s for v in ev["variants"].values() for s in v.get("splits", {})))
    series = {
        split: [ev["variants"][v].get("splits", {}).get(split, {}).get(key, 0.0) for v in variants]
        for split in splits
    }
    title = f"{track.name}: quality per variant"
    bar_chart(variants, series, track.report_quality_label, title, dest, dpi)


def sample_variant(ev: dict[str, Any], cfg: Report) -> str:
    """The variant whose samples are shown: cfg.sample_variant, else the eval's reference."""
    if cfg.sample_variant in ev["variants"]:
        return cfg.sample_variant
    ref = ev.get("reference") or next(iter(ev["variants"]))
    log.info(
        "report: samples of %s (report.sample_variant %r was not evaluated)",
        ref,
        cfg.sample_variant,
    )
    return ref


def eval_section(track: ReportFace, src: Sources, out: Path, cfg: Report) -> Section:
    section = Section("Quality per variant (evaluation)")
    path = src.metrics_of(track.name, "eval")
    ev = read_json(path)
    if ev is None or not ev.get("variants"):
        section.items.append(missing(path, track.name, "eval"))
        return section
    section.items.append(quality_table(track, ev))
    if (table := before_after_table(track, ev)) is not None:
        section.items.append(table)
    if (table := pages_table(ev)) is not None:
        section.items.append(table)
    if (table := engravings_table(ev)) is not None:
        section.items.append(table)
    section.items += real_items(track, ev, src, out, cfg)
    if (gallery := engraving_pages(track.name, src, out)) is not None:
        section.items.append(gallery)
    name = f"assets/{track.name}_quality.png"
    quality_plot(track, ev, out / name, cfg.dpi)
    section.items.append(Figure(name, f"{track.report_quality[0].upper()} per variant and split"))
    variant = sample_variant(ev, cfg)
    show = VIEWS[track.eval_samples]
    for split, s in ev["variants"][variant].get("splits", {}).items():
        section.items.append(show(SampleSplit(track.name, variant, split, s), src, out, cfg))
    return section
