// tokenlimit dashboard. It only draws what the server answers: every
// decision shown was taken by the engine (see docs/dashboard.md).
'use strict';
(() => {
  const $ = (sel) => document.querySelector(sel);
  const $$ = (sel) => Array.from(document.querySelectorAll(sel));

  // el builds an element; `text` sets its text, other keys are attributes.
  function el(tag, attrs = {}, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    e.append(...kids);
    return e;
  }
  // setRows replaces a table's body with rows, and labels each cell with
  // its column's header (data-label), which a phone-width screen shows
  // beside the value when the table stacks (see .stack in app.css).
  function setRows(table, rows) {
    for (const tr of rows) labelCells(table, tr.cells);
    table.tBodies[0].replaceChildren(...rows);
  }
  // labelCells labels the cells of a row of table, the first one first.
  function labelCells(table, cells) {
    const heads = table.tHead.rows[0].cells;
    Array.from(cells).forEach((c, i) => c.setAttribute('data-label', heads[i] ? heads[i].textContent : ''));
  }
  function svg(tag, attrs = {}) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    return e;
  }

  // request calls a JSON endpoint with method, a body when not undefined,
  // and headers. It throws the server's error message (with the answer's
  // status). Answers are never cached: some hold a secret.
  async function request(method, path, body, headers = {}) {
    const init = { method, headers: { ...headers }, cache: 'no-store' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    let data = {};
    try { data = await res.json(); } catch (e) { /* not JSON, or 204 */ }
    if (!res.ok) {
      const err = data.error || {};
      throw Object.assign(new Error((err.field ? err.field + ': ' : '') + (err.message || res.status + ' ' + res.statusText)), { status: res.status });
    }
    return data;
  }
  // api calls a dashboard endpoint: GET without body, POST with one.
  const api = (path, body, headers) => request(body === undefined ? 'GET' : 'POST', path, body, headers);

  function say(id, msg, isError) {
    const s = $(id);
    s.textContent = msg || '';
    s.classList.toggle('error', !!isError);
  }
  // guard runs an action, showing its failure (or its message) in a status line.
  async function guard(id, fn) {
    try { say(id, await fn()); } catch (e) { say(id, e.message, true); }
  }

  const secs = (ms) => (ms / 1000).toFixed(2) + ' s';
  const num = (v) => Number(v).toLocaleString('en-US');
  function dur(ms) {
    if (ms < 1000) return ms + ' ms';
    if (ms < 120000) return +(ms / 1000).toFixed(1) + ' s';
    if (ms < 7200000) return +(ms / 60000).toFixed(1) + ' min';
    if (ms < 172800000) return +(ms / 3600000).toFixed(1) + ' h';
    return +(ms / 86400000).toFixed(1) + ' days';
  }
  const int = (id) => Math.round(Number($(id).value));
  const ms = (id) => Math.round(Number($(id).value) * 1000);

  // ticks is a time axis under a chart: a label at each [share of the width,
  // text], left to right. The chart draws a grid line at each share.
  function ticks(marks) {
    return el('div', { class: 'ticks', 'aria-hidden': 'true' }, ...marks.map(([at, text]) => {
      const span = el('span', { text });
      span.style.left = (100 * at).toFixed(2) + '%';
      return span;
    }));
  }
  // timeStep is a round tick interval in ms giving at most about 8 ticks.
  function timeStep(totalMs) {
    for (const s of [100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000]) if (totalMs / s <= 8) return s;
    return 86400000;
  }
  // tickLines are vertical grid lines at the marks' shares of width W.
  const tickLines = (marks, W, H) => marks.map(([at]) => svg('line', { class: 'grid-line', x1: at * W, x2: at * W, y1: 0, y2: H }));

  // lines draws series of values as polylines scaled to the svg's viewBox,
  // with vertical grid lines at marks (see ticks).
  function lines(box, series, n, top, marks) {
    const W = 600, H = 160;
    const peak = Math.max(1, top || 0, ...series.flatMap((s) => s.values));
    const kids = [0.25, 0.5, 0.75].map((f) => svg('line', { class: 'grid-line', x1: 0, x2: W, y1: H * f, y2: H * f }));
    kids.push(...tickLines(marks || [], W, H));
    for (const s of series) {
      const pts = s.values.map((v, i) => `${(i * W / Math.max(1, n - 1)).toFixed(1)},${(H - 4 - v / peak * (H - 12)).toFixed(1)}`);
      kids.push(svg('polyline', { class: s.cls, points: pts.join(' ') }));
    }
    box.replaceChildren(...kids);
    return peak;
  }

  // ---- Overview: live counts from /ui/api/overview/stream --------------
  const overview = (() => {
    const groups = {
      // A shadow limit never denies: what it admits is allowed (as
      // tokenlimit_decisions_total counts it, result="shadow_allowed"),
      // what it would have denied has a column of its own.
      allowed: ['allowed', 'shadow_allowed'], denied: ['denied'], shadow: ['shadow_denied'],
      failopen: ['fail_open_allowed', 'fail_open_denied'], failclosed: ['fail_closed'],
    };
    let data = null, stream = null, timer = 0;

    // merge adds an update (the last few seconds) to the window held.
    function merge(u) {
      if (!data || !data.live || !u.live || u.seconds >= data.seconds) { data = u; return; }
      const n = data.seconds, from = u.from + u.seconds - n;
      const pick = (old, fresh) => Array.from({ length: n }, (_, i) => {
        const s = from + i, j = s - u.from, k = s - data.from;
        if (j >= 0 && j < u.seconds) return fresh[j];
        return old && k >= 0 && k < n ? old[k] : 0;
      });
      const old = new Map(data.limits.map((l) => [l.name, l]));
      const fresh = new Map(u.limits.map((l) => [l.name, l]));
      const names = u.limits.map((l) => l.name).concat(data.limits.map((l) => l.name).filter((x) => !fresh.has(x)));
      const limits = names.map((name) => {
        const o = old.get(name), f = fresh.get(name), counts = {};
        for (const r of Object.keys((f || o).counts)) {
          counts[r] = pick(o && o.counts[r], f ? f.counts[r] : new Array(u.seconds).fill(0));
        }
        return { name, counts };
      }).filter((l) => fresh.has(l.name) || Object.values(l.counts).some((c) => c.some((v) => v)));
      data = { ...u, from, seconds: n, limits, checks: pick(data.checks, u.checks), latency_us: pick(data.latency_us, u.latency_us) };
    }

    const total = (l, g, i0, i1) => {
      let s = 0;
      for (const k of groups[g]) for (let i = i0; i < i1; i++) s += l.counts[k][i] || 0;
      return s;
    };

    // storeItem is a named store's health as /readyz knows it: ok,
    // failing (it has not answered since the start), or its breaker open
    // or half-open, with the last error while it fails.
    function storeItem(st) {
      const state = st.breaker === 'open' ? 'breaker open' : st.breaker === 'half-open' ? 'breaker half-open' : st.degraded ? 'failing' : 'ok';
      const cls = state === 'ok' ? 'badge' : state === 'breaker half-open' ? 'badge warn' : 'badge bad';
      return el('li', { 'data-store': st.name, 'data-health': st.degraded ? 'failing' : 'ok' },
        el('code', { text: st.name }), ' ', el('span', { class: cls, text: state }),
        st.degraded && st.breaker === 'closed' ? el('span', { class: 'small', text: ' not answered since the start' }) : '',
        st.error ? el('span', { class: 'small store-error', text: st.error }) : '');
    }

    function renderHealth() {
      const h = data.health, c = data.config, r = c.last_reload;
      $('#ov-store').textContent = h.store === 'memory' ? 'Embedded, in memory' : h.store === 'redis' ? 'Redis' : h.store;
      const cls = h.breaker === 'closed' ? 'badge' : h.breaker === 'open' ? 'badge bad' : 'badge warn';
      $('#ov-breaker').replaceChildren('circuit breaker ', el('span', { class: cls, text: h.breaker }),
        h.degraded ? ' degraded: limits follow their failure mode' : '');
      const stores = h.stores || [];
      $('#ov-stores-card').hidden = !stores.length;
      $('#ov-stores').replaceChildren(...stores.map(storeItem));
      $('#ov-version').textContent = 'version ' + c.version;
      let reload = data.live ? 'no reload since the start' : '';
      if (r) {
        const at = new Date(r.at_ms).toLocaleTimeString();
        reload = r.ok ? `reloaded at ${at}` : `reload at ${at} rejected, kept version ${r.version}: ${r.error}`;
        reload += ` (${c.reloads_ok} loaded, ${c.reloads_failed} rejected)`;
      }
      $('#ov-reload').textContent = reload;
    }

    function renderSelect() {
      const sel = $('#ov-limit'), names = data.limits.map((l) => l.name);
      const have = Array.from(sel.options).slice(1).map((o) => o.value);
      if (have.join('\n') === names.join('\n')) return;
      const keep = sel.value;
      sel.replaceChildren(el('option', { value: '', text: 'All limits' }), ...names.map((x) => el('option', { value: x, text: x })));
      sel.value = names.includes(keep) ? keep : '';
    }

    function renderTable(last) {
      const rows = data.limits.map((l) => {
        const cells = ['allowed', 'denied', 'shadow', 'failopen', 'failclosed'].map((g) =>
          el('td', { class: 'num', 'data-limit': l.name, 'data-col': g, text: num(total(l, g, 0, data.seconds)) }));
        const now = Object.keys(groups).reduce((a, g) => a + total(l, g, last, last + 1), 0);
        return el('tr', {}, el('th', { scope: 'row', text: l.name }), ...cells,
          el('td', { class: 'num', 'data-limit': l.name, 'data-col': 'last', text: num(now) }));
      });
      setRows($('#ov-table'), rows);
    }

    function render() {
      renderHealth();
      $('#ov-off').hidden = data.live;
      $('#ov-live').hidden = !data.live;
      if (!data.live) { $('#ov-rate').textContent = 'n/a'; return; }
      const last = data.seconds - 2; // the last whole second
      $('#ov-rate').textContent = num(data.checks[last] || 0);
      $('#ov-latency').textContent = data.checks[last] ? `mean decision time ${num(data.latency_us[last])} µs` : 'no checks in the last second';
      renderSelect();
      const pick = $('#ov-limit').value;
      const ls = data.limits.filter((l) => !pick || l.name === pick);
      const series = ['allowed', 'denied', 'shadow', 'failopen'].map((g) => ({
        cls: 'l-' + g, values: Array.from({ length: data.seconds }, (_, i) => ls.reduce((a, l) => a + total(l, g, i, i + 1), 0)),
      }));
      // One mark a minute back from now (the last point) over the window.
      const span = data.seconds - 1, marks = [];
      for (let m = Math.floor(span / 60); m >= 0; m--) marks.push([(span - 60 * m) / Math.max(1, span), m ? `−${m} min` : 'now']);
      const peak = lines($('#ov-chart'), series, data.seconds, 0, marks);
      $('#ov-ticks').replaceWith(Object.assign(ticks(marks), { id: 'ov-ticks' }));
      $('#ov-peak').textContent = `scale: 0 to ${num(peak)} decisions per second`;
      renderTable(last);
    }

    function update(u) {
      merge(u);
      render();
      say('#ov-status', '');
    }
    function poll() {
      if (timer) return;
      const tick = () => api('/ui/api/overview').then(update).catch((e) => say('#ov-status', e.message, true));
      tick();
      timer = setInterval(tick, 2000);
    }
    function show() {
      if (stream || timer) return;
      if (!window.EventSource) { poll(); return; }
      stream = new EventSource('/ui/api/overview/stream');
      stream.addEventListener('overview', (ev) => update(JSON.parse(ev.data)));
      stream.onerror = () => {
        if (stream && stream.readyState === EventSource.CLOSED) { stream = null; poll(); } else say('#ov-status', 'Reconnecting…');
      };
    }
    function hide() {
      if (stream) stream.close();
      stream = null;
      clearInterval(timer);
      timer = 0;
    }
    $('#ov-limit').addEventListener('change', () => data && render());
    return { show, hide };
  })();

  // ---- Limits ------------------------------------------------------------
  // usd writes micro-dollars as dollars: 5000000 is $5.00, 1234 $0.001234.
  function usd(micro) {
    const frac = String(micro % 1e6).padStart(6, '0').replace(/0+$/, '').padEnd(2, '0');
    return `$${Math.floor(micro / 1e6).toLocaleString('en-US')}.${frac}`;
  }
  // amountsOf is what writes limit l's amounts: usd for a limit in US
  // dollars, num otherwise.
  const amountsOf = (l) => (l.unit === 'usd' ? usd : num);
  function budget(l) {
    const per = dur(l.period_ms);
    const amount = amountsOf(l);
    if (l.calendar) return `${amount(l.quota)} per calendar ${l.calendar}`;
    if (l.concurrency) return `${num(l.quota)} in flight (lease ${per})`;
    switch (l.algorithm) {
      case 'token_bucket': return l.unit === 'usd' ? `${usd(l.burst || l.quota)} of spend, refilling ${usd(l.quota)} per ${per}`
        : `${num(l.burst || l.quota)} tokens, refilling ${num(l.quota)} per ${per}`;
      case 'gcra': return `${amount(l.quota)} per ${per}, bursts of ${amount(l.burst || l.quota)}`;
      default: return `${amount(l.quota)} per ${per}`;
    }
  }
  // count writes n things: "1 lease", "3 leases".
  const count = (n, one, many = one + 's') => `${num(n)} ${n === 1 ? one : many}`;
  // leaseFacts describes a leased limit's leases, in its units: the terms,
  // what this replica's leases hold now (and a bar of what is unused of
  // what they took), and the takes and returns since the replica started.
  // Denied and failed takes and amounts left standing show only when
  // there were any.
  function leaseFacts(l) {
    const le = l.lease, amount = amountsOf(l);
    const bar = el('span', {
      class: 'meter', role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': le.leased, 'aria-valuenow': le.unused,
      'aria-label': `${l.name}: ${amount(le.unused)} of ${amount(le.leased)} leased unused`,
    }, el('span'));
    bar.firstChild.style.width = (le.leased ? 100 * le.unused / le.leased : 0).toFixed(1) + '%';
    const since = [`${count(le.taken, 'lease')} taken`, `${amount(le.returned)} returned`];
    if (le.denied) since.push(`${count(le.denied, 'take')} denied (less than a lease left)`);
    if (le.failed) since.push(`${count(le.failed, 'take')} failed (the store failed)`);
    if (le.stood) since.push(`${amount(le.stood)} left charged (not returnable)`);
    return el('div', {
      class: 'lease', 'data-outstanding': le.outstanding, 'data-leased': le.leased, 'data-unused': le.unused,
      'data-taken': le.taken, 'data-returned': le.returned,
    },
    el('strong', { text: `Leased ${amount(le.size)} at a time, each for up to ${dur(le.ttl_ms)}` }),
    el('span', { class: 'lease-held', text: le.outstanding
      ? `This replica holds ${count(le.outstanding, 'lease')}: ${amount(le.unused)} of ${amount(le.leased)} unused`
      : 'This replica holds no lease now' }),
    bar,
    el('span', { class: 'small lease-since', text: `Since this replica started: ${since.join(', ')}` }));
  }
  // storeOf says which store keeps a limit's budgets: a named store
  // (stores: in the configuration) or the main one.
  const storeOf = (l) => el('span', {
    class: 'small store-of', 'data-store': l.store || '',
    text: l.store ? `Kept in the store ${l.store}` : 'Kept in the main store',
  });
  let limitsCache = null;
  async function loadLimits() {
    limitsCache = await api('/ui/api/limits');
    return limitsCache;
  }
  const limitsPage = (() => {
    let timer = 0, visible = false, shown = '';
    function render(d) {
      $('#lim-version').textContent = `Configuration version ${d.config_version}.`;
      const now = JSON.stringify(d.limits);
      if (now === shown) return; // keep a selection in the table while nothing changed
      shown = now;
      // Where budgets live matters once some live elsewhere than the main store.
      const named = d.limits.some((l) => l.store);
      setRows($('#lim-table'), d.limits.map((l) => {
        const match = Object.entries(l.match || {});
        const key = l.key.length ? l.name + '|' + l.key.map((k) => `${k}=<${k}>`).join('|') : l.name + ' (one budget for all)';
        return el('tr', { 'data-limit': l.name },
          el('th', { scope: 'row' }, l.name, l.shadow ? ' ' : '', l.shadow ? el('span', { class: 'badge warn', text: 'shadow' }) : ''),
          el('td', { text: match.length ? match.map(([k, v]) => `${k} = ${v}`).join(', ') : 'every request' }),
          el('td', {}, el('code', { text: key })),
          el('td', { text: l.concurrency ? 'concurrency' : l.algorithm }),
          el('td', {}, el('span', { class: 'budget', text: budget(l) }), named ? storeOf(l) : '', l.lease ? leaseFacts(l) : ''),
          el('td', { text: l.cost === 'request' ? "the request's own cost" : l.cost === 'spend' ? "each call's price in US dollars" : l.cost }),
          el('td', { text: l.fail_open ? 'fail open: allow, counted locally' : 'fail closed: answer 503' }));
      }));
    }
    const refresh = () => guard('#lim-status', async () => {
      const d = await loadLimits();
      render(d);
      // A leased limit's leases change as calls come: follow them.
      if (visible && !timer && d.limits.some((l) => l.lease)) timer = setInterval(refresh, 2000);
      return d.limits.length ? '' : 'No limits are configured.';
    });
    return {
      show() { visible = true; refresh(); },
      hide() { visible = false; clearInterval(timer); timer = 0; },
    };
  })();

  // ---- Key inspector -------------------------------------------------------
  const inspector = (() => {
    function descriptors() {
      const d = {};
      for (const i of $$('#ins-form [data-desc]')) if (i.value.trim()) d[i.dataset.desc] = i.value.trim();
      for (const line of $('#ins-extra').value.split('\n')) {
        const eq = line.indexOf('=');
        if (eq > 0) d[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
      }
      return d;
    }
    const auth = () => ({ Authorization: 'Bearer ' + $('#ins-token').value });

    function stateCell(s) {
      const share = s.limit ? s.remaining / s.limit : 0;
      const bar = el('span', { class: 'meter', 'aria-hidden': 'true' }, el('span'));
      bar.firstChild.style.width = (100 * share).toFixed(1) + '%';
      const text = s.level !== undefined
        ? `${s.level.toFixed(2)} of ${num(s.limit)} tokens`
        : s.concurrency ? `${num(s.used)} of ${num(s.limit)} in flight` : `${num(s.used)} of ${num(s.limit)} used`;
      const cell = el('td', { 'data-remaining': s.remaining }, `${text}, ${num(s.remaining)} left`, bar);
      // The store counts a lease whole when it is taken: what leases hold
      // unused shows as used here until it is paid out or returned.
      const lim = limitsCache && limitsCache.limits.find((l) => l.name === s.name);
      if (lim && lim.lease) {
        const amount = amountsOf(lim);
        cell.append(el('span', { class: 'small lease-note', text: `Leased: used counts each lease whole, unused parts included (this replica's leases of ${s.name} hold ${amount(lim.lease.unused)} unused, over all its keys).` }));
      }
      if (s.entries && s.entries.length) {
        cell.append(el('details', { class: 'entries' },
          el('summary', { text: `${s.entries.length} log entr${s.entries.length > 1 ? 'ies' : 'y'}` }),
          el('ol', {}, ...s.entries.map((e) => el('li', { text: `cost ${num(e.cost)}, ${secs(e.ago_ms)} ago` })))));
      }
      return cell;
    }

    async function inspect() {
      // The limits too: what their leases hold now (stateCell).
      const [d] = await Promise.all([api('/ui/api/inspect', { descriptors: descriptors() }, auth()), loadLimits()]);
      const table = $('#ins-table');
      table.hidden = !d.limits.length;
      setRows(table, d.limits.map((s) => el('tr', { 'data-limit': s.name },
        el('th', { scope: 'row' }, s.name, s.shadow ? ' (shadow)' : ''),
        el('td', {}, el('code', { text: s.key })),
        el('td', { text: s.policy }),
        stateCell(s),
        el('td', { text: s.reset_after_ms ? dur(s.reset_after_ms) : 'whole now' }))));
      return d.limits.length ? `Inspected at ${new Date(d.at_ms).toLocaleTimeString()}; nothing was charged.` : 'No limit selects these descriptors.';
    }
    async function reset() {
      const d = await api('/ui/api/reset', { descriptors: descriptors(), limit: $('#ins-limit').value }, auth());
      await inspect();
      return d.reset.length ? `Reset ${d.reset.length} budget${d.reset.length > 1 ? 's' : ''}: ${d.reset.join(', ')}` : 'No budget matched.';
    }
    $('#ins-form').addEventListener('submit', (ev) => { ev.preventDefault(); guard('#ins-status', inspect); });
    $('#ins-reset').addEventListener('click', () => guard('#ins-status', reset));
    return {
      show: () => guard('#ins-status', async () => {
        const d = await loadLimits();
        // Say that the inspector is off, and how to turn it on, before
        // anyone fills in the form.
        $('#ins-off').hidden = !d.inspector_off;
        $('#ins-off').textContent = d.inspector_off ? `The key inspector is off here: ${d.inspector_off}.` : '';
        for (const c of $$('#ins-form input, #ins-form select, #ins-form textarea, #ins-form button')) c.disabled = !!d.inspector_off;
        const sel = $('#ins-limit'), keep = sel.value;
        sel.replaceChildren(el('option', { value: '', text: 'every budget' }), ...d.limits.map((l) => el('option', { value: l.name, text: l.name })));
        sel.value = keep;
        return '';
      }),
    };
  })();

  // ---- Quota plane: Teams and API keys -------------------------------------
  // Both pages call the plane's admin API (/v1/admin/...) that tokenlimit
  // serve serves beside the dashboard, with the admin token typed in the
  // page's password field. The token lives there only, in the page's
  // memory: never in a cookie, storage or a URL, so a reload asks for it
  // again. The admin token fields of every page mirror each other.
  for (const f of $$('.admin-token')) {
    f.addEventListener('input', () => { for (const o of $$('.admin-token')) if (o !== f) o.value = f.value; });
  }

  // confirmAction asks in a modal dialog (not window.confirm, which blocks
  // the page); it resolves to whether OK was chosen. extra is an element
  // shown under the question, such as a choice.
  function confirmAction(text, ok, extra) {
    const d = $('#confirm');
    $('#confirm-text').textContent = text;
    $('#confirm-ok').textContent = ok;
    $('#confirm-extra').replaceChildren(...(extra ? [extra] : []));
    d.showModal();
    return new Promise((resolve) => {
      const done = (yes) => { d.close(); resolve(yes); };
      $('#confirm-ok').onclick = () => done(true);
      $('#confirm-cancel').onclick = () => done(false);
      d.oncancel = (ev) => { ev.preventDefault(); done(false); };
    });
  }

  // labelsOf reads "name=value" lines; an empty line is skipped.
  function labelsOf(text) {
    const out = {};
    for (const line of text.split('\n').map((x) => x.trim()).filter(Boolean)) {
      const eq = line.indexOf('=');
      if (eq <= 0) throw new Error(`labels: want name=value on each line, got "${line}"`);
      out[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
    }
    return out;
  }
  // specOf builds a team's or key's spec from a create form's fields.
  function specOf(page, extra = {}) {
    const spec = { name: $(`#${page}-name`).value.trim(), plan: $(`#${page}-plan`).value.trim() || undefined, ...extra };
    const labels = labelsOf($(`#${page}-labels`).value);
    if (Object.keys(labels).length) spec.labels = labels;
    const limits = $(`#${page}-limits`).value.trim();
    if (limits) {
      try { spec.limits = JSON.parse(limits); } catch (e) { throw new Error(`limits: not JSON: ${e.message}`); }
    }
    return spec;
  }

  // amount writes v in a budget's unit.
  function amount(unit, v) {
    switch (unit) {
      case 'usd': return usd(v);
      case 'tokens': return `${num(v)} tokens`;
      case 'in_flight': return `${num(v)} in flight`;
      default: return `${num(v)} requests`;
    }
  }
  // budgetItem is one budget of a usage answer: its name and level, used
  // of limit as text and as a bar, and when it is whole again.
  function budgetItem(b) {
    const share = b.limit ? Math.min(1, b.used / b.limit) : 0;
    const bar = el('span', {
      class: 'meter used' + (b.remaining <= 0 ? ' spent' : ''), role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': b.limit,
      'aria-valuenow': b.used, 'aria-label': `${b.name}: ${amount(b.unit, b.used)} of ${amount(b.unit, b.limit)} used`,
    }, el('span'));
    bar.firstChild.style.width = (100 * share).toFixed(1) + '%';
    const left = new Date(b.reset) - Date.now();
    const level = b.level === 'key' ? 'the key' : b.level_name ? `${b.level} ${b.level_name}` : 'the configuration';
    return el('li', { 'data-limit': b.name, 'data-level': b.level, 'data-used': b.used, 'data-remaining': b.remaining },
      el('span', { class: 'budget-head' }, el('strong', { text: b.name }), el('span', { class: 'small', text: ` of ${level}` })),
      el('span', { text: `${amount(b.unit, b.used)} of ${amount(b.unit, b.limit)} used` }), bar,
      el('span', { class: 'small', text: b.used <= 0 ? 'whole' : left > 0 ? `whole again in ${dur(left)} (${new Date(b.reset).toLocaleTimeString()})` : 'whole again now' }));
  }
  function budgetsCell(u) {
    if (u instanceof Error) return el('td', { class: 'error', text: `usage: ${u.message}` });
    if (!u.limits.length) return el('td', { text: 'no budget applies' });
    return el('td', {}, el('ul', { class: 'budgets' }, ...u.limits.map(budgetItem)));
  }
  // spendCell is what the usd budgets counted this period.
  function spendCell(u) {
    const spend = u instanceof Error ? [] : u.limits.filter((b) => b.unit === 'usd');
    if (!spend.length) return el('td', { class: 'num', text: 'no spend budget' });
    return el('td', { class: 'num' }, ...spend.map((b) => el('span', { class: 'spend', 'data-limit': b.name, text: `${usd(b.used)} of ${usd(b.limit)} (${b.name})` })));
  }
  function labelsCell(r) {
    const ls = Object.entries(r.labels || {});
    return el('td', {}, ls.length ? el('span', { class: 'labels' }, ...ls.map(([k, v]) => el('code', { text: `${k}=${v}` }))) : 'none');
  }
  const button = (text, label, cls, onClick) => {
    const b = el('button', { type: 'button', class: cls, 'aria-label': label, text });
    b.addEventListener('click', onClick);
    return b;
  };

  // planePage wires the Teams or the API keys page (o.name): the records
  // of o.path listed and searched (o.words are what a search matches),
  // each with its usage, refreshed every two seconds while the page is
  // shown; o.cells are a row's cells before its budgets, o.actions its
  // buttons, o.create makes a record from the create form, o.context is
  // what rows need beside the records (fetched with them).
  function planePage(o) {
    const id = (x) => `#${o.name}-${x}`;
    const noun = o.name === 'keys' ? 'key' : 'team';
    const rows = new Map(); // record id -> { tr, version }
    let timer = 0, running = null, again = false;
    const call = (method, path, body, headers = {}) =>
      request(method, path, body, { ...headers, Authorization: 'Bearer ' + $(id('token')).value });

    async function listAll(path, field) {
      const out = [];
      let after = '';
      do {
        const d = await call('GET', `${path}?limit=1000${after ? '&after=' + encodeURIComponent(after) : ''}`);
        out.push(...d[field]);
        after = d.next || '';
      } while (after);
      return out;
    }
    const MAX_ROWS = 100;
    async function load() {
      const [all, ctx] = await Promise.all([listAll(o.path, o.name), o.context ? o.context(listAll) : null]);
      const q = $(id('search')).value.trim().toLowerCase();
      const hits = all.filter((r) => !q || o.words(r).some((w) => String(w).toLowerCase().includes(q)))
        .sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
      const shown = hits.slice(0, MAX_ROWS);
      const usages = await Promise.all(shown.map((r) => call('GET', `${o.path}/${encodeURIComponent(r.id)}/usage`).catch((e) => e)));
      const table = $(id('table')), seen = new Set();
      // A row is built once per version of its record; a refresh replaces
      // only the cells that changed, and moves no row that stays in place,
      // so that a button being clicked is never taken out of the page.
      const trs = shown.map((r, i) => {
        seen.add(r.id);
        const cells = [...o.cells(r, ctx), budgetsCell(usages[i]), spendCell(usages[i])];
        labelCells(table, cells);
        let row = rows.get(r.id);
        if (!row || row.version !== r.version) {
          const actions = el('td', { class: 'actions' }, ...o.actions(r));
          row = { tr: el('tr', { 'data-id': r.id, 'data-name': r.name }, ...cells, actions), version: r.version };
          labelCells(table, row.tr.cells);
          rows.set(r.id, row);
          return row.tr;
        }
        cells.forEach((c, j) => { if (row.tr.cells[j].outerHTML !== c.outerHTML) row.tr.cells[j].replaceWith(c); });
        return row.tr;
      });
      for (const k of rows.keys()) if (!seen.has(k)) rows.delete(k);
      const body = table.tBodies[0];
      if (trs.length !== body.rows.length || trs.some((tr, i) => body.rows[i] !== tr)) body.replaceChildren(...trs);
      table.hidden = !trs.length;
      let summary = `${hits.length} of ${all.length} ${noun}${all.length === 1 ? '' : 's'}`;
      if (hits.length > shown.length) summary += `; the first ${MAX_ROWS} shown: narrow the search`;
      $(id('summary')).textContent = `${summary} · updated at ${new Date().toLocaleTimeString()}`;
    }
    // refresh loads the records again; called while a load runs, it runs
    // one more after it, and its promise settles once that one is shown.
    function refresh() {
      if (running) { again = true; return running; }
      running = (async () => {
        try { do { again = false; await load(); } while (again); } finally { running = null; }
      })();
      return running;
    }
    function stop() { clearInterval(timer); timer = 0; }
    // poll shows the records again every two seconds, until an error (such
    // as a wrong token) or leaving the page.
    function poll() {
      stop();
      timer = setInterval(() => refresh().catch((e) => { stop(); say(id('status'), e.message, true); }), 2000);
    }
    const start = () => guard(id('status'), async () => {
      stop();
      try { await refresh(); } catch (e) { $(id('table')).hidden = true; throw e; }
      poll();
      return '';
    });
    // act runs a change, then shows the records as they are after it. A
    // change the server refuses with 412 (the record was edited elsewhere
    // since the page showed it) changed nothing: the page says so and
    // shows the record as it is now, for the user to check and try again.
    const act = (fn) => guard(id('status'), async () => {
      let msg;
      try {
        msg = await fn();
      } catch (e) {
        if (e.status !== 412) throw e;
        await refresh();
        throw new Error(`Nothing was done: this ${noun} was changed elsewhere since the page showed it. ` +
          'The table shows it as it is now: check it and try again.');
      }
      if (msg === null) return '';
      await refresh();
      if (!timer) poll();
      return msg;
    });
    $(id('auth')).addEventListener('submit', (ev) => { ev.preventDefault(); start(); });
    $(id('search')).addEventListener('input', () => { if (timer) refresh().catch((e) => say(id('status'), e.message, true)); });
    $(id('create')).addEventListener('submit', (ev) => {
      ev.preventDefault();
      act(async () => {
        const msg = await o.create(call);
        $(id('create')).reset();
        return msg;
      });
    });
    return {
      call, act, refresh,
      show: () => guard(id('status'), async () => {
        const d = await loadLimits();
        // The plane's admin endpoints answer this browser under the same
        // conditions as the inspector's: say so before a token is typed.
        const off = d.plane_off || '';
        $(id('off')).hidden = !off;
        $(id('off')).textContent = off ? `This page is off here: ${off}.` : '';
        for (const c of $$(`#page-${o.name} form input, #page-${o.name} form select, #page-${o.name} form textarea, #page-${o.name} form button`)) c.disabled = !!off;
        if (!off && $(id('token')).value) start();
        return '';
      }),
      hide() { stop(); if (o.hide) o.hide(); },
    };
  }

  const teamsPage = (() => {
    const p = planePage({
      name: 'teams', path: '/v1/admin/teams',
      words: (t) => [t.name, t.plan || '', ...Object.entries(t.labels || {}).flatMap(([k, v]) => [k, v, `${k}=${v}`])],
      // How many keys each team has.
      context: async (listAll) => {
        const n = new Map();
        for (const k of await listAll('/v1/admin/keys', 'keys')) if (k.team) n.set(k.team, (n.get(k.team) || 0) + 1);
        return n;
      },
      cells: (t, keys) => [
        el('th', { scope: 'row' }, t.name, t.disabled ? ' ' : '', t.disabled ? el('span', { class: 'badge warn', text: 'disabled' }) : ''),
        el('td', { text: t.plan || 'the default' }), labelsCell(t), el('td', { class: 'num', text: num(keys.get(t.id) || 0) })],
      actions: (t) => [button('Delete', `Delete team ${t.name}`, 'secondary danger', () => p.act(async () => {
        if (!(await confirmAction(`Delete team ${t.name}? A team that keys still name cannot be deleted.`, 'Delete'))) return null;
        await p.call('DELETE', `/v1/admin/teams/${encodeURIComponent(t.id)}`, undefined, { 'If-Match': `"${t.version}"` });
        return `Deleted team ${t.name}.`;
      }))],
      create: async (call) => {
        const t = await call('POST', '/v1/admin/teams', specOf('teams'));
        return `Created team ${t.name}.`;
      },
    });
    return p;
  })();

  const keysPage = (() => {
    // showSecret shows a secret once, with a Copy button; Done (or leaving
    // the page) removes it from the page, and nothing else keeps it.
    function showSecret(what, secret) {
      $('#keys-secret-what').textContent = what;
      $('#keys-secret-value').value = secret;
      $('#keys-secret').hidden = false;
      $('#keys-copy').focus();
    }
    function hideSecret() {
      $('#keys-secret-value').value = '';
      $('#keys-secret').hidden = true;
    }
    $('#keys-secret-done').addEventListener('click', () => { hideSecret(); say('#keys-status', ''); });
    $('#keys-copy').addEventListener('click', () => guard('#keys-status', async () => {
      const input = $('#keys-secret-value');
      try {
        await navigator.clipboard.writeText(input.value);
      } catch (e) { // no clipboard API here (not a secure context)
        input.select();
        if (!document.execCommand('copy')) throw new Error('Could not copy: select the secret and copy it yourself.');
      }
      return 'Copied the secret.';
    }));
    const grace = () => el('div', { class: 'field' }, el('label', { for: 'confirm-grace', text: 'The old secret stays valid' }),
      el('select', { id: 'confirm-grace' }, el('option', { value: '', text: 'no longer: refuse it now' }),
        el('option', { value: '1h', text: 'for one hour' }), el('option', { value: '24h', text: 'for a day' })));
    const p = planePage({
      name: 'keys', path: '/v1/admin/keys', hide: hideSecret,
      words: (k) => [k.name, k.id, k.team || '', ...Object.entries(k.labels || {}).flatMap(([n, v]) => [n, v, `${n}=${v}`])],
      // The teams, for the create form's choice.
      context: async (listAll) => {
        const teams = await listAll('/v1/admin/teams', 'teams');
        const sel = $('#keys-team'), keep = sel.value, names = teams.map((t) => t.id);
        if (Array.from(sel.options).slice(1).map((x) => x.value).join('\n') !== names.join('\n')) {
          sel.replaceChildren(el('option', { value: '', text: 'no team' }), ...names.map((n) => el('option', { value: n, text: n })));
          sel.value = names.includes(keep) ? keep : '';
        }
        return null;
      },
      cells: (k) => {
        const badges = [];
        if (k.disabled) badges.push(el('span', { class: 'badge warn', text: 'disabled' }));
        if (k.expires_at) badges.push(el('span', { class: 'small', text: `expires ${new Date(k.expires_at).toLocaleString()}` }));
        if (k.previous_valid_until && new Date(k.previous_valid_until) > Date.now()) {
          badges.push(el('span', { class: 'small', text: `old secret valid until ${new Date(k.previous_valid_until).toLocaleString()}` }));
        }
        return [el('th', { scope: 'row' }, el('span', { class: 'key-name', text: k.name }), el('code', { class: 'key-id', text: k.id }), ...badges),
          el('td', { text: k.team || 'none' }), labelsCell(k)];
      },
      actions: (k) => [
        button('Rotate', `Rotate key ${k.name}`, 'secondary', () => p.act(async () => {
          if (!(await confirmAction(`Give key ${k.name} a new secret?`, 'Rotate', grace()))) return null;
          const r = await p.call('POST', `/v1/admin/keys/${encodeURIComponent(k.id)}/rotate`, { grace: $('#confirm-grace').value || undefined }, { 'If-Match': `"${k.version}"` });
          showSecret(`New secret of key ${r.name} (${r.id}).`, r.secret);
          return `Rotated key ${r.name}.`;
        })),
        button('Revoke', `Revoke key ${k.name}`, 'secondary danger', () => p.act(async () => {
          if (!(await confirmAction(`Revoke key ${k.name}? Calls with its secret are refused from now on; this cannot be undone.`, 'Revoke'))) return null;
          await p.call('DELETE', `/v1/admin/keys/${encodeURIComponent(k.id)}`, undefined, { 'If-Match': `"${k.version}"` });
          return `Revoked key ${k.name} (${k.id}).`;
        })),
      ],
      create: async (call) => {
        const k = await call('POST', '/v1/admin/keys', specOf('keys', { team: $('#keys-team').value || undefined }));
        showSecret(`Secret of the new key ${k.name} (${k.id}).`, k.secret);
        return `Created key ${k.name}.`;
      },
    });
    return p;
  })();

  // ---- Simulators: one sandbox session for the page ------------------------
  const sim = { session: '' };

  // simulator wires a simulator page: call(action, extra) posts to its
  // endpoint and renders the answer, dropping answers older than the one
  // shown.
  function simulator(path, statusId, params, render) {
    let sent = 0, shown = 0;
    const s = { state: null, at: 0 };
    s.call = (action, extra = {}) => guard(statusId, async () => {
      const seq = ++sent;
      const a = await api(path, { session: sim.session, action, ...params(), ...extra });
      sim.session = a.session;
      if (seq < shown) return '';
      shown = seq;
      s.state = a;
      s.at = performance.now();
      render(a, action);
      return '';
    });
    return s;
  }
  const serverNow = (s) => s.state.now_ms + (performance.now() - s.at);

  function logItem(e, t0, what) {
    const verdict = e.allowed ? 'ALLOW' : 'DENY';
    let detail = e.allowed ? ` · ${num(e.remaining)} left` : ` · retry after ${secs(e.retry_after_ms)}`;
    if (e.cost_exceeds_limit) detail = ' · costs more than the limit can ever admit';
    return el('li', { class: e.allowed ? 'allow' : 'deny', 'data-allowed': String(e.allowed), 'data-retry-ms': e.retry_after_ms },
      `#${e.n} ${what}`, el('span', { class: e.allowed ? 'verdict-allow' : 'verdict-deny', text: verdict }),
      ` at t+${((e.at_ms - t0) / 1000).toFixed(2)} s${detail}`);
  }

  // ---- Sliding window --------------------------------------------------------
  const windowSim = (() => {
    let frame = 0, timer = 0, t0 = null;
    const params = () => ({ limit: int('#win-limit'), window_ms: ms('#win-window') });
    const s = simulator('/ui/api/sim/window', '#win-status', params, (a, action) => {
      if (action === 'reset' || !a.log.length) t0 = null;
      if (a.log.length && t0 === null) t0 = a.log[0].at_ms;
      $('#win-count').textContent = `${a.limit - a.remaining}/${a.limit}`;
      $('#win-from').textContent = `now − ${dur(params().window_ms)}`;
      $('#win-log').replaceChildren(...a.log.slice().reverse().map((e) => logItem(e, t0, '')));
      draw();
    });
    // draw places the window's requests on the track, moving as time passes.
    function draw() {
      cancelAnimationFrame(frame);
      frame = 0;
      if (!s.state) return;
      const w = params().window_ms, now = serverNow(s);
      const inside = s.state.log.filter((e) => e.at_ms > now - w);
      $('#win-track').replaceChildren(...inside.map((e) => {
        const d = el('span', { class: e.allowed ? 'dot' : 'dot deny', title: `#${e.n} ${e.allowed ? 'allowed' : 'denied'}` });
        d.style.left = (100 * (e.at_ms - (now - w)) / w).toFixed(2) + '%';
        return d;
      }));
      if (inside.length && !$('#page-window').hidden) frame = requestAnimationFrame(draw);
    }
    $('#win-send').addEventListener('click', () => s.call('send'));
    $('#win-reset').addEventListener('click', () => s.call('reset'));
    for (const id of ['#win-limit', '#win-window']) $(id).addEventListener('change', () => s.call('peek'));
    return {
      show() {
        s.call('peek');
        // Requests leave the window as time passes: refresh the count.
        timer = setInterval(() => { if (s.state && s.state.remaining < s.state.limit) s.call('peek'); }, 500);
      },
      hide() { clearInterval(timer); cancelAnimationFrame(frame); },
    };
  })();

  // ---- Token bucket ------------------------------------------------------------
  const bucketSim = (() => {
    let timer = 0, t0 = null;
    const params = () => ({ capacity: int('#bkt-capacity'), refill: int('#bkt-refill'), per_ms: ms('#bkt-per') });
    const s = simulator('/ui/api/sim/bucket', '#bkt-status', params, (a, action) => {
      if (action === 'reset' || !a.log.length) t0 = null;
      if (a.log.length && t0 === null) t0 = a.log[0].at_ms;
      const level = a.level;
      $('#bkt-level').textContent = `${level.toFixed(2)} / ${a.limit}`;
      $('#bkt-fill').style.height = (100 * level / a.limit).toFixed(2) + '%';
      const g = $('#bkt-gauge');
      g.setAttribute('aria-valuemax', a.limit);
      g.setAttribute('aria-valuenow', level.toFixed(2));
      $('#bkt-full').textContent = a.reset_after_ms ? `full in ${secs(a.reset_after_ms)}` : 'full';
      $('#bkt-log').replaceChildren(...a.log.slice().reverse().map((e) => logItem(e, t0, `${e.kind} (cost ${e.cost}): `)));
    });
    const send = (kind, costId) => s.call('send', { kind, cost: int(costId) });
    $('#bkt-chat').addEventListener('click', () => send('Chat', '#bkt-chat-cost'));
    $('#bkt-embed').addEventListener('click', () => send('Embed', '#bkt-embed-cost'));
    $('#bkt-reset').addEventListener('click', () => s.call('reset'));
    for (const id of ['#bkt-capacity', '#bkt-refill', '#bkt-per']) $(id).addEventListener('change', () => s.call('peek'));
    const labels = () => {
      $('#bkt-chat').textContent = `Chat (cost ${int('#bkt-chat-cost')})`;
      $('#bkt-embed').textContent = `Embed (cost ${int('#bkt-embed-cost')})`;
    };
    for (const id of ['#bkt-chat-cost', '#bkt-embed-cost']) $(id).addEventListener('input', labels);
    labels();
    return {
      show() {
        s.call('peek');
        // The gauge refills live: peek (cost 0) while the bucket is not full.
        timer = setInterval(() => { if (s.state && s.state.reset_after_ms > 0) s.call('peek'); }, 250);
      },
      hide() { clearInterval(timer); },
    };
  })();

  // ---- The race ----------------------------------------------------------------
  const race = (() => {
    let ran = false;
    function panel(id, r, a) {
      const p = $(id), over = r.admitted - a.limit;
      p.dataset.admitted = r.admitted;
      const v = p.querySelector('.verdict');
      v.textContent = `${r.admitted} admitted, limit ${a.limit}`;
      v.className = 'big verdict ' + (over > 0 ? 'verdict-deny' : 'verdict-allow');
      const waves = new Set(r.requests.map((q) => q.wave)).size;
      p.querySelector('.explain').textContent = over > 0
        ? `Over-admitted by ${over}: in each wave the replicas' reads crossed, so every request saw room before any increment landed.`
        : `Exactly ${r.admitted === a.limit ? 'the limit' : 'the requests sent'}: each check read and charged in one step (${waves} wave${waves > 1 ? 's' : ''}).`;
      p.querySelector('.chips').replaceChildren(...r.requests.map((q, i) => el('li', {
        class: q.allowed ? 'allow' : 'deny', title: `replica ${q.replica}, wave ${q.wave}: saw ${q.saw} left, ${q.allowed ? 'admitted' : 'denied'}`,
        'aria-label': `request ${i + 1} from replica ${q.replica}: ${q.allowed ? 'admitted' : 'denied'}`, text: `${q.replica}${i + 1}`,
      })));
    }
    const run = () => guard('#race-status', async () => {
      ran = true;
      const a = await api('/ui/api/sim/race', { requests: int('#race-requests'), limit: int('#race-limit'), in_flight: int('#race-inflight') });
      panel('#race-naive', a.naive, a);
      panel('#race-atomic', a.atomic, a);
      return `${a.requests} requests from replicas A and B, ${a.in_flight} in flight each.`;
    });
    $('#race-form').addEventListener('submit', (ev) => { ev.preventDefault(); run(); });
    return { show() { if (!ran) run(); } };
  })();

  // ---- Five algorithms ---------------------------------------------------------
  const compare = (() => {
    let ran = false;
    const names = { fixed_window: 'Fixed window', sliding_log: 'Sliding log', sliding_counter: 'Sliding counter', token_bucket: 'Token bucket', gcra: 'GCRA' };
    function chart(a, run) {
      const W = 600, x = (t) => (t / a.duration_ms * W).toFixed(1);
      const top = Math.max(...a.requests.map((r) => r.cost));
      const kids = [svg('line', { class: 'grid-line', x1: 0, x2: W, y1: 100, y2: 100 })];
      for (let k = 1; k * a.window_ms < a.duration_ms; k++) kids.push(svg('line', { class: 'boundary', x1: x(k * a.window_ms), x2: x(k * a.window_ms), y1: 0, y2: 140 }));
      a.requests.forEach((r, i) => {
        const h = 8 + 28 * r.cost / top, ok = run.decisions[i].allowed;
        kids.push(svg('rect', { class: ok ? 'bar-allow' : 'bar-deny', x: x(r.t_ms), width: 2.5, y: ok ? 100 - h : 101, height: h }));
      });
      const pts = run.samples.map((p) => `${x(p.t_ms)},${(56 - 50 * p.remaining / a.limit).toFixed(1)}`);
      kids.push(svg('polyline', { class: 'l-remaining', points: pts.join(' ') }));
      const step = timeStep(a.duration_ms), marks = [];
      for (let t = 0; t <= a.duration_ms; t += step) marks.push([t / a.duration_ms, +(t / 1000).toFixed(1) + ' s']);
      const box = svg('svg', { viewBox: '0 0 600 140', preserveAspectRatio: 'none', role: 'img', 'aria-label': `${names[run.algorithm]}: decisions over time` });
      box.append(...tickLines(marks, W, 140), ...kids);
      return el('figure', { class: 'chart' }, box, ticks(marks));
    }
    function card(a, run) {
      const burst = run.max_in_window > a.limit;
      return el('div', { class: 'card', 'data-algorithm': run.algorithm, 'data-admitted': run.admitted_requests, 'data-max-in-window': run.max_in_window },
        el('h2', { text: names[run.algorithm] || run.algorithm }),
        el('p', { class: 'small' }, el('code', { text: run.policy })),
        el('p', {}, `Admitted ${run.admitted_requests} of ${a.requests.length} requests (cost ${run.admitted_cost}). Most in any ${dur(a.window_ms)}: `,
          el('strong', { class: burst ? 'verdict-deny' : '', text: `${run.max_in_window}` }), burst ? ` (the budget is ${a.limit} per window)` : ''),
        chart(a, run));
    }
    const run = () => guard('#cmp-status', async () => {
      ran = true;
      const a = await api('/ui/api/sim/compare', { pattern: $('#cmp-pattern').value, limit: int('#cmp-limit'), window_ms: ms('#cmp-window') });
      $('#cmp-grid').replaceChildren(...a.algorithms.map((r) => card(a, r)));
      return `${a.requests.length} requests over ${dur(a.duration_ms)}, the same for every algorithm.`;
    });
    $('#cmp-form').addEventListener('submit', (ev) => { ev.preventDefault(); run(); });
    $('#cmp-pattern').addEventListener('change', run);
    return { show() { if (!ran) run(); } };
  })();

  // ---- Pages -----------------------------------------------------------------------
  const pages = { overview, limits: limitsPage, inspector, teams: teamsPage, keys: keysPage, window: windowSim, bucket: bucketSim, race, compare };
  let current = null;
  function route() {
    let name = location.hash.slice(1);
    if (!(name in pages)) name = 'overview';
    if (name === current) return;
    if (current && pages[current].hide) pages[current].hide();
    const first = current === null;
    current = name;
    for (const n of Object.keys(pages)) $('#page-' + n).hidden = n !== name;
    for (const a of $$('.top a')) {
      if (a.getAttribute('href') === '#' + name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    document.title = `${$('#h-' + name).textContent} · tokenlimit`;
    if (!first) $('#main').focus({ preventScroll: true });
    if (pages[name].show) pages[name].show();
  }
  window.addEventListener('hashchange', route);
  route();
})();
