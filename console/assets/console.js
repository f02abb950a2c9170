// The approval console's pages. Every text that comes from the API (and so
// from customers, the model or the platform) is put into the page as text:
// textContent and text nodes only, never HTML. The session cookie is
// HttpOnly; state-changing requests carry the page's CSRF token.
"use strict";

(function () {
  const API = "/console/api";
  const POLL_MS = 2500;       // the queue
  const FOLLOW_MS = 1000;     // an operation that is not settled yet
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.getAttribute("content") : "";
  let serverOffsetMs = 0;  // server clock minus this browser's clock

  // ---- DOM helpers: elements and text, never markup.

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "className") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) append(e, c);
    return e;
  }

  function append(parent, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) {
      for (const c of child) append(parent, c);
    } else if (child instanceof Node) {
      parent.appendChild(child);
    } else {
      parent.appendChild(document.createTextNode(String(child)));
    }
  }

  function $(id) { return document.getElementById(id); }

  function setText(node, text) { if (node) node.textContent = text === undefined ? "" : text; }

  function clear(node) { while (node && node.firstChild) node.removeChild(node.firstChild); }

  function show(node, visible) { if (node) node.hidden = !visible; }

  // ---- Formatting.

  function money(minor, currency) {
    if (minor === null || minor === undefined) return "—";
    const n = Number(minor);
    const sign = n < 0 ? "-" : "";
    const a = Math.abs(n);
    const cents = String(a % 100).padStart(2, "0");
    const units = Math.floor(a / 100).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return `${sign}${units}.${cents} ${currency || ""}`.trim();
  }

  function serverNow() { return Date.now() + serverOffsetMs; }

  function duration(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) return "—";
    const neg = ms < 0;
    let s = Math.floor(Math.abs(ms) / 1000);
    let out;
    if (s < 60) out = `${s} s`;
    else if (s < 3600) out = `${Math.floor(s / 60)} min`;
    else if (s < 86400) out = `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    else out = `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
    return neg ? `${out} ago` : out;
  }

  function when(ms) {
    if (!ms) return "—";
    return new Date(Number(ms)).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function stateText(op) {
    return op.outcome ? `${op.state} / ${op.outcome}` : op.state;
  }

  function kindText(kind) {
    if (kind === "full-refund" || kind === "refund") return "refund";
    if (kind === "account-credit" || kind === "credit") return "credit";
    if (kind === "cancel-order") return "cancellation";
    return kind || "";
  }

  // The page's heading for an operation: what it does, of how much, where.
  function titleText(op) {
    const amount = money(op.amount_minor, op.currency);
    switch (kindText(op.kind)) {
      case "credit": return `Account credit of ${amount} on ${op.order_id}`;
      case "refund": return `Refund of ${amount} on ${op.order_id}`;
      case "cancellation": return `Cancellation of ${op.order_id}, refunding ${amount}`;
      default: return `${op.kind} on ${op.order_id} (${amount})`;
    }
  }

  function opLink(key, text) {
    return el("a", { href: "/console/operations/" + encodeURIComponent(key) }, text || key);
  }

  function sessionLink(id, text) {
    return el("a", { href: "/console/sessions/" + encodeURIComponent(id) }, text || id);
  }

  // ---- The API, with the session cookie.

  class ApiError extends Error {
    constructor(status, body) {
      const e = body && body.error ? body.error : {};
      super(e.message || `HTTP ${status}`);
      this.status = status;
      this.code = e.code || "";
      this.body = body;
    }
  }

  async function api(method, path, body) {
    const headers = { "Accept": "application/json" };
    const init = { method, headers, credentials: "same-origin", cache: "no-store" };
    if (method !== "GET") {
      headers["X-CSRF-Token"] = csrf;
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body || {});
    }
    const r = await fetch(API + path, init);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (r.status === 401) {
      // The session ended: the server shows the sign-in form for this page.
      window.location.reload();
      throw new ApiError(401, data);
    }
    if (!r.ok) throw new ApiError(r.status, data);
    if (data && typeof data.now_ms === "number") serverOffsetMs = data.now_ms - Date.now();
    return data;
  }

  function say(text, kind) {
    for (const m of document.querySelectorAll('[data-test="message"]')) {
      m.textContent = text;
      m.className = "message" + (kind ? " " + kind : "");
    }
  }

  function refusal(what, e) {
    if (e instanceof ApiError) {
      return `${what} refused (${e.status}${e.code ? " " + e.code : ""}): ${e.message}`;
    }
    return `${what} failed: ${e.message || e}`;
  }

  async function whoAmI() {
    const me = await api("GET", "/v1/me");
    const scopes = $("scopes");
    if (scopes) {
      const limits = Object.entries(me.max_amount_minor || {}).map(([c, a]) => money(a, c));
      let text = me.scopes.join(", ");
      if (limits.length) text += " · limit " + limits.join(", ");
      if (me.tiers && me.tiers.length) text += " · tiers " + me.tiers.join(", ");
      setText(scopes, text);
    }
    me.may = (scope) => me.scopes.includes(scope) || me.scopes.includes("admin");
    return me;
  }

  async function verifyAudit() {
    const target = $("audit-verify");
    if (!target) return;
    try {
      const v = await api("GET", "/v1/audit/verify");
      if (v.ok && v.records === undefined) {
        target.textContent = "Audit chain verified: intact.";
        target.className = (target.className.replace(/\b(ok|bad)\b/g, "") + " ok").trim();
      } else if (v.ok) {
        target.textContent = `Audit chain verified: ${v.records} records, intact.`;
        target.className = (target.className.replace(/\b(ok|bad)\b/g, "") + " ok").trim();
      } else if (v.records === undefined) {
        target.textContent = "Audit chain BROKEN: ask an administrator to run opgate audit verify.";
        target.className = (target.className.replace(/\b(ok|bad)\b/g, "") + " bad").trim();
      } else {
        target.textContent =
          `Audit chain BROKEN at record ${v.first_bad_seq}: ${v.problem} (${v.records} records).`;
        target.className = (target.className.replace(/\b(ok|bad)\b/g, "") + " bad").trim();
      }
    } catch (e) {
      target.textContent = refusal("Verification", e);
    }
  }

  function every(ms, fn) {
    let running = false;
    const tick = async () => {
      if (running || document.hidden) return;
      running = true;
      try { await fn(); } finally { running = false; }
    };
    return setInterval(tick, ms);
  }

  // ---- The queue.

  async function queuePage() {
    try { await whoAmI(); } catch (e) { say(refusal("Loading", e), "error"); return; }
    const tier = $("filter-tier");
    const owner = $("filter-owner");
    const saved = new URLSearchParams(window.location.search);
    if (saved.get("tier")) tier.value = saved.get("tier");
    if (saved.get("owner")) owner.value = saved.get("owner");
    // A filter change and the timer can both start a refresh; only the one
    // started last is drawn, so an older answer never replaces a newer one.
    let started = 0;
    const refresh = async () => {
      const mine = ++started;
      const q = new URLSearchParams({ state: "pending", sort: "created_at", limit: "500" });
      if (tier.value) q.set("tier", tier.value);
      if (owner.value.trim()) q.set("owner", owner.value.trim());
      try {
        const [pending, unknown] = await Promise.all([
          api("GET", "/v1/operations?" + q.toString()),
          api("GET", "/v1/operations?state=outcome_unknown&sort=created_at&limit=500"),
        ]);
        if (mine !== started) return;
        renderPending(pending.operations);
        renderUnknown(unknown.operations);
        setText($("pending-updated"), `Updated ${when(serverNow())}; refreshes every few seconds.`);
      } catch (e) {
        say(refusal("Loading the queue", e), "error");
      }
    };
    const filtersChanged = () => {
      const q = new URLSearchParams();
      if (tier.value) q.set("tier", tier.value);
      if (owner.value.trim()) q.set("owner", owner.value.trim());
      const s = q.toString();
      window.history.replaceState(null, "", "/console/" + (s ? "?" + s : ""));
      refresh();
    };
    wireBatch(refresh);
    tier.addEventListener("change", filtersChanged);
    owner.addEventListener("change", filtersChanged);
    $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); filtersChanged(); });
    await refresh();
    verifyAudit();
    every(POLL_MS, refresh);
  }

  // Batch review: the proposals a person selected in the queue, each kept as
  // it was when selected (what the review shows and what is approved).
  const selected = new Map();

  function wireBatch(refresh) {
    const review = () => {
      const items = $("batch-items");
      clear(items);
      for (const op of selected.values()) {
        const p = op.proposal;
        const box = el("dl", { className: "fields compact", "data-test": "batch-item",
                               "data-key": op.key });
        dl(box, [
          ["Owner", op.owner],
          ["Order", op.order_id],
          ["Kind", kindText(op.kind)],
          ["Amount", money(op.amount_minor, op.currency)],
          ["Effect", p.effect],
          ["Tier", p.tier],
          ["Fingerprint", el("code", {}, op.fingerprint)],
        ]);
        items.appendChild(box);
      }
      setText($("batch-title"), `Approve each of these ${selected.size} proposals?`);
      show($("batch"), true);
    };
    $("batch-review").addEventListener("click", review);
    $("batch-cancel").addEventListener("click", () => show($("batch"), false));
    $("batch-clear").addEventListener("click", () => {
      selected.clear();
      show($("batch"), false);
      refresh();
    });
    $("batch-confirm").addEventListener("click", async () => {
      const button = $("batch-confirm");
      const items = [...selected.values()].map((op) => ({
        key: op.key, amount_minor: op.amount_minor, currency: op.currency,
        fingerprint: op.fingerprint }));
      try {
        button.disabled = true;
        const answer = await api("POST", "/v1/approvals", { items });
        const list = $("batch-results");
        clear(list);
        for (const r of answer.results) {
          const what = r.status === 200
            ? `approved: it is ${stateText(r.operation)}`
            : `not approved: ${(r.error && r.error.message) || "HTTP " + r.status}`;
          list.appendChild(el("li", { "data-test": "batch-result", "data-key": r.key,
                                      "data-status": r.status,
                                      className: r.status === 200 ? "ok" : "error" },
            opLink(r.key, r.key), " — ", what));
        }
        show(list, true);
        say(`${answer.approved} approved, ${answer.refused} not approved.`,
          answer.refused ? "error" : "ok");
        selected.clear();
        show($("batch"), false);
        refresh();
      } catch (e) {
        say(refusal("Batch approval", e), "error");
      } finally {
        button.disabled = false;
      }
    });
  }

  // Draws `rows` (each with a data-key) into `body`, keeping the row already
  // there for a key and replacing only the cells whose content changed: a
  // refresh never swaps a row, a link or a checkbox under the pointer.
  function patchRows(body, rows) {
    const old = new Map();
    for (const r of [...body.children]) {
      if (r.dataset.key) old.set(r.dataset.key, r);
      else body.removeChild(r);
    }
    rows.forEach((row, i) => {
      let kept = old.get(row.dataset.key);
      if (kept) {
        old.delete(row.dataset.key);
        [...row.children].forEach((cell, j) => {
          const was = kept.children[j];
          if (!was) kept.appendChild(cell);
          else if (was.outerHTML !== cell.outerHTML) kept.replaceChild(cell, was);
        });
      } else {
        kept = row;
      }
      if (body.children[i] !== kept) body.insertBefore(kept, body.children[i] || null);
    });
    for (const r of old.values()) body.removeChild(r);
  }

  // The pending operations as last drawn, by key: what a checkbox selects.
  const shown = new Map();

  function renderPending(ops) {
    const now = serverNow();
    const rows = [];
    shown.clear();
    for (const op of ops) {
      shown.set(op.key, op);
      const needed = op.approvals_needed || 1;
      const got = (op.approvals || []).length;
      const box = el("input", { type: "checkbox", "data-test": "select",
                                "aria-label": `Select ${op.order_id}` });
      box.checked = selected.has(op.key);
      box.addEventListener("change", () => {
        if (box.checked) selected.set(op.key, shown.get(op.key) || op);
        else selected.delete(op.key);
        show($("batch-bar"), selected.size > 0);
      });
      const row = el("tr", { "data-test": "pending-row", "data-key": op.key, className: "link" },
        el("td", {}, box),
        el("td", {}, op.owner),
        el("td", {}, opLink(op.key, op.order_id)),
        el("td", {}, kindText(op.kind)),
        el("td", { className: "num" }, money(op.amount_minor, op.currency)),
        el("td", {}, el("span", { className: "tier tier-" + op.proposal.tier }, op.proposal.tier)),
        el("td", {}, duration(now - op.created_at_ms)),
        el("td", { className: op.expires_at_ms - now < 3600 * 1000 ? "soon" : "" },
          op.expires_at_ms ? duration(op.expires_at_ms - now) : "—"),
        el("td", {}, `${got} of ${needed}`,
          got ? el("span", { className: "sub" }, " (" +
            op.approvals.map((a) => a.principal).join(", ") + ")") : null));
      row.addEventListener("click", (ev) => {
        if (ev.target.closest("a") || ev.target.closest("input")) return;
        window.location.assign("/console/operations/" + encodeURIComponent(op.key));
      });
      rows.push(row);
    }
    patchRows($("pending"), rows);
    for (const box of $("pending").querySelectorAll('[data-test="select"]'))
      box.checked = selected.has(box.closest("tr").dataset.key);
    show($("pending-empty"), ops.length === 0);
    show($("batch-bar"), selected.size > 0);
  }

  function renderUnknown(ops) {
    const now = serverNow();
    const rows = [];
    for (const op of ops) {
      rows.push(el("tr", { "data-test": "unknown-row", "data-key": op.key },
        el("td", {}, op.owner),
        el("td", {}, opLink(op.key, op.order_id)),
        el("td", {}, kindText(op.kind)),
        el("td", { className: "num" }, money(op.amount_minor, op.currency)),
        el("td", { className: op.needs_attention ? "soon" : "" },
          op.unknown_since_ms ? duration(now - op.unknown_since_ms) : "—"),
        el("td", { className: "num" }, String(op.attempts)),
        el("td", { className: "inert" }, op.last_error || "")));
    }
    patchRows($("unknown"), rows);
    show($("unknown-empty"), ops.length === 0);
  }

  // ---- One operation.

  function dl(target, rows) {
    clear(target);
    for (const [label, value, field] of rows) {
      target.appendChild(el("dt", {}, label));
      target.appendChild(el("dd", field ? { "data-field": field } : {}, value));
    }
  }

  function auditRow(r, withKey) {
    const details = r.details && typeof r.details === "object" && Object.keys(r.details).length
      ? JSON.stringify(r.details) : (typeof r.details === "string" ? r.details : "");
    return el("tr", { "data-test": "audit-row" },
      el("td", { className: "num" }, String(r.seq)),
      el("td", {}, when(r.at_ms)),
      el("td", {}, r.principal),
      withKey ? el("td", {}, r.operation_key ? opLink(r.operation_key) : "") : null,
      el("td", {}, r.action),
      el("td", {}, r.from || r.to ? `${r.from || "—"} → ${r.to || "—"}` : ""),
      el("td", { className: "inert details" }, details));
  }

  function ledgerRows(target, rows, withKey) {
    clear(target);
    for (const l of rows) {
      target.appendChild(el("tr", { "data-test": "ledger-row" },
        el("td", {}, when(l.at_ms)),
        withKey ? el("td", {}, opLink(l.operation_key)) : el("td", {}, kindText(l.kind)),
        el("td", { className: "num" }, money(l.amount_minor, l.currency)),
        el("td", { className: "mono" }, l.provider_object_id),
        el("td", {}, l.recorded_by)));
    }
    if (!rows.length)
      target.appendChild(el("tr", {}, el("td", { colspan: 5, className: "empty" }, "No rows.")));
  }

  function opRows(target, ops) {
    clear(target);
    for (const o of ops) {
      target.appendChild(el("tr", { "data-test": "related-row", "data-key": o.key },
        el("td", {}, opLink(o.key)),
        el("td", {}, stateText(o)),
        el("td", { className: "num" }, money(o.amount_minor, o.currency)),
        el("td", {}, when(o.created_at_ms))));
    }
    if (!ops.length)
      target.appendChild(el("tr", {}, el("td", { colspan: 4, className: "empty" }, "None.")));
  }

  // The text of one transcript item.
  function itemText(item) {
    const content = (c) => {
      if (typeof c === "string") return c;
      if (Array.isArray(c)) return c.map((p) => (p && (p.text || p.output_text)) || "").join("");
      return c === undefined ? "" : JSON.stringify(c);
    };
    switch (item.type) {
      case "message": return [item.role || "message", content(item.content)];
      case "function_call": return ["tool call", `${item.name}(${item.arguments || ""})`];
      case "function_call_output": {
        const out = item.success === false ? `error: ${item.error || ""}` : (item.output || "");
        return ["tool result", out];
      }
      default: return [item.type || "item", JSON.stringify(item)];
    }
  }

  function renderTranscript(target, transcript, callId, wholeButton) {
    const items = [];
    for (const page of transcript.item_pages || [])
      for (const item of (page && page.data) || []) items.push(item);
    const at = items.findIndex((i) => i.type === "function_call" && i.call_id === callId);
    const draw = (all) => {
      clear(target);
      const from = all || at < 0 ? 0 : Math.max(0, at - 4);
      const to = all || at < 0 ? items.length : Math.min(items.length, at + 5);
      if (from > 0) target.appendChild(el("p", { className: "sub" }, `… ${from} earlier items`));
      for (let i = from; i < to; i++) {
        const [who, text] = itemText(items[i]);
        const mark = items[i].call_id === callId && callId ? " this-call" : "";
        target.appendChild(el("div", { className: "item " + (items[i].type || "") + mark },
          el("span", { className: "who" }, who), el("div", { className: "text inert" }, text)));
      }
      if (to < items.length)
        target.appendChild(el("p", { className: "sub" }, `… ${items.length - to} later items`));
      if (!items.length) target.appendChild(el("p", { className: "sub" }, "No items."));
      if (transcript.truncated)
        target.appendChild(el("p", { className: "sub" },
          "The platform's transcript goes on; it is shown as far as it was read."));
      if (wholeButton) show(wholeButton, !all && (from > 0 || to < items.length));
    };
    draw(false);
    if (wholeButton) wholeButton.onclick = () => draw(true);
  }

  // ---- Passkeys (WebAuthn): bytes travel as base64url in JSON.

  function b64urlToBytes(text) {
    const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const raw = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }

  function bytesToB64url(buffer) {
    let raw = "";
    for (const b of new Uint8Array(buffer)) raw += String.fromCharCode(b);
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // Asks the approver's passkey to sign this operation as shown: the proof
  // an approval above the step-up line carries.
  async function stepUp(path, fingerprint) {
    const c = await api("POST", path + "/step-up", { fingerprint });
    const assertion = await navigator.credentials.get({ publicKey: {
      challenge: b64urlToBytes(c.challenge),
      rpId: c.rp_id,
      allowCredentials: c.allow_credentials.map((id) => ({ type: "public-key",
                                                           id: b64urlToBytes(id) })),
      userVerification: "preferred",
      timeout: c.timeout_ms,
    } });
    return {
      challenge: c.challenge,
      credential_id: bytesToB64url(assertion.rawId),
      client_data_json: bytesToB64url(assertion.response.clientDataJSON),
      authenticator_data: bytesToB64url(assertion.response.authenticatorData),
      signature: bytesToB64url(assertion.response.signature),
    };
  }

  async function passkeysPage() {
    try { await whoAmI(); } catch (e) { say(refusal("Loading", e), "error"); return; }
    const render = (list) => {
      const body = $("passkeys");
      clear(body);
      for (const k of list.passkeys) {
        const remove = el("button", { type: "button", className: "quiet",
                                      "data-test": "remove-passkey" }, "Remove");
        remove.addEventListener("click", async () => {
          try {
            render(await api("DELETE", "/v1/passkeys/" + encodeURIComponent(k.id)));
            say(`Passkey "${k.label}" removed.`, "ok");
          } catch (e) { say(refusal("Removing the passkey", e), "error"); }
        });
        body.appendChild(el("tr", { "data-test": "passkey-row", "data-id": k.id },
          el("td", {}, k.label), el("td", {}, when(k.created_at_ms)),
          el("td", {}, k.last_used_at_ms ? when(k.last_used_at_ms) : "never"),
          el("td", {}, remove)));
      }
      show($("passkeys-empty"), list.passkeys.length === 0);
    };
    try { render(await api("GET", "/v1/passkeys")); } catch (e) {
      say(refusal("Loading your passkeys", e), "error");
    }
    $("register-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const label = $("passkey-label").value.trim();
      if (!label) { say("Give the passkey a label: which device it is on.", "error"); return; }
      if (!window.PublicKeyCredential) {
        say("This browser does not offer passkeys here (they need https or localhost).",
          "error");
        return;
      }
      try {
        const o = await api("POST", "/v1/passkeys/challenge", {});
        const created = await navigator.credentials.create({ publicKey: {
          challenge: b64urlToBytes(o.challenge),
          rp: o.rp,
          user: { id: b64urlToBytes(o.user.id), name: o.user.name,
                  displayName: o.user.display_name },
          pubKeyCredParams: [{ type: "public-key", alg: -7 }],
          excludeCredentials: o.exclude_credentials.map((id) => ({ type: "public-key",
                                                                   id: b64urlToBytes(id) })),
          authenticatorSelection: { residentKey: "preferred", userVerification: "preferred" },
          attestation: "none",
          timeout: o.timeout_ms,
        } });
        await api("POST", "/v1/passkeys", {
          label, challenge: o.challenge,
          client_data_json: bytesToB64url(created.response.clientDataJSON),
          attestation_object: bytesToB64url(created.response.attestationObject) });
        render(await api("GET", "/v1/passkeys"));
        $("passkey-label").value = "";
        say(`Passkey "${label}" registered.`, "ok");
      } catch (e) {
        say(refusal("Registering the passkey", e), "error");
      }
    });
  }

  async function reportPage() {
    try { await whoAmI(); } catch (e) { say(refusal("Loading", e), "error"); return; }
    const load = async () => {
      const days = Number($("report-since").value);
      const from = serverNow() - days * 86400 * 1000;
      let r;
      try { r = await api("GET", `/v1/report?from_ms=${Math.floor(from)}`); } catch (e) {
        say(refusal("Loading the report", e), "error");
        return;
      }
      const t = r.time_to_decision_ms;
      const u = r.outcome_unknown;
      const secs = (ms) => (ms === null ? "—" : duration(ms));
      dl($("report-figures"), [
        ["Proposals", String(r.proposals), "proposals"],
        ["Time to decision", `p50 ${secs(t.p50)}, p95 ${secs(t.p95)}`, "time-to-decision"],
        ["Reminded, escalated", `${r.reminded}, ${r.escalated}`],
        ["Lowered by the approver", String(r.narrowed.count), "narrowed"],
        ["outcome_unknown", `${u.count} of ${u.of_executed} executed; resolved in p50 ` +
          `${secs(u.time_to_resolution_ms.p50)}`],
        ["Denial reasons", Object.entries(r.denial_reasons).map(([k, v]) => `${v}× ${k}`)
          .concat(r.denials_for_other_reasons ? [`${r.denials_for_other_reasons}× other reasons`] : [])
          .join("; ") || "none"],
      ]);
      for (const chart of ["outcomes", "kinds", "approvers"])
        $("chart-" + chart).setAttribute("src",
          `${API}/v1/report/charts/${chart}.svg?from_ms=${Math.floor(from)}`);
    };
    $("report-since").addEventListener("change", load);
    await load();
  }

  async function policyPage() {
    let policy;
    try {
      await whoAmI();
      policy = await api("GET", "/v1/policy");
    } catch (e) { say(refusal("Loading the policy", e), "error"); return; }
    const amounts = (m) => Object.entries(m || {}).map(([c, a]) => money(a, c)).join(", ") ||
      "none";
    const body = $("policy-tools");
    clear(body);
    for (const t of policy.tools) {
      const limits = Object.entries(t.limits).map(([k, v]) =>
        `${k}: ${typeof v === "object" && !Array.isArray(v) ? amounts(v)
          : Array.isArray(v) ? v.join(", ") : v}`).join("; ");
      body.appendChild(el("tr", { "data-test": "policy-tool", "data-name": t.name },
        el("td", {}, el("code", {}, t.name)), el("td", {}, t.enabled ? "yes" : "no"),
        el("td", {}, el("span", { className: "tier tier-" + t.tier }, t.tier)),
        el("td", {}, t.tiers_allowed.join(", ")), el("td", {}, limits || "—")));
    }
    const declared = $("policy-declared");
    clear(declared);
    $("declared-card").hidden = !(policy.declared || []).length;
    for (const d of policy.declared || []) {
      const above = Object.entries(d.tier_above_minor).map(([tier, m]) =>
        `${tier} above ${amounts(m)}`).join("; ");
      declared.appendChild(el("tr", { "data-test": "declared-operation", "data-name": d.name },
        el("td", {}, el("code", {}, d.name)),
        el("td", {}, d.money + (d.amount_argument ? ` (${d.amount_argument})` : "")),
        el("td", {}, el("span", { className: "tier tier-" + d.tier }, d.tier),
          above ? "; " + above : ""),
        el("td", {}, Object.keys(d.parameters.properties).join(", ")),
        el("td", {}, d.effect), el("td", {}, el("code", {}, d.executor.url))));
    }
    const esc = policy.escalation;
    dl($("policy-rules"), [
      ["Two approvers above", amounts(policy.two_person_threshold_minor)],
      ["Approval time", duration(policy.approval_ttl_s * 1000)],
      ["Reminder after", esc.remind_after_s ? duration(esc.remind_after_s * 1000) : "off"],
      ["Escalation", esc.escalate_after_s
        ? `to ${esc.escalate_to_tier} after ${duration(esc.escalate_after_s * 1000)}` : "off"],
      ["Passkey step-up", `tiers: ${policy.step_up.tiers.join(", ") || "none"}; above: ` +
        amounts(policy.step_up.above_minor), "step-up"],
    ]);
  }

  async function operationPage() {
    const prefix = "/console/operations/";
    const key = decodeURIComponent(window.location.pathname.slice(prefix.length));
    const path = "/v1/operations/" + encodeURIComponent(key);
    setText($("key"), key);
    let me;
    let op;
    let ctx;
    try {
      me = await whoAmI();
      [op, ctx] = await Promise.all([api("GET", path), api("GET", path + "/context")]);
    } catch (e) {
      setText($("state"), "not found");
      say(e.status === 404 ? "No operation with that key for the owners you may see."
        : refusal("Loading", e), "error");
      return;
    }
    // What the page shows, and what an approval sends: never refreshed in
    // place, so an approval can only approve what a person read.
    const shown = { amount_minor: op.amount_minor, currency: op.currency,
                    fingerprint: op.fingerprint };
    const p = op.proposal;
    document.title = `${kindText(op.kind)} ${op.order_id} · opgate console`;
    const renderProposal = () => {
      setText($("title"), titleText(op));
      const escalated = op.escalated_to_tier ? [
        ["Escalated", `to the ${op.escalated_to_tier} tier at ${when(op.escalated_at_ms)}: ` +
          "nobody decided it in the time the policy sets; earlier approvals were discarded",
          "escalated"],
      ] : [];
      const lowered = op.original_amount_minor ? [
        ["Proposed by the agent", money(op.original_amount_minor, op.currency), "original_amount"],
        ["Lowered by", `${op.edited_by}: ${op.edit_reason}`, "edited_by"],
      ] : [];
      dl($("proposal"), [
        ["Owner", op.owner, "owner"],
        ["Order", op.order_id, "order_id"],
        ["Amount", money(op.amount_minor, op.currency), "amount"],
        ...lowered,
        ["Currency", op.currency, "currency"],
        [kindText(op.kind) === "credit" ? "Credited to" : "Payment method",
          kindText(op.kind) === "credit" ? op.proposal.customer : op.proposal.payment_method,
          "payment_method"],
        ["Customer-visible effect", op.proposal.effect, "effect"],
        ...(op.proposal.arguments ? [
          // A declared operation: exactly what its executor will be sent.
          ["Arguments", el("code", {}, JSON.stringify(op.proposal.arguments)), "arguments"],
          ["Moves money", op.proposal.money, "money"]] : []),
        ["Tier", op.proposal.tier, "tier"],
        ...escalated,
        ["Fingerprint", el("code", {}, op.fingerprint), "fingerprint"],
        ["Created", when(op.created_at_ms)],
        ["Approval expires", op.expires_at_ms ? when(op.expires_at_ms) : "—"],
        ["Session", op.session_id ? sessionLink(op.session_id) : "—"],
      ]);
    };
    renderProposal();
    setText($("reason"), p.reason || "(none given)");
    renderContext(ctx);
    if (op.session_id) $("session-link").setAttribute("href",
      "/console/sessions/" + encodeURIComponent(op.session_id));
    else show($("session-link"), false);
    // The pack proves this operation offline (opgate audit verify-evidence);
    // downloading it is audited.
    $("evidence-link").setAttribute("href",
      "/console/api/v1/operations/" + encodeURIComponent(key) + "/evidence");

    let mode = null;  // "approve" | "lower" | "deny" while the confirmation shows
    let lower = null;  // {amount_minor, edit_reason} while a lower amount is reviewed
    const confirmBox = $("confirm-box");
    const openConfirm = (which) => {
      mode = which;
      const details = $("confirm-details");
      if (which === "lower") {
        setText($("confirm-title"),
          `Approve ${money(lower.amount_minor, shown.currency)} instead of ` +
          `${money(shown.amount_minor, shown.currency)}?`);
        const was = money(shown.amount_minor, shown.currency);
        const now = money(lower.amount_minor, shown.currency);
        // The server writes amounts without thousands separators.
        const plain = (minor) =>
          `${Math.floor(minor / 100)}.${String(minor % 100).padStart(2, "0")} ${shown.currency}`;
        dl(details, [
          ["Amount", now, "lower-amount"],
          ["Instead of", was],
          // As the server will write it: the new amount, lowered from what
          // the agent proposed.
          ["Customer-visible effect",
            op.proposal.effect.replace(/ \(lowered by the approver from [^)]*\)/, "")
              .split(plain(shown.amount_minor)).join(`${plain(lower.amount_minor)} (lowered by ` +
                `the approver from ${plain(op.original_amount_minor || shown.amount_minor)})`),
            "lower-effect"],
          ["To", kindText(op.kind) === "credit" ? p.customer : p.payment_method],
          ["The agent is told", lower.edit_reason],
          ["Fingerprint of what is lowered", el("code", {}, shown.fingerprint)],
        ]);
        $("confirm").textContent = "Confirm the lower amount";
        $("confirm").className = "primary";
      } else if (which === "approve") {
        setText($("confirm-title"), `Approve exactly this ${kindText(op.kind)}?`);
        dl(details, [
          ["Amount", money(shown.amount_minor, shown.currency)],
          ["Effect", p.effect],
          ["To", kindText(op.kind) === "credit" ? p.customer : p.payment_method],
          ["Fingerprint", el("code", {}, shown.fingerprint)],
        ]);
        $("confirm").textContent = "Confirm approval";
        $("confirm").className = "primary";
      } else {
        setText($("confirm-title"),
          "Deny this proposal? The agent is told the reason written above.");
        dl(details, [["Amount", money(shown.amount_minor, shown.currency)], ["Effect", p.effect]]);
        $("confirm").textContent = "Confirm denial";
        $("confirm").className = "danger";
        $("deny-reason").focus();
      }
      show(confirmBox, true);
    };
    $("approve").addEventListener("click", () => openConfirm("approve"));
    $("approve-lower").addEventListener("click", () => {
      show($("lower-form"), true);
      $("lower-amount").focus();
    });
    $("lower-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = $("lower-amount").value.trim();
      const m = /^(\d{1,12})(?:\.(\d{1,2}))?$/.exec(text);
      const minor = m ? Number(m[1]) * 100 + Number((m[2] || "0").padEnd(2, "0")) : NaN;
      const reason = $("lower-reason").value.trim();
      if (!m || minor <= 0) {
        say("Write the amount to approve as a number such as 15.00.", "error");
        return;
      }
      if (minor >= shown.amount_minor) {
        say(`An approval may only lower the amount: write less than ` +
          `${money(shown.amount_minor, shown.currency)}.`, "error");
        return;
      }
      if (!reason) {
        say("Say why the amount is lower: the agent is told it.", "error");
        $("lower-reason").focus();
        return;
      }
      lower = { amount_minor: minor, edit_reason: reason };
      openConfirm("lower");
    });
    $("deny").addEventListener("click", () => openConfirm("deny"));
    $("cancel").addEventListener("click", () => { mode = null; show(confirmBox, false); });
    $("confirm").addEventListener("click", async () => {
      if (!mode) return;
      const button = $("confirm");
      try {
        button.disabled = true;
        // Above the step-up line the approver's passkey signs this
        // operation as shown, first.
        const proof = mode !== "deny" && op.step_up_required
          ? await stepUp(path, shown.fingerprint) : undefined;
        if (mode === "lower") {
          const after = await api("POST", path + "/approve", {
            amount_minor: lower.amount_minor, currency: shown.currency,
            fingerprint: shown.fingerprint, edit_reason: lower.edit_reason, step_up: proof });
          // What this person chose is now what the page shows.
          shown.amount_minor = after.amount_minor;
          shown.fingerprint = after.fingerprint;
          op = after;
          renderProposal();
          update(after);
          show($("lower-form"), false);
          say(`Approved ${money(after.amount_minor, after.currency)} (lowered from ` +
            `${money(after.original_amount_minor, after.currency)}) by ${me.principal}. ` +
            `It is ${stateText(after)}.`, "ok");
        } else if (mode === "approve") {
          const after = await api("POST", path + "/approve", { ...shown, step_up: proof });
          update(after);
          const got = (after.approvals || []).length;
          if (after.state === "pending")
            say(`Approved by ${me.principal}: ${got} of ${after.approvals_needed || 2} approvals. ` +
              "It runs once the next approver confirms.", "ok");
          else say(`Approved by ${me.principal}. It is ${stateText(after)}.`, "ok");
        } else {
          const reason = $("deny-reason").value.trim();
          if (!reason) {
            say("A denial needs a reason: the agent is told it.", "error");
            $("deny-reason").focus();
            return;
          }
          const after = await api("POST", path + "/deny", { reason });
          update(after);
          say(`Denied by ${me.principal}. The agent is told: ${reason}`, "ok");
        }
        mode = null;
        show(confirmBox, false);
      } catch (e) {
        if (e.body && e.body.operation) update(e.body.operation);
        say(refusal(mode === "deny" ? "Denial" : "Approval", e), "error");
        mode = null;
        show(confirmBox, false);
      } finally {
        button.disabled = false;
      }
    });

    $("reconcile").addEventListener("click", async () => {
      try {
        const after = await api("POST", path + "/reconcile", {});
        update(after);
        say(`Reconcile asked: the operation is ${stateText(after)}.`, "ok");
      } catch (e) {
        say(refusal("Reconcile", e), "error");
      }
    });
    $("resolve-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const outcome = $("resolve-outcome").value;
      const evidence = $("resolve-evidence").value.trim();
      const providerId = $("resolve-provider-id").value.trim();
      if (!outcome) { say("Choose the outcome: succeeded or failed.", "error"); return; }
      if (!evidence) { say("Resolving needs evidence: what you saw, and where.", "error"); return; }
      const body = { outcome, evidence };
      if (providerId) body.provider_object_id = providerId;
      try {
        const after = await api("POST", path + "/resolve", body);
        update(after);
        say(`Resolved by ${me.principal} as ${outcome}: the operation is ${stateText(after)}.`,
          "ok");
      } catch (e) {
        say(refusal("Resolve", e), "error");
      }
    });

    function update(next) {
      op = next;
      const st = $("state");
      setText(st, stateText(op));
      st.className = "state state-" + op.state + (op.outcome ? " outcome-" + op.outcome : "");
      const changed = op.fingerprint !== shown.fingerprint ||
        op.amount_minor !== shown.amount_minor || op.currency !== shown.currency;
      show($("changed"), changed);
      const pending = op.state === "pending";
      show($("decide"), pending && me.may("operations:approve"));
      show($("approve-lower"), pending && op.kind !== "cancel-order");
      if (pending) {
        const needed = op.approvals_needed || ctx.policy.approvals_needed || 1;
        const names = (op.approvals || []).map((a) => `${a.principal} (${when(a.at_ms)})`);
        setText($("approvals"), `Approvals: ${(op.approvals || []).length} of ${needed}` +
          (names.length ? ` — ${names.join(", ")}` : "") +
          (needed > 1 ? ". Two different people must approve." : "."));
        const limit = (me.max_amount_minor || {})[op.currency];
        const hints = [];
        if (op.owner === me.principal) hints.push("You cannot approve your own operation.");
        if (limit === undefined || op.amount_minor > limit)
          hints.push(`The amount is above your approval limit (${limit === undefined
            ? "none for " + op.currency : money(limit, op.currency)}).`);
        if (me.tiers && me.tiers.length && !me.tiers.includes(op.proposal.tier))
          hints.push(`You may not decide ${op.proposal.tier}-tier proposals.`);
        if ((op.approvals || []).some((a) => a.principal === me.principal))
          hints.push("You have approved it already.");
        if (op.step_up_required)
          hints.push("Approving it asks your passkey to sign it (register one under Passkeys).");
        setText($("decide-hint"), hints.join(" "));
      }
      const unknown = op.state === "outcome_unknown";
      show($("oncall"), unknown && me.may("operations:resolve"));
      if (unknown)
        dl($("attempts"), [
          ["Attempts", String(op.attempts)],
          ["Last error", op.last_error || "—"],
          ["Unknown since", when(op.unknown_since_ms)],
          ["Idempotency key", el("code", {}, op.idempotency_key)],
          ["Needs attention", op.needs_attention ? "yes" : "no"],
        ]);
      const history = $("history");
      clear(history);
      for (const r of op.history || []) history.appendChild(auditRow(r, false));
    }

    async function loadSide() {
      const related = (ctx.related || []).filter((r) => r.key !== key);
      opRows($("related-order"), related);
      try {
        const byOwner = await api("GET", "/v1/operations?limit=50&owner=" +
          encodeURIComponent(op.owner));
        const seen = new Set(related.map((r) => r.key).concat([key]));
        opRows($("related-owner"), byOwner.operations.filter((o) => !seen.has(o.key)));
      } catch (e) { say(refusal("Loading related operations", e), "error"); }
      try {
        const ledger = await api("GET", "/v1/ledger?operation=" + encodeURIComponent(key));
        ledgerRows($("ledger"), ledger.ledger, false);
      } catch (e) { say(refusal("Loading the ledger", e), "error"); }
      if (op.session_id) {
        try {
          const t = await api("GET", "/v1/sessions/" + encodeURIComponent(op.session_id) +
            "/transcript");
          renderTranscript($("transcript"), t, op.call_id, $("transcript-all"));
        } catch (e) {
          setText($("transcript"), refusal("Loading the transcript", e));
        }
      } else {
        setText($("transcript"), "No session.");
      }
    }

    update(op);
    loadSide();
    verifyAudit();
    let lastState = stateText(op);
    every(FOLLOW_MS, async () => {
      if (op.state === "settled") return;
      try {
        const next = await api("GET", path);
        update(next);
        if (stateText(next) !== lastState) {
          lastState = stateText(next);
          if (next.state === "settled") {
            ctx = await api("GET", path + "/context");
            renderContext(ctx);
            loadSide();
            verifyAudit();
          }
        }
      } catch (e) {
        say(refusal("Refreshing", e), "error");
      }
    });
  }

  function renderContext(ctx) {
    const drafts = $("drafts");
    clear(drafts);
    for (const d of ctx.drafts || []) {
      drafts.appendChild(el("li", { "data-test": "draft", "data-id": d.id },
        el("p", { className: "inert" }, d.text),
        el("p", { className: "sub" }, `Drafted by ${d.drafted_by} at ${when(d.created_at_ms)} ` +
          "(session " + d.session_id + "). Not sent: a person sends it, or not.")));
    }
    show($("drafts-empty"), !(ctx.drafts || []).length);
    const m = ctx.money;
    const cur = m ? m.currency : "";
    if (m) {
      dl($("money"), [
        ["Order amount (paid)", money(m.paid_minor, cur), "paid"],
        ["Refunded outside opgate", money(m.refunded_outside_minor, cur)],
        ["Refunded by opgate", money(m.refunded_minor, cur), "refunded"],
        ["Credited by opgate", money(m.credited_minor, cur), "credited"],
        ["Being paid out now", money(m.in_progress_minor, cur)],
        ["Remaining", money(m.remaining_minor, cur), "remaining"],
        ["Order status", m.status],
      ]);
    } else {
      dl($("money"), [["Order", "not found"]]);
    }
    const pol = ctx.policy;
    const opCur = ctx.operation.currency;
    dl($("policy"), [
      ["Approvals needed", String(pol.approvals_needed), "approvals_needed"],
      ["Two-person threshold", pol.two_person_threshold_minor === null
        ? `none for ${opCur}: always two` : money(pol.two_person_threshold_minor, opCur)],
      ["Refund window", `${pol.refund_window_days} days`],
      ["Approval time", duration(pol.approval_ttl_s * 1000)],
      ["Credit cap", money(pol.credit_hard_cap_minor, opCur)],
      ["Support tier up to", money(pol.credit_support_limit_minor, opCur)],
    ]);
    const o = ctx.order;
    if (o) {
      dl($("order"), [
        ["Order", o.order_id],
        ["Owner", o.owner],
        ["Placed", o.placed_at ? when(o.placed_at * 1000) : "—"],
        ["Payment method", o.payment_method || "—"],
        ["Payment intent", el("code", {}, o.payment_intent || "—")],
        ["Customer", el("code", {}, o.customer || "—")],
        ["Note", el("span", { className: "inert", "data-test": "order-note" }, o.note || ""),
          "note"],
      ]);
    } else {
      dl($("order"), [["Order", "not found"]]);
    }
  }

  // ---- One agent session.

  async function sessionPage() {
    const prefix = "/console/sessions/";
    const id = decodeURIComponent(window.location.pathname.slice(prefix.length));
    const path = "/v1/sessions/" + encodeURIComponent(id);
    setText($("title"), "Session " + id);
    let s;
    try {
      await whoAmI();
      s = await api("GET", path);
    } catch (e) {
      say(e.status === 404 ? "No session with that id for the owners you may see."
        : refusal("Loading", e), "error");
      return;
    }
    dl($("session"), [
      ["Session", s.session_id],
      ["Owner", s.owner],
      ["Bound by", s.bound_by],
      ["Closed", s.closed ? "yes" : "no"],
      ["Last sync", when(s.last_sync_ms)],
      ["Last sync error", s.last_sync_error || "—"],
    ]);
    const calls = $("calls");
    clear(calls);
    const byTime = s.calls.slice().sort((x, y) => x.created_at_ms - y.created_at_ms);
    for (const c of byTime) {
      const result = c.result
        ? (c.result.success ? c.result.output : "error: " + c.result.error) : "—";
      calls.appendChild(el("tr", { "data-test": "call-row" },
        el("td", { className: "mono" }, c.call_id),
        el("td", {}, c.name),
        el("td", { className: "inert details" }, c.arguments),
        el("td", {}, c.operation_key ? opLink(c.operation_key) : ""),
        el("td", { className: "inert details" }, result),
        el("td", {}, c.delivery + (c.delivery_error ? ": " + c.delivery_error : ""))));
    }
    const notes = $("notes");
    clear(notes);
    for (const n of s.notes || []) {
      notes.appendChild(el("tr", { "data-test": "note-row" },
        el("td", {}, when(n.at_ms)),
        el("td", { className: "mono" }, n.call_id),
        el("td", {}, n.order_id),
        el("td", { className: "inert details" }, n.text),
        el("td", { className: "mono" }, (n.evidence || []).join(", "))));
    }
    opRows($("operations"), s.operations);
    ledgerRows($("ledger"), s.ledger, true);
    if (s.ledger_next_cursor)
      $("ledger").appendChild(el("tr", {}, el("td", { colspan: 5, className: "empty" },
        "More rows than shown here: opgate ledger --session " + s.session_id)));
    const records = (s.notes || []).map((n) => n.audit);
    for (const o of s.operations) {
      try {
        const a = await api("GET", "/v1/audit?operation=" + encodeURIComponent(o.key));
        records.push(...a.audit);
      } catch (e) { say(refusal("Loading the audit", e), "error"); }
    }
    records.sort((a, b) => a.seq - b.seq);
    const audit = $("audit");
    clear(audit);
    for (const r of records) audit.appendChild(auditRow(r, true));
    verifyAudit();
    try {
      const t = await api("GET", path + "/transcript");
      renderTranscript($("transcript"), t, "", null);
    } catch (e) {
      setText($("transcript"), refusal("Loading the transcript", e));
    }
  }

  const pages = { queue: queuePage, operation: operationPage, session: sessionPage,
                  passkeys: passkeysPage, policy: policyPage, report: reportPage };
  const start = pages[document.body.dataset.page];
  if (start) start();
})();
