// A session's timeline, built from its event log (EventViews in log
// order): turns, provider attempts, tool calls by dispatch, pauses,
// compactions, errors, and the session's lifecycle events.

import { h, clock, between, duration, pretty, clip, contentText, disclosure, rawJson } from './dom.js';

const DISPATCHES = ['client', 'mcp', 'sandbox', 'subagent'];
const DISPATCH_LABEL = { client: 'Client', mcp: 'MCP', sandbox: 'Sandbox', subagent: 'Subagent', other: 'Other' };

/** Reasons after which the session is in state `error` (spec 02 §3). */
const TERMINAL_ERRORS = new Set([
  'provider_config', 'all_providers_failed', 'loop_limit', 'profile_unavailable',
  'primary_provider_unavailable', 'tool_result_merge_invalid',
]);

function payload(ev) {
  return ev && ev.payload && typeof ev.payload === 'object' ? ev.payload : {};
}

function blocks(content) {
  return Array.isArray(content) ? content.filter((b) => b && typeof b === 'object') : [];
}

/** The state a log implies (`open` until a close or a terminal error). */
export function impliedState(events) {
  let state = events.length ? 'open' : '';
  for (const ev of events) {
    if (ev.event_type === 'session.close') state = 'closed';
    if (ev.event_type === 'session.error' && TERMINAL_ERRORS.has(payload(ev).reason)) state = 'error';
  }
  return state;
}

