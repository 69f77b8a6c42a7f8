// lsd's chat page: conversations kept in this browser (localStorage), answers streamed from
// the server's OpenAI endpoint with `lsd_rounds` (each chunk carries its round's origin
// spans and counts), shown coloured by origin, with a live panel of the speculation.
"use strict";
(function () {
  const R = window.LsdRender;
  const STORE = "lsd.conversations", CURRENT = "lsd.current", KEY = "lsd.apiKey", ORIGINS = "lsd.origins";
  const SOURCE_COLOURS = { lookup: "#2e7dd7", suffix: "#7b4fd0", text: "#168a6f", forced: "#8a8a20",
                           model: "#d2691e", multilevel: "#c0392b", none: "#8c8c96" };
  const $ = (id) => document.getElementById(id);
  const state = { conversations: [], current: null, controller: null, live: null, renderTimer: null };

  // ---- storage -----------------------------------------------------------------------------
  function load() {
    try { state.conversations = JSON.parse(localStorage.getItem(STORE) || "[]"); }
    catch (e) { state.conversations = []; }
    if (!Array.isArray(state.conversations)) state.conversations = [];
    // (kept by an older page, or edited by hand: only what this page can show)
    state.conversations = state.conversations.filter((c) => c && typeof c.id === "string"
      && Array.isArray(c.messages) && c.messages.every((m) => m && typeof m.role === "string"));
    for (const c of state.conversations) {
      if (typeof c.title !== "string") c.title = "Conversation";
      if (!c.settings || typeof c.settings !== "object") c.settings = {};
    }
    state.current = localStorage.getItem(CURRENT);
    if (!state.conversations.some((c) => c.id === state.current)) newConversation();
  }
  function save() {  // false (and said) when the browser's storage is full
    try {
      localStorage.setItem(STORE, JSON.stringify(state.conversations));
      localStorage.setItem(CURRENT, state.current || "");
      return true;
    } catch (e) {
      showError("This browser's storage for the page is full: delete old conversations " +
                "to keep new ones (this one is shown but not kept).");
      return false;
    }
  }
  function current() { return state.conversations.find((c) => c.id === state.current); }
  function newConversation() {
    const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6),
                title: "New conversation", messages: [], settings: { logprobs: true } };
    state.conversations.unshift(c);
    state.current = c.id;
    save();
    return c;
  }

  // ---- conversations list ------------------------------------------------------------------
  function button(text, label, onClick, cls) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = text; b.className = cls || "";
    if (label) b.setAttribute("aria-label", label);
    b.addEventListener("click", onClick);
    return b;
  }
  function renderList() {
    const list = $("conversations");
    list.replaceChildren();
    for (const c of state.conversations) {
      const li = document.createElement("li");
      if (c.id === state.current) { li.className = "current"; li.setAttribute("aria-current", "true"); }
      li.append(button(c.title, null, () => select(c.id), "open"),
                button("✎", `Rename ${c.title}`, () => rename(c), "icon"),
                button("✕", `Delete ${c.title}`, () => remove(c), "icon"));
      list.append(li);
    }
  }
  function select(id) {
    if (state.controller) return;  // (an answer is streaming into the current one)
    state.current = id; save(); renderAll();
  }
  function rename(c) {
    const title = window.prompt("Name of this conversation", c.title);
    if (title && title.trim()) { c.title = title.trim().slice(0, 80); save(); renderList(); }
  }
  function remove(c) {
    if (state.controller && c.id === state.current) return;
    if (!window.confirm(`Delete "${c.title}"?`)) return;
    state.conversations = state.conversations.filter((x) => x !== c);
    if (state.current === c.id) {
      state.current = state.conversations.length ? state.conversations[0].id : null;
      if (!state.current) newConversation();
    }
    save(); renderAll();
  }

  // ---- messages ----------------------------------------------------------------------------
  function messageBody(m) {
    const body = document.createElement("div");
    body.className = "body";
    if (m.role === "user") { body.textContent = m.content; return body; }
    let html = "";
    if (m.reasoning) {
      html += `<details class="reasoning"><summary>Reasoning</summary><div class="text">` +
        `${R.escapeHtml(m.reasoning)}</div></details>`;
    }
    const showOrigins = $("show-origins").checked && m.spans && m.spans.length;
    html += showOrigins ? R.renderSpans(m.spans) : R.renderMarkdown(m.content || "");
    for (const call of m.toolCalls || []) {
      html += `<div class="call">→ ${R.escapeHtml(call.name || "")}(${R.escapeHtml(call.arguments || "")})</div>`;
    }
    if (m.note) html += `<p class="muted small">${R.escapeHtml(m.note)}</p>`;
    body.innerHTML = html;
    return body;
  }
  function messageNode(m, index, last) {
    const node = document.createElement("div");
    node.className = `msg ${m.role}`;
    const who = document.createElement("div");
    who.className = "who";
    who.append(m.role === "user" ? "you" : "lsd");
    if (m.role === "assistant") {
      who.append(button("Copy", "Copy this answer", () => copy(m.content || "")));
      if (last && !state.controller) who.append(button("Regenerate", "Regenerate this answer", regenerate));
    }
    node.append(who, messageBody(m));
    node.dataset.index = String(index);
    return node;
  }
  function renderMessages() {
    const c = current();
    const box = $("messages");
    box.replaceChildren(...c.messages.map((m, i) => messageNode(m, i, i === c.messages.length - 1)));
    box.scrollTop = box.scrollHeight;
  }
  function updateLast() {  // the streaming answer only: cheaper than all of them
    const c = current();
    const box = $("messages");
    const i = c.messages.length - 1;
    const old = box.lastElementChild;
    const node = messageNode(c.messages[i], i, true);
    if (old && old.dataset.index === String(i)) old.replaceWith(node); else box.append(node);
    box.scrollTop = box.scrollHeight;
  }
  function renderSettings() {
    const s = current().settings || {};
    for (const el of $("settings").elements) {
      if (el.type === "checkbox") el.checked = s[el.name] !== false;
      else el.value = s[el.name] ?? "";
    }
  }
  function renderAll() { renderList(); renderMessages(); renderSettings(); }
  async function copy(text) {
    try { await navigator.clipboard.writeText(text); }
    catch (e) {  // (no clipboard API outside secure contexts)
      const area = document.createElement("textarea");
      area.value = text; document.body.append(area); area.select();
      document.execCommand("copy"); area.remove();
    }
  }

  // ---- requests ----------------------------------------------------------------------------
  function headers() {
    const h = { "Content-Type": "application/json" };
    const key = localStorage.getItem(KEY);
    if (key) h.Authorization = `Bearer ${key}`;
    return h;
  }
  function requestBody(c) {
    const s = c.settings || {};
    const body = { model: "lsd", stream: true, lsd_rounds: true,
                   messages: c.messages.slice(0, -1).map((m) => ({ role: m.role, content: m.content || "" })) };
    if (s.rule) body.rule = s.rule;
    if (s.drafter) body.drafter = s.drafter;
    if (s.k) body.k = s.k === "auto" ? "auto" : Number(s.k);
    if (s.temperature !== undefined && s.temperature !== "") body.temperature = Number(s.temperature);
    body.max_tokens = s.max_tokens ? Number(s.max_tokens) : 512;
    if (s.logprobs !== false) body.logprobs = true;
    return body;
  }
  function showError(text) {
    const box = $("error");
    box.textContent = text || "";
    box.hidden = !text;
  }
  async function errorText(response) {
    try { const body = await response.json(); return body.error.message; }
    catch (e) { return `HTTP ${response.status}`; }
  }

  function startLive() {
    state.live = { rounds: 0, tokens: 0, drafted: 0, accepted: 0, loose: 0, source: "–",
                   bars: [], firstAt: null, tokensAtFirst: 0, final: null };
    drawLive();
  }
  function onRound(round) {
    const live = state.live;
    const now = performance.now();
    if (live.firstAt === null) { live.firstAt = now; live.tokensAtFirst = round.tokens; }
    live.rounds += 1; live.tokens += round.tokens; live.drafted += round.drafted;
    live.accepted += round.accepted; live.loose += round.loose; live.source = round.source;
    live.bars.push({ n: round.tokens, source: round.source });
    live.lastAt = now;
  }
  function drawLive() {
    const live = state.live;
    if (!live) return;
    const f = live.final;
    const span = live.lastAt && live.firstAt !== null ? (live.lastAt - live.firstAt) / 1000 : 0;
    const tps = f ? f.decode_tokens_per_second : span > 0 ? (live.tokens - live.tokensAtFirst) / span : null;
    $("stat-tps").textContent = tps ? tps.toFixed(1) : "–";
    $("stat-tau").textContent = live.rounds ? (live.tokens / live.rounds).toFixed(2) : "–";
    $("stat-accept").textContent = live.drafted ? `${Math.round(100 * live.accepted / live.drafted)} %` : "–";
    $("stat-loose").textContent = String(live.loose);
    $("stat-rounds").textContent = String(live.rounds);
    $("stat-source").textContent = live.source;
    drawChart(live.bars);
  }
  function drawChart(bars) {
    const canvas = $("chart");
    const g = canvas.getContext("2d");
    g.clearRect(0, 0, canvas.width, canvas.height);
    if (!bars.length) return;
    const shown = bars.slice(-canvas.width / 2);
    const top = Math.max(4, ...shown.map((b) => b.n));
    const w = canvas.width / Math.max(shown.length, 40);
    shown.forEach((b, i) => {
      const h = (canvas.height - 4) * b.n / top;
      g.fillStyle = SOURCE_COLOURS[b.source] || SOURCE_COLOURS.none;
      g.fillRect(i * w, canvas.height - h, Math.max(1, w - 1), h);
    });
  }

  // token probabilities of a round, spread over its spans in order (a span's tokens), only
  // where the round's tokens spell exactly its spans' text (not when text is held back, a
  // token splits a character, or the round also wrote reasoning or a call)
  function withProbabilities(spans, logprobs) {
    const tokens = (logprobs && logprobs.content) || [];
    const origin = (o) => (o === "e" || o === "l" ? o : "t");
    const spelled = tokens.map((t) => t.token).join("") === spans.map((s) => s[0]).join("");
    let t = 0;
    return spans.map(([text, o]) => {
      const p = [];
      let length = 0;
      while (spelled && t < tokens.length && length < text.length) {
        length += tokens[t].token.length; p.push(Math.round(1000 * Math.exp(tokens[t].logprob)) / 1000); t++;
      }
      return { t: text, o: origin(o), p };
    });
  }
  function onChunk(chunk, answer) {
    const choice = chunk.choices && chunk.choices[0];
    if (choice) {
      const delta = choice.delta || {};
      if (delta.content) answer.content += delta.content;
      if (delta.reasoning_content) answer.reasoning = (answer.reasoning || "") + delta.reasoning_content;
      for (const call of delta.tool_calls || []) {
        const calls = answer.toolCalls = answer.toolCalls || [];
        const c = calls[call.index] = calls[call.index] || { name: "", arguments: "" };
        if (call.function && call.function.name) c.name = call.function.name;
        if (call.function && call.function.arguments) c.arguments += call.function.arguments;
      }
      if (chunk.lsd && chunk.lsd.round) {
        onRound(chunk.lsd.round);
        answer.spans.push(...withProbabilities(chunk.lsd.round.spans, choice.logprobs));
      }
      if (choice.finish_reason) answer.finish = choice.finish_reason;
    }
    if (chunk.lsd && chunk.lsd.tau !== undefined) { state.live.final = chunk.lsd; answer.stats = chunk.lsd; }
  }
  async function readStream(response, answer) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
        const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("");
        if (!data || data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        onChunk(chunk, answer);
      }
      scheduleRender();
    }
  }
  // Repainting the answer costs the browser CPU time that a small machine's llama.cpp
  // threads miss (every round re-rendered: 0.7x decode speed on 2 cores): at most every
  // RENDER_MS while streaming, and once at the end.
  const RENDER_MS = 500;
  function scheduleRender() {
    if (state.renderTimer) return;
    state.renderTimer = setTimeout(() => {
      state.renderTimer = null;
      if (state.controller) { updateLast(); drawLive(); }
    }, RENDER_MS);
  }
  async function ask() {
    const c = current();
    const answer = { role: "assistant", content: "", spans: [] };
    c.messages.push(answer);
    state.controller = new AbortController();
    setBusy(true); showError(""); startLive(); updateLast();
    $("messages").setAttribute("aria-busy", "true");  // (read once it is whole)
    setStatus("answering…", false);
    try {
      const response = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
        body: JSON.stringify(requestBody(c)), signal: state.controller.signal });
      if (response.status === 401) { $("key-form").hidden = false; $("api-key").focus(); }
      if (!response.ok) throw new Error(await errorText(response));
      await readStream(response, answer);
    } catch (e) {
      if (e.name === "AbortError") answer.note = "stopped";
      else if (answer.content) answer.note = `error: ${e.message || e}`;
      else {  // nothing came: the question goes back to the box, to be sent again
        showError(String(e.message || e));
        c.messages.pop();
        const question = c.messages.pop();
        if (question && !$("prompt").value) $("prompt").value = question.content;
      }
    } finally {
      state.controller = null; setBusy(false); save(); renderMessages(); drawLive();
      $("messages").removeAttribute("aria-busy");
      $("prompt").focus();
    }
  }
  function setBusy(busy) {
    $("send").disabled = busy; $("stop").disabled = !busy;
  }
  function send(event) {
    if (event) event.preventDefault();
    const text = $("prompt").value;
    if (!text.trim() || state.controller) return;
    const c = current();
    c.messages.push({ role: "user", content: text });
    if (c.title === "New conversation") c.title = text.trim().slice(0, 40);
    $("prompt").value = "";
    save(); renderList(); renderMessages();  // (a full storage is said, the answer still comes)
    ask();
  }
  function regenerate() {
    const c = current();
    if (state.controller || !c.messages.length || c.messages[c.messages.length - 1].role !== "assistant") return;
    c.messages.pop(); save(); renderMessages(); ask();
  }

  // ---- server status -----------------------------------------------------------------------
  async function poll() {
    if (state.controller) return;  // (answering: the server is busy with us)
    let text = "unreachable", bad = true;
    try {
      const response = await fetch("/health", { cache: "no-store" });
      const h = await response.json();
      if (h.status === "ok") {
        bad = false;
        text = h.processing ? `busy${h.queue ? `: ${h.queue} waiting` : ""}` : "ready";
      } else {
        text = { loading: "loading the model…", restarting: "restarting the engine…",
                 shutting_down: "shutting down", failed: `failed: ${h.reason || ""}` }[h.status] || h.status;
      }
    } catch (e) { /* the server is down: said below */ }
    setStatus(text, bad);
  }
  function setStatus(text, bad) {  // (a live region: written only when it changes)
    const status = $("status");
    if (status.textContent !== text) status.textContent = text;
    status.classList.toggle("bad", bad);
  }
  async function modelName() {
    try {
      const response = await fetch("/v1/models", { headers: headers() });
      if (response.ok) $("model").textContent = (await response.json()).data[0].id;
    } catch (e) { /* shown when the server answers */ }
  }

  // ---- wiring ------------------------------------------------------------------------------
  function init() {
    load();
    const origins = localStorage.getItem(ORIGINS);
    $("show-origins").checked = origins !== "off";
    document.body.classList.toggle("no-origins", origins === "off");
    renderAll();
    $("composer").addEventListener("submit", send);
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e);
    });
    $("stop").addEventListener("click", () => state.controller && state.controller.abort());
    $("new-chat").addEventListener("click", () => { if (!state.controller) { newConversation(); renderAll(); $("prompt").focus(); } });
    $("show-origins").addEventListener("change", (e) => {
      localStorage.setItem(ORIGINS, e.target.checked ? "on" : "off");
      document.body.classList.toggle("no-origins", !e.target.checked);
      renderMessages();
    });
    $("settings").addEventListener("change", () => {
      const s = {};
      for (const el of $("settings").elements) s[el.name] = el.type === "checkbox" ? el.checked : el.value;
      current().settings = s; save();
    });
    $("key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      localStorage.setItem(KEY, $("api-key").value);
      $("key-form").hidden = true; showError(""); modelName();
    });
    poll(); modelName();
    setInterval(poll, 2000);
    $("prompt").focus();
  }
  window.addEventListener("DOMContentLoaded", init);
})();
