// The DOM builder both front ends use (the account area's and the operators' console): h(tag,
// attrs, ...children) makes an element; attributes are set and children appended as text nodes,
// never parsed as HTML, so nothing a server or customer wrote becomes markup.
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
};
