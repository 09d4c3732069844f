// The account area's front end: hash routes (#/overview, #/wallet, #/keys, #/usage, #/batches,
// #/pricing, #/security), every action a call to /console/api. No framework, no innerHTML with data: the
// DOM is built with h(), so nothing a server or customer wrote is ever parsed as HTML.
"use strict";
(() => {
  const I18N = window.DVZ_I18N;
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  const statusRegion = document.getElementById("status");
  const state = { lang: window.DVZ_DOM.pickLang("dvz-lang"), session: null };
  const VIEWS = ["overview", "wallet", "keys", "usage", "batches", "pricing", "security"];

  const T = () => I18N[state.lang];
  const t = (path, vars) => window.DVZ_DOM.translate(T(), path, vars);
  const locale = () => (state.lang === "fa" ? "fa-IR" : "en-US");
  /** A decimal toman string with the language's digits and separators, exact (Intl takes strings). */
  function toman(text, fractionMax = 0) {
    return new Intl.NumberFormat(locale(), { maximumFractionDigits: fractionMax }).format(text);
  }
  const num = (n) => new Intl.NumberFormat(locale()).format(n);
  /** Exact micro-toman (a decimal string) as a toman decimal string: "1234567" → "1.234567". */
  const tomanOfMicro = (micro) => { const m = String(micro).padStart(7, "0"); return `${m.slice(0, -6)}.${m.slice(-6)}`; };
  /** Text with Latin digits, in the page's digits (phone numbers in Persian digits on Persian pages). */
  const digits = (text) => (state.lang === "fa" ? String(text).replace(/[0-9]/g, (d) => "۰۱۲۳۴۵۶۷۸۹"[d]) : String(text));
  /** A phone number as people write it here (0912 …), in the page's digits, kept left to right inside any sentence. */
  const phoneText = (phone) => `\u2066${digits(String(phone).replace(/^\+98/, "0"))}\u2069`;
  /** "1 request" / "2 requests": the key for n's plural form (`one` → key, else key + "s"). */
  const plural = (key, n) => (new Intl.PluralRules(locale()).select(Number(n)) === "one" ? key : `${key}s`);
  function when(iso) {
    if (!iso) return t("keys.never");
    const cal = state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-GB";
    return new Intl.DateTimeFormat(cal, { dateStyle: "medium", timeStyle: "short" }).format(new Date(iso));
  }
  function day(iso) {
    const cal = state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-GB";
    return new Intl.DateTimeFormat(cal, { dateStyle: "medium", timeZone: "UTC" }).format(new Date(iso));
  }

  const { h, table } = window.DVZ_DOM;
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
    if (!response.ok) {
      const retryAfter = response.headers.get("retry-after");
      const triesLeft = response.headers.get("x-darvaze-tries-left");
      throw Object.assign(new Error(data.error ? data.error.message : String(response.status)), { code: data.error && data.error.code, param: data.error && data.error.param, retryAfter, triesLeft });
    }
    return data;
  }

  function errorBox(id) { return h("p", { id, class: "error", role: "alert" }); }
  /** The page's own sentence for an error code, and the details the server sent as numbers (tries left, seconds to wait). */
  function showError(box, error) {
    const known = error.code ? T().errors.codes[error.code] : undefined;
    const parts = [known || (error.code ? t("errors.unknown", { code: error.code }) : error.message)];
    // Which field was refused (e.g. allowed_ips.1: the second address), when the page names it.
    const field = error.param && T().errors.params[String(error.param).split(".")[0]];
    if (field) parts.push(field);
    if (error.triesLeft) parts.push(t("errors.triesLeft", { n: num(error.triesLeft) }));
    if (error.retryAfter && /^\d+$/.test(error.retryAfter)) parts.push(t("errors.wait", { s: num(error.retryAfter) }));
    box.textContent = parts.join(" ");
  }
  function field(label, input) { return h("label", {}, label, input); }

  // ---- shell ----
  function applyLang() {
    document.documentElement.lang = state.lang;
    document.documentElement.dir = T().dir;
    document.title = `${t("brand")} · ${state.session ? (currentView() === "receipt" ? t("receipt.title") : t(`nav.${currentView()}`)) : t("signIn.title")}`;
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
    const v = location.hash.replace(/^#\//, "").split("?")[0].split("/")[0];
    return VIEWS.includes(v) || v === "receipt" ? v : "overview";
  }
  function hashParams() {
    const q = location.hash.split("?")[1] || "";
    return new URLSearchParams(q);
  }

  // Each render's number: a view still loading when another render began (a sign-out while the
  // keys list reloads) must not mark the page as its own when it finishes.
  let renders = 0;
  async function render(focus) {
    const mine = ++renders;
    applyLang();
    const view = state.session ? currentView() : "signin";
    const builder = { signin: signInView, overview: overviewView, wallet: walletView, keys: keysView, usage: usageView, batches: batchesView, pricing: pricingView, security: securityView, receipt: receiptView }[view];
    const content = h("div", { id: `view-${view}` });
    main.replaceChildren(content);
    try {
      await builder(content);
    } catch (error) {
      const box = h("p", { class: "error", role: "alert" });
      showError(box, error.code ? error : { message: t("errors.view") });
      content.append(box);
    }
    if (mine !== renders) return;
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
    // The code asked for from this page: the server tries a code only for whoever asked for it.
    let codeId = "";
    const codeForm = h("form", { id: "code-form", hidden: true, onsubmit: async (e) => {
      e.preventDefault();
      err.textContent = "";
      try {
        state.session = await api("POST", "/console/api/sign-in", { phone: phone.value, code_id: codeId, code: code.value });
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
        codeId = sent.code_id;
        sentNote.textContent = t("signIn.sent", { phone: phoneText(sent.phone), s: num(sent.expires_in_s) });
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
    const requests = (n) => t(plural("overview.request", n), { n: num(n) });
    root.append(h("h1", {}, t("overview.title")));
    if (!o.funded) root.append(h("p", { class: "warn", id: "not-funded" }, t("overview.notFunded"), " ", h("a", { href: "#/wallet" }, t("nav.wallet"))));
    else if (o.balance_alert) root.append(alertBanner(o));
    else if (o.low_balance) root.append(h("p", { class: "warn", id: "low-balance" }, t("overview.low", { amount: toman(o.low_balance_toman) })));
    root.append(h("div", { class: "cards" },
      card("balance", t("overview.balance"), money(o.balance_toman)),
      card("held", t("overview.held"), money(o.held_toman)),
      card("available", t("overview.available"), money(o.available_toman)),
      card("spent-today", t("overview.today"), money(o.today.spent_toman), requests(o.today.requests)),
      card("spent-month", t("overview.month", { month: gregorianMonth }), money(o.month.spent_toman), requests(o.month.requests)),
      card("spent-jalali-month", t("overview.jalaliMonth", { month: jalaliMonth }), money(o.jalali_month.spent_toman), requests(o.jalali_month.requests))));
  }

  /** Shown while the balance is below the customer's own alert threshold (until a top-up lifts it). */
  const alertBanner = (o) => h("p", { class: "warn", id: "balance-alert", role: "status" }, t("alert.banner", { amount: toman(o.low_balance_threshold_toman) }), " ", h("a", { href: "#/wallet" }, t("nav.wallet")));

  /** An amount in toman to the micro-toman: a request's cost (0.972 toman) shows in the balance. */
  const money = (x) => `${toman(x, 6)} ${t("toman")}`;
  const card = (id, label, value, extra) => h("div", { class: "card", id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), extra ? h("div", { class: "muted" }, extra) : null);

  // ---- wallet ----
  const PRESETS = ["100000", "500000", "1000000"];
  async function walletView(root) {
    const list = await api("GET", "/console/api/topups");
    const o = await api("GET", "/console/api/overview");
    const err = errorBox("topup-error");
    root.append(h("h1", {}, t("wallet.title")), h("div", { class: "cards" },
      card("wallet-balance", t("overview.balance"), money(o.balance_toman)),
      card("wallet-available", t("overview.available"), money(o.available_toman))));
    // Back from the payment page: PAYMENT_RETURN_URL=/console/#/wallet adds ?topup=…&outcome=…, shown once:
    // the address loses them at once, so a later visit (or a reload) does not show an old outcome.
    const returned = hashParams().get("topup") || new URLSearchParams(location.search).get("topup");
    const outcome = hashParams().get("outcome") || new URLSearchParams(location.search).get("outcome");
    if (returned) history.replaceState(null, "", `${location.pathname}#/wallet`);
    const found = returned && list.data.find((x) => x.id === returned);
    if (found) {
      // The record's state is the truth; the outcome the payment page reported explains one not paid.
      const note = outcome && found.state !== "verified" && T().outcomes[outcome] ? ` — ${T().outcomes[outcome]}` : "";
      root.append(h("p", { id: "topup-outcome", role: "status", class: found.state === "verified" ? "ok" : "warn" }, t("wallet.returned", { state: t(`states.${found.state}`) }) + note));
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
    root.append(box, alertSettings(o), h("h2", {}, t("wallet.history")));
    if (list.data.length === 0) { root.append(h("p", { class: "muted" }, t("wallet.none"))); return; }
    const action = (x) => {
      if (x.pending) return h("button", { type: "button", onclick: async () => { try { await api("POST", `/console/api/topups/${x.id}/check`); render(); } catch (error) { showError(err, error); } } }, t("wallet.check"));
      if (x.state === "verified") return h("a", { href: `#/receipt/${x.id}`, class: "receipt-link", "aria-label": t("wallet.receiptOf", { time: when(x.created_at) }) }, t("wallet.receipt"));
      return "";
    };
    root.append(table(t("wallet.history"), [t("usage.time"), { text: `${t("toman")}`, num: true }, t("keys.status"), t("wallet.ref"), ""], list.data.map((x) =>
      h("tr", { "data-topup": x.id, "data-state": x.state }, h("td", {}, when(x.created_at)), h("td", { class: "num" }, toman(x.amount_toman)), h("td", {}, t(`states.${x.state}`)),
        h("td", { class: "ltr ref", "data-ref": x.ref_id || "" }, x.ref_id ? digits(x.ref_id) : "—"), h("td", {}, action(x)))), "topups"));
  }
  /** The low-balance alert's threshold: an SMS once the balance falls below it; empty turns it off. */
  function alertSettings(o) {
    const err = errorBox("alert-error");
    const saved = h("p", { id: "alert-saved", role: "status", class: "muted" });
    const threshold = h("input", { id: "alert-threshold", inputmode: "numeric", dir: "ltr", value: o.low_balance_threshold_toman ? toman(o.low_balance_threshold_toman) : "" });
    const save = async () => {
      err.textContent = "";
      const value = asciiDigits(threshold.value).replace(/[^\d.]/g, "");
      try {
        const set = await api("PUT", "/console/api/alert", { low_balance_threshold_toman: value || null });
        saved.textContent = set.low_balance_threshold_toman ? t("alert.saved", { amount: toman(set.low_balance_threshold_toman) }) : t("alert.off");
      } catch (error) { showError(err, error); }
    };
    return h("section", { class: "box", "aria-labelledby": "alert-title" }, h("h2", { id: "alert-title" }, t("alert.title")), h("p", { class: "muted" }, t("alert.help", { max: num(o.alert_sms_daily_max) })),
      h("form", { class: "inline", id: "alert-form", onsubmit: (e) => { e.preventDefault(); save(); } }, field(t("alert.threshold"), threshold), h("button", { class: "primary", type: "submit", id: "alert-save" }, t("alert.save"))),
      saved, err);
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
        // The new key is in the list at once, while its secret is still shown above.
        keyList(listBox, await api("GET", "/console/api/keys"), err);
      } catch (error) { showError(err, error); }
    } },
      field(t("keys.name"), name),
      h("fieldset", {}, h("legend", {}, t("keys.optional")), field(t("keys.concurrency"), conc), field(t("keys.rpm"), rpm), field(t("keys.tpm"), tpm), field(t("keys.cap"), cap),
        h("label", { class: "check" }, residency, t("keys.inCountry")), field(t("keys.expires"), expires)),
      h("button", { class: "primary", type: "submit", id: "key-create", disabled: !list.funded }, t("keys.create")), err);
    root.append(h("section", { class: "box", "aria-labelledby": "key-create-title" }, h("h2", { id: "key-create-title" }, t("keys.create")), form), reveal);
    const listBox = h("div", { id: "key-list" });
    root.append(h("h2", {}, t("keys.title")), listBox);
    keyList(listBox, list, err);
  }
  function keyList(box, list, err) {
    if (list.data.length === 0) { box.replaceChildren(h("p", { class: "muted" }, t("keys.none"))); return; }
    const status = (k) => (k.revoked_at ? t("keys.revoked") : k.expires_at && Date.parse(k.expires_at) <= Date.now() ? t("keys.expired") : t("keys.active"));
    const editor = h("div", { id: "key-restrict-panel" });
    box.replaceChildren(editor);
    box.prepend(table(t("keys.title"), [t("keys.name"), t("keys.display"), t("keys.created"), t("keys.lastUsed"), t("keys.expiresCol"), { text: t("keys.spent"), num: true }, t("keys.status"), ""], list.data.map((k) =>
      h("tr", { "data-key": k.id },
        h("td", {}, k.name), h("td", {}, h("code", {}, k.display)), h("td", {}, when(k.created_at)), h("td", { class: "last-used" }, when(k.last_used_at)), h("td", {}, k.expires_at ? when(k.expires_at) : "—"),
        h("td", { class: "num spent" }, toman(k.spent_toman, 6)), h("td", { class: "key-status" }, status(k)),
        h("td", {}, k.revoked_at ? "" : h("button", { type: "button", class: "restrict", "aria-label": `${t("keys.restrict")} ${k.name}`, onclick: () => restrictForm(editor, k, err) }, t("keys.restrict")), " ",
          k.revoked_at ? "" : h("button", { type: "button", class: "danger revoke", "aria-label": `${t("keys.revoke")} ${k.name}`, onclick: async () => {
          if (!confirm(t("keys.revokeConfirm", { name: k.name }))) return;
          try { await api("DELETE", `/console/api/keys/${k.id}`); announce(t("keys.revoked")); render(); } catch (error) { showError(err, error); }
        } }, t("keys.revoke"))))), "keys-table"));
  }
  /** The key's model and address allowlists, comma-separated; an empty field clears its list. */
  function restrictForm(panel, k, err) {
    const listInput = (id, list) => h("input", { id, dir: "ltr", value: (list || []).join(", ") });
    const models = listInput("restrict-models", k.allowed_models);
    const ips = listInput("restrict-ips", k.allowed_ips);
    const listOf = (el) => { const items = el.value.split(/[,،\s]+/).filter(Boolean); return items.length ? items : null; };
    const form = h("form", { id: "restrict-form", onsubmit: async (e) => {
      e.preventDefault();
      err.textContent = "";
      try {
        await api("PATCH", `/console/api/keys/${k.id}`, { allowed_models: listOf(models), allowed_ips: listOf(ips) });
        announce(t("keys.restrictSaved", { name: k.name }));
        render();
      } catch (error) { showError(err, error); }
    } },
      h("p", { class: "muted" }, t("keys.restrictHelp")),
      field(t("keys.allowedModels"), models), field(t("keys.allowedIps"), ips),
      h("button", { class: "primary", type: "submit", id: "restrict-save" }, t("keys.restrictSave")), " ",
      h("button", { type: "button", onclick: () => panel.replaceChildren() }, t("keys.cancel")));
    panel.replaceChildren(h("section", { class: "box", "aria-labelledby": "restrict-title" }, h("h2", { id: "restrict-title" }, t("keys.restrictOf", { name: k.name })), form));
    models.focus();
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
    const from = datePicker("filter-from", t("usage.from"), params.get("from"));
    const to = datePicker("filter-to", t("usage.to"), params.get("to"));
    root.append(h("form", { class: "inline", id: "usage-filters", onsubmit: (e) => {
      e.preventDefault();
      const next = new URLSearchParams();
      if (keySel.value) next.set("key", keySel.value);
      if (model.value.trim()) next.set("model", model.value.trim());
      if (from.value()) next.set("from", from.value());
      if (to.value()) next.set("to", to.value());
      location.hash = `#/usage?${next}`;
    } }, field(t("usage.key"), keySel), field(t("usage.model"), model), from.node, to.node, h("button", { type: "submit", id: "usage-apply" }, t("usage.apply"))));
    root.append(h("p", { id: "usage-totals", "data-cost-micro": usage.totals.cost_micro_toman }, t(plural("usage.total", usage.totals.requests), { n: num(usage.totals.requests), cost: toman(usage.totals.cost_toman, 6) })),
      h("p", {}, h("a", { id: "usage-csv", href: `/console/api/usage.csv?${q}`, download: "" }, t("usage.csv"))));
    root.append(h("h2", { id: "chart-title" }, t("usage.chart")), chart(usage.daily));
    if (usage.data.length === 0) { root.append(h("p", { class: "muted" }, t("usage.none"))); return; }
    root.append(table(t("usage.title"), [t("usage.time"), t("usage.key"), t("usage.model"), { text: t("usage.tokens"), num: true }, { text: t("usage.cost"), num: true }, t("usage.status"), t("usage.source")], usage.data.map((r) =>
      h("tr", { "data-request": r.request_id, "data-cost-micro": r.cost_micro_toman, "data-batch": r.batch_id || null },
        h("td", {}, when(r.created_at)), h("td", {}, r.key_name || r.key_id), h("td", { class: "ltr" }, r.model),
        h("td", { class: "num" }, `${num(r.input_units)} / ${num(r.output_units)}`), h("td", { class: "num cost" }, toman(r.cost_toman, 6)), h("td", {}, num(r.status)),
        h("td", { class: "source" }, sourceOf(r)))), "usage-table"));
  }
  /** Where a request came from: live, or a batch's line (which batch, which line, linked to the batches page). */
  function sourceOf(r) {
    if (!r.batch_id) return t("usage.live");
    return h("a", { href: `#/batches?batch=${encodeURIComponent(r.batch_id)}`, class: "batch-line" }, t("usage.batchLine", { line: num(r.batch_line) }), " ", h("code", { class: "batch-id" }, r.batch_id));
  }
  /** The daily spend as bars over a date axis, each bar with its value; the same figures in its accessible name. */
  function chart(daily) {
    const NS = "http://www.w3.org/2000/svg";
    const W = 600, H = 220, TOP = 24, BASE = 180;
    const el = (tag, attrs, text) => {
      const node = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
      if (text !== undefined) node.textContent = text;
      return node;
    };
    const svg = el("svg", { class: "chart", id: "usage-chart", role: "img", viewBox: `0 0 ${W} ${H}` });
    const label = daily.map((d) => `${day(d.day)}: ${toman(d.cost_toman, 6)} ${t("toman")}`).join("، ") || t("usage.none");
    svg.setAttribute("aria-label", `${t("usage.chart")}: ${label}`);
    const max = Math.max(1, ...daily.map((d) => Number(d.cost_micro_toman)));
    const w = Math.min(60, W / Math.max(daily.length, 1));
    const shortDay = (iso) => new Intl.DateTimeFormat(state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-GB", { month: "short", day: "numeric", timeZone: "UTC" }).format(new Date(iso));
    // The axis: the baseline, and the largest day's value at the top.
    svg.append(el("line", { x1: 0, x2: W, y1: BASE, y2: BASE, class: "axis" }));
    svg.append(el("text", { x: state.lang === "fa" ? W - 4 : 4, y: 14, class: "axis-label", "text-anchor": "start" }, t("usage.chartValue", { cost: toman((max / 1e6).toFixed(6), 6) })));
    const every = Math.ceil(daily.length / 8); // at most 8 dates and values, so they never overlap
    daily.forEach((d, i) => {
      const height = Math.max(2, (Number(d.cost_micro_toman) / max) * (BASE - TOP - 14));
      const x = state.lang === "fa" ? W - (i + 1) * w : i * w;
      const bar = el("rect", { x: x + w * 0.15, width: w * 0.7, y: BASE - height, height });
      bar.append(el("title", {}, `${day(d.day)}: ${toman(d.cost_toman, 6)} ${t("toman")}`));
      svg.append(bar);
      if (i % every !== 0) return;
      svg.append(el("text", { x: x + w / 2, y: BASE - height - 4, "text-anchor": "middle", class: "bar-value" }, toman(d.cost_toman, 2)));
      svg.append(el("text", { x: x + w / 2, y: BASE + 18, "text-anchor": "middle", class: "bar-day" }, shortDay(d.day)));
    });
    return svg;
  }

  /**
   * A date field in the page's calendar: Gregorian (the browser's date input) in English, and on
   * Persian pages day, month and year of the Jalali calendar. Either way its value is the
   * Gregorian YYYY-MM-DD the API takes ("" for none).
   */
  function datePicker(id, label, iso) {
    if (state.lang !== "fa") {
      const input = h("input", { id, type: "date", value: iso || "" });
      return { node: field(label, input), value: () => input.value };
    }
    const now = jalaliOf(new Date());
    const shown = iso ? jalaliOf(new Date(`${iso}T00:00:00Z`)) : null;
    const select = (part, name, options) => h("select", { id: `${id}-${part}`, "aria-label": `${label}: ${name}` }, h("option", { value: "" }, t("usage.anyDate")),
      options.map(([value, text]) => h("option", { value, selected: shown && shown[part] === value }, text)));
    const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => a + i);
    const d = select("d", t("usage.day"), range(1, 31).map((n) => [n, num(n)]));
    const m = select("m", t("usage.month"), range(1, 12).map((n) => [n, JALALI_MONTHS[n - 1]]));
    const y = select("y", t("usage.year"), range(now.y - 3, now.y).map((n) => [n, digits(n)]));
    const node = h("fieldset", { class: "date", id }, h("legend", {}, label), d, m, y);
    return { node, value: () => (d.value && m.value && y.value ? gregorianOf(Number(y.value), Number(m.value), Number(d.value)) || "" : "") };
  }
  const JALALI_MONTHS = ["فروردین", "اردیبهشت", "خرداد", "تیر", "مرداد", "شهریور", "مهر", "آبان", "آذر", "دی", "بهمن", "اسفند"];
  const JALALI_PARTS = new Intl.DateTimeFormat("en-US-u-ca-persian-nu-latn", { timeZone: "UTC", year: "numeric", month: "numeric", day: "numeric" });
  /** The Jalali year, month and day of a UTC day. */
  function jalaliOf(date) {
    const p = Object.fromEntries(JALALI_PARTS.formatToParts(date).map((x) => [x.type, x.value]));
    return { y: parseInt(p.year, 10), m: Number(p.month), d: Number(p.day) };
  }
  /** The Gregorian YYYY-MM-DD of a Jalali date, or null when there is no such day (31 Mehr, 30 Esfand of a common year). */
  function gregorianOf(y, m, d) {
    // 1 Farvardin falls on 19–22 March; from there months 1–6 have 31 days and 7–11 have 30.
    for (let march = 18; march <= 23; march++) {
      const nowruz = new Date(Date.UTC(y + 621, 2, march));
      const j = jalaliOf(nowruz);
      if (j.y !== y || j.m !== 1 || j.d !== 1) continue;
      const date = new Date(nowruz.getTime() + ((m <= 6 ? (m - 1) * 31 : 186 + (m - 7) * 30) + d - 1) * 86_400_000);
      const back = jalaliOf(date);
      return back.y === y && back.m === m && back.d === d ? date.toISOString().slice(0, 10) : null;
    }
    return null;
  }

  // ---- batches ----
  /** When a batch ended (completed, failed, expired or cancelled), or null while it runs. */
  const endedAt = (b) => b.completed_at || b.failed_at || b.expired_at || b.cancelled_at || null;
  const isoOf = (seconds) => (seconds ? new Date(seconds * 1000).toISOString() : null);
  /** States a batch still moves on from: while one is listed, the page reads the list again every BATCHES_REFRESH_MS. */
  const BATCH_LIVE_STATES = ["validating", "in_progress", "finalizing", "cancelling"];
  /** States a batch can be cancelled in (POST /v1/batches/{id}/cancel's). */
  const BATCH_CANCELLABLE_STATES = ["validating", "in_progress"];
  /** Between reads of the list while a batch runs: often enough to see lines move, few enough for a page left open all day. */
  const BATCHES_REFRESH_MS = 2_000;
  /** The account's batches, newest first: status, lines run of all, the cost so far, the result files to download, a cancel while one runs. */
  async function batchesView(root) {
    const mine = renders;
    const list = await api("GET", "/console/api/batches");
    root.append(h("h1", {}, t("batches.title")), h("p", { class: "muted" }, t("batches.help")));
    if (list.data.length === 0) { root.append(h("p", { class: "muted", id: "batches-none" }, t("batches.none"))); return; }
    const err = errorBox("batch-error");
    const result = h("p", { id: "batch-result", role: "status" });
    const box = h("div", { id: "batch-list" });
    root.append(result, err, box);
    // While a batch is live and this page is still the one shown (a new render stops it), the list is read again.
    let timer = null;
    const schedule = () => {
      if (timer !== null || mine !== renders || !box.querySelector("tr[data-live]")) return;
      timer = setTimeout(() => { timer = null; refresh(); }, BATCHES_REFRESH_MS);
    };
    const refresh = async () => {
      if (mine !== renders) return;
      try { batchList(box, await api("GET", "/console/api/batches"), { result, err, refresh }); } catch (error) { showError(err, error); }
      schedule();
    };
    batchList(box, list, { result, err, refresh });
    schedule();
  }
  /** The batches' table in `box`, read again in place: the control that had focus keeps it. */
  function batchList(box, list, page) {
    const asked = hashParams().get("batch");
    const focused = document.activeElement && box.contains(document.activeElement) ? focusKey(document.activeElement) : null;
    box.replaceChildren(table(t("batches.title"), [t("batches.id"), t("batches.created"), t("batches.status"), t("batches.progress"), { text: t("batches.cost"), num: true }, t("batches.ended"), t("batches.files"), ""], list.data.map((b) =>
      h("tr", { "data-batch": b.id, "data-status": b.status, "data-live": BATCH_LIVE_STATES.includes(b.status) ? "true" : null, "data-cost-micro": b.cost_micro_toman, class: b.id === asked ? "chosen" : null, "aria-current": b.id === asked ? "true" : null },
        h("td", { class: "ltr" }, h("code", {}, b.id), h("div", { class: "muted endpoint" }, b.endpoint)), h("td", {}, when(isoOf(b.created_at))), h("td", { class: "batch-status" }, t(`batches.states.${b.status}`)),
        h("td", { class: "progress" }, progressOf(b)), h("td", { class: "num cost" }, toman(tomanOfMicro(b.cost_micro_toman), 6)), h("td", {}, endedAt(b) ? when(isoOf(endedAt(b))) : "—"),
        h("td", { class: "files" }, fileLink(b, "output_file_id", "batches.output"), " ", fileLink(b, "error_file_id", "batches.errors")),
        h("td", {}, BATCH_CANCELLABLE_STATES.includes(b.status) ? cancelButton(b, page) : ""))), "batches-table"));
    // A control gone with the read (the cancel of a batch now cancelling): focus stays in the table.
    if (focused) (box.querySelector(focused) || box.querySelector(".table-wrap")).focus();
  }
  /** Where focus was in the batches' table, as a selector that finds the same control in the table read again. */
  function focusKey(el) {
    const row = el.closest("tr[data-batch]");
    const cls = el.classList[el.classList.length - 1];
    if (row && cls) return `tr[data-batch="${CSS.escape(row.dataset.batch)}"] .${CSS.escape(cls)}`;
    return el.classList.contains("table-wrap") ? ".table-wrap" : null;
  }
  /** Cancel, once confirmed: no new line starts; the lines running end and are billed; the result said in the page. */
  function cancelButton(b, page) {
    return h("button", { type: "button", class: "danger cancel", "aria-label": t("batches.cancelOf", { id: b.id }), onclick: async () => {
      if (!confirm(t("batches.cancelConfirm", { id: b.id }))) return;
      page.err.textContent = "";
      // The list is read again first: the result is said beside the batch's new state.
      try {
        const moved = await api("POST", `/console/api/batches/${encodeURIComponent(b.id)}/cancel`);
        await page.refresh();
        page.result.textContent = t(moved.status === "cancelled" ? "batches.cancelled" : "batches.cancelling", { id: b.id });
      } catch (error) { showError(page.err, error); await page.refresh(); }
    } }, t("batches.cancel"));
  }
  /** "12 of 20 (2 failed)" beside a bar; the bar's name says the same for screen readers. */
  function progressOf(b) {
    const c = b.request_counts;
    const run = c.completed + c.failed;
    const text = t(c.failed > 0 ? "batches.ranFailed" : "batches.ran", { run: num(run), total: num(c.total), failed: num(c.failed) });
    return h("span", { class: "progress-cell" }, h("progress", { max: String(Math.max(c.total, 1)), value: String(run), "aria-label": text }), h("span", { class: "progress-text" }, text));
  }
  /** A download of one of the batch's result files (the session's own account's only), or nothing when it has none. */
  function fileLink(b, field, label) {
    const id = b[field];
    if (!id) return "";
    return h("a", { href: `/console/api/files/${encodeURIComponent(id)}/content`, download: `${id}.jsonl`, class: field === "output_file_id" ? "output-file" : "error-file", "aria-label": t(`${label}Of`, { id: b.id }) }, t(label));
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

  // ---- receipt ----
  /** A paid top-up's receipt (#/receipt/<id>): both calendars, the amount, the Zarinpal reference and card; printable as a PDF. */
  async function receiptView(root) {
    const id = location.hash.replace(/^#\/receipt\//, "").split("?")[0];
    let r;
    try {
      r = await api("GET", `/console/api/receipts/${encodeURIComponent(id)}`);
    } catch (error) {
      if (error.code !== "not_found") throw error;
      root.append(h("h1", {}, t("receipt.title")), h("p", { class: "warn", id: "receipt-none" }, t("receipt.none")), h("p", {}, h("a", { href: "#/wallet" }, t("receipt.back"))));
      return;
    }
    const at = new Date(r.verified_at || r.created_at);
    const date = (calendar) => new Intl.DateTimeFormat(`${locale()}-u-ca-${calendar}`, { dateStyle: "full", timeStyle: "short", timeZone: "Asia/Tehran" }).format(at);
    const line = (key, value, attrs) => [h("dt", {}, t(`receipt.${key}`)), h("dd", attrs || {}, value)];
    root.append(h("article", { class: "receipt", id: "receipt", "data-topup": r.id, "aria-labelledby": "receipt-title" },
      h("h1", { id: "receipt-title" }, `${t("brand")} — ${t("receipt.title")}`),
      h("dl", {},
        line("number", r.id, { class: "ltr" }),
        line("account", phoneText(r.phone || ""), {}),
        line("jalali", date("persian"), { id: "receipt-jalali" }),
        line("gregorian", date("gregory"), { id: "receipt-gregorian" }),
        line("amount", `${toman(r.amount_toman)} ${t("toman")}`, { id: "receipt-amount", "data-amount-micro": r.amount_micro_toman }),
        line("provider", r.ref_id ? t("receipt.zarinpal") : "—", {}),
        line("ref", r.ref_id ? digits(r.ref_id) : "—", { id: "receipt-ref", class: "ltr", "data-ref": r.ref_id || "" }),
        r.card_pan ? line("card", digits(r.card_pan), { id: "receipt-card", class: "ltr" }) : null),
      h("p", { class: "muted" }, t("receipt.wallet"))),
      h("p", { class: "no-print" }, h("button", { type: "button", class: "primary", id: "receipt-print", onclick: () => window.print() }, t("receipt.print")), " ", h("a", { href: "#/wallet" }, t("receipt.back"))));
  }

  // ---- sessions ----
  async function securityView(root) {
    const list = await api("GET", "/console/api/sessions");
    const err = errorBox("session-error");
    root.append(h("h1", {}, t("security.title")), table(t("security.title"), [t("security.device"), t("security.address"), t("keys.created"), t("security.lastUsed"), ""], list.data.map((s) =>
      h("tr", { "data-session": s.id }, h("td", { class: "ltr device", title: s.user_agent || "" }, s.device || "—"), h("td", { class: "ltr" }, s.client_address || "—"), h("td", {}, when(s.created_at)), h("td", {}, when(s.last_used_at)),
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
