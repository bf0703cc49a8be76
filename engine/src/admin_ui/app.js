// The baesrv admin console: sign-in, the session list, a session's live
// timeline. Every figure comes from the admin JSON API (/admin/v1/…),
// called with the admin key the operator typed into this tab.

import { h, sessionHref, dateTime, listKeys } from './dom.js';
import { buildTimeline, renderTimeline, impliedState } from './timeline.js';

const KEY_SLOT = 'bae.console.adminKey';
const POLL_MS = 1000;
const POLL_IDLE_MS = 5000;
const $ = (id) => document.getElementById(id);

const state = {
  profiles: new Map(),
  keys: new Map(),
  listed: new Map(),
  creators: new Map(),
  list: { cursors: [''], page: 0, next: null },
  view: null,
};

// ---- the admin key (sessionStorage only) -----------------------------------

function adminKey() {
  return sessionStorage.getItem(KEY_SLOT);
}

function forgetKey(message) {
  sessionStorage.removeItem(KEY_SLOT);
  stopSession();
  state.profiles.clear();
  state.keys.clear();
  state.listed.clear();
  state.creators.clear();
  state.loaded = false;
  $('session-rows').replaceChildren();
  $('quota-rows').replaceChildren();
  $('quota-refused').textContent = '';
  $('traffic-rows').replaceChildren();
  $('traffic-overload').textContent = '';
  $('timeline').replaceChildren();
  showLogin(message || '');
}

class Unauthorized extends Error {}

