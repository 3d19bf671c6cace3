// The trace viewer: a list of recorded requests and, per trace, what the model sent, what the proxy mended,
// what it corrected and what the client finally got. Plain DOM, no build step; data only via textContent.
"use strict";

const LABELS = {clean: "clean", repaired: "repaired", rejected: "corrected", fallback: "fallback",
                surrendered: "surrendered", error: "error"};
const REPAIR_WORDS = {
  __malformed_json__: "malformed JSON", trailing_comma: "trailing comma", single_quotes: "single quotes",
  unclosed_braces: "unclosed braces", name_case: "name case", name_prefix: "name prefix",
  name_namespace: "namespace",
  double_encoded: "double-encoded", arguments_object: "arguments as object", empty_arguments: "empty arguments",
};
const REASON_WORDS = {
  unknown_spell: "unknown tool", missing_arguments: "missing arguments", unexpected_arguments: "unexpected arguments",
  invalid_arguments: "invalid arguments", malformed_json: "malformed JSON", missing_call: "missing call",
  ungrounded_arguments: "made-up arguments",
};
let nextAfter = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path) {
  const key = sessionStorage.getItem("sanctum-key");
  const response = await fetch(path, {headers: key ? {authorization: "Bearer " + key} : {}});
  if (response.status === 401) {
    document.getElementById("key").hidden = false;
    throw new Error("This proxy needs a key for its traces.");
  }
  const body = await response.json();
  if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
  return body;
}

// ---- the list ---------------------------------------------------------------------------------------------

function listQuery(after) {
  const form = new FormData(document.getElementById("filters"));
  const params = new URLSearchParams({limit: "50"});
  if (form.get("outcome")) params.set("outcome", form.get("outcome"));
  if (form.get("model").trim()) params.set("model", form.get("model").trim());
  if (form.get("since")) params.set("since", String(Date.now() / 1000 - Number(form.get("since"))));
  if (after) params.set("after", after);
  return "/sanctum/traces?" + params;
}

async function loadList(after) {
  const rows = document.getElementById("rows");
  const note = document.getElementById("list-note");
  try {
    const page = await api(listQuery(after));
    if (!after) rows.replaceChildren();
    page.data.forEach((t) => rows.append(row(t)));
    nextAfter = page.has_more ? page.last_id : null;
    document.getElementById("more").hidden = !nextAfter;
    note.textContent = rows.children.length ? "" : "No traces match. Send a chat request through the proxy.";
    markSelected();
  } catch (error) {
    note.textContent = error.message;
  }
}

function row(t) {
  return el("tr", {"data-id": t.id, tabindex: "0", onclick: () => { location.hash = t.id; },
                   onkeydown: (e) => { if (e.key === "Enter") location.hash = t.id; }},
    el("td", {title: t.time}, clock(t.created)),
    el("td", {}, badge(t.outcome)),
    el("td", {}, t.model || "(none)", el("span", {class: "sub"}, t.mode + (t.stream ? " · stream" : ""))),
    el("td", {class: "num"}, t.rounds),
    el("td", {class: "num"}, ms(t.latency_ms)),
    el("td", {}, happened(t)));
}

function happened(t) {
  const parts = [];
  const o = t.omens || {};
  if (o.SpellCallRepaired) parts.push(`${o.SpellCallRepaired} mended`);
  if (o.SpellCallRejected) parts.push(`${o.SpellCallRejected} corrected`);
  if (o.SpellCallingFallback) parts.push("fell back to prompted");
  if (t.error) parts.push(t.error.replaceAll("_", " "));
  else if (t.cast && t.cast.length) parts.push("cast " + t.cast.join(", "));
  else parts.push("text answer");
  return parts.join(" · ");
}

