// A session log in the shapes of spec 02 (§4, §6) covering what the mock
// provider alone cannot produce in the end-to-end run: an MCP + client
// tool turn, auto compaction, a fallback after a failed primary, a sandbox
// tool, a pause retired as abandoned, a failed compaction, a remote
// subagent, and hostile text in every free-form field. The console's own
// timeline module groups and renders it inside the page
// (console.spec.mjs, step "synthetic log").

const A = 'key_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
const B = 'key_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb';
export const HOSTILE = '<img src=x onerror=alert(2)><script>alert(3)</script>';

let n = 0;
let ms = 0;
function ev(type, payload, key = A, gap = 5) {
  n += 1;
  ms += gap;
  const t = new Date(Date.UTC(2026, 6, 6, 18, 0, 0, 0) + ms).toISOString();
  return {
    id: 'evt_' + String(n).padStart(32, '0'),
    session_id: 'ses_synthetic',
    client_key_id: key,
    event_type: type,
    payload,
    created_at: t,
  };
}

const usage = { input_tokens: 100, output_tokens: 20 };
const req = (attempt, extra = {}) => ({ attempt, kind: attempt ? 'fallback' : 'primary', provider: 'anthropic', base_url: 'http://x', model: 'm', max_tokens: 10, messages: [], tools: [], ...extra });
const ok = (attempt, extra = {}) => ({ attempt, kind: attempt ? 'fallback' : 'primary', provider: 'anthropic', ok: true, status: 200, body: {}, usage, ...extra });

