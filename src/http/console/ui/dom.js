// What both front ends (the account area's and the operators' console) build with: h(tag,
// attrs, ...children) makes an element; attributes are set and children appended as text nodes,
// never parsed as HTML, so nothing a server or customer wrote becomes markup; table() their
// tables; pickLang and translate their one rule for the page's language and its strings.
"use strict";
window.DVZ_DOM = {
  h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  },
  /**
   * A table of `rows` (tr elements) under `heads` (text, or { text, num }), named `caption`. On
   * phones each row stacks as label: value (the CSS reads the labels from data-label); the wrapper
   * is focusable and named, since a table wider than its box scrolls inside it and keyboards must reach it.
   */
  table(caption, heads, rows, id) {
    const { h } = window.DVZ_DOM;
    for (const row of rows) [...row.cells].forEach((cell, i) => { const head = heads[i]; if (head) cell.dataset.label = head.text || head; });
    return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption }, h("table", { id, class: "stack" },
      h("caption", { class: "sr-only" }, caption),
      h("thead", {}, h("tr", {}, heads.map((x) => h("th", { scope: "col", class: x.num ? "num" : null }, x.text || x)))),
      h("tbody", {}, rows)));
  },
  /** The language saved under `storageKey`, else the browser's first of Persian and English, else Persian. */
  pickLang(storageKey) {
    const saved = localStorage.getItem(storageKey);
    if (saved === "fa" || saved === "en") return saved;
    for (const l of navigator.languages || [navigator.language]) {
      if (/^fa\b/i.test(l)) return "fa";
      if (/^en\b/i.test(l)) return "en";
    }
    return "fa";
  },
  /** The string at the dotted `path` of `strings`, its {name}s filled from `vars`; the path itself when there is none. */
  translate(strings, path, vars) {
    let s = path.split(".").reduce((o, k) => (o ? o[k] : undefined), strings);
    if (typeof s !== "string") return path;
    for (const [k, v] of Object.entries(vars || {})) s = s.replaceAll(`{${k}}`, String(v));
    return s;
  },
};
