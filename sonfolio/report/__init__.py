"""The run report: one self-contained HTML page per run, from the stages' metrics and outputs.

It only reads what the other stages wrote (metrics/*.json, the DVCLive curves, the eval folders)
and never recomputes a figure. A missing input becomes a visible section that names the command
that produces it, so a partial pipeline still gets a report.

page: the entry point (write_report), the page's parts and their rendering; one module per
section: training, quality (with samples: how a track's eval samples are shown), speed (size
and latency), qat_vs_ptq, cost, conditions; beneath them items (what a page is made of),
sources (where it reads from; what it asks a track's report face) and plots (bar charts).

Layout of the output folder (docs/report.md): index.html, assets/ (plots, copied sample images
and audio clips: every link is relative and stays inside the folder) and <track>_latency.csv
(one row per benchmarked variant, for `dvc plots show`).
"""
