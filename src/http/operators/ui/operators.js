// The operators' console: hash routes (#/overview, #/customers, #/customer/<id>, #/payments,
// #/prices, #/pools, #/operations, #/operators, #/audit), every figure read from the admin API
// through the operator's session (/operators/api/admin/…). No innerHTML with data: the DOM is
// built with h(). Amounts arrive as exact toman strings and are only formatted here.
"use strict";
(() => {
  const I18N = window.DVZ_OPS_I18N;
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  const statusRegion = document.getElementById("status");
  const state = { lang: window.DVZ_DOM.pickLang("dvz-ops-lang"), session: null, stopFeed: null, flash: null };
  const VIEWS = ["overview", "customers", "payments", "prices", "pools", "operations", "operators", "audit"];
  const OWNER_VIEWS = ["operators", "audit"];

  const T = () => I18N[state.lang];
  const t = (path, vars) => window.DVZ_DOM.translate(T(), path, vars);
  const locale = () => (state.lang === "fa" ? "fa-IR" : "en-US");
  /** A decimal toman string in the page's digits, exact to the micro-toman (Intl formats strings without rounding them to a double). */
  const toman = (text) => new Intl.NumberFormat(locale(), { maximumFractionDigits: 6 }).format(text);
  const num = (n) => new Intl.NumberFormat(locale()).format(n);
  /** A time in Tehran: the Jalali calendar on Persian pages, the Gregorian on English ones. */
  function when(iso) {
    if (!iso) return "—";
    const cal = state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-GB";
    return new Intl.DateTimeFormat(cal, { dateStyle: "medium", timeStyle: "short", timeZone: "Asia/Tehran" }).format(new Date(iso));
  }
  const monthName = (iso) =>
    new Intl.DateTimeFormat(state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-US-u-ca-persian", { month: "long", year: "numeric", timeZone: "Asia/Tehran" }).format(new Date(iso));

  const { h, table } = window.DVZ_DOM;
  const announce = (text) => { statusRegion.textContent = text; };

  async function call(method, path, body) {
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
    }
    if (!response.ok) throw Object.assign(new Error(data.error ? data.error.message : String(response.status)), { code: data.error && data.error.code });
    return data;
  }
  const admin = (method, path, body) => call(method, `/operators/api/admin${path}`, body);

  function errorBox(id) { return h("p", { id, class: "error", role: "alert" }); }
  function showError(box, error) {
    const known = error.code ? T().errors.codes[error.code] : undefined;
    box.textContent = known || (error.code ? t("errors.unknown", { code: error.code }) : error.message);
  }
  /** Runs a form's action, its error shown in `box`. */
  const guarded = (box, action) => async (e) => {
    if (e) e.preventDefault();
    box.textContent = "";
    try { await action(); } catch (error) { showError(box, error); }
  };
  function field(label, input) { return h("label", {}, label, input); }
  const cell = (value, cls) => h("td", { class: cls || null }, value);
  const money = (x) => cell(toman(x), "num");
  const card = (id, label, value, extra) => h("div", { class: "card", id }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), extra ? h("div", { class: "muted" }, extra) : null);
  const json = (value) => h("details", {}, h("summary", {}, "JSON"), h("pre", {}, JSON.stringify(value, null, 2)));
  const ref = () => `console-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

  // ---- shell ----
  const isOwner = () => state.session && state.session.operator.role === "owner";
  const views = () => VIEWS.filter((v) => isOwner() || !OWNER_VIEWS.includes(v));
  function currentView() {
    const v = location.hash.replace(/^#\//, "").split("?")[0].split("/")[0];
    return v === "customer" || VIEWS.includes(v) ? v : "overview";
  }
  const routeArg = () => decodeURIComponent(location.hash.replace(/^#\//, "").split("?")[0].split("/")[1] || "");
  function applyLang() {
    document.documentElement.lang = state.lang;
    document.documentElement.dir = T().dir;
    const view = currentView();
    document.title = `${t("brand")} · ${state.session ? t(`nav.${view === "customer" ? "customers" : view}`) : t("signIn.title")}`;
    const sw = document.getElementById("lang-switch");
    sw.textContent = T().other;
    sw.lang = T().otherLang;
    document.getElementById("brand").textContent = t("brand");
    document.getElementById("skip-link").textContent = t("skip");
    const out = document.getElementById("sign-out");
    out.textContent = t("signOut");
    out.hidden = !state.session;
    document.getElementById("who").textContent = state.session ? `${state.session.operator.name} · ${t(`roles.${state.session.operator.role}`)}` : "";
    nav.hidden = !state.session;
    nav.setAttribute("aria-label", t("navLabel"));
    const here = view === "customer" ? "customers" : view;
    nav.replaceChildren(...views().map((v) => h("a", { href: `#/${v}`, id: `nav-${v}`, "aria-current": v === here ? "page" : null }, t(`nav.${v}`))));
  }

  let renders = 0;
  async function render(focus) {
    const mine = ++renders;
    if (state.stopFeed) state.stopFeed();
    state.stopFeed = null;
    applyLang();
    const view = state.session ? currentView() : "signin";
    const builder = { signin: signInView, overview: overviewView, customers: customersView, customer: customerView, payments: paymentsView, prices: pricesView, pools: poolsView, operations: operationsView, operators: operatorsView, audit: auditView }[view];
    const content = h("div", { id: `view-${view}` });
    main.replaceChildren(content);
    try {
      await builder(content);
    } catch (error) {
      const box = h("p", { class: "error", role: "alert", id: "view-error" });
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
    const login = h("input", { id: "login", autocomplete: "username", required: true, dir: "ltr" });
    const password = h("input", { id: "password", type: "password", autocomplete: "current-password", required: true, dir: "ltr" });
    const code = h("input", { id: "code", inputmode: "numeric", autocomplete: "one-time-code", required: true, dir: "ltr", maxlength: "10" });
    root.append(h("h1", {}, t("signIn.title")), h("form", { id: "signin-form", onsubmit: guarded(err, async () => {
      state.session = await call("POST", "/operators/api/sign-in", { login: login.value, password: password.value, code: code.value });
      if (!location.hash || location.hash === "#/") location.hash = "#/overview";
      render(true);
    }) }, field(t("signIn.login"), login), field(t("signIn.password"), password), field(t("signIn.code"), code),
      h("button", { class: "primary", type: "submit", id: "sign-in" }, t("signIn.submit"))), err);
  }

  // ---- overview ----
  function groupsTable(caption, groups, id) {
    return table(caption, [t("overview.key"), { text: t("overview.reqs"), num: true }, { text: t("overview.errors"), num: true }, { text: t("overview.revenue"), num: true }],
      groups.map((g) => h("tr", {}, cell(g.key), cell(num(g.requests), "num"), cell(num(g.errors), "num"), money(g.revenue_toman))), id);
  }
  /** The batch queue: the database's figures (every node's), and this node's own part beneath. */
  function batchCard(q) {
    if (!q) return card("batch-queue", t("overview.batches"), "—");
    const db = q.open_batches === 0 ? t("overview.batchesNone") : t("overview.batchesN", { open: num(q.open_batches), queued: num(q.lines_queued), running: num(q.lines_running), age: num(q.oldest_open_batch_age_s ?? 0) });
    return card("batch-queue", t("overview.batches"), db, t("overview.batchesNode", { inFlight: num(q.node.lines_in_flight), age: num(q.node.oldest_item_age_s), depth: q.queue_depth === null ? "—" : num(q.queue_depth) }));
  }
  async function overviewView(root) {
    const o = await admin("GET", "/overview");
    const requests = (r) => t("overview.requests", { n: num(r.requests), e: num(r.errors) });
    root.append(h("h1", {}, t("overview.title")), h("div", { class: "cards" },
      card("revenue-today", t("overview.today"), `${toman(o.today.revenue_toman)} ${t("toman")}`, requests(o.today)),
      card("revenue-month", t("overview.month", { month: monthName(o.month.from) }), `${toman(o.month.revenue_toman)} ${t("toman")}`, requests(o.month)),
      card("ledger-audit", t("overview.audit"), o.ledger_audit.ok ? t("overview.auditOk") : t("overview.auditBad", { names: o.ledger_audit.failed.join("; ") })),
      card("dead-letters", t("overview.dead"), t("overview.deadN", { n: num(o.dead_letters.awaiting_replay), amount: toman(o.dead_letters.written_off_toman) })),
      card("sms-budget", t("overview.sms"), o.sms_budget ? t("overview.smsN", { sent: num(o.sms_budget.sent), max: num(o.sms_budget.max) }) : "—"),
      card("payments-waiting", t("overview.payments"), o.payments ? t("overview.paymentsN", { waiting: num(o.payments.waiting), review: num(o.payments.needs_review) }) : "—"),
      card("pools-trouble", t("overview.pools"), o.pools_in_trouble.length === 0 ? t("overview.poolsNone") : o.pools_in_trouble.map((p) => `${p.model}/${p.backend}: ${p.breaker}`).join(", ")),
      batchCard(o.batch_queue)));
    root.append(h("p", { class: o.month.reconciled ? "ok" : "bad", id: "reconciled" }, o.month.reconciled ? t("overview.reconciled") : t("overview.notReconciled")));
    root.append(h("h2", {}, t("overview.byModel")), groupsTable(t("overview.byModel"), o.month.by_model, "by-model"));
    root.append(h("h2", {}, t("overview.byVendor")), groupsTable(t("overview.byVendor"), o.month.by_vendor, "by-vendor"));
    root.append(h("h2", {}, t("overview.byRegion")), groupsTable(t("overview.byRegion"), o.month.by_region, "by-region"));
  }

  // ---- customers ----
  async function customersView(root) {
    const err = errorBox("search-error");
    const q = h("input", { id: "search", type: "search", required: true, dir: "auto", value: new URLSearchParams(location.hash.split("?")[1] || "").get("q") || "" });
    const results = h("div", { id: "results" });
    const search = async () => {
      const found = await admin("GET", `/customers?q=${encodeURIComponent(q.value)}`);
      results.replaceChildren(found.data.length === 0 ? h("p", { id: "no-results" }, t("customers.none")) : table(t("customers.title"),
        [t("customers.id"), t("customers.name"), t("customers.phone"), t("customers.matched"), { text: t("customers.balance"), num: true }],
        found.data.map((c) => h("tr", {}, cell(h("a", { href: `#/customer/${encodeURIComponent(c.id)}`, class: "customer-link" }, c.id)), cell(c.name),
          cell(h("span", { class: "ltr" }, c.phone || "—")), cell(t(`customers.matchedBy.${c.matched}`)), money(c.balance_toman))), "customers"));
      announce(String(found.data.length));
    };
    root.append(h("h1", {}, t("customers.title")), h("form", { class: "inline", id: "search-form", role: "search", onsubmit: guarded(err, search) },
      field(t("customers.search"), q), h("button", { class: "primary", type: "submit", id: "search-submit" }, t("customers.go"))), err, results);
    if (q.value) await search();
  }

  function usageSection(id, account) {
    const box = h("section", { id: "usage", "aria-labelledby": "usage-title" });
    const key = h("select", { id: "usage-key" }, h("option", { value: "" }, t("customer.allKeys")), account.keys.map((k) => h("option", { value: k.id }, `${k.name} · ${k.display}`)));
    const model = h("input", { id: "usage-model", dir: "ltr" });
    const from = h("input", { id: "usage-from", dir: "ltr", placeholder: "2026-01-01" });
    const to = h("input", { id: "usage-to", dir: "ltr", placeholder: "2026-12-31" });
    const err = errorBox("usage-error");
    const list = h("div", {});
    const query = () => new URLSearchParams(Object.entries({ key: key.value, model: model.value, from: from.value, to: to.value }).filter(([, v]) => v)).toString();
    const load = async () => {
      const u = await admin("GET", `/accounts/${encodeURIComponent(id)}/usage?limit=50&${query()}`);
      const last = u.data[0];
      const most = u.daily.reduce((m, d) => (Number(d.cost_toman) > m ? Number(d.cost_toman) : m), 0) || 1;
      list.replaceChildren(
        h("p", { id: "last-request" }, last ? t("customer.last", { model: last.model, cost: toman(last.cost_toman) }) : t("customer.noUsage")),
        h("h3", {}, t("customer.daily")),
        h("div", { class: "bars", id: "daily-chart", role: "list" }, u.daily.map((d) => h("div", { class: "bar", role: "listitem" }, h("span", {}, d.day),
          h("span", { class: "fill", "data-share": String(Number(d.cost_toman) / most) }), h("span", { class: "amount" }, `${toman(d.cost_toman)} ${t("toman")}`)))),
        table(t("customer.usage"), [t("customer.time"), t("customer.model"), { text: t("customer.tokens"), num: true }, { text: t("customer.cost"), num: true }, { text: t("customer.status"), num: true }, t("customer.source")],
          u.data.map((r) => h("tr", { "data-batch": r.batch_id || null }, cell(when(r.created_at)), cell(r.model), cell(`${num(r.input_units)} / ${num(r.output_units)}`, "num"), money(r.cost_toman), cell(num(r.status), "num"),
            cell(r.batch_id ? t("customer.batchLine", { id: r.batch_id, line: num(r.batch_line) }) : t("customer.live"), "wrap source"))), "usage-table"),
        h("a", { href: `/operators/api/admin/accounts/${encodeURIComponent(id)}/usage.csv?${query()}`, id: "usage-csv", download: "" }, t("customer.csv")));
      // Bar widths from data attributes (the policy allows no inline style attribute set as text).
      for (const fill of list.querySelectorAll(".fill")) fill.style.width = `${Math.max(1, Math.round(Number(fill.dataset.share) * 100))}%`;
    };
    box.append(h("h2", { id: "usage-title" }, t("customer.usage")), h("form", { class: "inline", id: "usage-filters", onsubmit: guarded(err, load) },
      field(t("customer.key"), key), field(t("customer.model"), model), field(t("customer.from"), from), field(t("customer.to"), to), h("button", { type: "submit" }, t("customer.filter"))), err, list);
    return { box, load };
  }

  function adjustForm(id, onDone) {
    const err = errorBox("adjust-error");
    // The outcome of the adjustment just made, shown once on the page it re-rendered.
    const done = h("p", { id: "adjust-done", class: "ok", role: "status" }, state.flash || "");
    state.flash = null;
    const amount = h("input", { id: "adjust-amount", required: true, dir: "ltr", inputmode: "decimal" });
    const reason = h("input", { id: "adjust-reason", required: true, minlength: "3", maxlength: "500" });
    return h("section", { "aria-labelledby": "adjust-title" }, h("h2", { id: "adjust-title" }, t("customer.adjust")),
      h("form", { id: "adjust-form", onsubmit: guarded(err, async () => {
        done.textContent = "";
        const r = await admin("POST", `/accounts/${encodeURIComponent(id)}/adjustments`, { amount_toman: amount.value.trim(), reason: reason.value, reference: ref() });
        state.flash = t("customer.adjusted", { balance: toman(r.balance_toman) });
        await onDone();
      }) }, field(t("customer.adjustAmount"), amount), field(t("customer.adjustReason"), reason), h("button", { class: "primary", type: "submit", id: "adjust-submit" }, t("customer.adjustSubmit"))), err, done);
  }

  async function customerView(root) {
    const id = routeArg();
    const a = await admin("GET", `/accounts/${encodeURIComponent(id)}`);
    const w = await admin("GET", `/accounts/${encodeURIComponent(id)}/wallet`);
    const s = await admin("GET", `/accounts/${encodeURIComponent(id)}/sessions`);
    const pays = await admin("GET", `/topups?account_id=${encodeURIComponent(id)}`).catch(() => ({ data: [] }));
    const usage = usageSection(id, a);
    const keyErr = errorBox("key-error");
    root.append(h("h1", {}, t("customer.title", { name: a.name })), h("p", { class: "ltr muted" }, a.id),
      h("h2", {}, t("customer.wallet")), h("div", { class: "cards" },
        card("balance", t("customer.balance"), `${toman(a.balance_toman)} ${t("toman")}`),
        card("held", t("customer.held"), `${toman(a.held_toman)} ${t("toman")}`),
        card("available", t("customer.available"), `${toman(a.available_toman)} ${t("toman")}`)));
    root.append(h("h2", {}, t("customer.keys")), table(t("customer.keys"), [t("customer.key"), t("customer.limits"), t("customer.state")],
      a.keys.map((k) => h("tr", {}, cell(h("span", { class: "ltr" }, `${k.name} · ${k.display}`)),
        cell(`${num(k.concurrency_max)} · rpm ${k.rpm === null ? "∞" : num(k.rpm)} · tpm ${k.tpm === null ? "∞" : num(k.tpm)}${k.monthly_spend_cap_toman ? ` · ${toman(k.monthly_spend_cap_toman)} ${t("toman")}` : ""}`),
        cell(k.revoked_at ? t("customer.revoked") : h("div", { class: "row" }, t("customer.active"), h("button", { type: "button", class: "danger", "data-key": k.id, onclick: guarded(keyErr, async () => { await admin("DELETE", `/keys/${encodeURIComponent(k.id)}`); render(); }) }, t("customer.revoke")))))), "keys"), keyErr);
    root.append(usage.box);
    root.append(adjustForm(id, () => render()));
    root.append(h("h2", {}, t("customer.moves")), table(t("customer.moves"), [t("customer.time"), t("customer.kind"), { text: t("customer.amount"), num: true }, t("customer.reason"), t("customer.reference")],
      w.moves.map((m) => h("tr", {}, cell(when(m.at)), cell(t(`customer.${m.kind}`)), money(m.amount_toman), cell(m.reason || "—", "wrap"), cell(h("span", { class: "ltr" }, m.reference)))), "moves"));
    root.append(h("h2", {}, t("customer.payments")), paymentsTable(pays.data, () => render()));
    root.append(h("h2", {}, t("customer.leases")), w.leases.length === 0 ? h("p", {}, t("customer.noLeases")) : table(t("customer.leases"), [t("customer.key"), { text: t("customer.amount"), num: true }, t("customer.time")],
      w.leases.map((l) => h("tr", {}, cell(l.key_id), money(l.amount_toman), cell(when(l.deadline)))), "leases"));
    root.append(h("h2", {}, t("customer.alerts")), w.alerts.length === 0 ? h("p", {}, t("customer.noAlerts")) : table(t("customer.alerts"), [t("customer.time"), { text: t("customer.balance"), num: true }, t("customer.state")],
      w.alerts.map((x) => h("tr", {}, cell(when(x.at)), money(x.balance_toman), cell(x.status))), "alerts"));
    root.append(h("h2", {}, t("customer.sessions")), s.data.length === 0 ? h("p", {}, t("customer.noSessions")) : table(t("customer.sessions"), [t("customer.device"), t("customer.lastUsed")],
      s.data.map((x) => h("tr", {}, cell(x.device), cell(when(x.last_used_at)))), "sessions"));
    await usage.load();
  }

  // ---- payments ----
  /** Top-ups with what the provider said; review buttons for those in review; a refund (a negative adjustment naming the top-up) for paid ones. */
  function paymentsTable(rows, onDone) {
    const err = errorBox("payment-error");
    const reasonOf = (label) => { const r = window.prompt(label); if (!r) throw new Error(t("errors.codes.invalid_request")); return r; };
    const act = (row) => {
      const buttons = [];
      if (row.state === "needs_review") {
        buttons.push(h("button", { type: "button", onclick: guarded(err, async () => { await admin("POST", `/topups/${row.id}/complete`, { reason: reasonOf(t("payments.reason")) }); await onDone(); }) }, t("payments.complete")));
        buttons.push(h("button", { type: "button", class: "danger", onclick: guarded(err, async () => { await admin("POST", `/topups/${row.id}/reject`, { reason: reasonOf(t("payments.reason")) }); await onDone(); }) }, t("payments.reject")));
      }
      if (row.state === "verified") {
        buttons.push(h("button", { type: "button", class: "danger", onclick: guarded(err, async () => {
          await admin("POST", `/accounts/${row.account_id}/adjustments`, { amount_toman: `-${row.amount_toman}`, reason: `refund of top-up ${row.id}: ${reasonOf(t("customer.refundReason"))}`, reference: `refund-${row.id}` });
          await onDone();
        }) }, t("customer.refund")));
      }
      return h("div", { class: "row" }, buttons);
    };
    if (rows.length === 0) return h("p", {}, t("payments.none"));
    return h("div", {}, table(t("payments.title"), [t("payments.id"), t("payments.account"), t("payments.state"), { text: t("payments.amount"), num: true }, t("payments.created"), t("payments.said"), ""],
      rows.map((p) => h("tr", { "data-state": p.state }, cell(p.state === "verified" ? receipt(p) : h("span", { class: "ltr" }, p.id)), cell(h("a", { href: `#/customer/${p.account_id}` }, p.account_id)), cell(t(`states.${p.state}`)), money(p.amount_toman), cell(when(p.created_at)),
        cell(h("span", { class: "ltr" }, [p.ref_id, p.card_pan, p.reason].filter(Boolean).join(" · ") || "—"), "wrap"), cell(act(p)))), "payments"), err);
  }
  /** A paid top-up's receipt, as its customer's console shows it: number, time in both calendars, amount, Zarinpal's reference and the card. */
  function receipt(p) {
    const at = p.verified_at || p.updated_at;
    const both = `${new Intl.DateTimeFormat(state.lang === "fa" ? "fa-IR-u-ca-persian" : "en-US-u-ca-persian", { dateStyle: "medium", timeStyle: "short", timeZone: "Asia/Tehran" }).format(new Date(at))} · ${new Intl.DateTimeFormat(state.lang === "fa" ? "fa-IR-u-ca-gregory" : "en-GB", { dateStyle: "medium", timeZone: "Asia/Tehran" }).format(new Date(at))}`;
    return h("details", { class: "receipt-of" }, h("summary", {}, h("span", { class: "ltr" }, p.id)), h("dl", {},
      h("dt", {}, t("payments.paidAt")), h("dd", {}, both),
      h("dt", {}, t("payments.amount")), h("dd", {}, toman(p.amount_toman)),
      h("dt", {}, t("payments.ref")), h("dd", { class: "ltr" }, p.ref_id || "—"),
      h("dt", {}, t("payments.card")), h("dd", { class: "ltr" }, p.card_pan || "—")));
  }
  async function paymentsView(root) {
    const err = errorBox("reconcile-error");
    const done = h("p", { id: "reconcile-done", role: "status" });
    const stateSel = h("select", { id: "payment-state" }, h("option", { value: "" }, t("payments.all")), Object.keys(T().states).map((s) => h("option", { value: s }, t(`states.${s}`))));
    stateSel.value = new URLSearchParams(location.hash.split("?")[1] || "").get("state") || "";
    root.append(h("h1", {}, t("payments.title")));
    let list;
    try {
      list = await admin("GET", `/topups?limit=200${stateSel.value ? `&state=${stateSel.value}` : ""}`);
    } catch (error) {
      if (error.code !== "service_unavailable") throw error;
      root.append(h("p", { class: "warn" }, t("payments.disabled")));
      return;
    }
    root.append(h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = `#/payments?state=${stateSel.value}`; } }, field(t("payments.state"), stateSel), h("button", { type: "submit" }, t("payments.show"))),
      h("div", { class: "row" }, h("button", { type: "button", id: "reconcile", onclick: guarded(err, async () => { const r = await admin("POST", "/topups/reconcile"); done.textContent = t("payments.reconciled", { n: num(r.inquired) }); }) }, t("payments.reconcile")), done), err,
      paymentsTable(list.data, () => render()));
  }

  // ---- models and prices ----
  async function pricesView(root) {
    const catalog = await admin("GET", "/catalog");
    const rates = await admin("GET", "/rates");
    const changes = await admin("GET", "/catalog/changes");
    const today = catalog.toman_per_1m_today || {};
    const models = catalog.data.filter((m) => m.usd_per_1m.input_token !== undefined);
    root.append(h("h1", {}, t("nav.prices")));
    if (rates.current) root.append(h("p", { id: "rate" }, t("prices.rate", { rate: num(rates.current.toman_per_usd), date: when(rates.current.effective_at) })));
    if (rates.fetch) root.append(h("p", { class: "muted" }, t("prices.fetcher", { state: rates.fetch.last_error ? rates.fetch.last_error : when(rates.fetch.last_success_at) })));
    root.append(priceForm(models, today), addModelForm(), aliasRetireForm(catalog.data));
    root.append(h("h2", {}, t("nav.prices")), table(t("nav.prices"), [t("prices.model"), t("prices.vendor"), { text: t("prices.usdIn"), num: true }, { text: t("prices.usdOut"), num: true }, { text: t("prices.tomanIn"), num: true }, { text: t("prices.tomanOut"), num: true }, { text: t("prices.batch"), num: true }, t("prices.window")],
      catalog.data.map((m) => h("tr", { id: `model-${m.id}` }, cell(h("span", { class: "ltr" }, m.id, m.retired ? ` (${t("prices.retired")})` : "")), cell(m.vendor),
        cell(m.usd_per_1m.input_token === undefined ? "—" : toman(m.usd_per_1m.input_token), "num"), cell(m.usd_per_1m.output_token === undefined ? "—" : toman(m.usd_per_1m.output_token), "num"),
        cell(today[m.id] && today[m.id].input_token ? toman(today[m.id].input_token) : "—", "num"), cell(today[m.id] && today[m.id].output_token ? toman(today[m.id].output_token) : "—", "num"),
        cell(batchToday(today[m.id]), "num"), cell(num(m.context_window), "num"))), "catalog"));
    root.append(h("h2", {}, t("prices.history")), table(t("prices.history"), [t("prices.at"), t("prices.model"), t("prices.action"), t("prices.by")],
      changes.data.map((c) => h("tr", {}, cell(when(c.at || c.created_at)), cell(c.model), cell(c.action), cell(c.declared_by && c.declared_by !== c.by ? `${c.by} (${c.declared_by})` : c.by))), "changes"));
    root.append(h("h2", {}, t("prices.rates")), table(t("prices.rates"), [t("prices.at"), { text: "toman / USD", num: true }],
      rates.versions.slice().reverse().map((v) => h("tr", {}, cell(when(v.effective_at)), cell(num(v.toman_per_usd), "num"))), "rates"));
  }
  /** A model's batch prices today (docs/batches.md#money), input / output, or a dash when it has none. */
  function batchToday(prices) {
    if (!prices || prices["batch:input_token"] === undefined) return "—";
    const out = prices["batch:output_token"];
    return `${toman(prices["batch:input_token"])} / ${out === undefined ? "—" : toman(out)}`;
  }
  function priceForm(models, today) {
    const err = errorBox("price-error");
    const done = h("p", { id: "price-done", class: "ok", role: "status" });
    const pick = h("select", { id: "price-model" }, models.map((m) => h("option", { value: m.id }, m.id)));
    const input = h("input", { id: "price-input", dir: "ltr", inputmode: "decimal", required: true });
    const output = h("input", { id: "price-output", dir: "ltr", inputmode: "decimal", required: true });
    const preview = h("div", { id: "price-preview" });
    const fill = () => { const m = models.find((x) => x.id === pick.value); if (m) { input.value = m.usd_per_1m.input_token; output.value = m.usd_per_1m.output_token ?? ""; } };
    pick.addEventListener("change", fill);
    fill();
    const entry = () => {
      const { id, ...rest } = models.find((x) => x.id === pick.value);
      const usd = { ...rest.usd_per_1m, input_token: input.value.trim() };
      if (output.value.trim()) usd.output_token = output.value.trim();
      return { ...rest, usd_per_1m: usd };
    };
    const show = async () => {
      const p = await admin("POST", `/catalog/models/${encodeURIComponent(pick.value)}/preview`, entry());
      preview.replaceChildren(h("h3", {}, t("prices.previewTitle")), table(t("prices.previewTitle"), [t("prices.unit"), { text: t("prices.before"), num: true }, { text: t("prices.after"), num: true }],
        p.prices.map((r) => h("tr", { "data-key": r.key }, cell(h("span", { class: "ltr" }, r.key)), cell(r.toman_per_1m_before === null ? "—" : toman(r.toman_per_1m_before), "num"), cell(r.toman_per_1m_after === null ? "—" : toman(r.toman_per_1m_after), "num"))), "preview-table"));
    };
    return h("section", { "aria-labelledby": "price-title" }, h("h2", { id: "price-title" }, t("prices.change")),
      h("form", { id: "price-form", onsubmit: guarded(err, async () => {
        const r = await admin("PUT", `/catalog/models/${encodeURIComponent(pick.value)}`, entry());
        done.textContent = t("prices.applied", { v: num(r.price_version) });
        announce(done.textContent);
      }) }, field(t("prices.pick"), pick), field(t("prices.newIn"), input), field(t("prices.newOut"), output),
        h("div", { class: "row" }, h("button", { type: "button", id: "price-preview-button", onclick: guarded(err, show) }, t("prices.preview")), h("button", { class: "primary", type: "submit", id: "price-apply" }, t("prices.apply")))),
      err, preview, done);
  }

  /** A new model: its catalog entry as the catalog file writes it (docs/catalog.md), previewed, then added. */
  function addModelForm() {
    const err = errorBox("add-error");
    const done = h("p", { id: "add-done", class: "ok", role: "status" });
    const id = h("input", { id: "add-id", dir: "ltr", required: true, autocomplete: "off" });
    const entry = h("textarea", { id: "add-entry", dir: "ltr", rows: "6", required: true, spellcheck: "false" });
    const preview = h("div", { id: "add-preview" });
    const body = () => {
      try { return JSON.parse(entry.value); } catch { throw Object.assign(new Error("bad entry"), { code: "invalid_request" }); }
    };
    const show = async () => {
      const p = await admin("POST", `/catalog/models/${encodeURIComponent(id.value.trim())}/preview`, body());
      preview.replaceChildren(table(t("prices.previewTitle"), [t("prices.unit"), { text: t("prices.after"), num: true }],
        p.prices.map((r) => h("tr", { "data-key": r.key }, cell(h("span", { class: "ltr" }, r.key)), cell(r.toman_per_1m_after === null ? "—" : toman(r.toman_per_1m_after), "num"))), "add-preview-table"));
    };
    return h("section", { "aria-labelledby": "add-title" }, h("h2", { id: "add-title" }, t("prices.add")),
      h("form", { id: "add-form", onsubmit: guarded(err, async () => {
        const r = await admin("PUT", `/catalog/models/${encodeURIComponent(id.value.trim())}`, body());
        done.textContent = t("prices.added", { v: num(r.price_version) });
        announce(done.textContent);
      }) }, field(t("prices.newId"), id), field(t("prices.entry"), entry),
        h("div", { class: "row" }, h("button", { type: "button", id: "add-preview-button", onclick: guarded(err, show) }, t("prices.preview")), h("button", { class: "primary", type: "submit", id: "add-apply" }, t("prices.add")))),
      err, preview, done);
  }

  /** An alias (prices unchanged) or a retirement (its prices end: the model answers 410 naming the successor), each previewed first. */
  function aliasRetireForm(entries) {
    const err = errorBox("alias-error");
    const done = h("p", { id: "alias-done", class: "ok", role: "status" });
    const live = entries.filter((e) => !e.retired);
    const pick = h("select", { id: "alias-model" }, live.map((m) => h("option", { value: m.id }, m.id)));
    const alias = h("input", { id: "alias-name", dir: "ltr" });
    const successor = h("select", { id: "retire-successor" }, live.map((m) => h("option", { value: m.id }, m.id)));
    const preview = h("div", { id: "retire-preview" });
    const entryOf = () => { const { id, ...rest } = entries.find((x) => x.id === pick.value); return rest; };
    const showRetire = async () => {
      const p = await admin("POST", `/catalog/models/${encodeURIComponent(pick.value)}/preview`, { ...entryOf(), retired: { successor: successor.value } });
      preview.replaceChildren(table(t("prices.previewTitle"), [t("prices.unit"), { text: t("prices.before"), num: true }, { text: t("prices.after"), num: true }],
        p.prices.map((r) => h("tr", {}, cell(h("span", { class: "ltr" }, r.key)), cell(r.toman_per_1m_before === null ? "—" : toman(r.toman_per_1m_before), "num"), cell(r.toman_per_1m_after === null ? "—" : toman(r.toman_per_1m_after), "num")))));
    };
    return h("section", { "aria-labelledby": "alias-title" }, h("h2", { id: "alias-title" }, `${t("prices.addAlias")} · ${t("prices.retire")}`),
      h("form", { class: "inline", id: "alias-form", onsubmit: guarded(err, async () => {
        await admin("POST", `/catalog/models/${encodeURIComponent(pick.value)}/aliases`, { alias: alias.value.trim() });
        done.textContent = `${pick.value} ← ${alias.value.trim()}`;
      }) }, field(t("prices.pick"), pick), field(t("prices.alias"), alias), h("button", { type: "submit", id: "alias-submit" }, t("prices.addAlias"))),
      h("form", { class: "inline", id: "retire-form", onsubmit: guarded(err, async () => {
        await admin("POST", `/catalog/models/${encodeURIComponent(pick.value)}/retire`, { successor: successor.value });
        done.textContent = `${pick.value} → ${successor.value}`;
      }) }, field(t("prices.successor"), successor), h("button", { type: "button", id: "retire-preview-button", onclick: guarded(err, showRetire) }, t("prices.preview")),
        h("button", { type: "submit", class: "danger", id: "retire-submit" }, t("prices.retire"))), err, preview, done);
  }

  // ---- pools ----
  /** The cluster's live view (the dashboard's feed, /admin/pools/live, one event a second), drawn until the page changes. */
  async function poolsView(root) {
    const list = h("div", { id: "pools-live" });
    const nodes = h("p", { class: "muted", id: "pools-nodes" });
    const draw = (view) => {
      nodes.textContent = view.nodes.map((n) => n.node).join(" · ");
      list.replaceChildren(table(t("pools.title"), [t("pools.model"), t("pools.backend"), t("pools.region"), { text: t("pools.latency"), num: true }, t("pools.breaker"), { text: t("pools.inflight"), num: true }, { text: "req/s", num: true }, { text: t("overview.errors"), num: true }],
        view.backends.map((b) => h("tr", {}, cell(b.model), cell(b.backend), cell(b.region), cell(num(Math.round(b.ttftEwmaMs)), "num"), cell(b.breaker, b.breaker === "closed" ? null : "bad"),
          cell(`${num(b.inFlight)} / ${num(b.concurrencyLimit)}`, "num"), cell(num(Math.round(b.requestsPerS * 10) / 10), "num"), cell(`${num(Math.round(b.errorRate * 100))}%`, "num"))), "pools"));
    };
    root.append(h("h1", {}, t("pools.title")), h("h2", {}, t("pools.live")), nodes, list);
    const feed = new AbortController();
    state.stopFeed = () => feed.abort();
    const response = await fetch("/operators/api/admin/pools/live", { credentials: "same-origin", signal: feed.signal });
    if (!response.ok || !response.body) throw Object.assign(new Error(String(response.status)), { code: "service_unavailable" });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = "";
    let first = true;
    const next = async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffered += value;
        let end;
        while ((end = buffered.indexOf("\n\n")) >= 0) {
          const frame = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const data = frame.split("\n").find((l) => l.startsWith("data: "));
          if (frame.startsWith("event: pools") && data) draw(JSON.parse(data.slice(6)));
          if (first) { first = false; return; }
        }
      }
    };
    await next(); // the first view before the page counts as ready
    next().catch(() => {});
    if (isOwner()) root.append(poolEditor((await admin("GET", "/pools")).data));
  }
  /** A pool's JSON as the pools file writes it (GET /admin/pools `spec`: each key's variable, never a key), for the model typed or picked. */
  function poolEditor(pools) {
    const err = errorBox("pool-error");
    const done = h("p", { id: "pool-saved", class: "ok", role: "status" });
    const specOf = (id) => pools.find((p) => p.model === id)?.spec;
    const text = h("textarea", { id: "pool-json", required: true, dir: "ltr", "aria-label": t("pools.edit") });
    const model = h("input", { id: "pool-model", dir: "ltr", required: true, list: "pool-models", onchange: () => {
      const spec = specOf(model.value.trim());
      if (spec) text.value = JSON.stringify(spec, null, 2);
    } });
    if (pools.length > 0) { model.value = pools[0].model; text.value = JSON.stringify(pools[0].spec, null, 2); }
    const models = h("datalist", { id: "pool-models" }, pools.map((p) => h("option", { value: p.model })));
    return h("section", {}, h("h2", {}, t("pools.edit")), models, h("form", { onsubmit: guarded(err, async () => {
      await admin("PUT", `/pools/${encodeURIComponent(model.value)}`, JSON.parse(text.value));
      done.textContent = t("pools.saved");
    }) }, field(t("pools.model"), model), text, h("button", { class: "primary", type: "submit", id: "pool-save" }, t("pools.save"))), err, done);
  }

  // ---- operations ----
  async function operationsView(root) {
    const dead = await admin("GET", "/usage/dead-letters");
    const audit = await admin("GET", "/ledger/audit");
    const anomalies = await admin("GET", "/anomalies");
    const err = errorBox("replay-error");
    root.append(h("h1", {}, t("operations.title")), h("h2", {}, t("operations.dead")), err, dead.data.length === 0 ? h("p", {}, t("operations.noDead")) : table(t("operations.dead"), ["ID", t("customer.time"), t("customer.reason"), ""],
      dead.data.map((d) => h("tr", {}, cell(d.id), cell(when(d.created_at)), cell(d.reason, "wrap"), cell(h("button", { type: "button", onclick: guarded(err, async () => { await admin("POST", `/usage/dead-letters/${d.id}/replay`); render(); }) }, t("operations.replay"))))), "dead-letters"));
    root.append(h("h2", {}, t("operations.audit")), table(t("operations.audit"), [t("operations.check"), ""],
      audit.checks.map((c) => h("tr", {}, cell(c.name, "wrap"), cell(c.ok ? t("operations.ok") : t("operations.bad"), c.ok ? "ok" : "bad"))), "ledger-checks"));
    root.append(h("h2", {}, t("operations.writeOffs")), table(t("operations.writeOffs"), [t("customer.key"), { text: t("operations.count"), num: true }, { text: t("customer.amount"), num: true }],
      audit.write_offs_by_key.map((w) => h("tr", {}, cell(w.key_id), cell(num(w.requests), "num"), cell(toman(microText(w.write_off_micro)), "num"))), "write-offs"));
    root.append(h("h2", {}, t("operations.anomalies")), table(t("operations.anomalies"), [t("pools.backend"), t("pools.model"), t("operations.anomaly"), { text: t("operations.count"), num: true }, t("customer.time")],
      anomalies.data.map((a) => h("tr", {}, cell(a.backend || "—"), cell(a.model), cell(a.anomaly), cell(num(a.requests), "num"), cell(when(a.last_at)))), "anomalies"));
  }

  // ---- operators and the audit trail (owner) ----
  /** An operator's role, changed where it is shown (the server keeps the last owner an owner). */
  function roleChange(o, err) {
    const select = h("select", { "aria-label": `${t("operators.role")} · ${o.login}`, "data-operator": o.id }, Object.keys(T().roles).map((r) => h("option", { value: r }, t(`roles.${r}`))));
    select.value = o.role;
    // Saved by its button, not on change: stepping through the list by keyboard must not grant each role on the way.
    const save = h("button", { type: "button", onclick: guarded(err, async () => { await admin("PATCH", `/operators/${o.id}`, { role: select.value }); announce(`${o.login}: ${t(`roles.${select.value}`)}`); }) }, t("operators.saveRole"));
    return h("div", { class: "row" }, select, save);
  }
  async function operatorsView(root) {
    const list = await admin("GET", "/operators");
    const err = errorBox("operator-error");
    const done = h("div", { id: "operator-added", role: "status" });
    const login = h("input", { id: "op-login", required: true, dir: "ltr" });
    const name = h("input", { id: "op-name", required: true });
    const role = h("select", { id: "op-role" }, Object.keys(T().roles).map((r) => h("option", { value: r }, t(`roles.${r}`))));
    const password = h("input", { id: "op-password", type: "password", required: true, minlength: "12", autocomplete: "new-password", dir: "ltr" });
    const ceiling = h("input", { id: "op-ceiling", dir: "ltr", inputmode: "decimal" });
    root.append(h("h1", {}, t("operators.title")), table(t("operators.title"), [t("operators.login"), t("operators.name"), t("operators.role"), t("operators.created"), ""],
      list.data.map((o) => h("tr", {}, cell(h("span", { class: "ltr" }, o.login)), cell(o.name), cell(roleChange(o, err)), cell(when(o.created_at)),
        cell(o.id === state.session.operator.id ? "" : h("button", { type: "button", class: "danger", onclick: guarded(err, async () => { await admin("DELETE", `/operators/${o.id}`); render(); }) }, t("operators.remove"))))), "operators"),
      h("h2", {}, t("operators.add")), h("form", { id: "operator-form", onsubmit: guarded(err, async () => {
        const body = { login: login.value, name: name.value, role: role.value, password: password.value };
        if (ceiling.value.trim()) body.adjust_daily_max_toman = ceiling.value.trim();
        const made = await admin("POST", "/operators", body);
        done.replaceChildren(h("p", { class: "secret" }, t("operators.added", { login: made.login }), " ", h("code", { id: "otpauth" }, made.otpauth_uri)));
      }) }, field(t("operators.login"), login), field(t("operators.name"), name), field(t("operators.role"), role), field(t("operators.password"), password), field(t("operators.ceiling"), ceiling),
        h("button", { class: "primary", type: "submit", id: "operator-submit" }, t("operators.submit"))), err, done);
  }
  const csvCell = (v) => { const s = /^[=+\-@\t\r]/.test(v) ? `'${v}` : v; return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s; };
  async function auditView(root) {
    const action = h("input", { id: "audit-action", dir: "ltr", value: new URLSearchParams(location.hash.split("?")[1] || "").get("action") || "" });
    const rows = await admin("GET", `/audit?limit=500${action.value ? `&action=${encodeURIComponent(action.value)}` : ""}`);
    const csv = [["at", "actor", "role", "via", "action", "target", "reason", "amount_micro_toman", "before", "after"].join(","),
      ...rows.data.map((r) => [r.at, r.actor, r.role, r.via, r.action, r.target, r.reason || "", r.amount_micro_toman || "", JSON.stringify(r.before), JSON.stringify(r.after)].map((v) => csvCell(String(v))).join(","))].join("\r\n");
    const link = h("a", { id: "audit-csv", download: "darvaze-audit.csv", href: URL.createObjectURL(new Blob([csv], { type: "text/csv" })) }, t("audit.csv"));
    root.append(h("h1", {}, t("audit.title")), h("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); location.hash = `#/audit?action=${encodeURIComponent(action.value)}`; } },
      field(t("audit.filter"), action), h("button", { type: "submit" }, t("audit.show"))), link,
      table(t("audit.title"), [t("audit.at"), t("audit.actor"), t("audit.role"), t("audit.action"), t("audit.target"), { text: t("audit.amount"), num: true }, t("audit.reason"), t("audit.before"), t("audit.after")],
        rows.data.map((r) => h("tr", { "data-action": r.action }, cell(when(r.at)), cell(h("span", { class: "ltr" }, r.actor)), cell(t(`roles.${r.role}`)), cell(r.action), cell(h("span", { class: "ltr" }, r.target)),
          cell(r.amount_micro_toman === null ? "—" : toman(microText(r.amount_micro_toman)), "num"), cell(r.reason || "—", "wrap"), cell(r.before === null ? "—" : json(r.before)), cell(r.after === null ? "—" : json(r.after)))), "audit"));
  }
  /** Micro-toman as a decimal toman string, exactly (BigInt: no double on the way). */
  function microText(micro) {
    const v = BigInt(micro);
    const abs = v < 0n ? -v : v;
    const frac = (abs % 1000000n).toString().padStart(6, "0").replace(/0+$/, "");
    return `${v < 0n ? "-" : ""}${abs / 1000000n}${frac ? `.${frac}` : ""}`;
  }

  // ---- start ----
  document.getElementById("lang-switch").addEventListener("click", () => {
    state.lang = T().otherLang;
    localStorage.setItem("dvz-ops-lang", state.lang);
    render();
  });
  document.getElementById("sign-out").addEventListener("click", async () => {
    await call("POST", "/operators/api/sign-out").catch(() => {});
    state.session = null;
    render(true);
  });
  window.addEventListener("hashchange", () => render(true));
  (async () => {
    state.session = await call("GET", "/operators/api/session").catch(() => null);
    render();
  })();
})();