/** GET an admin API path; a 401 sends the tab back to the sign-in form. */
async function api(path, params) {
  const key = adminKey();
  if (!key) throw new Unauthorized('no admin key');
  const qs = params ? '?' + new URLSearchParams(params).toString() : '';
  let resp;
  try {
    resp = await fetch(path + qs, {
      headers: { Authorization: 'Bearer ' + key, Accept: 'application/json' },
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
  } catch (e) {
    throw new Error('the server did not answer (' + e.message + ')');
  }
  if (resp.status === 401) {
    forgetKey('The server refused the admin key (401). Enter it again.');
    throw new Unauthorized('401');
  }
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  if (!resp.ok) {
    const detail = body && typeof body.detail === 'string' ? body.detail : resp.statusText;
    throw new Error(`${path}: ${resp.status} ${detail}`);
  }
  return body;
}

/** Every item of a paginated list. */
async function all(path) {
  const out = [];
  let cursor = '';
  for (let i = 0; i < 1000; i += 1) {
    const page = await api(path, { limit: '200', cursor });
    out.push(...(page.items || []));
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  return out;
}

function notice(text) {
  const n = $('notice');
  n.textContent = text || '';
  n.hidden = !text;
}

function announce(text) {
  $('announce').textContent = text;
}

function failed(e) {
  if (!(e instanceof Unauthorized)) notice(String(e.message || e));
}

// ---- views -----------------------------------------------------------------

function show(id) {
  for (const v of ['login-view', 'list-view', 'session-view', 'quota-view', 'traffic-view']) $(v).hidden = v !== id;
  for (const b of ['forget', 'nav-sessions', 'nav-quotas', 'nav-traffic']) $(b).hidden = id === 'login-view';
}

function showLogin(message) {
  show('login-view');
  $('login-error').textContent = message;
  $('key-input').value = '';
  $('key-input').focus();
}

async function signIn(e) {
  e.preventDefault();
  const key = $('key-input').value.trim();
  $('key-input').value = '';
  if (!key) return;
  sessionStorage.setItem(KEY_SLOT, key);
  try {
    await api('/admin/v1/profiles', { limit: '1' });
  } catch (err) {
    if (!(err instanceof Unauthorized)) {
      sessionStorage.removeItem(KEY_SLOT);
      showLogin(String(err.message || err));
    }
    return;
  }
  notice('');
  route();
}

/** `#/` (list, with filters in the query) or `#/s/<session id>`. */
function parseHash() {
  const hash = location.hash || '#/';
  const m = /^#\/s\/([^/?]+)$/.exec(hash);
  if (m) return { view: 'session', id: decodeURIComponent(m[1]) };
  if (hash === '#/quotas') return { view: 'quotas' };
  if (hash === '#/traffic') return { view: 'traffic' };
  const q = new URLSearchParams(hash.split('?')[1] || '');
  return { view: 'list', state: q.get('state') || '', profile: q.get('profile') || '', key: q.get('key') || '', limit: q.get('limit') || '50' };
}

async function route() {
  if (location.hash && !location.hash.startsWith('#/')) return;
  if (!adminKey()) return showLogin('');
  const r = parseHash();
  stopSession();
  try {
    await loadDirectory();
  } catch (e) {
    if (adminKey()) show('list-view');
    return failed(e);
  }
  if (r.view === 'session') return openSession(r.id);
  if (r.view === 'quotas') return openQuotas();
  if (r.view === 'traffic') return openTraffic();
  for (const [id, v] of [['f-state', r.state], ['f-profile', r.profile], ['f-key', r.key], ['f-limit', r.limit]]) $(id).value = v;
  if ($('f-limit').value === '') $('f-limit').value = '50';
  state.list = { cursors: [''], page: 0, next: null };
  show('list-view');
  loadPage();
}

/** Profile names and client keys, for filters and labels. */
async function loadDirectory(force) {
  if (state.loaded && !force) return;
  const [profiles, keys] = await Promise.all([all('/admin/v1/profiles'), all('/admin/v1/keys')]);
  state.profiles = new Map(profiles.map((p) => [p.id, p]));
  state.keys = new Map(keys.map((k) => [k.id, k]));
  state.loaded = true;
  const pick = $('f-profile');
  const pv = pick.value;
  pick.replaceChildren(h('option', { value: '' }, 'any'), ...profiles.map((p) => h('option', { value: p.id }, `${p.name} (${p.id})`)));
  pick.value = pv;
  const kpick = $('f-key');
  const kv = kpick.value;
  kpick.replaceChildren(h('option', { value: '' }, 'any'), ...keys.map((k) => h('option', { value: k.id }, `${k.name} (${k.prefix}\u2026)`)));
  kpick.value = kv;
}

// ---- session list ----------------------------------------------------------

function filtersToHash() {
  const q = new URLSearchParams();
  for (const [name, id] of [['state', 'f-state'], ['profile', 'f-profile'], ['key', 'f-key'], ['limit', 'f-limit']]) {
    if ($(id).value && !(name === 'limit' && $(id).value === '50')) q.set(name, $(id).value);
  }
  const s = q.toString();
  location.hash = '#/' + (s ? '?' + s : '');
}

/** The creating (or, for audit rows, requesting) key: the first event's. */
async function creatorOf(id) {
  if (state.creators.has(id)) return state.creators.get(id);
  const page = await api(`/admin/v1/sessions/${encodeURIComponent(id)}/events`, { limit: '1' });
  const first = (page.items || [])[0];
  const key = first ? first.client_key_id : null;
  state.creators.set(id, key);
  return key;
}

async function loadPage() {
  const seq = (state.listSeq = (state.listSeq || 0) + 1);
  const current = () => seq === state.listSeq;
  const l = state.list;
  const stateFilter = $('f-state').value;
  const profile = $('f-profile').value;
  const key = $('f-key').value;
  const params = { limit: $('f-limit').value, cursor: l.cursors[l.page] };
  if (stateFilter) params.state = stateFilter;
  $('list-summary').textContent = 'Loading\u2026';
  let page;
  try {
    page = await api('/admin/v1/sessions', params);
  } catch (e) {
    if (current()) $('list-summary').textContent = '';
    return current() && failed(e);
  }
  if (!current()) return;
  notice('');
  const items = page.items || [];
  for (const s of items) state.listed.set(s.id, s);
  let shown = items.filter((s) => !profile || s.profile_id === profile);
  if (key) {
    try {
      const owners = await Promise.all(shown.map((s) => creatorOf(s.id)));
      shown = shown.filter((s, i) => owners[i] === key);
    } catch (e) {
      return current() && failed(e);
    }
    if (!current()) return;
  }
  l.next = page.next_cursor || null;
  const filtered = profile || key;
  $('list-summary').textContent = filtered
    ? `${shown.length} of the ${items.length} sessions on this page match (profile and key filters apply in the browser; the admin API filters by state).`
    : `${items.length} session${items.length === 1 ? '' : 's'} on this page.`;
  $('session-rows').replaceChildren(...(shown.length ? shown.map(row) : [h('li', { class: 'empty' }, 'No sessions.')]));
  $('page-label').textContent = `Page ${l.page + 1}`;
  $('page-first').disabled = l.page === 0;
  $('page-prev').disabled = l.page === 0;
  $('page-next').disabled = !l.next;
  // Back from a session (Escape, the link, the browser): focus its row.
  const back = state.returnTo && [...$('session-rows').querySelectorAll('a.session-row')].find((a) => a.dataset.sessionId === state.returnTo);
  state.returnTo = null;
  if (back) back.focus();
}

function row(s) {
  const profile = state.profiles.get(s.profile_id);
  const creator = state.creators.get(s.id);
  return h('li', {},
    h('a', { class: 'session-row', href: sessionHref(s.id), 'data-nav': true, dataset: { sessionId: s.id } },
      h('span', { class: 'sid' }, s.id),
      h('span', { class: 'badge state-' + s.state }, s.state),
      h('span', { class: 'field' }, h('span', { class: 'k' }, 'profile '), profile ? profile.name : s.profile_id),
      h('span', { class: 'field' }, h('span', { class: 'k' }, 'created '), dateTime(s.created_at)),
      s.closed_at ? h('span', { class: 'field' }, h('span', { class: 'k' }, 'closed '), dateTime(s.closed_at)) : null,
      s.client_version ? h('span', { class: 'field' }, h('span', { class: 'k' }, 'client '), s.client_version) : null,
      creator ? h('span', { class: 'field' }, h('span', { class: 'k' }, 'key '), keyName(creator)) : null));
}

function keyName(id) {
  const k = state.keys.get(id);
  return k ? k.name : id;
}

// ---- one session -----------------------------------------------------------

function stopSession() {
  if (state.view && state.view.timer) clearTimeout(state.view.timer);
  state.view = null;
}

// ---- quotas (extension) ------------------------------------------------------

/**
 * Shows a view that reads one admin resource again every few seconds while
 * it is shown (the quotas and traffic views).
 */
async function openPolled(viewId, titleId, path, render) {
  show(viewId);
  const v = { timer: null };
  state.view = v;
  $(titleId).focus();
  const poll = async () => {
    if (state.view !== v) return;
    try {
      const body = await api(path);
      if (state.view !== v) return;
      notice('');
      render(body);
    } catch (e) {
      if (e instanceof Unauthorized) return;
      failed(e);
    }
    v.timer = setTimeout(poll, POLL_IDLE_MS);
  };
  await poll();
}

function openQuotas() {
  return openPolled('quota-view', 'quota-title', '/admin/v1/quotas', renderQuotas);
}

function renderQuotas(q) {
  const n = (x) => Number(x || 0).toLocaleString('en-US');
  const refused = Object.entries(q.refused || {}).map(([k, c]) => `${k.replace(/_/g, ' ')} ${n(c)}`);
  $('quota-refused').textContent = 'Refused since the server started: ' + (refused.join(' \u00b7 ') || 'none');
  const rows = (q.quotas || []).map((s) => {
    const l = s.quota || {};
    const u = s.usage || {};
    const who = s.scope === 'key' ? state.keys.get(s.id) : state.profiles.get(s.id);
    const of = (used, limit, what) => {
      if (limit === null || limit === undefined) return null;
      const over = Number(used || 0) >= Number(limit);
      return h('span', { class: 'field' + (over ? ' over' : '') }, h('span', { class: 'k' }, what + ' '), `${n(used)} of ${n(limit)}`);
    };
    const rate = l.requests_per_second === null || l.requests_per_second === undefined ? null
      : h('span', { class: 'field' }, h('span', { class: 'k' }, 'requests '), `${n(l.requests_per_second)}/s, burst ${n(l.burst)}, ${n(u.requests_available)} left`);
    const budget = of(u.tokens_used, l.token_budget, 'tokens');
    if (budget) budget.append(` this ${l.window} window (from ${dateTime(u.window_start)})`);
    return h('li', {},
      h('div', { class: 'session-row quota-row', dataset: { scope: s.scope, id: s.id } },
        h('span', { class: 'sid' }, who ? `${who.name} (${s.id})` : s.id),
        h('span', { class: 'badge' }, s.scope),
        of(u.open_sessions, l.max_open_sessions, 'open sessions'),
        rate,
        budget));
  });
  $('quota-rows').replaceChildren(...(rows.length ? rows : [h('li', { class: 'empty' }, 'No quotas are set.')]));
}

// ---- provider traffic (extension) -------------------------------------------

function openTraffic() {
  return openPolled('traffic-view', 'traffic-title', '/admin/v1/traffic', renderTraffic);
}

function renderTraffic(t) {
  const n = (x) => Number(x || 0).toLocaleString('en-US');
  const field = (what, text, cls) => h('span', { class: 'field' + (cls ? ' ' + cls : '') }, h('span', { class: 'k' }, what + ' '), text);
  const o = t.overload || {};
  const refused = Object.entries(o.refused || {}).map(([k, c]) => `${k.replace(/_/g, ' ')} ${n(c)}`);
  const bound = (x) => (x === null || x === undefined ? '' : ` of ${n(x)}`);
  $('traffic-overload').textContent = `Overload: waiting ${n(o.waiting)}${bound(o.max_waiting)} \u00b7 `
    + `store backlog ${n(o.store_backlog)}${bound(o.max_store_backlog)} \u00b7 `
    + 'refused since the server started: ' + (refused.join(' \u00b7 ') || 'none');
  const rows = (t.providers || []).map((p) => {
    const l = p.limits || {};
    const max = l.max_concurrent === null || l.max_concurrent === undefined ? '' : ` of ${n(l.max_concurrent)}`;
    const full = max !== '' && Number(p.in_flight || 0) >= Number(l.max_concurrent);
    const left = (x, what) => (x === null || x === undefined ? null : field(what + ' available', n(x)));
    // An entry with neither table is not watched: its figures stay zero.
    if (!p.limits && !p.retry) {
      return h('li', {},
        h('div', { class: 'session-row traffic-row', dataset: { entry: p.name } },
          h('span', { class: 'sid' }, p.name),
          h('span', { class: 'badge' }, 'no limits configured')));
    }
    return h('li', {},
      h('div', { class: 'session-row traffic-row', dataset: { entry: p.name } },
        h('span', { class: 'sid' }, p.name),
        p.limits ? null : h('span', { class: 'badge' }, 'retry only'),
        field('in flight', `${n(p.in_flight)}${max}`, full ? 'over' : ''),
        field('queued', n(p.queued)),
        field('retry waiting', n(p.retry_waiting)),
        field('oldest wait', `${n(p.oldest_wait_ms)} ms`),
        field('admitted', n(p.admitted_total)),
        field('expired', n(p.expired_total), Number(p.expired_total || 0) > 0 ? 'over' : ''),
        field('retries', n(p.retries_total)),
        left(p.requests_available, 'requests'),
        left(p.tokens_available, 'tokens')));
  });
  $('traffic-rows').replaceChildren(...(rows.length ? rows : [h('li', { class: 'empty' }, 'No limits configured.')]));
}

async function openSession(id) {
  show('session-view');
  const v = {
    id, events: [], seen: new Set(), anchor: '', timer: null, rendered: 0,
    ctx: { open: new Set(), keys: state.keys, gen: 1 },
  };
  state.view = v;
  state.returnTo = id;
  $('session-title').textContent = 'Session ' + id;
  $('timeline').replaceChildren();
  $('live').textContent = 'Loading events\u2026';
  renderMeta(v);
  $('session-title').focus();
  loadLineage(v);
  await poll(v);
}

/** The session's family tree (extension: where it came from, its forks). */
async function loadLineage(v) {
  try {
    v.lineage = await api(`/admin/v1/sessions/${encodeURIComponent(v.id)}/lineage`);
  } catch (e) {
    return failed(e);
  }
  if (state.view === v) renderMeta(v);
}

function sessionLink(id) {
  return h('a', { href: sessionHref(id), class: 'sid' }, id);
}

/** The meta rows of the family tree (nothing until it has loaded). */
function lineageRows(l) {
  if (!l) return [];
  const o = l.origin;
  const origin = !o ? 'created by a client'
    : o.kind === 'fork' ? ['forked from ', sessionLink(o.parent_session_id), ' after ', o.parent_event_id]
      : ['imported (source session ', o.source_session_id, ')'];
  const forks = (l.children || []).map((c, i) => [i ? ', ' : '', sessionLink(c.session_id)]);
  return [['Origin', origin], ['Forks', forks.length ? forks : '\u2014']];
}

/** Downloads the session's export document (the admin key is a header, so a plain link cannot). */
async function downloadExport() {
  const v = state.view;
  const key = adminKey();
  if (!v || !key) return;
  try {
    const resp = await fetch(`/admin/v1/sessions/${encodeURIComponent(v.id)}/export`, {
      headers: { Authorization: 'Bearer ' + key },
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
    if (!resp.ok) throw new Error(`export: ${resp.status} ${resp.statusText}`);
    const url = URL.createObjectURL(await resp.blob());
    const a = h('a', {}, '');
    a.href = url;
    a.download = `${v.id}.bae.jsonl`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    announce('Export downloaded');
  } catch (e) {
    failed(e);
  }
}

/**
 * Reads every event after the last one seen. The cursor is opaque and the
 * last page's `next_cursor` is null, so the anchor is kept one event behind
 * the end: a page from it starts with an event already seen, and any more
 * are new. (Re-reading that one event is the cost of not parsing cursors.)
 */
async function pull(v) {
  for (let i = 0; i < 10000; i += 1) {
    const path = `/admin/v1/sessions/${encodeURIComponent(v.id)}/events`;
    const page = await api(path, { limit: '200', cursor: v.anchor });
    const items = page.items || [];
    for (const ev of items) {
      if (!v.seen.has(ev.id)) {
        v.seen.add(ev.id);
        v.events.push(ev);
      }
    }
    if (page.next_cursor) {
      v.anchor = page.next_cursor;
      continue;
    }
    if (items.length >= 2) {
      const back = await api(path, { limit: String(items.length - 1), cursor: v.anchor });
      if (back.next_cursor) v.anchor = back.next_cursor;
    }
    return;
  }
}

async function poll(v) {
  if (state.view !== v) return;
  if (document.hidden) {
    v.timer = setTimeout(() => poll(v), POLL_MS);
    return;
  }
  try {
    await pull(v);
    notice('');
  } catch (e) {
    if (e instanceof Unauthorized) return;
    failed(e);
  }
  if (state.view !== v) return;
  const fresh = v.events.length - v.rendered;
  if (fresh > 0) {
    await loadUsage(v);
    renderTimeline($('timeline'), buildTimeline(v.events), v.ctx);
    renderMeta(v);
    if (v.rendered) announce(`${fresh} new event${fresh > 1 ? 's' : ''}`);
    v.rendered = v.events.length;
  }
  const live = impliedState(v.events) === 'open';
  const now = new Date().toISOString().slice(11, 19);
  $('live').textContent = `${v.events.length} events \u00b7 ${live ? 'live' : 'ended'}: checked for new events at ${now} UTC, every ${(live ? POLL_MS : POLL_IDLE_MS) / 1000} s`;
  v.timer = setTimeout(() => poll(v), live ? POLL_MS : POLL_IDLE_MS);
}

/** The session's provider tokens (total and by turn), for the meta list and
 * the turns; a failure leaves the figures out rather than the page. */
async function loadUsage(v) {
  try {
    const u = await api(`/admin/v1/sessions/${encodeURIComponent(v.id)}/usage`);
    v.usage = u;
    v.ctx.usage = new Map((u.by_turn || []).map((t) => [t.turn_event_id, t]));
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
  }
}

/** `12 calls · 1,234 in · 5,678 cache read · 90 cache write · 321 out · cost 0.0123`. */
function tokensLine(u) {
  if (!u) return '';
  const n = (x) => Number(x || 0).toLocaleString('en-US');
  const parts = [`${n(u.calls)} call${u.calls === 1 ? '' : 's'}`, `${n(u.input_tokens)} in`,
    `${n(u.cache_read_tokens)} cache read`, `${n(u.cache_write_tokens)} cache write`, `${n(u.output_tokens)} out`];
  if (u.cost !== null && u.cost !== undefined) parts.push(`cost ${u.cost}`);
  return parts.join(' \u00b7 ');
}

function renderMeta(v) {
  const listed = state.listed.get(v.id);
  const creator = v.events[0] ? v.events[0].client_key_id : null;
  const profile = listed && state.profiles.get(listed.profile_id);
  const rows = [
    ['State', impliedState(v.events) || (listed ? listed.state : '?')],
    ['Profile', profile ? `${profile.name} (${profile.id})` : listed ? listed.profile_id : '\u2014'],
    ['Creator key', creator ? (state.keys.get(creator) ? `${state.keys.get(creator).name} (${creator})` : creator) : '\u2014'],
    ['Created', dateTime(listed ? listed.created_at : v.events[0] && v.events[0].created_at)],
    ['Closed', dateTime(listed && listed.closed_at)],
    ...lineageRows(v.lineage),
  ];
  if (v.usage) rows.push(['Provider tokens', tokensLine(v.usage.total) || '\u2014']);
  $('session-meta').replaceChildren(...rows.flatMap(([k, val]) => [h('dt', {}, k), h('dd', {}, val)]));
}

function setAllCalls(open) {
  const v = state.view;
  if (!v) return;
  for (const d of $('timeline').querySelectorAll('details.tool-call')) d.open = open;
}

// ---- wiring ----------------------------------------------------------------

function init() {
  $('login-form').addEventListener('submit', signIn);
  $('forget').addEventListener('click', () => forgetKey('Key forgotten. Enter it again to continue.'));
  $('filters').addEventListener('submit', (e) => e.preventDefault());
  $('filters').addEventListener('change', () => filtersToHash());
  $('refresh').addEventListener('click', async () => {
    try {
      await loadDirectory(true);
    } catch (e) {
      return failed(e);
    }
    loadPage();
  });
  $('page-first').addEventListener('click', () => { state.list.page = 0; loadPage(); });
  $('page-prev').addEventListener('click', () => { state.list.page = Math.max(0, state.list.page - 1); loadPage(); });
  $('page-next').addEventListener('click', () => {
    const l = state.list;
    if (!l.next) return;
    l.cursors[l.page + 1] = l.next;
    l.cursors.length = l.page + 2;
    l.page += 1;
    loadPage();
  });
  $('expand-all').addEventListener('click', () => setAllCalls(true));
  $('collapse-all').addEventListener('click', () => setAllCalls(false));
  $('download-export').addEventListener('click', downloadExport);
  window.addEventListener('hashchange', route);
  listKeys(document, () => {
    if (!$('session-view').hidden || !$('quota-view').hidden || !$('traffic-view').hidden) location.hash = '#/';
  });
  route();
}

init();
