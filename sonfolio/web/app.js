// Sonfolio's page: read a score image or transcribe a speech clip with the running service.
//
// Safe by construction: every string from a file name, the service or a model reaches the page
// through textContent, value or a blob: URL, never as markup (tests/test_web.py reads this file
// and fails on the APIs that parse HTML or run strings); the service's Content-Security-Policy
// allows no inline script and nothing from another origin.
"use strict";

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- requests and their errors

// The service's error detail in words: a string, or FastAPI's list of field errors.
async function detailOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    return response.statusText || "no detail";
  }
  const detail = body && body.detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  }
  return JSON.stringify(body);
}

const HINTS = {
  400: "the file is damaged or empty",
  408: "the upload took too long",
  413: "too large",
  415: "not a supported file type",
  422: "refused",
  503: "the service is busy or has no model for this: try again later",
};

class ServiceError extends Error {}

// fetch, with any failure as a ServiceError whose message says what happened and why.
async function call(url, options) {
  let response;
  try {
    response = await fetch(url, options);
  } catch (err) {
    throw new ServiceError(`the service did not answer (${err.message}): is it still running?`);
  }
  if (!response.ok) {
    const hint = HINTS[response.status] ? ` (${HINTS[response.status]})` : "";
    throw new ServiceError(`error ${response.status}${hint}: ${await detailOf(response)}`);
  }
  return response;
}

// A status line: data-state says busy / done / error (for people: its words and its colour).
function setStatus(el, state, text) {
  el.dataset.state = state;
  el.textContent = text;
}

function showNote(el, text) {
  el.textContent = text || "";
  el.hidden = !text;
}

function replaceUrl(holder, key, blob) {
  if (holder[key]) URL.revokeObjectURL(holder[key]);
  holder[key] = blob ? URL.createObjectURL(blob) : null;
  return holder[key];
}

function describeFile(file) {
  return `chosen: ${file.name} (${(file.size / 1024).toFixed(1)} KB)`;
}

// A drop zone: files dropped on it become its input's choice, as if chosen in the dialog.
// One request of the page: its button is off and its status says what is under way until the
// request ends; `work` returns what the status says then, and an error is shown with `retry`,
// what the user can do next.
async function whileBusy(button, status, doing, work, retry) {
  button.disabled = true;
  setStatus(status, "busy", doing);
  try {
    setStatus(status, "done", await work());
  } catch (err) {
    setStatus(status, "error", `${err.message}. ${retry}`);
  } finally {
    button.disabled = false;
  }
}

// The file chosen in a tab's input (`${tab}-file`), kept in `holder.file` and named under the
// input; undefined when the choice was cancelled.
function choose(tab, holder) {
  const file = $(`${tab}-file`).files[0];
  if (!file) return undefined;
  holder.file = file;
  $(`${tab}-chosen`).textContent = describeFile(file);
  setStatus($(`${tab}-status`), "idle", "");
  return file;
}

function dropZone(zone, input) {
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    if (!event.dataTransfer.files.length) return;
    input.files = event.dataTransfer.files;
    input.dispatchEvent(new Event("change"));
  });
}

// ---------------------------------------------------------------- the score

// file: the chosen one; read: what the results shown were read from (file and page choice)
const score = { file: null, image: null, read: null, urls: {} };

// The uploaded image decoded by the browser, or null where it cannot (a TIFF, say).
function loadImage(file) {
  return new Promise((resolve) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => resolve(null);
    img.src = replaceUrl(score.urls, "image", file);
  });
}

// The page as the service cut it: turned `deg` degrees counter-clockwise about its centre and
// enlarged to hold the corners (PIL's rotate(expand=True)); the boxes are in this image.
function levelCanvas(img, deg) {
  const rad = (deg * Math.PI) / 180;
  const w = img.naturalWidth;
  const h = img.naturalHeight;
  const cos = Math.abs(Math.cos(rad));
  const sin = Math.abs(Math.sin(rad));
  const canvas = document.createElement("canvas");
  canvas.width = deg ? Math.ceil(w * cos + h * sin) : w;
  canvas.height = deg ? Math.ceil(w * sin + h * cos) : h;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff"; // the service lays the turned page on white paper
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.translate(canvas.width / 2, canvas.height / 2);
  ctx.rotate(-rad); // canvas turns clockwise for a positive angle
  ctx.drawImage(img, -w / 2, -h / 2);
  return canvas;
}

