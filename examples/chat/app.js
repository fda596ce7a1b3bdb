// Streams one noterag run from a `langgraph dev` server with the JS SDK: the method's progress
// events (stream mode "custom") become a step-by-step timeline and the note/memory panel, the
// answer node's tokens (stream mode "messages-tuple") fill the answer as they arrive. With a
// human review, the run pauses with a HITL request (LangChain v1's, as Agent Chat UI renders
// it): the review card shows it and resumes the run with the reviewer's decision.
import { Client } from "@langchain/langgraph-sdk";

const $ = (id) => document.getElementById(id);
const form = $("ask");
const params = new URLSearchParams(location.search);
const LIMITS = ["max_steps", "max_tokens", "top_k"];

// URL parameters prefill the form (?server=...&method=deepnote&max_steps=1&question=...).
for (const name of ["server", "method", "question", "human_review", ...LIMITS]) {
  if (params.has(name)) form.elements[name].value = params.get(name);
}
if ([...LIMITS, "human_review"].some((name) => params.has(name))) $("advanced").open = true;

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
  human_review: (e, body) => {
    if (e.query) body.append(el("div", "label", "searched for"), el("p", "", e.query));
    if (e.note) body.append(el("pre", "note", e.note));
    return `Review: ${e.decision}`;
  },
  decision: ({ decision }, body) => {
    if (decision.type === "edit") {
      const { name, args } = decision.edited_action;
      body.append(el("pre", "note", args[EDITED[name]]));
    }
    if (decision.message) body.append(el("p", "", decision.message));
    return `Your decision: ${decision.type}`;
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
  const review = form.elements.human_review.value;
  if (review !== "none") ctx.human_review = review;
  return ctx;
}

// Agent Chat UI's test for a review card (isAgentInboxInterruptSchema in
// src/lib/agent-inbox-interrupt.ts): a HITL request with named actions and review configs.
function isHitlRequest(value) {
  return (
    Array.isArray(value?.action_requests) && value.action_requests.length > 0 &&
    Array.isArray(value?.review_configs) && value.review_configs.length > 0 &&
    value.action_requests.every((a) => typeof a?.name === "string" && a.args && typeof a.args === "object") &&
    value.review_configs.every((c) => typeof c?.action_name === "string" && Array.isArray(c.allowed_decisions))
  );
}

// The HITL request the thread waits on, if any.
async function pendingReview(client, threadId) {
  const state = await client.threads.getState(threadId);
  const values = (state.tasks ?? []).flatMap((task) => task.interrupts ?? []).map((i) => i.value);
  return { request: values.find(isHitlRequest) ?? null, values: state.values };
}

// The text each review edits.
const EDITED = { review_note: "note", review_answer: "answer" };

// Show the request as a card; resolves with the reviewer's decision (LangChain v1's Decision).
function review(request) {
  const [action] = request.action_requests;
  const config = request.review_configs.find((c) => c.action_name === action.name) ?? request.review_configs[0];
  const allowed = config.allowed_decisions;
  const field = EDITED[action.name];
  const original = String(action.args[field] ?? "");
  $("review-title").textContent = action.name === "review_note" ? "Review the note" : "Review the answer";
  $("review").dataset.action = action.name;
  // The description: what the decisions do, then (Markdown) what the note was written from
  const [says, ...more] = (action.description ?? "").split("\n\n");
  $("review-description").textContent = says;
  $("review-label").textContent = field;
  const text = $("review-text");
  text.value = original;
  text.readOnly = !allowed.includes("edit");
  const args = $("review-args");
  args.replaceChildren();
  if (more.length) args.append(el("pre", "", more.join("\n\n")));
  for (const [name, value] of Object.entries(action.args)) {
    if (name === field) continue;
    args.append(el("div", "label", name));
    if (name === "passages" && Array.isArray(value)) args.append(list(value.map((p) => p.title)));
    else if (name === "verdicts" && Array.isArray(value)) {
      args.append(list(value.map((v) => `step ${v.step}: ${v.verdict ?? "—"} ${v.reason ?? ""}`)));
    } else args.append(el("pre", "", typeof value === "string" ? value : JSON.stringify(value, null, 2)));
  }
  $("review-approve").hidden = !allowed.includes("approve");
  $("review-edit").hidden = !allowed.includes("edit");
  $("review-reject-row").hidden = !allowed.includes("reject");
  $("review-edit").disabled = true;
  $("review-reject").disabled = true;
  $("review-message").value = "";
  text.oninput = () => { $("review-edit").disabled = text.value === original || !text.value.trim(); };
  $("review-message").oninput = () => { $("review-reject").disabled = !$("review-message").value.trim(); };
  $("review").hidden = false;
  $("review").scrollIntoView({ block: "nearest" });
  return new Promise((resolve) => {
    const done = (decision) => {
      $("review").hidden = true;
      resolve(decision);
    };
    $("review-approve").onclick = () => done({ type: "approve" });
    $("review-resolve").onclick = () => done({ type: "resolve" });
    // Like Agent Chat UI: every arg back, the edited one changed.
    $("review-edit").onclick = () =>
      done({ type: "edit", edited_action: { name: action.name, args: { ...action.args, [field]: text.value } } });
    $("review-reject").onclick = () => done({ type: "reject", message: $("review-message").value.trim() });
  });
}

// The run under way, kept for the page's next load: a reload mid-run joins it (below).
const RUNNING = "noterag-chat-run";