/** Groups the log into timeline items. */
export function buildTimeline(events) {
  const items = [];
  const calls = new Map();
  const pauses = [];
  let turn = null;
  let comp = null;
  let turns = 0;
  const top = (kind, ev) => items.push({ kind, key: kind + '-' + ev.id, events: [ev], ev });

  for (const ev of events) {
    const p = payload(ev);
    const type = ev.event_type;
    if (comp && !comp.done && !isCompactionPart(ev)) comp.done = true;
    switch (type) {
      case 'client.message.send': {
        turns += 1;
        turn = {
          kind: 'turn', key: 'turn-' + ev.id, index: turns, start: ev, events: [ev],
          attempts: [], tools: [], results: [], resumes: [], errors: [], other: [], reply: null, pause: null,
        };
        items.push(turn);
        for (const b of blocks(p.content)) {
          if (b.type !== 'tool_result') continue;
          turn.resumes.push(String(b.tool_use_id ?? ''));
          const call = calls.get(b.tool_use_id);
          if (call) call.resumedIn = turn;
        }
        for (const pause of pauses) {
          if (!pause.end && pause.ids.some((id) => turn.resumes.includes(id))) {
            pause.end = { how: 'resumed', ev, turn };
          }
        }
        break;
      }
      case 'session.compaction.started':
        comp = { kind: 'compaction', key: 'comp-' + ev.id, started: ev, completed: null, events: [ev], attempts: [], messages: [], errors: [], done: false };
        items.push(comp);
        break;
      case 'session.compaction.completed':
        if (comp) {
          comp.completed = ev;
          comp.events.push(ev);
          comp.done = true;
        } else top('event', ev);
        break;
      case 'provider.request': {
        const target = p.purpose === 'compaction' && comp ? comp : turn;
        if (!target) { top('event', ev); break; }
        target.attempts.push({ req: ev, res: null });
        target.events.push(ev);
        break;
      }
      case 'provider.response': {
        const target = p.purpose === 'compaction' && comp ? comp : turn;
        const a = target && [...target.attempts].reverse().find((x) => !x.res);
        if (!a) { top('event', ev); break; }
        a.res = ev;
        target.events.push(ev);
        break;
      }
      case 'tool.call': {
        if (!turn) { top('event', ev); break; }
        const call = {
          id: String(p.id ?? ''), name: String(p.name ?? '?'),
          dispatch: DISPATCHES.includes(p.dispatch) ? p.dispatch : 'other',
          ev, related: [], result: null, request: null, response: null, turn, resumedIn: null,
        };
        calls.set(p.id, call);
        turn.tools.push(call);
        turn.events.push(ev);
        break;
      }
      case 'mcp.request':
      case 'sandbox.request': {
        const dispatch = type.startsWith('mcp') ? 'mcp' : 'sandbox';
        const call = turn && turn.tools.find((c) => c.dispatch === dispatch && !c.request && c.name === p.tool);
        if (!call) { stray(turn, ev, top); break; }
        call.request = ev;
        call.related.push(ev);
        turn.events.push(ev);
        break;
      }
      case 'mcp.response':
      case 'sandbox.response': {
        const dispatch = type.startsWith('mcp') ? 'mcp' : 'sandbox';
        const call = turn && turn.tools.find((c) => c.dispatch === dispatch && c.request && !c.response);
        if (!call) { stray(turn, ev, top); break; }
        call.response = ev;
        call.related.push(ev);
        turn.events.push(ev);
        break;
      }
      case 'tool.result': {
        const call = calls.get(p.tool_use_id);
        if (call) {
          call.result = ev;
          call.related.push(ev);
        }
        if (turn) {
          turn.events.push(ev);
          if (!call || call.turn !== turn) turn.results.push(ev);
        } else top('event', ev);
        break;
      }
      case 'server.message.send': {
        if (comp && !comp.done && (p.synthetic === 'compaction_preamble' || comp.messages.length)) {
          comp.messages.push(ev);
          comp.events.push(ev);
          break;
        }
        if (p.synthetic === 'abandoned_tool_results') {
          for (const b of blocks(p.content)) {
            const pause = pauses.find((x) => !x.end && x.ids.includes(b.tool_use_id));
            if (pause) pause.end = { how: 'abandoned', ev };
          }
          top('event', ev);
          break;
        }
        if (!turn || turn.reply) { top('event', ev); break; }
        turn.reply = ev;
        turn.events.push(ev);
        const ids = blocks(p.content)
          .filter((b) => b.type === 'tool_use' && b.dispatch === 'client')
          .map((b) => String(b.id ?? ''));
        if (ids.length) {
          turn.pause = { ev, owner: ev.client_key_id, ids, end: null };
          pauses.push(turn.pause);
        }
        break;
      }
      case 'session.error': {
        if (p.reason === 'driver_turn_abandoned') {
          const pause = pauses.find((x) => !x.end && x.owner === p.owner_client_key_id);
          if (pause) pause.end = { how: 'abandoned', ev };
        }
        if (comp && !comp.completed && p.reason === 'compaction_store_failed') {
          comp.errors.push(ev);
          comp.events.push(ev);
        } else if (turn && !turn.reply && p.reason !== 'driver_turn_abandoned') {
          turn.errors.push(ev);
          turn.events.push(ev);
        } else top('error', ev);
        break;
      }
      default:
        if (turn && !turn.reply && /^session\.(subagent|sandbox)\./.test(type)) {
          turn.other.push(ev);
          turn.events.push(ev);
        } else top('event', ev);
    }
  }
  for (const it of items) it.sig = it.events.length + ':' + sigExtra(it);
  return items;
}

/** A request or response that matched no tool call: listed with its turn. */
function stray(turn, ev, top) {
  if (!turn) return top('event', ev);
  turn.other.push(ev);
  turn.events.push(ev);
}

function isCompactionPart(ev) {
  const p = payload(ev);
  return ev.event_type === 'session.compaction.completed' || p.purpose === 'compaction' ||
    ev.event_type === 'server.message.send' ||
    (ev.event_type === 'session.error' && p.reason === 'compaction_store_failed');
}

/** What else changes an item's rendering besides its own events. */
function sigExtra(it) {
  if (it.kind === 'compaction') return String(it.done);
  if (it.kind !== 'turn') return '';
  const ends = it.pause && it.pause.end ? it.pause.end.how + it.pause.end.ev.id : '';
  const results = it.tools.map((c) => (c.result ? c.result.id : '-')).join(',');
  return ends + '|' + results;
}

// ---- rendering -------------------------------------------------------------

