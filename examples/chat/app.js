// Streams one noterag run from a `langgraph dev` server with the JS SDK: the method's progress
// events (stream mode "custom") become a step-by-step timeline and the note/memory panel, the
// answer node's tokens (stream mode "messages-tuple") fill the answer as they arrive.
import { Client } from "@langchain/langgraph-sdk";

const $ = (id) => document.getElementById(id);
const form = $("ask");
const params = new URLSearchParams(location.search);
const LIMITS = ["max_steps", "max_tokens", "top_k"];

// URL parameters prefill the form (?server=...&method=deepnote&max_steps=1&question=...).
for (const name of ["server", "method", "question", ...LIMITS]) {
  if (params.has(name)) form.elements[name].value = params.get(name);
}
if (LIMITS.some((name) => params.has(name))) $("advanced").open = true;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function list(items) {
  const ul = el("ul");
  for (const item of items) ul.append(el("li", "", item));
  return ul;
}

function badge(ok, yes, no) {
  return el("span", ok === null || ok === undefined ? "badge" : ok ? "badge ok" : "badge no",
    ok === null || ok === undefined ? "—" : ok ? yes : no);
}

// One card per progress event: what the step did, in the paper's terms.
const CARDS = {
  passages: (e, body) => {
    body.append(el("div", "label", "queries"), list(e.queries));
    body.append(el("div", "label", `passages read (${e.passages.length})`));
    body.append(e.passages.length ? list(e.passages.map((p) => p.title)) : el("p", "muted", "nothing new"));
    return "Retrieve";
  },
  queries: (e, body) => {
    body.append(e.queries.length ? list(e.queries) : el("p", "muted", "no new query"));
    return "Refine query";
  },
  note: (e, body) => {
    body.append(el("pre", "note", e.note || "(empty)"));
    setMemory(e.note, `initial note, step ${e.step}`);
    return "Initial note";
  },
  verdict: (e, body) => {
    body.append(badge(e.accepted, "accepted", "rejected"), el("span", "muted", ` ${e.reason}`));
    if (e.note) body.append(el("pre", "note", e.note));
    if (e.accepted && e.note) setMemory(e.note, `accepted at step ${e.step}`);
    return "Review";
  },
  filter: (e, body) => {
    body.append(badge(e.useful, "useful", "useless"), el("span", "", ` ${e.title}`));
    return "Chunk filter";
  },
  sentences: (e, body) => {
    body.append(list(e.passages.map((p) => `${p.title}: ${p.text}`)));
    return "Sentence filter";
  },
  memory_review: (e, body) => {
    body.append(el("pre", "note", e.text));
    return `Memory ${e.agent}`;
  },
  sufficiency: (e, body) => {
    body.append(badge(e.sufficient, "sufficient", "insufficient"), el("span", "muted", ` ${e.reason}`));
    return "Sufficiency";
  },
  summaries: (e, body) => {
    body.append(el("div", "label", "sub-question"), el("p", "", e.sub_question));
    body.append(el("div", "label", "global summary"), el("pre", "note", e.global_summary));
    if (e.local_summary) {
      body.append(el("div", "label", "local summary"), el("pre", "note", e.local_summary.response));
    }
    setMemory([e.global_summary, e.local_summary?.response].filter(Boolean).join("\n\n"),
      `memory after step ${e.step}`);
    return "Summarize";
  },
  judgment: (e, body) => {
    body.append(badge(e.sufficient, "sufficient", "insufficient"));
    return "Judge";
  },
  sub_question: (e, body) => {
    body.append(badge(e.accepted, "planned", "refused"), el("span", "", ` ${e.sub_question || ""}`));
    if (e.reason) body.append(el("p", "muted", e.reason));
    return "Plan";
  },
};

function setMemory(text, caption) {
  $("memory").textContent = text || "(empty)";
  $("memory-caption").textContent = caption;
}

function addEvent(event) {
  // The engine's record of each search, with the passages' whole text (for trace pages): the
  // method's own "passages" event already shows what was read.
  if (event.type === "retrieval") return;
  const item = el("li", "event");
  item.dataset.type = event.type;
  const body = el("div", "body");
  const render = CARDS[event.type];
  const title = render ? render(event, body) : event.type;
  if (!render) body.append(el("pre", "", JSON.stringify(event, null, 2)));
  const head = el("div", "head");
  head.append(el("span", "title", title));
  if (event.step !== undefined) head.append(el("span", "step", `step ${event.step}`));
  item.append(head, body);
  $("timeline").append(item);
  item.scrollIntoView({ block: "nearest" });
}

function setStatus(state, text) {
  $("status").dataset.state = state;
  $("status").textContent = text;
}

// The limits the method knows (vanilla RAG has no max_steps, and the server refuses unknown
// context fields), from the context schema the server publishes for Studio.
async function context(client, method) {
  const [assistant] = await client.assistants.search({ graphId: method, limit: 1 });
  if (!assistant) throw new Error(`the server has no graph ${method}`);
  const { context_schema: schema } = await client.assistants.getSchemas(assistant.assistant_id);
  const ctx = {};
  for (const name of LIMITS) {
    const value = form.elements[name].value.trim();
    if (value && name in (schema?.properties ?? {})) ctx[name] = Number(value);
  }
  return ctx;
}

async function run(event) {
  event.preventDefault();
  const { server, method, question } = Object.fromEntries(new FormData(form));
  $("timeline").replaceChildren();
  $("answer").textContent = "";
  delete $("answer").dataset.chunks;
  setMemory("", "");
  form.elements.go.disabled = true;
  setStatus("running", `running ${method}…`);
  try {
    // apiKey null: a local server needs none.
    const client = new Client({ apiUrl: server.replace(/\/$/, ""), apiKey: null });
    // Chat-shaped input, as Agent Chat UI sends it: the graph takes the last human message as
    // the question.
    const stream = client.runs.stream(null, method, {
      input: { messages: [{ role: "user", content: question }] },
      context: await context(client, method),
      streamMode: ["custom", "messages-tuple"],
    });
    let final = null;
    for await (const { event, data } of stream) {
      if (event === "custom" && data.type === "answer") final = data.answer;
      else if (event === "custom") addEvent(data);
      else if (event === "messages") {
        const [chunk, meta] = data;
        // Only the answer node streams; the check keeps the page right if that ever changes.
        if (meta.langgraph_node === "answer" && typeof chunk.content === "string") {
          $("answer").textContent += chunk.content;
          $("answer").dataset.chunks = Number($("answer").dataset.chunks || 0) + 1;
        }
      } else if (event === "error") {
        throw new Error(data.message || JSON.stringify(data));
      }
    }
    // The streamed tokens, as the answer node stripped them.
    if (final !== null) $("answer").textContent = final;
    setStatus("done", "done");
  } catch (error) {
    setStatus("error", `error: ${error.message}`);
  } finally {
    form.elements.go.disabled = false;
  }
}

form.addEventListener("submit", run);
