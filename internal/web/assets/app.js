// DiStash console: polls /status.json every second, redraws the tables
// and keeps the charts' history in the page (rates are differences of
// successive counters divided by the time between the two polls).
// Plain JavaScript and SVG: no build step, no library, no network access
// beyond this server (the page's Content-Security-Policy says so).
'use strict';

(function () {
  const POLL_MS = 1000;            // how often the page asks
  const TIMEOUT_MS = 5000;         // a poll that takes longer is abandoned
  const WINDOW_MS = 5 * 60 * 1000; // what the charts show
  const SCHEMA = 1;                // the status document this page reads
  const COLORS = ['#2f6fdf', '#d1373f', '#1f9d55', '#d68a00', '#8e44ad', '#16a2b8', '#6c757d', '#e83e8c'];

  // The page's state, on window for tests and curious operators.
  const state = {
    polls: 0,        // status documents read
    errors: 0,       // polls that failed
    last: null,      // the last status document
    lastError: '',
    prev: null,      // the document before, and when it was read
    prevAt: 0,
    series: { tps: [], conflicts: [], p99: [], hitRate: {} }, // [{t, v}], v null for a gap
  };
  window.distashConsole = state;

  // ---- helpers ----

  function el(tag, props, children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === 'text') e.textContent = v;
        else if (k === 'class') e.className = v;
        else e.setAttribute(k, v);
      }
    }
    for (const c of children || []) {
      if (c !== null && c !== undefined) e.append(c);
    }
    return e;
  }

  function svgEl(tag, attrs) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  const numFmt = new Intl.NumberFormat('en-US');
  function count(n) { return numFmt.format(n); }

  function bytes(n) {
    if (!(n > 0)) return '0 B';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
  }

  function short(v) {
    if (v === null || v === undefined || !isFinite(v)) return 'n/a';
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    return String(+v.toPrecision(3)); // 8.93, 0.0042: small latencies keep their digits
  }

  function percent(num, den) {
    return den > 0 ? (100 * num / den).toFixed(1) + '%' : '-';
  }

  function ago(ms) {
    if (!(ms > 0)) return '';
    const s = Math.round(ms / 1000);
    if (s < 90) return s + ' s';
    if (s < 5400) return Math.round(s / 60) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  }

  function badge(text, kind) { return el('span', { class: 'badge ' + kind, text: text }); }

  function healthKind(h) {
    if (h === 'healthy' || h === 'alive') return 'ok';
    if (h === 'restarting') return 'warn';
    return 'bad';
  }

  // cell makes a table cell; field and value (the raw figure) let tests
  // and scripts read what the text shows in a friendlier form.
  function cell(content, opts) {
    opts = opts || {};
    const td = el('td', { class: opts.num ? 'num' : null, 'data-field': opts.field, 'data-value': opts.value, title: opts.title });
    if (content instanceof Node) td.append(content); else td.textContent = content;
    return td;
  }

  function capacityBar(used, capacity) {
    if (!(capacity > 0)) return el('span', { class: 'bar-label', text: bytes(used) + ' (no capacity limit)' });
    const frac = Math.max(0, used / capacity);
    const bar = el('span', { class: 'bar' + (frac >= 0.95 ? ' full' : frac >= 0.8 ? ' high' : ''), role: 'meter',
      'aria-valuemin': '0', 'aria-valuemax': String(capacity), 'aria-valuenow': String(used) });
    const fill = el('span');
    fill.style.width = Math.min(100, 100 * frac).toFixed(1) + '%';
    bar.append(fill);
    const pct = 100 * frac;
    return el('span', null, [bar, el('span', { class: 'bar-label', text: pct.toFixed(pct > 0 && pct < 1 ? 2 : 1) + '% of ' + bytes(capacity) })]);
  }

  function fillBody(table, rows) {
    const tbody = table.tBodies[0];
    tbody.replaceChildren(...rows);
    table.hidden = rows.length === 0;
  }

  function dl(container, pairs) {
    const list = container.querySelector('dl');
    const items = [];
    for (const [k, v, field, raw] of pairs) {
      items.push(el('dt', { text: k }));
      items.push(el('dd', { text: v, 'data-field': field, 'data-value': raw }));
    }
    list.replaceChildren(...items);
  }

  // ---- the figures a stash shows against its capacity ----

  // poolModes maps a pool's name to its mode (ephemeral or durable).
  function poolModes(st) {
    const m = {};
    for (const p of st.pools || []) m[p.name] = p.mode;
    return m;
  }

  // used is what a stash's capacity limits: ephemeral pools evict to keep
  // the engine's resident bytes within it, durable pools refuse commits
  // once their live bytes reach it.
  function used(s, mode) { return mode === 'ephemeral' ? s.engineBytes : s.bytes; }

  // ---- rendering ----

  function render(st) {
    const modes = poolModes(st);

    // Header.
    const sum = document.getElementById('summary');
    const parts = [
      ['committed version', String(st.committedVersion)],
      ['commits', count(st.commits)],
      ['pools', String((st.pools || []).length)],
      ['stashes', String((st.stashes || []).length)],
    ];
    if ((st.nodes || []).length > 0) {
      parts.push(['generation', String(st.generation)], ['controller', st.controller || '-']);
    }
    sum.replaceChildren(...parts.map(([k, v]) => el('span', null, [k + ' ', el('b', { text: v })])));

    // Ratekeeper, log, transaction counters.
    dl(document.getElementById('ratekeeper'), [
      ['limit', st.rateLimit > 0 ? count(Math.round(st.rateLimit)) + ' tx/s' : 'unlimited', 'rateLimit', st.rateLimit],
      ['reason', st.rateLimit > 0 ? (st.rateLimitReason || '-') : '-', 'rateLimitReason', st.rateLimitReason],
    ]);
    const log = st.log || {};
    const logRows = [
      ['replicas', String(log.replicas || 0), 'replicas', log.replicas],
      ['last version', String(log.lastVersion || 0), 'lastVersion', log.lastVersion],
      ['entries in memory', count(log.entriesInMemory || 0), 'entriesInMemory', log.entriesInMemory],
      ['bytes in memory', bytes(log.bytesInMemory || 0), 'bytesInMemory', log.bytesInMemory],
      ['spilled to disk', count(log.entriesSpilled || 0) + ' entries, ' + bytes(log.bytesSpilled || 0), 'bytesSpilled', log.bytesSpilled],
      ['popped up to', String(log.minPopped || 0), 'minPopped', log.minPopped],
    ];
    if (log.lastVersion > 0 && log.minPopped > 0) {
      // Versions are microseconds: how far back the log still holds.
      logRows.push(['holds the last', short(Math.max(0, log.lastVersion - log.minPopped) / 1e6) + ' s', 'held', null]);
    }
    if ((st.logReplicas || []).length) logRows.push(['on nodes', st.logReplicas.join(', '), 'logReplicas', null]);
    if (!st.log) logRows.splice(0, logRows.length, ['', 'no log replica in the answering process', null, null]);
    dl(document.getElementById('log'), logRows);
    const ctr = [
      ['commits', count(st.commits), 'commits', st.commits],
      ['conflicts', count(st.conflicts), 'conflicts', st.conflicts],
      ['too old', count(st.tooOld), 'tooOld', st.tooOld],
      ['pool full', count(st.poolFull), 'poolFull', st.poolFull],
      ['commit batches', count(st.commitBatches), 'commitBatches', st.commitBatches],
    ];
    for (const [k, f] of [['commit p50', 'commitP50Ms'], ['commit p99', 'commitP99Ms'], ['GRV p99', 'grvP99Ms'], ['read p99', 'readP99Ms']]) {
      ctr.push([k, f in st ? short(st[f]) + ' ms' : 'n/a', f, st[f]]);
    }
    if (st.lastRecoveryUnixMs > 0) {
      ctr.push(['last recovery', new Date(st.lastRecoveryUnixMs).toLocaleString() + ', took ' + (st.lastRecoveryMicros / 1000).toFixed(0) + ' ms', 'lastRecoveryUnixMs', st.lastRecoveryUnixMs]);
    }
    dl(document.getElementById('counters'), ctr);

    renderNodes(st);
    renderPools(st, modes);
    renderStashes(st, modes);
    renderDistribution(st);
  }

  function renderNodes(st) {
    const note = document.getElementById('nodes-note');
    const nodes = st.nodes || [];
    const rows = [];
    if (nodes.length === 0) {
      note.textContent = st.node
        ? 'This node alone (its roles below); the cluster-wide view needs the coordinators.'
        : 'Embedded cluster: one process holds every role (coordinator, log, sequencer, proxies, resolver, ratekeeper) and every stash.';
    } else {
      const down = nodes.filter(n => n.health !== 'alive').length;
      note.textContent = nodes.length + ' node(s), ' + (down ? down + ' unreachable' : 'all alive') + '.';
    }
    const list = nodes.length ? nodes : (st.node ? [Object.assign({ health: 'alive' }, st.node)] : []);
    for (const n of list) {
      let health = badge(n.health || '-', healthKind(n.health));
      if (n.health === 'unreachable' && n.unreachableMs > 0) health = el('span', null, [health, ' for ' + ago(n.unreachableMs)]);
      rows.push(el('tr', { 'data-node': n.id }, [
        cell(n.id, { field: 'id' }),
        cell(n.address, { field: 'address', title: n.machine ? 'machine ' + n.machine : null }),
        cell(n.class || '-', { field: 'class' }),
        cell(n.pool || '-', { field: 'pool' }),
        cell((n.dc || '-') + ' / ' + (n.zone || '-')),
        cell(health, { field: 'health', value: n.health }),
        cell(String(n.generation), { num: true, field: 'generation', value: n.generation }),
        cell(n.logDurableVersion > 0 ? String(n.logDurableVersion) : '-', { num: true, field: 'logDurableVersion', value: n.logDurableVersion }),
        cell(el('span', null, (n.roles || []).map(r => el('span', { class: 'role', text: r }))), { field: 'roles', value: (n.roles || []).join(',') }),
      ]));
    }
    fillBody(document.getElementById('nodes'), rows);
  }

  function renderPools(st, modes) {
    const rows = [];
    for (const p of st.pools || []) {
      const stashes = (st.stashes || []).filter(s => s.pool === p.name);
      let keys = 0, b = 0, u = 0, cap = 0, hits = 0, misses = 0, ev = 0;
      for (const s of stashes) {
        keys += s.keys; b += s.bytes; u += used(s, p.mode); hits += s.hits; misses += s.misses; ev += s.evictions;
        cap += s.capacityBytes > 0 ? s.capacityBytes : p.capacityBytes;
      }
      const eph = p.mode === 'ephemeral';
      rows.push(el('tr', { 'data-pool': p.name }, [
        cell(p.name, { field: 'name' }),
        cell(el('code', { text: p.prefix }), { field: 'prefix', value: p.prefix }),
        cell(p.medium, { field: 'medium' }),
        cell(p.mode, { field: 'mode' }),
        cell(p.engine, { field: 'engine' }),
        cell(String(p.stashes), { num: true, field: 'stashes', value: p.stashes }),
        cell(String(p.replication), { num: true, field: 'replication', value: p.replication }),
        cell(count(keys), { num: true, field: 'keys', value: keys, title: 'over its stashes, each replica counted' }),
        cell(bytes(b), { num: true, field: 'bytes', value: b, title: 'live key+value bytes over its stashes' }),
        cell(capacityBar(u, cap), { field: 'used', value: u, title: eph ? 'engine bytes against capacity (evicts to stay within)' : 'live bytes against capacity (commits refused when full)' }),
        cell(eph ? percent(hits, hits + misses) : '-', { num: true, field: 'hitRate' }),
        cell(eph ? count(ev) : '-', { num: true, field: 'evictions', value: ev }),
      ]));
    }
    fillBody(document.getElementById('pools'), rows);
  }

  function renderStashes(st, modes) {
    const rows = [];
    const counters = [];
    for (const s of st.stashes || []) {
      const mode = modes[s.pool];
      const eph = mode === 'ephemeral';
      let health = badge(s.health || '-', healthKind(s.health));
      const extra = [];
      if (s.restarts > 0) extra.push(s.restarts + ' restart(s)');
      if (s.excluded) extra.push('excluded');
      if (extra.length) health = el('span', null, [health, ' ' + extra.join(', ')]);
      const lag = s.version > 0 && st.committedVersion > 0 ? Math.max(0, st.committedVersion - s.version) / 1000 : null;
      rows.push(el('tr', { 'data-stash': String(s.id) }, [
        cell(String(s.id), { num: true, field: 'id', value: s.id }),
        cell(s.pool + '-' + s.index, { field: 'name', title: mode }),
        cell(health, { field: 'health', value: s.health, title: s.lastError ? 'last failure: ' + s.lastError : null }),
        cell(s.node ? s.node : '-', { field: 'node', title: s.address || null }),
        cell(count(s.keys), { num: true, field: 'keys', value: s.keys }),
        cell(bytes(s.bytes), { num: true, field: 'bytes', value: s.bytes }),
        cell(capacityBar(used(s, mode), s.capacityBytes), { field: 'used', value: used(s, mode) }),
        cell(count(s.reads), { num: true, field: 'reads', value: s.reads }),
        cell(eph ? count(s.hits) : '-', { num: true, field: 'hits', value: s.hits }),
        cell(eph ? count(s.misses) : '-', { num: true, field: 'misses', value: s.misses }),
        cell(eph ? percent(s.hits, s.hits + s.misses) : '-', { num: true, field: 'hitRate' }),
        cell(eph ? count(s.evictions) : '-', { num: true, field: 'evictions', value: s.evictions }),
        cell(count(s.filterNegatives), { num: true, field: 'filterNegatives', value: s.filterNegatives, title: 'absent-key reads answered by a Bloom filter' }),
        cell(bytes(s.windowBytes), { num: true, field: 'windowBytes', value: s.windowBytes }),
        cell(lag === null ? '-' : short(lag) + ' ms', { num: true, field: 'lag', value: lag, title: 'committed version minus its applied version' }),
        cell(String(s.shards) + (s.fetching > 0 ? ' (' + s.fetching + ' fetching)' : ''), { num: true, field: 'shards', value: s.shards }),
      ]));
      if ((s.engineCounters || []).length) {
        const text = s.engineCounters.map(c => c.name.replace(/_/g, ' ') + ' ' + (/_bytes$/.test(c.name) ? bytes(c.value) : count(c.value))).join(', ');
        counters.push(el('p', { class: 'counters' }, [el('b', { text: s.pool + '-' + s.index + ': ' }), text]));
      }
      if (s.lastError) {
        counters.push(el('p', { class: 'counters warning', text: s.pool + '-' + s.index + ' is ' + s.health + '; last failure: ' + s.lastError }));
      }
    }
    fillBody(document.getElementById('stashes'), rows);
    document.getElementById('engine-counters').replaceChildren(...counters);
  }

  function renderDistribution(st) {
    const rows = [], moves = [];
    for (const d of st.distribution || []) {
      rows.push(el('tr', { 'data-pool': d.pool }, [
        cell(d.pool, { field: 'pool' }),
        cell(count(d.shards), { num: true, field: 'shards', value: d.shards }),
        cell(count(d.teams), { num: true, field: 'teams', value: d.teams }),
        cell(String(d.replication), { num: true, field: 'replication', value: d.replication }),
        cell(bytes(d.bytes), { num: true, field: 'bytes', value: d.bytes }),
        cell(count(d.underReplicated), { num: true, field: 'underReplicated', value: d.underReplicated }),
        cell(count(d.moving), { num: true, field: 'moving', value: d.moving }),
        cell(bytes(d.movingBytesLeft), { num: true, field: 'movingBytesLeft', value: d.movingBytesLeft }),
        cell(count(d.queued), { num: true, field: 'queued', value: d.queued }),
        cell(count(d.movesDone), { num: true, field: 'movesDone', value: d.movesDone }),
        cell(d.warning || '', { field: 'warning' }),
      ]));
      for (const r of d.queue || []) {
        moves.push(el('tr', null, [
          cell(d.pool), cell(r.inFlight ? 'moving' : 'queued'), cell(r.reason),
          cell(el('code', { text: '[' + r.begin + ', ' + r.end + ')' })),
          cell((r.from || []).join(',')), cell(r.reason === 'split' ? 'split' : (r.to || []).join(',')),
          cell(bytes(r.bytes), { num: true }),
        ]));
      }
    }
    document.getElementById('distribution-note').textContent = rows.length
      ? 'The data distributor\'s view: shards of each pool, the teams of stashes holding them, moves in flight and queued.'
      : 'No data distributor reported (it runs with the transaction roles).';
    fillBody(document.getElementById('distribution'), rows);
    fillBody(document.getElementById('moves'), moves);
  }

  // ---- history and charts ----

  function push(series, t, v) {
    series.push({ t: t, v: v });
    while (series.length && series[0].t < t - WINDOW_MS) series.shift();
  }

  // record adds this poll's points: rates since the previous poll.
  function record(st, at) {
    const prev = state.prev;
    const dt = (at - state.prevAt) / 1000;
    const t = Date.now();
    if (prev && dt > 0) {
      const rate = (a, b) => (a >= b ? (a - b) / dt : null); // a counter that went back restarted: a gap
      push(state.series.tps, t, rate(st.commits, prev.commits));
      push(state.series.conflicts, t, rate(st.conflicts, prev.conflicts));
      const modes = poolModes(st);
      const sums = doc => {
        const m = {};
        for (const s of doc.stashes || []) {
          if (modes[s.pool] !== 'ephemeral') continue;
          const x = m[s.pool] || (m[s.pool] = { hits: 0, misses: 0 });
          x.hits += s.hits; x.misses += s.misses;
        }
        return m;
      };
      const now = sums(st), before = sums(prev);
      for (const pool of Object.keys(now)) {
        const a = now[pool], b = before[pool] || { hits: 0, misses: 0 };
        const h = a.hits - b.hits, m = a.misses - b.misses;
        const series = state.series.hitRate[pool] || (state.series.hitRate[pool] = []);
        push(series, t, h >= 0 && m >= 0 && h + m > 0 ? 100 * h / (h + m) : null);
      }
    }
    if ('commitP99Ms' in st) push(state.series.p99, t, st.commitP99Ms);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // drawChart draws series ([{name, color, points}]) in the figure's SVG,
  // over the last WINDOW_MS; yMax fixes the scale (hit rates: 100).
  function drawChart(id, series, opts) {
    opts = opts || {};
    const fig = document.getElementById(id);
    const svg = fig.querySelector('svg');
    const W = Math.max(200, Math.round(svg.clientWidth || 400)), H = 160;
    const L = 42, R = 8, T = 8, B = 18;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const now = Date.now();
    let max = 0, n = 0, last = null;
    for (const s of series) {
      for (const p of s.points) if (p.v !== null && isFinite(p.v)) max = Math.max(max, p.v);
      n = Math.max(n, s.points.length);
    }
    const yMax = opts.yMax || niceMax(max);
    const x = t => L + (W - L - R) * (1 - (now - t) / WINDOW_MS);
    const y = v => T + (H - T - B) * (1 - Math.min(v, yMax) / yMax);
    const kids = [];
    for (let i = 0; i <= 4; i++) {
      const v = yMax * i / 4, yy = y(v);
      kids.push(svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: yy, y2: yy }));
      const label = svgEl('text', { class: 'axis', x: L - 4, y: yy + 3, 'text-anchor': 'end' });
      label.textContent = short(v);
      kids.push(label);
    }
    // Time labels right to left, every minute or every other one when
    // narrow; the left edge (the window's start) goes unlabelled.
    const minutes = WINDOW_MS / 60000;
    const step = (W - L - R) / minutes < 60 ? 2 : 1;
    for (let m = 0; m < minutes; m += step) {
      const label = svgEl('text', { class: 'axis', x: x(now - m * 60000), y: H - 4, 'text-anchor': m === 0 ? 'end' : 'middle' });
      label.textContent = m === 0 ? 'now' : '-' + m + ' min';
      kids.push(label);
    }
    for (const s of series) {
      let d = '', pen = false;
      for (const p of s.points) {
        if (p.v === null || !isFinite(p.v)) { pen = false; continue; }
        d += (pen ? 'L' : 'M') + x(p.t).toFixed(1) + ' ' + y(p.v).toFixed(1);
        pen = true;
      }
      const path = svgEl('path', { class: 'series', d: d || 'M0 0', stroke: s.color, 'data-series': s.name, 'data-points': String(s.points.length) });
      kids.push(path);
      for (let i = s.points.length - 1; i >= 0; i--) {
        if (s.points[i].v !== null) { if (last === null) last = s.points[i].v; break; }
      }
    }
    if (opts.empty) {
      const t = svgEl('text', { class: 'empty', x: L + 10, y: H / 2 });
      t.textContent = opts.empty;
      kids.push(t);
    }
    svg.replaceChildren(...kids);
    fig.setAttribute('data-points', String(n));
    fig.setAttribute('data-max', String(max));
    fig.querySelector('[data-now]').textContent = opts.now !== undefined ? opts.now : short(last);
    const legend = fig.querySelector('[data-legend]');
    if (legend) {
      legend.replaceChildren(...series.map(s => {
        const sw = el('i');
        sw.style.background = s.color;
        const lv = s.points.length ? s.points[s.points.length - 1].v : null;
        return el('span', { 'data-series': s.name }, [sw, s.name + ' ' + (lv === null ? '-' : lv.toFixed(1) + '%')]);
      }));
    }
  }

  function drawCharts() {
    const s = state.series;
    drawChart('chart-tps', [{ name: 'commits', color: COLORS[0], points: s.tps }]);
    drawChart('chart-conflicts', [{ name: 'conflicts', color: COLORS[1], points: s.conflicts }]);
    const hasP99 = state.last && 'commitP99Ms' in state.last;
    drawChart('chart-p99', [{ name: 'commit p99', color: COLORS[3], points: s.p99 }],
      hasP99 ? {} : { now: 'n/a', empty: 'n/a: this server does not report commit latency' });
    const pools = Object.keys(s.hitRate).sort();
    drawChart('chart-hitrate', pools.map((p, i) => ({ name: p, color: COLORS[(i + 2) % COLORS.length], points: s.hitRate[p] })),
      { yMax: 100, now: pools.length ? undefined : 'n/a', empty: pools.length ? undefined : 'no ephemeral pool: no cache to hit' });
  }

  // ---- polling ----

  function setState(kind, text) {
    const s = document.getElementById('state');
    s.setAttribute('data-state', kind);
    s.textContent = text;
  }

  async function poll() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const resp = await fetch('/status.json', { cache: 'no-store', signal: ctl.signal });
      const doc = await resp.json().catch(() => ({ error: 'not JSON (HTTP ' + resp.status + ')' }));
      if (!resp.ok) throw new Error(doc.error || 'HTTP ' + resp.status);
      const at = performance.now();
      record(doc, at);
      state.prev = doc;
      state.prevAt = at;
      state.last = doc;
      state.polls++;
      state.lastError = '';
      render(doc);
      setState('ok', (doc.schema === SCHEMA ? '' : 'schema ' + doc.schema + '? ') + 'updated ' + new Date().toLocaleTimeString());
    } catch (e) {
      state.errors++;
      state.lastError = e.name === 'AbortError' ? 'timed out' : String(e.message || e);
      setState('error', 'status unavailable: ' + state.lastError);
      // Rates need two successive documents: start again after a gap.
      state.prev = null;
    } finally {
      clearTimeout(timer);
    }
    drawCharts();
    setTimeout(poll, POLL_MS);
  }

  document.getElementById('window-minutes').textContent = String(WINDOW_MS / 60000);
  window.addEventListener('resize', drawCharts);
  poll();
})();