/** Renders `items` into `list`, reusing the element of each unchanged item. */
export function renderTimeline(list, items, ctx) {
  const old = new Map([...list.children].map((el) => [el.dataset.key, el]));
  const active = document.activeElement;
  const focusKey = active && list.contains(active) ? active.dataset.focusKey : null;
  const nodes = items.map((it) => {
    const prev = old.get(it.key);
    const sig = it.sig + '#' + ctx.gen;
    if (prev && prev.dataset.sig === sig) return prev;
    const el = renderItem(it, ctx);
    el.dataset.key = it.key;
    el.dataset.sig = sig;
    return el;
  });
  nodes.forEach((el, i) => {
    if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
  });
  while (list.children.length > nodes.length) list.lastElementChild.remove();
  if (focusKey && !list.contains(document.activeElement)) {
    const again = [...list.querySelectorAll('[data-focus-key]')].find((el) => el.dataset.focusKey === focusKey);
    if (again) again.focus();
  }
}

function renderItem(it, ctx) {
  if (it.kind === 'turn') return renderTurn(it, ctx);
  if (it.kind === 'compaction') return renderCompaction(it, ctx);
  return renderEvent(it, ctx);
}

function itemShell(cls, key, title, meta, ctx, events, ...body) {
  return h('li', { class: 'item ' + cls },
    h('div', { class: 'item-head' },
      h('h3', { tabindex: '-1', 'data-nav': true, dataset: { focusKey: 'head-' + key } }, title),
      h('span', { class: 'meta' }, meta)),
    body,
    disclosure('events-' + key, `Raw events (${events.length})`, ctx.open, () =>
      h('ol', { class: 'raw-list' }, events.map((ev) => h('li', {}, rawJson(ev, ctx.open, 'all'))))));
}

function keyLabel(ctx, id) {
  if (!id) return 'no key';
  const k = ctx.keys.get(id);
  return k ? `${k.name} (${k.prefix}\u2026)` : id;
}

function renderTurn(t, ctx) {
  const sp = payload(t.start);
  const end = t.reply || t.errors[t.errors.length - 1] || t.events[t.events.length - 1];
  const took = between(t.start.created_at, end.created_at);
  const usage = t.attempts.reduce((acc, a) => {
    const u = a.res && payload(a.res).usage;
    if (u && typeof u === 'object') {
      acc.in += Number(u.input_tokens) || 0;
      acc.out += Number(u.output_tokens) || 0;
    }
    return acc;
  }, { in: 0, out: 0 });
  const status = t.pause ? (t.pause.end ? t.pause.end.how : 'paused') : t.reply ? 'answered' : t.errors.length ? 'failed' : 'running';
  // The stored usage of the turn (cache reads and writes apart, a cost
  // when priced), else what its logged responses say.
  const stored = ctx.usage && ctx.usage.get(t.start.id);
  const tokens = stored
    ? `${stored.input_tokens} in / ${stored.cache_read_tokens} cache read / ${stored.cache_write_tokens} cache write / ${stored.output_tokens} out tokens${stored.cost !== null && stored.cost !== undefined ? ` / cost ${stored.cost}` : ''}`
    : usage.in || usage.out ? `${usage.in} in / ${usage.out} out tokens` : '';
  const meta = [clock(t.start.created_at), keyLabel(ctx, t.start.client_key_id), status,
    took !== null && end !== t.start ? duration(took) : '', tokens].filter(Boolean).join(' \u00b7 ');
  const title = t.resumes.length ? `Turn ${t.index} (returns ${t.resumes.length} tool result${t.resumes.length > 1 ? 's' : ''})` : `Turn ${t.index}`;
  return itemShell('turn status-' + status, t.key, title, meta, ctx, t.events,
    message('user', sp.content),
    t.results.length ? h('ul', { class: 'results' }, t.results.map((ev) => h('li', {},
      `Tool result for ${payload(ev).tool_use_id ?? '?'}${payload(ev).is_error ? ' (error)' : ''}: `,
      h('span', { class: 'clip' }, clip(contentText(payload(ev).content), 300))))) : null,
    t.attempts.length ? h('ol', { class: 'attempts', 'aria-label': 'Provider attempts' }, t.attempts.map((a) => attempt(a))) : null,
    t.errors.map((ev) => errorLine(ev)),
    toolGroups(t, ctx),
    t.other.length ? h('ul', { class: 'other' }, t.other.map((ev) => h('li', {}, eventLine(ev)))) : null,
    t.pause ? pauseLine(t.pause, ctx) : null,
    t.reply ? message(payload(t.reply).role === 'user' ? 'user' : 'assistant', payload(t.reply).content) : null);
}