function drawPage(target, level, systems) {
  target.width = level.width;
  target.height = level.height;
  const ctx = target.getContext("2d");
  ctx.drawImage(level, 0, 0);
  const line = Math.max(2, Math.round(level.width / 400));
  ctx.lineWidth = line;
  ctx.font = `bold ${line * 8}px sans-serif`;
  for (const s of systems) {
    const [left, top, right, bottom] = s.box;
    ctx.strokeStyle = s.canonical ? "#1565c0" : "#c62828";
    ctx.fillStyle = ctx.strokeStyle;
    ctx.strokeRect(left, top, right - left, bottom - top);
    ctx.fillText(String(s.index), left + line * 2, top + line * 9);
  }
}

function drawCrop(target, level, box) {
  const [left, top, right, bottom] = box;
  target.width = Math.max(1, right - left);
  target.height = Math.max(1, bottom - top);
  target.getContext("2d").drawImage(level, left, top, right - left, bottom - top, 0, 0,
    target.width, target.height);
}

const ENGRAVING_SCALE = 2; // LilyPond's SVG is at print size (a staff ~ 5 mm): small on screen

// One system's text engraved by the service's POST /engrave into the card's image.
async function engrave(card, text, time) {
  const img = card.querySelector(".engraving");
  const status = card.querySelector(".engrave-status");
  card.dataset.engrave = "busy";
  setStatus(status, "busy", "engraving…");
  try {
    const response = await call("/engrave", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text, time }),
    });
    img.src = replaceUrl(card, "engravingUrl", await response.blob());
    await img.decode().catch(() => undefined); // an undrawable SVG shows as an empty image
    // one scale for every system, so staves match in size (a long one shrinks to fit)
    img.width = Math.round(img.naturalWidth * ENGRAVING_SCALE);
    img.hidden = false;
    card.querySelector(".problem").hidden = true; // an edited text that engraves is canonical
    setStatus(status, "done", "");
    card.dataset.engrave = "done";
  } catch (err) {
    img.hidden = true;
    setStatus(status, "error", `not engraved: ${err.message}`);
    card.dataset.engrave = "error";
  }
}

function systemCard(s) {
  const card = $("system-card").content.firstElementChild.cloneNode(true);
  card.dataset.index = String(s.index);
  card.dataset.canonical = String(Boolean(s.canonical));
  const [left, top, right, bottom] = s.box;
  card.querySelector(".system-title").textContent =
    `System ${s.index} (box ${left}, ${top} to ${right}, ${bottom})`;
  card.querySelector(".engraving").alt = `system ${s.index} engraved`;
  const text = card.querySelector(".text");
  text.value = s.text;
  if (!s.canonical) {
    showNote(card.querySelector(".problem"),
      `Not valid canonical LilyPond, so not engraved: ${s.problem}`);
    card.dataset.engrave = "skipped";
  }
  card.querySelector(".engrave").addEventListener("click", () => engrave(card, text.value, s.time));
  return card;
}

async function showReading(result, image) {
  const systems = result.systems;
  $("score-title").textContent =
    `${result.image}: ${systems.length} system${systems.length === 1 ? "" : "s"} ` +
    `read by model ${result.model}`;
  let note = systems.length ? "" : "No staff was found in this image: there is nothing to read.";
  if (!image) note = `${note} This browser cannot show the image, so its crops are left out.`;
  showNote($("score-note"), note.trim());
  $("score-ly-link").hidden = true;
  const list = $("systems");
  list.replaceChildren();
  const level = image && levelCanvas(image, result.deskew_deg || 0);
  const pageCanvas = $("score-page");
  pageCanvas.hidden = !level || !systems.length;
  if (level) drawPage(pageCanvas, level, systems);
  const cards = systems.map((s) => {
    const card = systemCard(s);
    if (level) drawCrop(card.querySelector(".crop"), level, s.box);
    else card.querySelector(".crop").hidden = true;
    list.append(card);
    return card;
  });
  $("score-result").hidden = false;
  // One engraving at a time: they share the service's decode slots with other users.
  for (const [i, s] of systems.entries()) {
    if (s.canonical) await engrave(cards[i], s.text, s.time);
  }
}

function readUrl(format, page) {
  const query = new URLSearchParams({ format });
  if (page) query.set("page", page);
  return `/read?${query}`;
}

function upload(file) {
  const form = new FormData();
  form.append("file", file, file.name);
  return form;
}

