// The account area's front end: hash routes (#/overview, #/wallet, #/keys, #/usage, #/pricing,
// #/security), every action a call to /console/api. No framework, no innerHTML with data: the
// DOM is built with h(), so nothing a server or customer wrote is ever parsed as HTML.
"use strict";
(() => {
  const I18N = window.DVZ_I18N;
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  const statusRegion = document.getElementById("status");
  const state = { lang: pickLang(), session: null };
  const VIEWS = ["overview", "wallet", "keys", "usage", "pricing", "security"];

  function pickLang() {
    const saved = localStorage.getItem("dvz-lang");
    if (saved === "fa" || saved === "en") return saved;
    for (const l of navigator.languages || [navigator.language]) {
      if (/^fa\b/i.test(l)) return "fa";
      if (/^en\b/i.test(l)) return "en";
    }
    return "fa";
  }
  const T = () => I18N[state.lang];
  function t(path, vars) {
    let s = path.split(".").reduce((o, k) => (o ? o[k] : undefined), T());
    if (typeof s !== "string") return path;
    for (const [k, v] of Object.entries(vars || {})) s = s.replaceAll(`{${k}}`, String(v));
    return s;
  }
  const locale = () => (state.lang === "fa" ? "fa-IR" : "en-US");
  /** A decimal toman string with the language's digits and separators, exact (Intl takes strings). */
  function toman(text, fractionMax = 0) {
    return new Intl.NumberFormat(locale(), { maximumFractionDigits: fractionMax }).format(text);
  }
  const num = (n) => new Intl.NumberFormat(locale()).format(n);
  function when(iso) {
    if (!iso) return t("keys.never");
    const cal = state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-GB";
    return new Intl.DateTimeFormat(cal, { dateStyle: "medium", timeStyle: "short" }).format(new Date(iso));
  }
  function day(iso) {
    const cal = state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-GB";
    return new Intl.DateTimeFormat(cal, { dateStyle: "medium", timeZone: "UTC" }).format(new Date(iso));
  }

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }
  const announce = (text) => { statusRegion.textContent = text; };

  async function api(method, path, body) {
    const headers = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (method !== "GET" && state.session) headers["x-csrf-token"] = state.session.csrf_token;
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
    } catch {
      throw new Error(t("errors.network"));
    }
    const data = await response.json().catch(() => ({}));
    if (response.status === 401 && data.error && data.error.code === "session_required") {
      state.session = null;
      render();
      throw new Error(data.error.message);
    }
    if (!response.ok) throw Object.assign(new Error(data.error ? data.error.message : String(response.status)), { code: data.error && data.error.code });
    return data;
  }

  function errorBox(id) { return h("p", { id, class: "error", role: "alert" }); }
  function showError(box, error) {
    const known = T().errors.codes && error.code ? T().errors.codes[error.code] : undefined;
    // In Persian the known codes read in Persian, with the server's words kept for the details (tries left, seconds).
    box.textContent = known ? `${known} (${error.message})` : t("errors.generic", { message: error.message });
  }
  function field(label, input) { return h("label", {}, label, input); }
  function table(caption, heads, rows, id) {
    // Focusable and named: a table wider than a phone screen scrolls, and keyboards must reach it.
    return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption }, h("table", { id },
      h("caption", { class: "sr-only" }, caption),
      h("thead", {}, h("tr", {}, heads.map((x) => h("th", { scope: "col", class: x.num ? "num" : null }, x.text || x)))),
      h("tbody", {}, rows)));
  }

  // ---- shell ----
  function applyLang() {
    document.documentElement.lang = state.lang;
    document.documentElement.dir = T().dir;
    document.title = `${t("brand")} · ${state.session ? t(`nav.${currentView()}`) : t("signIn.title")}`;
    const sw = document.getElementById("lang-switch");
    sw.textContent = T().other;
    sw.lang = T().otherLang;
    document.getElementById("brand").textContent = t("brand");
    document.getElementById("skip-link").textContent = t("skip");
    const out = document.getElementById("sign-out");
    out.textContent = t("signOut");
    out.hidden = !state.session;
    nav.hidden = !state.session;
    nav.setAttribute("aria-label", t("navLabel"));
    nav.replaceChildren(...VIEWS.map((v) => h("a", { href: `#/${v}`, id: `nav-${v}`, "aria-current": v === currentView() ? "page" : null }, t(`nav.${v}`))));
  }
  function currentView() {
    const v = location.hash.replace(/^#\//, "").split("?")[0];
    return VIEWS.includes(v) ? v : "overview";
  }
  function hashParams() {
    const q = location.hash.split("?")[1] || "";
    return new URLSearchParams(q);
  }

  async function render(focus) {
    applyLang();
    const view = state.session ? currentView() : "signin";
    const builder = { signin: signInView, overview: overviewView, wallet: walletView, keys: keysView, usage: usageView, pricing: pricingView, security: securityView }[view];
    const content = h("div", { id: `view-${view}` });
    main.replaceChildren(content);
    try {
      await builder(content);
    } catch (error) {
      content.append(h("p", { class: "error", role: "alert" }, t("errors.generic", { message: error.message })));
    }
    main.dataset.view = view;
    main.dataset.ready = String(Date.now());
    if (focus) main.focus();
  }

  // ---- sign-in ----
  function signInView(root) {
    const err = errorBox("signin-error");
    const phone = h("input", { id: "phone", type: "tel", inputmode: "tel", autocomplete: "tel", required: true, dir: "ltr", placeholder: "09xx xxx xxxx" });
    const code = h("input", { id: "code", inputmode: "numeric", autocomplete: "one-time-code", required: true, dir: "ltr", maxlength: "12" });
    const sentNote = h("p", { id: "code-sent", class: "muted" });
    const codeForm = h("form", { id: "code-form", hidden: true, onsubmit: async (e) => {
      e.preventDefault();
      err.textContent = "";
      try {
        state.session = await api("POST", "/console/api/sign-in", { phone: phone.value, code: code.value });
        if (!location.hash || location.hash === "#/") location.hash = "#/overview";
        render(true);
      } catch (error) { showError(err, error); }
    } }, sentNote, field(t("signIn.code"), code), h("button", { class: "primary", type: "submit", id: "sign-in" }, t("signIn.submit")),
      h("button", { type: "button", id: "change-phone", onclick: () => { codeForm.hidden = true; phoneForm.hidden = false; phone.focus(); } }, t("signIn.change")));
    const phoneForm = h("form", { id: "phone-form", onsubmit: async (e) => {
      e.preventDefault();
      err.textContent = "";
      try {
        const sent = await api("POST", "/console/api/otp", { phone: phone.value });
        sentNote.textContent = t("signIn.sent", { phone: sent.phone, s: num(sent.expires_in_s) });
        phoneForm.hidden = true;
        codeForm.hidden = false;
        code.focus();
      } catch (error) { showError(err, error); }
    } }, field(t("signIn.phone"), phone), h("button", { class: "primary", type: "submit", id: "send-code" }, t("signIn.send")));
    root.append(h("h1", {}, t("signIn.title")), phoneForm, codeForm, err);
  }

  // ---- overview ----
  async function overviewView(root) {
    const o = await api("GET", "/console/api/overview");
    // The UTC calendar month (what keys' monthly caps count) and the Jalali month (Tehran time), each labelled.
    const gregorianMonth = new Intl.DateTimeFormat(state.lang === "fa" ? "fa-IR-u-ca-gregory" : "en-US", { month: "long", year: "numeric", timeZone: "UTC" }).format(new Date(o.month.from));
    const jalaliMonth = new Intl.DateTimeFormat(state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-US-u-ca-persian", { month: "long", year: "numeric", timeZone: "Asia/Tehran" }).format(new Date(o.jalali_month.from));
    const card = (id, label, value, extra) => h("div", { class: "card", id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), extra ? h("div", { class: "muted" }, extra) : null);
    const money = (x) => `${toman(x, 2)} ${t("toman")}`;
    const requests = (n) => t(new Intl.PluralRules(locale()).select(n) === "one" ? "overview.request" : "overview.requests", { n: num(n) });
    root.append(h("h1", {}, t("overview.title")));
    if (!o.funded) root.append(h("p", { class: "warn", id: "not-funded" }, t("overview.notFunded"), " ", h("a", { href: "#/wallet" }, t("nav.wallet"))));
    else if (o.low_balance) root.append(h("p", { class: "warn", id: "low-balance" }, t("overview.low", { amount: toman(o.low_balance_toman) })));
    root.append(h("div", { class: "cards" },
      card("balance", t("overview.balance"), money(o.balance_toman)),
      card("held", t("overview.held"), money(o.held_toman)),
      card("available", t("overview.available"), money(o.available_toman)),
      card("spent-today", t("overview.today"), money(o.today.spent_toman), requests(o.today.requests)),
      card("spent-month", t("overview.month", { month: gregorianMonth }), money(o.month.spent_toman), requests(o.month.requests)),
      card("spent-jalali-month", t("overview.jalaliMonth", { month: jalaliMonth }), money(o.jalali_month.spent_toman), requests(o.jalali_month.requests))));
  }

  // ---- wallet ----
  const PRESETS = ["100000", "500000", "1000000"];
  async function walletView(root) {
    const list = await api("GET", "/console/api/topups");
    const err = errorBox("topup-error");
    root.append(h("h1", {}, t("wallet.title")));
    // Back from the payment page: PAYMENT_RETURN_URL=/console/#/wallet adds ?topup=…&outcome=….
    const returned = hashParams().get("topup") || new URLSearchParams(location.search).get("topup");
    if (returned) {
      const found = list.data.find((x) => x.id === returned);
      // The record's state is the truth; the outcome the payment page reported explains a pending one.
      const outcome = new URLSearchParams(location.search).get("outcome");
      const note = outcome && found && found.state !== "verified" && T().outcomes[outcome] ? ` — ${T().outcomes[outcome]}` : "";
      if (found) root.append(h("p", { id: "topup-outcome", role: "status", class: found.state === "verified" ? "ok" : "warn" }, t("wallet.returned", { state: t(`states.${found.state}`) }) + note));
    }
    const amount = h("input", { id: "topup-amount", inputmode: "numeric", dir: "ltr", required: true });
    const pay = async (value) => {
      err.textContent = "";
      try {
        const started = await api("POST", "/console/api/topups", { amount_toman: asciiDigits(String(value)).replace(/[^\d]/g, "") });
        location.assign(started.payment_url);
      } catch (error) { showError(err, error); }
    };
    const box = h("section", { class: "box", "aria-labelledby": "topup-title" }, h("h2", { id: "topup-title" }, t("wallet.topUp")));
    if (!list.payments_available) box.append(h("p", { class: "warn", id: "payments-unavailable" }, t("wallet.unavailable")));
    box.append(
      h("div", { class: "presets", role: "group", "aria-label": t("wallet.presets") }, PRESETS.map((p) => h("button", { type: "button", "data-amount": p, id: `preset-${p}`, disabled: !list.payments_available, onclick: () => pay(p) }, `${toman(p)} ${t("toman")}`))),
      h("form", { class: "inline", id: "topup-form", onsubmit: (e) => { e.preventDefault(); pay(amount.value); } }, field(t("wallet.amount"), amount), h("button", { class: "primary", type: "submit", id: "topup-submit", disabled: !list.payments_available }, t("wallet.pay"))),
      err);
    root.append(box, h("h2", {}, t("wallet.history")));
    if (list.data.length === 0) { root.append(h("p", { class: "muted" }, t("wallet.none"))); return; }
    root.append(table(t("wallet.history"), [t("usage.time"), { text: `${t("toman")}`, num: true }, t("keys.status"), "ref_id", ""], list.data.map((x) =>
      h("tr", { "data-topup": x.id, "data-state": x.state }, h("td", {}, when(x.created_at)), h("td", { class: "num" }, toman(x.amount_toman)), h("td", {}, t(`states.${x.state}`)), h("td", { class: "ltr" }, x.ref_id || "—"),
        h("td", {}, x.pending ? h("button", { type: "button", onclick: async () => { try { await api("POST", `/console/api/topups/${x.id}/check`); render(); } catch (error) { showError(err, error); } } }, t("wallet.check")) : ""))), "topups"));
  }
  function asciiDigits(s) { return s.replace(/[۰-۹]/g, (d) => String(d.charCodeAt(0) - 0x06f0)).replace(/[٠-٩]/g, (d) => String(d.charCodeAt(0) - 0x0660)); }

  // ---- keys ----
  async function keysView(root) {
    const list = await api("GET", "/console/api/keys");
    const err = errorBox("key-error");
    root.append(h("h1", {}, t("keys.title")));
    const reveal = h("div", { id: "new-key-panel" });
    if (!list.funded) root.append(h("p", { class: "warn", id: "keys-not-funded" }, t("keys.notFunded"), " ", h("a", { href: "#/wallet" }, t("keys.goWallet"))));
    const input = (id, attrs) => h("input", Object.assign({ id, dir: "ltr" }, attrs || {}));
    const name = input("key-name", { required: true, maxlength: "100", dir: null });
    const conc = input("key-concurrency", { inputmode: "numeric" });
    const rpm = input("key-rpm", { inputmode: "numeric" });
    const tpm = input("key-tpm", { inputmode: "numeric" });
    const cap = input("key-cap", { inputmode: "numeric" });
    const expires = input("key-expires", { type: "date" });
    const residency = h("input", { id: "key-in-country", type: "checkbox" });
    const intOf = (el) => (el.value.trim() ? Number(asciiDigits(el.value.trim())) : undefined);
    const form = h("form", { id: "key-form", onsubmit: async (e) => {
      e.preventDefault();
      err.textContent = "";
      const body = { name: name.value };
      if (intOf(conc) !== undefined) body.concurrency_max = intOf(conc);
      if (intOf(rpm) !== undefined) body.rpm = intOf(rpm);
      if (intOf(tpm) !== undefined) body.tpm = intOf(tpm);
      if (cap.value.trim()) body.monthly_spend_cap_toman = asciiDigits(cap.value.trim());
      if (residency.checked) body.residency = "in-country";
      if (expires.value) body.expires_at = new Date(`${expires.value}T23:59:59Z`).toISOString();
      try {
        const created = await api("POST", "/console/api/keys", body);
        showSecret(reveal, created);
      } catch (error) { showError(err, error); }
    } },
      field(t("keys.name"), name),
      h("fieldset", {}, h("legend", {}, t("keys.optional")), field(t("keys.concurrency"), conc), field(t("keys.rpm"), rpm), field(t("keys.tpm"), tpm), field(t("keys.cap"), cap),
        h("label", { class: "check" }, residency, t("keys.inCountry")), field(t("keys.expires"), expires)),
      h("button", { class: "primary", type: "submit", id: "key-create", disabled: !list.funded }, t("keys.create")), err);
    root.append(h("section", { class: "box", "aria-labelledby": "key-create-title" }, h("h2", { id: "key-create-title" }, t("keys.create")), form), reveal);
    root.append(h("h2", {}, t("keys.title")));
    if (list.data.length === 0) { root.append(h("p", { class: "muted" }, t("keys.none"))); return; }
    const status = (k) => (k.revoked_at ? t("keys.revoked") : k.expires_at && Date.parse(k.expires_at) <= Date.now() ? t("keys.expired") : t("keys.active"));
    root.append(table(t("keys.title"), [t("keys.name"), t("keys.display"), t("keys.created"), t("keys.lastUsed"), t("keys.expiresCol"), { text: t("keys.spent"), num: true }, t("keys.status"), ""], list.data.map((k) =>
      h("tr", { "data-key": k.id },
        h("td", {}, k.name), h("td", {}, h("code", {}, k.display)), h("td", {}, when(k.created_at)), h("td", { class: "last-used" }, when(k.last_used_at)), h("td", {}, k.expires_at ? when(k.expires_at) : "—"),
        h("td", { class: "num spent" }, toman(k.spent_toman, 6)), h("td", { class: "key-status" }, status(k)),
        h("td", {}, k.revoked_at ? "" : h("button", { type: "button", class: "danger revoke", "aria-label": `${t("keys.revoke")} ${k.name}`, onclick: async () => {
          if (!confirm(t("keys.revokeConfirm", { name: k.name }))) return;
          try { await api("DELETE", `/console/api/keys/${k.id}`); announce(t("keys.revoked")); render(); } catch (error) { showError(err, error); }
        } }, t("keys.revoke"))))), "keys-table"));
  }
  function showSecret(panel, created) {
    const copied = h("span", { role: "status", id: "copy-status" });
    const copy = h("button", { type: "button", id: "copy-key", onclick: async () => {
      try { await navigator.clipboard.writeText(created.key); copied.textContent = t("keys.copied"); } catch { copied.textContent = ""; }
    } }, t("keys.copy"));
    const done = h("button", { type: "button", id: "key-saved", onclick: () => { panel.replaceChildren(); render(); } }, t("keys.done"));
    panel.replaceChildren(h("section", { class: "secret", "aria-labelledby": "secret-title" },
      h("h2", { id: "secret-title" }, created.name),
      h("p", {}, t("keys.once")),
      h("p", {}, h("code", { id: "new-key" }, created.key)),
      h("p", {}, copy, " ", copied),
      h("p", {}, t("keys.exports")),
      h("pre", { id: "new-key-exports", tabindex: "0" }, created.exports.join("\n")),
      done));
    copy.focus();
  }

  // ---- usage ----
  async function usageView(root) {
    const params = hashParams();
    const keys = await api("GET", "/console/api/keys");
    const q = new URLSearchParams();
    for (const k of ["key", "model", "from", "to"]) if (params.get(k)) q.set(k, params.get(k));
    const usage = await api("GET", `/console/api/usage?${q}`);
    root.append(h("h1", {}, t("usage.title")));
    const keySel = h("select", { id: "filter-key" }, h("option", { value: "" }, t("usage.all")), keys.data.map((k) => h("option", { value: k.id, selected: params.get("key") === k.id }, k.name)));
    const model = h("input", { id: "filter-model", dir: "ltr", value: params.get("model") || "" });
    const from = h("input", { id: "filter-from", type: "date", value: params.get("from") || "" });
    const to = h("input", { id: "filter-to", type: "date", value: params.get("to") || "" });
    root.append(h("form", { class: "inline", id: "usage-filters", onsubmit: (e) => {
      e.preventDefault();
      const next = new URLSearchParams();
      if (keySel.value) next.set("key", keySel.value);
      if (model.value.trim()) next.set("model", model.value.trim());
      if (from.value) next.set("from", from.value);
      if (to.value) next.set("to", to.value);
      location.hash = `#/usage?${next}`;
    } }, field(t("usage.key"), keySel), field(t("usage.model"), model), field(t("usage.from"), from), field(t("usage.to"), to), h("button", { type: "submit", id: "usage-apply" }, t("usage.apply"))));
    root.append(h("p", { id: "usage-totals", "data-cost-micro": usage.totals.cost_micro_toman }, t("usage.totals", { n: num(usage.totals.requests), cost: toman(usage.totals.cost_toman, 6) })),
      h("p", {}, h("a", { id: "usage-csv", href: `/console/api/usage.csv?${q}`, download: "" }, t("usage.csv"))));
    root.append(h("h2", { id: "chart-title" }, t("usage.chart")), chart(usage.daily));
    if (usage.data.length === 0) { root.append(h("p", { class: "muted" }, t("usage.none"))); return; }
    root.append(table(t("usage.title"), [t("usage.time"), t("usage.key"), t("usage.model"), { text: t("usage.tokens"), num: true }, { text: t("usage.cost"), num: true }, t("usage.status")], usage.data.map((r) =>
      h("tr", { "data-request": r.request_id, "data-cost-micro": r.cost_micro_toman },
        h("td", {}, when(r.created_at)), h("td", {}, r.key_name || r.key_id), h("td", { class: "ltr" }, r.model),
        h("td", { class: "num" }, `${num(r.input_units)} / ${num(r.output_units)}`), h("td", { class: "num cost" }, toman(r.cost_toman, 6)), h("td", {}, num(r.status)))), "usage-table"));
  }
  function chart(daily) {
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("id", "usage-chart");
    svg.setAttribute("role", "img");
    svg.setAttribute("viewBox", "0 0 600 180");
    svg.setAttribute("preserveAspectRatio", "none");
    const label = daily.map((d) => `${day(d.day)}: ${toman(d.cost_toman, 2)} ${t("toman")}`).join("، ") || t("usage.none");
    svg.setAttribute("aria-label", `${t("usage.chart")}: ${label}`);
    const max = Math.max(1, ...daily.map((d) => Number(d.cost_micro_toman)));
    const w = Math.min(60, 600 / Math.max(daily.length, 1));
    daily.forEach((d, i) => {
      const r = document.createElementNS(NS, "rect");
      const height = Math.max(2, (Number(d.cost_micro_toman) / max) * 160);
      const x = state.lang === "fa" ? 600 - (i + 1) * w : i * w;
      r.setAttribute("x", String(x + w * 0.15));
      r.setAttribute("width", String(w * 0.7));
      r.setAttribute("y", String(175 - height));
      r.setAttribute("height", String(height));
      const title = document.createElementNS(NS, "title");
      title.textContent = `${day(d.day)}: ${toman(d.cost_toman, 6)}`;
      r.append(title);
      svg.append(r);
    });
    return svg;
  }

  // ---- pricing ----
  async function pricingView(root) {
    const p = await api("GET", "/console/api/pricing");
    root.append(h("h1", {}, t("pricing.title")));
    if (p.rate_effective_at) root.append(h("p", { id: "rate" }, t("pricing.rate", { rate: num(p.toman_per_usd), date: when(p.rate_effective_at) })));
    root.append(table(t("pricing.title"), [t("pricing.model"), { text: t("pricing.window"), num: true }, { text: t("pricing.input"), num: true }, { text: t("pricing.output"), num: true }, t("pricing.inCountry")], p.data.map((m) =>
      h("tr", { "data-model": m.id }, h("td", { class: "ltr" }, m.id), h("td", { class: "num" }, num(m.context_window)),
        h("td", { class: "num" }, m.pricing.input !== undefined ? toman(String(m.pricing.input)) : "—"), h("td", { class: "num" }, m.pricing.output !== undefined ? toman(String(m.pricing.output)) : "—"),
        h("td", {}, m.in_country ? t("pricing.yes") : t("pricing.no")))), "pricing-table"));
  }

  // ---- sessions ----
  async function securityView(root) {
    const list = await api("GET", "/console/api/sessions");
    const err = errorBox("session-error");
    root.append(h("h1", {}, t("security.title")), table(t("security.title"), [t("security.device"), t("security.address"), t("keys.created"), t("security.lastUsed"), ""], list.data.map((s) =>
      h("tr", { "data-session": s.id }, h("td", {}, s.user_agent || "—"), h("td", { class: "ltr" }, s.client_address || "—"), h("td", {}, when(s.created_at)), h("td", {}, when(s.last_used_at)),
        h("td", {}, s.current ? t("security.current") : h("button", { type: "button", onclick: async () => { try { await api("DELETE", `/console/api/sessions/${s.id}`); render(); } catch (error) { showError(err, error); } } }, t("security.end"))))), "sessions-table"),
      h("p", {}, h("button", { type: "button", class: "danger", id: "sign-out-everywhere", onclick: async () => {
        try { await api("POST", "/console/api/sign-out-everywhere"); state.session = null; render(true); } catch (error) { showError(err, error); }
      } }, t("security.everywhere"))), err);
  }

  // ---- start ----
  document.getElementById("lang-switch").addEventListener("click", () => {
    state.lang = state.lang === "fa" ? "en" : "fa";
    localStorage.setItem("dvz-lang", state.lang);
    render();
  });
  document.getElementById("sign-out").addEventListener("click", async () => {
    try { await api("POST", "/console/api/sign-out"); } catch {}
    state.session = null;
    render(true);
  });
  window.addEventListener("hashchange", () => render(true));
  (async () => {
    try {
      const r = await fetch("/console/api/session", { credentials: "same-origin" });
      if (r.ok) state.session = await r.json();
    } catch {}
    render();
  })();
})();