function message(role, content) {
  const text = contentText(content);
  return h('div', { class: 'msg msg-' + role },
    h('span', { class: 'who' }, role === 'user' ? 'User' : 'Assistant'),
    h('p', { class: 'text' }, text === '' ? '(empty)' : text));
}

function attempt(a) {
  const q = payload(a.req);
  const r = a.res ? payload(a.res) : null;
  const took = a.res ? between(a.req.created_at, a.res.created_at) : null;
  const parts = [`#${q.attempt ?? '?'} ${q.kind ?? ''}`, `${q.provider ?? '?'} ${q.model ?? ''}`];
  if (!r) parts.push('waiting');
  else {
    parts.push(r.ok ? `ok ${r.status ?? ''}` : `failed ${r.status ?? 'no status'}`);
    parts.push(duration(took));
    const u = r.usage;
    if (u && typeof u === 'object') parts.push(`${u.input_tokens ?? '?'} in / ${u.output_tokens ?? '?'} out tokens`);
    else if (r.ok) parts.push('no usage');
  }
  return h('li', { class: 'attempt' + (r && !r.ok ? ' bad' : '') },
    h('span', { class: 'label' }, 'Provider attempt'), ' ', parts.filter(Boolean).join(' \u00b7 '),
    r && r.error ? h('span', { class: 'error-text' }, ' \u2014 ' + r.error) : null);
}

function toolGroups(t, ctx) {
  if (!t.tools.length) return null;
  const groups = [...DISPATCHES, 'other']
    .map((d) => [d, t.tools.filter((c) => c.dispatch === d)])
    .filter(([, cs]) => cs.length);
  return h('div', { class: 'tools' }, groups.map(([d, cs]) => h('section', { class: 'tool-group', dataset: { dispatch: d } },
    h('h4', {}, `${DISPATCH_LABEL[d] || d} tool call${cs.length > 1 ? 's' : ''} (${cs.length})`),
    h('ul', {}, cs.map((c) => h('li', {}, toolCall(c, ctx)))))));
}

function toolCall(c, ctx) {
  const r = c.result ? payload(c.result) : null;
  const state = r ? (r.is_error ? 'error' : 'done') : c.dispatch === 'client' ? 'awaiting client' : 'running';
  const key = 'call-' + c.ev.id;
  const d = h('details', { class: 'tool-call', dataset: { dispatch: c.dispatch, toolUseId: c.id } },
    h('summary', { 'data-nav': true, dataset: { focusKey: key } },
      h('span', { class: 'tool-name' }, c.name), ' ', h('code', {}, c.id), ' ', h('span', { class: 'badge badge-' + state.replace(' ', '-') }, state)),
    h('div', { class: 'tool-body' },
      h('p', {}, `Dispatch: ${c.dispatch}`, payload(c.ev).server_name ? ` \u00b7 server ${payload(c.ev).server_name}` : '',
        ` \u00b7 called ${clock(c.ev.created_at)}`,
        c.result ? ` \u00b7 result ${clock(c.result.created_at)} (${duration(between(c.ev.created_at, c.result.created_at))})` : '',
        c.resumedIn ? ` \u00b7 returned in turn ${c.resumedIn.index} by ${keyLabel(ctx, c.resumedIn.start.client_key_id)}` : ''),
      h('h5', {}, 'Input'), h('pre', { class: 'json' }, pretty(payload(c.ev).input)),
      c.response ? [h('h5', {}, c.dispatch === 'mcp' ? 'MCP response' : 'Sandbox response'),
        h('pre', { class: 'json' }, pretty(payload(c.response).result ?? payload(c.response).error ?? null))] : null,
      r ? [h('h5', {}, r.is_error ? 'Result (error)' : 'Result'), h('pre', { class: 'json' }, contentText(r.content))] : null,
      h('ul', { class: 'raw-list' }, [c.ev, ...c.related].map((ev) => h('li', {}, rawJson(ev, ctx.open, 'call'))))));
  if (ctx.open.has(key)) d.open = true;
  d.addEventListener('toggle', () => (d.open ? ctx.open.add(key) : ctx.open.delete(key)));
  return d;
}