function markSelected() {
  const id = location.hash.slice(1);
  document.querySelectorAll("#rows tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.id === id));
}

// ---- one trace --------------------------------------------------------------------------------------------

async function showTrace() {
  markSelected();
  const id = location.hash.slice(1);
  const pane = document.getElementById("detail");
  if (!id) return;
  try {
    const trace = await api("/sanctum/traces/" + encodeURIComponent(id));
    pane.replaceChildren(...detail(trace));
    pane.scrollTop = 0;
  } catch (error) {
    pane.replaceChildren(el("p", {class: "note"}, error.message));
  }
}

function detail(t) {
  return [
    el("div", {class: "title"}, badge(t.outcome), el("h2", {}, headline(t))),
    el("p", {class: "story"}, story(t)),
    ...(t.clipped ? [el("p", {class: "note"}, "Stored clipped: " + t.clipped + " (traces_max_doc_bytes).")] : []),
    facts(t),
    el("h3", {}, "Repairs"),
    repairs(t),
    el("h3", {}, "Upstream rounds"),
    ...t.rounds.map((r) => roundCard(r, t)),
    el("details", {class: "raw"}, el("summary", {}, "The client's request"), pre(json(t.request))),
    el("p", {class: "sub"}, el("a", {href: "/sanctum/traces/" + t.id, target: "_blank"}, "Whole trace as JSON")),
  ];
}

function headline(t) {
  const calls = castCalls(t);
  if (t.error) return t.error.message.charAt(0).toUpperCase() + t.error.message.slice(1);
  if (calls.length) return "Cast " + calls.map((c) => c.function.name).join(", ");
  return "Answered with text";
}

function story(t) {
  const count = (type) => t.omens.filter((o) => o.type === type).length;
  const rounds = t.rounds.length === 1 ? "one upstream round" : `${t.rounds.length} upstream rounds`;
  const mended = count("SpellCallRepaired"), corrected = count("SpellCallRejected");
  const parts = [];
  if (count("SpellCallingFallback")) parts.push("The upstream refused native tool calls, so the proxy asked again in prompted mode.");
  if (mended) parts.push(`The proxy mended ${mended === 1 ? "one call" : mended + " calls"} locally.`);
  if (corrected) parts.push(`The model was corrected ${corrected === 1 ? "once" : corrected + " times"}.`);
  if (t.outcome === "surrendered") parts.push("No valid call came back, so the proxy gave up.");
  else if (t.outcome === "error") parts.push("The request failed: " + (t.error ? t.error.message : "unknown error") + ".");
  else if (!parts.length) parts.push("The model's answer went through unchanged.");
  return parts.join(" ") + ` It took ${rounds} and ${ms(t.latency_ms)}.`;
}

function facts(t) {
  const usage = t.usage || {};
  const rows = [
    ["Time", new Date(t.created * 1000).toLocaleString()], ["Model", t.model || "(none)"],
    ["Mode", t.requested_mode === t.mode ? t.mode : `${t.requested_mode} → ${t.mode}`],
    ["Stream", t.stream ? "yes" : "no"], ["Status", t.status], ["Latency", ms(t.latency_ms)],
    ["Tokens", usage.total_tokens ? `${usage.prompt_tokens} in · ${usage.completion_tokens} out` : "—"],
    ["Upstream", t.upstream], ["Trace id", t.id], ["Request id", t.request_id || "—"],
  ];
  return el("dl", {class: "facts"}, rows.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, String(v)))));
}

function repairs(t) {
  const cards = [];
  for (const omen of t.omens) {
    if (omen.type === "SpellCallRepaired") cards.push(mendedCard(omen, t));
    else if (omen.type === "SpellCallRejected") cards.push(correctedCard(omen, t));
    else if (omen.type === "SpellCallingFallback") cards.push(fallbackCard(omen));
    else if (omen.type === "SpellCallsDropped") cards.push(card("dropped", `Round ${omen.round} · dropped ${omen.spell}`,
      el("p", {}, "parallel_tool_calls is false, so only the first call was kept.")));
  }
  if (t.outcome === "surrendered") cards.push(surrenderCard(t));
  if (!t.omens.length && t.outcome !== "surrendered") {
    cards.push(el("p", {class: "note"}, "Nothing to repair: the model's answer went through as it was."));
  }
  cards.push(castCard(t));
  return el("div", {class: "repairs"}, cards);
}

function card(kind, title, ...body) {
  return el("article", {class: "card " + kind}, el("h4", {}, title), ...body);
}

function mendedCard(omen, t) {
  const cast = castCalls(t).find((c) => c.id === omen.call_id);
  return card("mended", [`Mended locally · ${omen.spell} · round ${omen.round} `,
                         ...(omen.repairs || []).map((r) => chip(REPAIR_WORDS[r] || r.replaceAll("_", " ")))],
    el("div", {class: "sides"},
      pane("The model wrote", rawArguments(omen.raw), "before"),
      pane("The client got", cast ? pretty(cast.function.arguments) : "(the call is not in the final answer)", "after")));
}

function correctedCard(omen, t) {
  const next = t.rounds.find((r) => r.number === omen.round + 1);
  return card("corrected", [`Corrected · round ${omen.round} `, chip(REASON_WORDS[omen.reason] || omen.reason),
                            omen.spell ? ` ${omen.spell}` : ""],
    (omen.details || []).length ? el("ul", {class: "details"}, omen.details.map((d) => el("li", {}, d))) : null,
    el("div", {class: "sides three"},
      pane("The model answered", rawCall(omen.raw), "before"),
      pane("The proxy replied", omen.correction, "note"),
      pane(next ? `Its next answer (round ${next.number})` : "Its next answer",
           next ? answerText(next.answer, next.error) : "(no further round: the proxy gave up)",
           next && next.outcome === "accepted" ? "after" : "before")));
}

function fallbackCard(omen) {
  return card("fallback", `Fell back · ${omen.from} → ${omen.to} · round ${omen.round}`,
    el("p", {}, `${(omen.reason || "").replaceAll("_", " ")}` + (omen.upstream_status ? ` (upstream status ${omen.upstream_status})` : "")),
    omen.message ? pre(omen.message) : null);
}

function surrenderCard(t) {
  const rejected = (t.error && t.error.rejected) || [];
  return card("surrendered", "Gave up",
    el("p", {}, t.error ? t.error.message : ""),
    rejected.length ? el("ol", {class: "rejected"}, rejected.map((r) => el("li", {}, pre(r)))) : null);
}

