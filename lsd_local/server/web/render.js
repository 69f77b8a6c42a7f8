// Rendering of answers for lsd's chat page: Markdown (a small, safe subset: everything is
// escaped first, links only to http(s)) and text coloured by origin, code blocks kept as code.
"use strict";
(function () {
  const ORIGIN_NAMES = { t: "written by the target", e: "draft token, exact", l: "draft token, kept loosely" };
  const FENCE = /^```([\w+.-]*)[ \t]*$/;

  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  function inline(escaped) {
    return escaped
      .replace(/`([^`\n]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>")
      .replace(/\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g,
        '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
  }

  function block(lines) {  // lines of one paragraph-ish block (no fences)
    const out = [];
    let list = null;
    const closeList = () => { if (list) { out.push(`</${list}>`); list = null; } };
    for (const line of lines) {
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      const bullet = /^\s*[-*+]\s+(.*)$/.exec(line);
      const numbered = /^\s*\d+[.)]\s+(.*)$/.exec(line);
      if (heading) {
        closeList();
        const level = Math.min(heading[1].length + 2, 6);  // (the page's own headings are h1-h2)
        out.push(`<h${level}>${inline(escapeHtml(heading[2]))}</h${level}>`);
      } else if (bullet || numbered) {
        const kind = bullet ? "ul" : "ol";
        if (list !== kind) { closeList(); out.push(`<${kind}>`); list = kind; }
        out.push(`<li>${inline(escapeHtml((bullet || numbered)[1]))}</li>`);
      } else if (line.trim() === "") {
        closeList();
      } else {
        closeList();
        out.push(`<p>${inline(escapeHtml(line))}</p>`);
      }
    }
    closeList();
    return out.join("");
  }

  // [{start, end, code, lang}] regions of text: fenced code (an unclosed fence runs to the end)
  function regions(text) {
    const lines = text.split("\n");
    const out = [];
    let at = 0, open = null, start = 0;
    for (const line of lines) {
      const end = at + line.length + 1;
      const fence = FENCE.exec(line.trim());
      if (fence && open === null) {
        if (at > start) out.push({ start, end: at, code: false });
        open = { start: at, body: end, lang: fence[1] };
      } else if (fence && open !== null) {
        out.push({ start: open.start, end: Math.min(end, text.length), code: true,
                   body: open.body, bodyEnd: Math.max(open.body, at - 1), lang: open.lang });
        open = null; start = end;
      }
      at = end;
    }
    if (open !== null) {
      out.push({ start: open.start, end: text.length, code: true, body: Math.min(open.body, text.length),
                 bodyEnd: text.length, lang: open.lang });
    } else if (start < text.length) {
      out.push({ start, end: text.length, code: false });
    }
    return out;
  }

  function renderMarkdown(text) {
    return regions(text).map((r) => r.code
      ? `<pre><code${r.lang ? ` data-lang="${escapeHtml(r.lang)}"` : ""}>${escapeHtml(text.slice(r.body, r.bodyEnd))}</code></pre>`
      : block(text.slice(r.start, r.end).split("\n"))).join("");
  }

  function spanTitle(span) {
    let title = ORIGIN_NAMES[span.o] || "";
    if (span.p && span.p.length) {
      title += " · target probability " + span.p.map((p) => p.toFixed(3)).join(", ");
    }
    return title;
  }

  // spans: [{t: text, o: "t"|"e"|"l", p: [probabilities] | undefined}] -> HTML; fenced code
  // is shown as a code block, the rest as pre-wrapped text, every piece coloured by origin
  function renderSpans(spans) {
    const text = spans.map((s) => s.t).join("");
    const owner = new Int32Array(text.length);
    let at = 0;
    spans.forEach((s, i) => { owner.fill(i, at, at + s.t.length); at += s.t.length; });
    const piece = (from, to) => {
      let html = "";
      let i = from;
      while (i < to) {
        let j = i + 1;
        while (j < to && owner[j] === owner[i]) j++;
        const span = spans[owner[i]];
        const origin = span.o === "e" || span.o === "l" ? span.o : "t";
        html += `<span class="tok origin-${origin}" title="${escapeHtml(spanTitle(span))}">` +
          `${escapeHtml(text.slice(i, j))}</span>`;
        i = j;
      }
      return html;
    };
    return regions(text).map((r) => r.code
      ? `<pre><code>${piece(r.body, r.bodyEnd)}</code></pre>`
      : `<div class="plain">${piece(r.start, r.end)}</div>`).join("");
  }

  window.LsdRender = { escapeHtml, renderMarkdown, renderSpans, regions, ORIGIN_NAMES };
})();