export const log = [
  ev('session.open', { client_version: HOSTILE, tools: ['get_time'], sandbox_tools: ['run_shell_command'], subagent_tools: [] }),
  ev('session.driver.register', {}),
  ev('session.join', { client_version: null, tools: [], sandbox_tools: [], subagent_tools: [] }, B),
  // Turn 1: MCP + client tool, paused.
  ev('client.message.send', { role: 'user', content: 'list ' + HOSTILE }),
  ev('provider.request', req(0)),
  ev('provider.response', ok(0), A, 250),
  ev('tool.call', { id: 'tu_m', name: 'list_directory', input: { path: HOSTILE }, dispatch: 'mcp', server_name: 'filesystem' }),
  ev('tool.call', { id: 'tu_c', name: 'get_time', input: {}, dispatch: 'client', server_name: null }),
  ev('mcp.request', { method: 'tools/call', server_name: 'filesystem', tool: 'list_directory', input: { path: HOSTILE } }),
  ev('mcp.response', { server_name: 'filesystem', ok: true, result: { content: [{ type: 'text', text: HOSTILE }], isError: false } }),
  ev('tool.result', { tool_use_id: 'tu_m', dispatch: 'mcp', server_name: 'filesystem', is_error: false, content: [{ type: 'text', text: 'README.md ' + HOSTILE }] }),
  ev('server.message.send', { role: 'assistant', content: [
    { type: 'tool_use', id: 'tu_m', name: 'list_directory', input: {}, dispatch: 'mcp' },
    { type: 'tool_use', id: 'tu_c', name: 'get_time', input: {}, dispatch: 'client' }] }),
  // Turn 2: the client result, then the answer; auto compaction after it.
  ev('client.message.send', { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_m', content: 'x' }, { type: 'tool_result', tool_use_id: 'tu_c', content: '18:00' }] }),
  ev('tool.result', { tool_use_id: 'tu_c', dispatch: 'client', content: '18:00', is_error: false, server_name: null }),
  ev('provider.request', req(0)),
  ev('provider.response', ok(0)),
  ev('server.message.send', { role: 'assistant', content: [{ type: 'text', text: 'It is 18:00 ' + HOSTILE }] }),
  ev('session.compaction.started', { trigger: 'auto', reason: 'token_threshold', token_count: 240, threshold_tokens: 200 }),
  ev('provider.request', req(0, { purpose: 'compaction' })),
  ev('provider.response', ok(0, { purpose: 'compaction' }), A, 900),
  ev('server.message.send', { role: 'user', synthetic: 'compaction_preamble', content: [{ type: 'text', text: 'The earlier part of this conversation was compacted. A summary follows.' }] }),
  ev('server.message.send', { role: 'assistant', content: [{ type: 'text', text: 'Summary ' + HOSTILE }] }),
  ev('session.compaction.completed', { preamble_event_id: 'evt_p', summary_event_id: 'evt_s', compacted_message_count: 5, input_tokens: 100, summary_tokens: 20 }),
  // Turn 3 (driver B): primary fails, fallback answers with a sandbox and a client tool.
  ev('client.message.send', { role: 'user', content: 'run it' }, B),
  ev('provider.request', req(0), B),
  ev('provider.response', { attempt: 0, kind: 'primary', provider: 'anthropic', ok: false, status: 429, error: 'provider returned HTTP 429 ' + HOSTILE, body: HOSTILE }, B, 40),
  ev('session.error', { reason: 'provider_call_failed', provider: 'anthropic', detail: HOSTILE }, B),
  ev('provider.request', req(1), B),
  ev('provider.response', ok(1), B, 60),
  ev('tool.call', { id: 'tu_s', name: 'run_shell_command', input: { command: 'echo hi' }, dispatch: 'sandbox' }, B),
  ev('tool.call', { id: 'tu_c2', name: 'get_time', input: {}, dispatch: 'client' }, B),
  ev('sandbox.request', { tool: 'run_shell_command', input: { command: 'echo hi' }, command: 'echo hi' }, B),
  ev('sandbox.response', { sandbox_id: 'abc', ok: true, result: { stdout: HOSTILE, stderr: '', exit_code: 0 } }, B, 30),
  ev('tool.result', { tool_use_id: 'tu_s', dispatch: 'sandbox', is_error: false, content: [{ type: 'text', text: 'hi' }] }, B),
  ev('server.message.send', { role: 'assistant', content: [
    { type: 'tool_use', id: 'tu_s', name: 'run_shell_command', input: {}, dispatch: 'sandbox' },
    { type: 'tool_use', id: 'tu_c2', name: 'get_time', input: {}, dispatch: 'client' }] }, B),
  // B never answers; A's next request reclaims the expired pause.
  ev('session.error', { reason: 'driver_turn_abandoned', owner_client_key_id: B }, B, 60000),
  // Turn 4: a remote subagent launch.
  ev('client.message.send', { role: 'user', content: 'delegate' }),
  ev('provider.request', req(0)),
  ev('provider.response', ok(0)),
  ev('tool.call', { id: 'tu_sa', name: 'launch_subagent', input: { task: HOSTILE }, dispatch: 'subagent' }),
  ev('session.subagent.start', { dispatch: 'remote', subagent_id: 'sba_1', harness: 'claude', model: 'm', detail: null }),
  ev('session.subagent.running', { dispatch: 'remote', subagent_id: 'sba_1', harness: 'claude', model: 'm', detail: null }),
  ev('tool.result', { tool_use_id: 'tu_sa', dispatch: 'subagent', is_error: false, content: [{ type: 'text', text: 'started' }] }),
  ev('provider.request', req(0)),
  ev('provider.response', ok(0)),
  ev('server.message.send', { role: 'assistant', content: [{ type: 'text', text: 'delegated' }] }),
  // A manual compaction whose provider call fails, then a late subagent event and the close.
  ev('session.compaction.started', { trigger: 'client', reason: 'manual', token_count: null, threshold_tokens: null }),
  ev('provider.request', req(0, { purpose: 'compaction' })),
  ev('provider.response', { attempt: 0, kind: 'primary', provider: 'anthropic', ok: false, status: null, error: 'timeout', body: null, purpose: 'compaction' }),
  ev('session.subagent.completed', { dispatch: 'remote', subagent_id: 'sba_1', harness: 'claude', model: 'm', detail: HOSTILE, exit_code: 0 }),
  ev('session.close', { reason: 'client_close' }),
];

/**
 * Runs inside the page (passed to `page.evaluate` with the log): imports
 * the console's timeline module, checks its grouping, renders it into a
 * fresh list (`#synthetic`, left in the page for a screenshot) and
 * returns the problems found plus the rendered text.
 */
export async function checkInPage(events) {
  const m = await import('/admin/ui/timeline.js');
  const bad = [];
  const expect = (cond, what) => { if (!cond) bad.push(what); };
  const items = m.buildTimeline(events);
  const kinds = items.map((i) => i.kind).join(' ');
  expect(kinds === 'event event event turn turn compaction turn error turn compaction event event', 'item kinds: ' + kinds);
  const [t1, t2, c1, t3, , t4, c2] = items.filter((i) => i.kind !== 'event');
  expect(t1.tools.length === 2 && t1.attempts.length === 1 && t1.attempts[0].res, 'turn 1 calls/attempts');
  const mcp = t1.tools.find((c) => c.dispatch === 'mcp');
  expect(mcp && mcp.request && mcp.response && mcp.result, 'mcp call exchange');
  const client = t1.tools.find((c) => c.dispatch === 'client');
  expect(client && client.result && client.resumedIn === t2, 'client call resumed in turn 2');
  expect(t1.pause && t1.pause.owner === events[0].client_key_id && t1.pause.end && t1.pause.end.how === 'resumed', 'turn 1 pause resumed');
  expect(t2.reply && t2.results.length === 1 && t2.resumes.length === 2, 'turn 2');
  expect(c1.completed && c1.attempts.length === 1 && c1.messages.length === 2, 'auto compaction');
  expect(t3.attempts.length === 2 && t3.errors.length === 1 && t3.attempts[0].res.payload.ok === false, 'fallback walk');
  const sb = t3.tools.find((c) => c.dispatch === 'sandbox');
  expect(sb && sb.request && sb.response && sb.result, 'sandbox exchange');
  expect(t3.pause && t3.pause.ids.join() === 'tu_c2' && t3.pause.end && t3.pause.end.how === 'abandoned', 'abandoned pause');
  expect(t4.tools[0].dispatch === 'subagent' && t4.other.length === 2 && t4.reply, 'subagent turn');
  expect(c2.done && !c2.completed && c2.attempts.length === 1, 'failed compaction');
  expect(m.impliedState(events) === 'closed', 'state');
  const list = document.createElement('ol');
  list.className = 'timeline';
  list.id = 'synthetic';
  m.renderTimeline(list, items, { open: new Set(), keys: new Map(), gen: 1 });
  for (const d of list.querySelectorAll('details')) d.open = true;
  for (const b of list.querySelectorAll('button[aria-expanded="false"]')) b.click();
  document.body.append(list);
  expect(list.querySelectorAll('img, script').length === 0, 'event text became markup');
  return { bad, text: list.textContent };
}
