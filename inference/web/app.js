// The translator page: TF Serving's REST API (`:predict`), reached through inference/web.py on
// this page's own origin. No library, no build step, nothing fetched from elsewhere.
"use strict";

const GREEDY = "serving_default";
const BEAM = "beam_search";
const ALIGNMENTS = "alignments";
const SIGNATURE_WORDS = { [GREEDY]: "greedy", [BEAM]: "beam search" };

const config = { model_name: "translator", max_body_bytes: 1 << 20 };
let lastSources = [];       // the source of each output line ("" for a blank one)
let attentionRequest = 0;   // only the newest heat-map request draws

class PageError extends Error {}

function $(id) {
  return document.getElementById(id);
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function setStatus(message) {
  $("status").textContent = message;
}

function describeRefusal(status, message) {
  const said = message || `HTTP status ${status}`;
  if (status === 502) {
    return `The model server is not answering, so nothing was translated. ${said}`;
  }
  if (status === 504) {
    return `The model server took too long to answer. ${said}`;
  }
  if (status === 413 || (status === 429 && /larger than the limit/.test(said))) {
    return `The text is too long for the server: ${said}. Translate fewer or shorter lines at once.`;
  }
  return `The server refused the request: ${said}`;
}

// `{output name: value}` of one `signature` over `texts`, or a PageError in plain words.
async function predict(signature, texts) {
  const body = JSON.stringify({ signature_name: signature, inputs: { text: texts } });
  const size = new TextEncoder().encode(body).length;
  if (size > config.max_body_bytes) {
    throw new PageError(
      `The text is too long: its request is ${size} bytes, and this page forwards at most ` +
      `${config.max_body_bytes}. Translate fewer or shorter lines at once.`);
  }
  let response;
  try {
    response = await fetch(`/v1/models/${encodeURIComponent(config.model_name)}:predict`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body,
    });
  } catch (error) {
    throw new PageError(
      "The page's own server cannot be reached (is `make demo-web` still running?).");
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch (error) {
    payload = null;
  }
  if (!response.ok) {
    throw new PageError(describeRefusal(response.status, payload && payload.error));
  }
  if (!payload || payload.outputs === undefined) {
    throw new PageError("The server's answer holds no outputs.");
  }
  // One output comes bare, several as {name: value} (TF Serving's columnar format).
  return Array.isArray(payload.outputs) ? { translation: payload.outputs } : payload.outputs;
}

function chosenSignature() {
  return document.querySelector('input[name="decoding"]:checked').value;
}

function showOutput(lines) {
  const output = $("output");
  output.replaceChildren(...lines.map((text, row) => {
    const line = document.createElement("div");
    line.className = "line";
    line.dataset.row = String(row);
    line.textContent = text;
    return line;
  }));
}

async function translate() {
  showError("");
  const lines = $("source").value.replace(/\r/g, "").split("\n");
  while (lines.length > 1 && lines[lines.length - 1].trim() === "") {
    lines.pop();  // The newline after the last line adds none.
  }
  const sources = lines.filter((line) => line.trim() !== "");
  if (sources.length === 0) {
    showError("There is nothing to translate: type some Spanish in the box first.");
    $("source").focus();
    return;
  }
  const signature = chosenSignature();
  const button = $("translate");
  button.disabled = true;
  setStatus(`Translating ${sources.length} line${sources.length > 1 ? "s" : ""}…`);
  const started = performance.now();
  try {
    const outputs = await predict(signature, sources);
    const seconds = (performance.now() - started) / 1000;
    const translations = outputs.translation;
    let next = 0;
    showOutput(lines.map((line) => (line.trim() === "" ? "" : translations[next++])));
    lastSources = lines;
    setStatus(`Translated ${sources.length} line${sources.length > 1 ? "s" : ""} in ` +
      `${seconds.toFixed(2)} s (${SIGNATURE_WORDS[signature]}).`);
    fillAttentionChoices(lines);
  } catch (error) {
    setStatus("");
    showError(error instanceof PageError ? error.message : `Something went wrong: ${error}`);
  } finally {
    button.disabled = false;
  }
}

function fillAttentionChoices(lines) {
  const select = $("attention-line");
  const options = [];
  lines.forEach((line, row) => {
    if (line.trim() !== "") {
      const option = document.createElement("option");
      option.value = String(row);
      option.textContent = `${row + 1}: ${line.length > 40 ? line.slice(0, 39) + "…" : line}`;
      options.push(option);
    }
  });
  select.replaceChildren(...options);
  $("attention").hidden = false;
  drawAttention();
}

// The tokens before the first "" (padding) of a row.
function unpadded(tokens) {
  const end = tokens.indexOf("");
  return end < 0 ? tokens : tokens.slice(0, end);
}

function shownPiece(piece) {
  return piece.replace(/^\u2581/, "") || "\u2581";
}

async function drawAttention() {
  const row = Number($("attention-line").value);
  const source = lastSources[row];
  const request = ++attentionRequest;
  const table = $("heatmap");
  table.replaceChildren();
  $("attention-translation").textContent = "";
  if (source === undefined) {
    return;
  }
  try {
    const outputs = await predict(ALIGNMENTS, [source]);
    if (request !== attentionRequest) {
      return;
    }
    const sourceTokens = unpadded(outputs.source_tokens[0]);
    const targetTokens = unpadded(outputs.target_tokens[0]);
    renderHeatmap(table, sourceTokens, targetTokens, outputs.alignment[0]);
    $("attention-translation").textContent = `Greedy translation: ${outputs.translation[0]}`;
  } catch (error) {
    if (request === attentionRequest) {
      showError(error instanceof PageError ? error.message : `Something went wrong: ${error}`);
    }
  }
}

function renderHeatmap(table, sourceTokens, targetTokens, alignment) {
  const head = document.createElement("thead");
  const headRow = head.insertRow();
  const corner = document.createElement("td");
  headRow.append(corner);
  for (const token of sourceTokens) {
    const cell = document.createElement("th");
    cell.scope = "col";
    cell.textContent = shownPiece(token);
    headRow.append(cell);
  }
  const body = document.createElement("tbody");
  targetTokens.forEach((token, t) => {
    const row = body.insertRow();
    const label = document.createElement("th");
    label.scope = "row";
    label.textContent = shownPiece(token);
    row.append(label);
    sourceTokens.forEach((sourceToken, s) => {
      const weight = alignment[t][s];
      const cell = row.insertCell();
      cell.style.backgroundColor = `rgba(29, 78, 216, ${Math.min(1, Math.max(0, weight))})`;
      cell.title = `${shownPiece(token)} ← ${shownPiece(sourceToken)}: ${weight.toFixed(2)}`;
    });
  });
  table.replaceChildren(head, body);
}

async function loadConfig() {
  try {
    const response = await fetch("/page_config.json");
    if (response.ok) {
      Object.assign(config, await response.json());
    }
  } catch (error) {
    // The defaults serve; a request will say what is wrong.
  }
}

document.addEventListener("DOMContentLoaded", () => {
  loadConfig();
  $("translate-form").addEventListener("submit", (event) => {
    event.preventDefault();
    translate();
  });
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      translate();
    }
  });
  $("attention-line").addEventListener("change", drawAttention);
  document.body.dataset.ready = "true";
});