function pauseLine(pause, ctx) {
  const n = pause.ids.length;
  const what = `Paused: waiting for ${keyLabel(ctx, pause.owner)} to return ${n} client tool result${n > 1 ? 's' : ''} (${pause.ids.join(', ')})`;
  let end = ' \u2014 still waiting';
  if (pause.end && pause.end.how === 'resumed') {
    end = ` \u2014 resumed ${clock(pause.end.ev.created_at)} by ${keyLabel(ctx, pause.end.ev.client_key_id)} in turn ${pause.end.turn.index}`;
  } else if (pause.end) end = ` \u2014 abandoned ${clock(pause.end.ev.created_at)}`;
  return h('p', { class: 'pause' + (pause.end ? '' : ' waiting') }, what, end);
}

function errorLine(ev) {
  const p = payload(ev);
  const extra = Object.entries(p).filter(([k]) => k !== 'reason').map(([k, v]) => `${k}: ${typeof v === 'string' ? v : pretty(v)}`);
  return h('p', { class: 'session-error' }, h('strong', {}, `session.error ${p.reason ?? '?'}`), extra.length ? ' \u2014 ' + extra.join(' \u00b7 ') : '');
}

function renderCompaction(c, ctx) {
  const s = payload(c.started);
  const done = c.completed ? payload(c.completed) : null;
  const status = done ? 'completed' : c.done ? 'failed' : 'running';
  const meta = [clock(c.started.created_at), `${s.trigger ?? '?'} / ${s.reason ?? '?'}`, status,
    c.completed ? duration(between(c.started.created_at, c.completed.created_at)) : '',
    s.token_count !== undefined && s.token_count !== null ? `at ${s.token_count} tokens` : '',
    done ? `${done.compacted_message_count ?? '?'} messages compacted, summary ${done.summary_tokens ?? '?'} tokens` : ''].filter(Boolean).join(' \u00b7 ');
  const summary = c.messages.find((m) => payload(m).synthetic !== 'compaction_preamble');
  return itemShell('compaction status-' + status, c.key, 'Compaction', meta, ctx, c.events,
    c.attempts.length ? h('ol', { class: 'attempts', 'aria-label': 'Provider attempts' }, c.attempts.map((a) => attempt(a))) : null,
    c.errors.map((ev) => errorLine(ev)),
    summary ? message('assistant', payload(summary).content) : null);
}

function renderEvent(it, ctx) {
  const ev = it.ev;
  const title = it.kind === 'error' ? 'Error' : ev.event_type;
  return itemShell(it.kind === 'error' ? 'error' : 'event', it.key, title,
    [clock(ev.created_at), keyLabel(ctx, ev.client_key_id)].join(' \u00b7 '), ctx, it.events,
    it.kind === 'error' ? errorLine(ev) : eventLine(ev, true));
}

/** One line describing a lifecycle event. */
function eventLine(ev, titled) {
  const p = payload(ev);
  const bits = [];
  for (const k of ['reason', 'client_version', 'image', 'sandbox_id', 'phase', 'subagent_id', 'harness', 'model', 'exit_code', 'detail', 'synthetic']) {
    if (p[k] !== undefined && p[k] !== null) bits.push(`${k}: ${typeof p[k] === 'string' ? p[k] : pretty(p[k])}`);
  }
  for (const k of ['tools', 'sandbox_tools', 'subagent_tools']) {
    if (Array.isArray(p[k]) && p[k].length) bits.push(`${k}: ${p[k].join(', ')}`);
  }
  if (Array.isArray(p.images)) bits.push('images: ' + p.images.map((i) => `${i && i.name} ${i && i.status}`).join(', '));
  if (ev.event_type === 'server.message.send') bits.push(clip(contentText(p.content), 300));
  if (titled) return bits.length ? h('p', { class: 'event-line' }, bits.join(' \u00b7 ')) : null;
  return h('p', { class: 'event-line' }, h('code', {}, ev.event_type), bits.length ? ' ' + bits.join(' \u00b7 ') : '');
}
