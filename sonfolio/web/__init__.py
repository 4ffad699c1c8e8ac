"""The service's page at `/` (index.html, app.js, style.css, served by sonfolio.web.page) and
the engraving behind it (sonfolio.web.engrave): read a score or a speech clip in a browser,
offline, from the running `sonfolio serve`. docs/inference.md describes the page."""