// One streamed run (a new question, or a review's decision), its events into the page. Asked
// for as Agent Chat UI asks (stream_resumable, on_disconnect "continue"): a reload of the page
// leaves the run going, and the reloaded page joins it.
async function streamRun(client, threadId, method, payload, server) {
  const stream = client.runs.stream(threadId, method, {
    ...payload,
    streamMode: ["custom", "messages-tuple"],
    streamResumable: true,
    onDisconnect: "continue",
  });
  await showStream(stream, (runId) =>
    sessionStorage.setItem(
      RUNNING,
      JSON.stringify({ server, method, threadId, runId, context: payload.context ?? {} }),
    ),
  );
}

async function showStream(stream, started) {
  for await (const { event, data } of stream) {
    if (event === "metadata" && data?.run_id && started) started(data.run_id);
    if (event === "custom" && data.type === "answer") {
      $("answer").textContent = data.answer;  // the streamed tokens, as the answer node stripped them
      $("answer").dataset.final = "1";
    } else if (event === "custom") addEvent(data);
    else if (event === "messages") {
      const [chunk, meta] = data;
      // Only the answer node streams; the check keeps the page right if that ever changes.
      if (meta.langgraph_node === "answer" && typeof chunk.content === "string") {
        if ($("answer").dataset.final) {  // the answer written again after a review
          $("answer").textContent = "";
          delete $("answer").dataset.final;
        }
        $("answer").textContent += chunk.content;
        $("answer").dataset.chunks = Number($("answer").dataset.chunks || 0) + 1;
      }
    } else if (event === "error") {
      throw new Error(data.message || JSON.stringify(data));
    }
  }
}

async function run(event) {
  event.preventDefault();
  const { server, method, question } = Object.fromEntries(new FormData(form));
  $("timeline").replaceChildren();
  $("answer").textContent = "";
  delete $("answer").dataset.chunks;
  delete $("answer").dataset.final;
  $("review").hidden = true;
  setMemory("", "");
  form.elements.go.disabled = true;
  setStatus("running", `running ${method}…`);
  try {
    // apiKey null: a local server needs none.
    const client = new Client({ apiUrl: server.replace(/\/$/, ""), apiKey: null });
    const ctx = await context(client, method);
    // A thread: a review pauses the run there, and a reload joins the run on it.
    const threadId = (await client.threads.create()).thread_id;
    // Chat-shaped input, as Agent Chat UI sends it: the graph takes the last human message as
    // the question.
    await streamRun(client, threadId, method, {
      input: { messages: [{ role: "user", content: question }] },
      context: ctx,
    }, server);
    await reviews(client, threadId, method, ctx, server);
  } catch (error) {
    setStatus("error", `error: ${reason(error)}`);
  } finally {
    sessionStorage.removeItem(RUNNING);
    form.elements.go.disabled = false;
  }
}

// A refusal's reason: the server's "detail" (the SDK's error reads "HTTP 422: {json}").
function reason(error) {
  const match = /^HTTP (\d+): (.*)$/s.exec(error?.message ?? "");
  if (!match) return error?.message ?? String(error);
  try {
    return `${JSON.parse(match[2]).detail ?? match[2]} (HTTP ${match[1]})`;
  } catch {
    return error.message;
  }
}

// The reviews of a paused thread, each resumed with the reviewer's decision, until the answer.
async function reviews(client, threadId, method, ctx, server) {
  while (threadId) {
    const { request, values } = await pendingReview(client, threadId);
    if (!request) {
      // the answer as the thread keeps it (an edited answer never streams)
      if (typeof values?.answer === "string") $("answer").textContent = values.answer;
      if (typeof values?.best_note === "string") setMemory(values.best_note, "the note the answer read");
      break;
    }
    setStatus("review", "waiting for your review");
    const decision = await review(request);
    addEvent({ type: "decision", decision });
    if (decision.type === "resolve") {
      // Agent Chat UI's Mark as Resolved: the paused thread ends, no answer is written
      await streamRun(client, threadId, method, { command: { goto: "__end__" } }, server);
      setStatus("resolved", "resolved: the thread ended without an answer");
      return;
    }
    if (decision.type === "edit" && decision.edited_action.name === "review_note") {
      setMemory(decision.edited_action.args.note, "edited by you");
    }
    setStatus("running", `resuming ${method}…`);
    await streamRun(client, threadId, method, { command: { resume: { decisions: [decision] } }, context: ctx }, server);
  }
  setStatus("done", "done");
}

// A reload mid-run: the run went on (it was asked for as resumable); join its stream from the
// start, then show the thread's answer (or its review).
async function rejoin() {
  const kept = JSON.parse(sessionStorage.getItem(RUNNING) ?? "null");
  if (!kept) return;
  form.elements.go.disabled = true;
  setStatus("running", `joining the ${kept.method} run under way…`);
  try {
    const client = new Client({ apiUrl: kept.server.replace(/\/$/, ""), apiKey: null });
    await showStream(client.runs.joinStream(kept.threadId, kept.runId, { lastEventId: "-1" }));
    const { request, values } = await pendingReview(client, kept.threadId);
    if (typeof values?.answer === "string") $("answer").textContent = values.answer;
    if (request) await reviews(client, kept.threadId, kept.method, kept.context, kept.server);
    else setStatus("done", "done");
  } catch (error) {
    setStatus("error", `error: ${reason(error)}`);
  } finally {
    sessionStorage.removeItem(RUNNING);
    form.elements.go.disabled = false;
  }
}

form.addEventListener("submit", run);
rejoin();