async function readScore(event) {
  event.preventDefault();
  const status = $("score-status");
  if (!score.file) {
    setStatus(status, "error", "Choose an image first.");
    return;
  }
  const page = new FormData($("score-form")).get("page");
  const read = { file: score.file, image: score.image, page };
  await whileBusy($("score-go"), status, `reading ${read.file.name}…`, async () => {
    const response = await call(readUrl("json", read.page), {
      method: "POST",
      body: upload(read.file),
    });
    const result = await response.json();
    score.read = read;
    setStatus(status, "busy", "engraving…");
    await showReading(result, await read.image);
    return `read ${read.file.name}`;
  }, "Your file is still chosen: read it again.");
}

// The service's own .ly for the image (POST /read?format=ly), saved under the image's name.
async function downloadLy() {
  const status = $("score-status");
  const link = $("score-ly-link");
  const { file, page } = score.read;
  await whileBusy($("score-ly"), status, "writing the .ly…", async () => {
    const response = await call(readUrl("ly", page), { method: "POST", body: upload(file) });
    link.href = replaceUrl(score.urls, "ly", await response.blob());
    link.download = `${file.name.replace(/\.[^.]*$/, "") || "score"}.ly`;
    link.textContent = `save ${link.download} again`;
    link.hidden = false;
    link.click();
    return `wrote ${link.download}`;
  }, "Try again.");
}

function chooseScore() {
  const file = choose("score", score);
  if (file) score.image = loadImage(file);
}

// ---------------------------------------------------------------- speech

const speech = { file: null, urls: {} };

function timeButton(chunk) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "seek";
  button.textContent = `${chunk.start.toFixed(2)}–${chunk.end.toFixed(2)}`;
  button.title = "play from here";
  button.addEventListener("click", () => {
    const audio = $("speech-audio");
    audio.currentTime = chunk.start;
    audio.play().catch(() => undefined); // a browser may refuse to play before a gesture
  });
  return button;
}

function chunkRow(chunk) {
  const row = document.createElement("tr");
  const when = document.createElement("td");
  when.append(timeButton(chunk));
  const said = document.createElement("td");
  said.className = chunk.no_speech ? "no-speech" : "said";
  said.textContent = chunk.no_speech ? "no speech" : chunk.text;
  row.append(when, said);
  return row;
}

function showTranscript(result) {
  $("speech-title").textContent =
    `${result.audio}: ${result.duration.toFixed(2)} s heard by model ${result.model}`;
  showNote($("speech-note"), result.no_speech
    ? "No speech was heard in this clip (silence, noise or hum): nothing was transcribed."
    : "");
  const transcript = $("transcript");
  transcript.textContent = result.text;
  transcript.classList.toggle("empty", !result.text);
  $("chunks").tBodies[0].replaceChildren(...result.chunks.map(chunkRow));
  $("speech-result").hidden = false;
}

async function transcribeSpeech(event) {
  event.preventDefault();
  const status = $("speech-status");
  if (!speech.file) {
    setStatus(status, "error", "Choose an audio file first.");
    return;
  }
  const { file } = speech;
  await whileBusy($("speech-go"), status, `transcribing ${file.name}…`, async () => {
    const response = await call("/transcribe", { method: "POST", body: upload(file) });
    showTranscript(await response.json());
    return `transcribed ${file.name}`;
  }, "Your file is still chosen: try again.");
}

function chooseSpeech() {
  const file = choose("speech", speech);
  if (!file) return;
  const audio = $("speech-audio");
  audio.src = replaceUrl(speech.urls, "audio", file);
  audio.hidden = false;
}

// ---------------------------------------------------------------- the page

function showTab(name) {
  for (const other of ["score", "speech"]) {
    $(other).hidden = other !== name;
    $(`tab-${other}`).setAttribute("aria-selected", String(other === name));
  }
}

async function showHealth() {
  const el = $("health");
  try {
    const health = await (await call("/health")).json();
    const models = Object.entries(health.models).map(([track, m]) =>
      m.loaded ? `${track}: ${m.name} (${m.kind}, ${m.device})` : `${track}: no model`);
    el.textContent = `service ${health.status}. ${models.join("; ")}`;
  } catch (err) {
    el.textContent = err.message;
  }
}

function start() {
  $("tab-score").addEventListener("click", () => showTab("score"));
  $("tab-speech").addEventListener("click", () => showTab("speech"));
  $("score-file").addEventListener("change", chooseScore);
  $("score-form").addEventListener("submit", readScore);
  $("score-ly").addEventListener("click", downloadLy);
  dropZone($("score-drop"), $("score-file"));
  $("speech-file").addEventListener("change", chooseSpeech);
  $("speech-form").addEventListener("submit", transcribeSpeech);
  dropZone($("speech-drop"), $("speech-file"));
  showHealth();
}

start();
