// DOM helpers of the console. Everything that reaches the page is built
// with createElement and text nodes: data is never parsed as markup, so
// event payloads (attacker-controlled) cannot inject elements or script.

/** `h('p', {class: 'x'}, 'text', child)`: an element with attributes and children. */
export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'href') el.setAttribute('href', safeHref(v));
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, kids);
  return el;
}

function append(el, kids) {
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
}

/** Only in-page and same-origin links: never a `javascript:` or foreign URL. */
function safeHref(v) {
  const s = String(v);
  return s.startsWith('#') || (s.startsWith('/') && !s.startsWith('//')) ? s : '#';
}

/** `#/s/<id>` for a session id (percent-encoded). */
export function sessionHref(id) {
  return '#/s/' + encodeURIComponent(id);
}

/** `HH:MM:SS.mmm` (UTC) of an EventView `created_at`. */
export function clock(ts) {
  const m = /T(\d\d:\d\d:\d\d(?:\.\d+)?)/.exec(String(ts || ''));
  return m ? m[1] : String(ts || '');
}

/** `2026-07-06 18:26:01` (UTC) of a timestamp, or an em dash for null. */
export function dateTime(ts) {
  if (!ts) return '\u2014';
  return String(ts).replace('T', ' ').replace(/\.\d+Z$/, '').replace(/Z$/, '');
}

/** Milliseconds between two `created_at` stamps, or null. */
export function between(a, b) {
  const t0 = Date.parse(a);
  const t1 = Date.parse(b);
  return Number.isFinite(t0) && Number.isFinite(t1) ? t1 - t0 : null;
}

/** `850 ms`, `2.4 s`, `3 min 5 s`. */
export function duration(ms) {
  if (ms === null || ms === undefined) return '';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Pretty JSON of any value (for `<pre>` text). */
export function pretty(v) {
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}

/** First characters of a long string, with an ellipsis. */
export function clip(s, n) {
  const t = String(s);
  return t.length > n ? t.slice(0, n - 1) + '\u2026' : t;
}

/** Plain text of message content (a string or a block array). */
export function contentText(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content === undefined ? '' : pretty(content);
  return content
    .map((b) => {
      if (!b || typeof b !== 'object') return String(b);
      if (b.type === 'text') return String(b.text ?? '');
      if (b.type === 'tool_use') return `[tool_use ${b.name ?? '?'} ${b.id ?? ''}]`;
      if (b.type === 'tool_result') {
        return `[tool_result ${b.tool_use_id ?? ''}] ${contentText(b.content)}`;
      }
      return `[${b.type ?? 'block'}]`;
    })
    .join('\n');
}

/**
 * A button that shows and hides `build()`'s element below it, built only
 * on first opening. `key` names it in `openKeys` so a re-render keeps it
 * open; `label` is the closed text.
 */
export function disclosure(key, label, openKeys, build, cls) {
  const wrap = h('div', { class: 'disclosure' + (cls ? ' ' + cls : '') });
  const btn = h('button', {
    type: 'button',
    class: 'link-button',
    'aria-expanded': 'false',
    dataset: { focusKey: key },
  }, label);
  let panel = null;
  const set = (open) => {
    btn.setAttribute('aria-expanded', String(open));
    if (open && !panel) {
      panel = build();
      panel.id = 'p-' + key.replace(/[^A-Za-z0-9_-]/g, '_');
      btn.setAttribute('aria-controls', panel.id);
      wrap.append(panel);
    }
    if (panel) panel.hidden = !open;
    if (open) openKeys.add(key);
    else openKeys.delete(key);
  };
  btn.addEventListener('click', () => set(btn.getAttribute('aria-expanded') !== 'true'));
  wrap.prepend(btn);
  if (openKeys.has(key)) set(true);
  return wrap;
}

/** A raw-JSON toggle for one EventView (`scope` tells its lists apart). */
export function rawJson(ev, openKeys, scope) {
  return disclosure(`raw-${scope}-${ev.id}`, `Raw JSON: ${ev.event_type}`, openKeys, () =>
    h('pre', { class: 'raw-json', tabindex: '0' }, pretty(ev)), 'raw');
}

/**
 * j/k and the arrow keys move focus between the `[data-nav]` elements of
 * the visible view; typing in a form control is left alone.
 */
export function listKeys(root, onEscape) {
  document.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const t = e.target;
    const typing = t instanceof HTMLElement && t.closest('input, select, textarea');
    if (typing) return;
    if (e.key === 'Escape' && onEscape) {
      onEscape();
      return;
    }
    const view = [...root.querySelectorAll('main > section')].find((s) => !s.hidden);
    if (!view) return;
    const items = [...view.querySelectorAll('[data-nav]')].filter((el) => el.offsetParent !== null);
    if (!items.length) return;
    const onItem = items.includes(t);
    const down = e.key === 'j' || (onItem && e.key === 'ArrowDown');
    const up = e.key === 'k' || (onItem && e.key === 'ArrowUp');
    if (!down && !up) return;
    e.preventDefault();
    const i = items.indexOf(t);
    const next = i < 0 ? (down ? 0 : items.length - 1) : Math.min(items.length - 1, Math.max(0, i + (down ? 1 : -1)));
    items[next].focus();
  });
}