function castCard(t) {
  const message = t.answer ? t.answer.message : null;
  if (!message) return card("cast none", "Final answer", el("p", {}, t.error ? "None: the client got an error." : "None."));
  const calls = message.tool_calls || [];
  const parts = calls.map((c) => el("div", {class: "call"}, el("code", {class: "name"}, c.function.name),
                                    c.function.arguments === undefined ? null : pre(pretty(c.function.arguments))));
  if (message.content) parts.push(pre(typeof message.content === "string" ? message.content : json(message.content)));
  if (!parts.length) parts.push(el("p", {class: "note"}, t.bodies ? "(empty)" : "(bodies not kept: traces_bodies = false)"));
  return card("cast", `Final answer · finish_reason ${t.answer.finish_reason}`, ...parts);
}

function roundCard(r, t) {
  const usage = r.usage || {};
  const sent = r.sent || {};
  return el("details", {class: "round " + r.outcome},
    el("summary", {},
      el("span", {class: "round-no"}, `Round ${r.number}`), ` ${r.mode}${r.constrained ? " (answer schema)" : ""} · `,
      el("b", {}, r.outcome),
      ` · status ${r.status} · ${ms(r.latency_ms)}` + (usage.total_tokens ? ` · ${usage.total_tokens} tokens` : "")),
    el("div", {class: "sides"},
      pane("Sent to the upstream", messagesText(sent), "sent"),
      pane("Raw answer", r.error ? json(r.error) : answerText(r.answer), r.outcome === "accepted" ? "after" : "before")));
}

// ---- small pieces -----------------------------------------------------------------------------------------

function castCalls(t) {
  return (t.answer && t.answer.message && t.answer.message.tool_calls) || [];
}

function rawArguments(raw) {
  if (raw === undefined) return "(bodies not kept: traces_bodies = false)";
  try {
    const call = JSON.parse(raw);
    const args = call && call.function && call.function.arguments;
    if (typeof args === "string") return args;
    if (args !== undefined) return json(args);
  } catch (e) { /* text from the answer's content: show it as it is */ }
  return raw;
}

function rawCall(raw) {
  if (raw === undefined) return "(bodies not kept: traces_bodies = false)";
  try {
    const call = JSON.parse(raw);
    if (call && call.function && call.function.name !== undefined) {
      const args = call.function.arguments;
      return `${call.function.name}(${typeof args === "string" ? args : json(args ?? "")})`;
    }
  } catch (e) { /* text from the answer's content: show it as it is */ }
  return raw;
}

function answerText(answer, error) {
  if (error) return json(error);
  if (!answer) return "(bodies not kept: traces_bodies = false)";
  const lines = [];
  const content = typeof answer.content === "string" ? answer.content : (answer.content ? json(answer.content) : "");
  if (content.trim()) lines.push(content);
  for (const call of answer.tool_calls || []) {
    const args = call.function.arguments;
    lines.push(`${call.function.name}(${args === undefined ? "" : typeof args === "string" ? args : json(args)})`);
  }
  return lines.join("\n") || "(empty answer)";
}

function messagesText(sent) {
  if (!sent.messages) return `${sent.message_count ?? "?"} messages (bodies not kept)`;
  const lines = sent.messages.map((m) => {
    const content = typeof m.content === "string" ? m.content : (m.content ? json(m.content) : "");
    const calls = (m.tool_calls || []).map((c) => `${c.function.name}(${c.function.arguments})`).join(" ");
    return `[${m.role}] ${content}${calls ? " " + calls : ""}`;
  });
  const tools = (sent.tools || []).map((tool) => (tool.function || {}).name).filter(Boolean);
  if (tools.length) lines.push(`(tools: ${tools.join(", ")})`);
  if (sent.response_format) lines.push("(with an answer schema: response_format)");
  return lines.join("\n\n");
}

function pane(label, text, kind) {
  return el("figure", {class: "pane " + kind}, el("figcaption", {}, label), pre(text));
}

function pre(text) {
  return el("pre", {}, text === null || text === undefined ? "" : String(text));
}

function pretty(args) {
  if (typeof args !== "string") return json(args);
  try { return json(JSON.parse(args)); } catch (e) { return args; }
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

function badge(outcome) {
  return el("span", {class: "badge " + outcome}, LABELS[outcome] || outcome);
}

function chip(text) {
  return el("span", {class: "chip"}, text);
}

function clock(created) {
  return new Date(created * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false});
}

function ms(value) {
  return value >= 1000 ? (value / 1000).toFixed(2) + " s" : Math.round(value) + " ms";
}

document.getElementById("filters").addEventListener("submit", (e) => { e.preventDefault(); loadList(); });
document.getElementById("filters").addEventListener("change", () => loadList());
document.getElementById("more").addEventListener("click", () => loadList(nextAfter));
document.getElementById("key").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("sanctum-key", new FormData(e.target).get("key").trim());
  e.target.hidden = true;
  loadList();
  showTrace();
});
window.addEventListener("hashchange", showTrace);
loadList();
showTrace();
