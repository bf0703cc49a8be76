// End-to-end check of the admin console in headless Chromium, driven by
// io-smol/tests/admin_ui.rs, which boots the server, prepares sessions and
// passes everything through the environment:
//   BAE_UI_BASE           http://<admin addr>
//   BAE_UI_ADMIN_KEY      the admin key
//   BAE_UI_SESSION        a session with a paused-then-resumed client tool turn
//   BAE_UI_PROFILE        that session's profile id
//   BAE_UI_KEY            the id of the client key that created it (with a quota)
//   BAE_UI_OTHER_SESSION  a session on another profile whose provider failed
//   BAE_UI_ARTIFACTS      folder for screenshots
//   BAE_CHROMIUM          the Chromium executable
// Protocol on stdio: the script prints `STEP <name>` lines, `WAITING live`
// when the test should send a message, and reads `SENT` back; it ends with
// `DONE` and exit code 0, or prints `FAIL <reason>` and exits 1.

import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';
import { mkdirSync, rmSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { log as syntheticLog, checkInPage, HOSTILE } from './synthetic-log.mjs';

function fail(msg) {
  console.log('FAIL ' + msg);
  process.exit(1);
}

function env(name) {
  const v = process.env[name];
  if (!v) fail(`${name} is not set`);
  return v;
}

const base = env('BAE_UI_BASE');
const adminKey = env('BAE_UI_ADMIN_KEY');
const sessionId = env('BAE_UI_SESSION');
const profileId = env('BAE_UI_PROFILE');
const keyId = env('BAE_UI_KEY');
const otherSession = env('BAE_UI_OTHER_SESSION');
const forkSession = env('BAE_UI_FORK');
const artifacts = env('BAE_UI_ARTIFACTS');
const executablePath = env('BAE_CHROMIUM');
mkdirSync(artifacts, { recursive: true });
rmSync(path.join(artifacts, 'failure.png'), { force: true });

const stdin = createInterface({ input: process.stdin });
const pending = [];
const waiting = [];
stdin.on('line', (l) => (waiting.length ? waiting.shift()(l) : pending.push(l)));
const nextLine = () => (pending.length ? Promise.resolve(pending.shift()) : new Promise((r) => waiting.push(r)));

const step = (name) => console.log('STEP ' + name);
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}
const T = { timeout: 15000 };

async function shot(page, name) {
  const file = path.join(artifacts, name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  console.log('SCREENSHOT ' + file);
}

async function textOf(locator) {
  return (await locator.textContent()) || '';
}

async function noHorizontalScroll(page, what) {
  const m = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, cw: document.documentElement.clientWidth }));
  check(m.sw <= m.cw, `${what}: the page scrolls sideways (${m.sw} > ${m.cw})`);
}

const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    // The refused keys below make the browser log their 401s; nothing else may be logged as an error.
    if (m.type() === 'error' && !/status of 401/.test(m.text())) problems.push('console: ' + m.text());
  });
  page.on('response', (r) => {
    if (r.status() >= 400 && r.status() !== 401) problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('dialog', (d) => {
    problems.push('a dialog opened (script ran from data?): ' + d.message());
    d.dismiss();
  });

  step('login');
  await page.goto(base + '/admin/ui');
  await page.locator('#key-input').waitFor(T);
  await page.fill('#key-input', 'bae_admin_not_the_key');
  await page.press('#key-input', 'Enter');
  await page.locator('#login-error', { hasText: 'refused the admin key' }).waitFor(T);
  await page.fill('#key-input', adminKey);
  await page.click('#login-form button[type=submit]');

  step('session list');
  const ours = page.locator(`a.session-row[data-session-id="${sessionId}"]`);
  const other = page.locator(`a.session-row[data-session-id="${otherSession}"]`);
  await ours.waitFor(T);
  await other.waitFor(T);
  const stored = await page.evaluate(() => ({
    key: sessionStorage.getItem('bae.console.adminKey'),
    local: localStorage.length,
    cookie: document.cookie,
    url: location.href,
  }));
  check(stored.key === adminKey, 'the key is not in sessionStorage');
  check(stored.local === 0 && stored.cookie === '', 'the console wrote localStorage or a cookie');
  check(!stored.url.includes(adminKey), 'the key is in the URL');
  await shot(page, '01-sessions');

  step('filters');
  await page.selectOption('#f-state', 'error');
  await page.waitForURL(/state=error/, T);
  await other.waitFor(T);
  await ours.waitFor({ state: 'detached', ...T });
  await other.click();
  await page.locator('#timeline .session-error', { hasText: 'all_providers_failed' }).waitFor(T);
  await page.locator('#timeline .session-error', { hasText: 'provider_call_failed' }).waitFor(T);
  await page.locator('#session-meta', { hasText: 'error' }).waitFor(T);
  await page.goBack();
  await other.waitFor(T);
  await page.selectOption('#f-state', '');
  await page.selectOption('#f-profile', profileId);
  await ours.waitFor(T);
  await other.waitFor({ state: 'detached', ...T });
  await page.selectOption('#f-profile', '');
  await other.waitFor(T);
  await page.selectOption('#f-key', keyId);
  await ours.waitFor(T);
  await other.waitFor({ state: 'detached', ...T });
  await page.selectOption('#f-key', '');
  await other.waitFor(T);

  step('keyboard');
  await page.locator('#list-title').click();
  await page.keyboard.press('j');
  check(await page.evaluate(() => document.activeElement.classList.contains('session-row')), 'j did not focus a session row');
  for (let i = 0; i < 10 && !(await ours.evaluate((el) => el === document.activeElement)); i += 1) {
    await page.keyboard.press('ArrowDown');
  }
  check(await ours.evaluate((el) => el === document.activeElement), 'the arrow keys did not reach the session');
  await page.keyboard.press('Enter');

  step('timeline');
  await page.waitForURL(/#\/s\/ses_/, T);
  const turns = page.locator('#timeline .item.turn');
  await turns.nth(1).waitFor(T);
  const first = await textOf(turns.nth(0));
  check(first.includes('what time is it?'), 'turn 1 does not show the user message: ' + first);
  check(/Provider attempt.*\d+ (ms|s)/.test(first), 'no provider attempt latency: ' + first);
  check(first.includes('11 in / 7 out tokens'), 'no provider usage: ' + first);
  check(first.includes('11 in / 0 cache read / 0 cache write / 7 out tokens'), 'no stored usage on the turn: ' + first);
  const meta = await textOf(page.locator('#session-meta'));
  check(meta.includes('Provider tokens') && meta.includes('2 calls \u00b7 21 in \u00b7 0 cache read \u00b7 0 cache write \u00b7 12 out'), 'no session usage: ' + meta);
  check(/Paused: waiting for .+ to return 1 client tool result \(tu_ui_1\).*resumed/.test(first), 'no pause with its owner: ' + first);
  const second = await textOf(turns.nth(1));
  const hostile = 'It is noon <img src=x onerror=alert(1)>';
  check(second.includes(hostile), 'the reply is not shown as text: ' + second);
  check((await page.locator('#timeline img').count()) === 0, 'event text became markup');
  await page.locator('#timeline .item', { hasText: 'session.open' }).first().waitFor(T);
  await shot(page, '02-timeline');

  step('family tree and export');
  await page.locator('#session-meta', { hasText: 'created by a client' }).waitFor(T);
  const forkLink = page.locator('#session-meta a', { hasText: forkSession });
  await forkLink.waitFor(T);
  const [download] = await Promise.all([page.waitForEvent('download', T), page.click('#download-export')]);
  check(download.suggestedFilename() === `${sessionId}.bae.jsonl`, 'export file name: ' + download.suggestedFilename());
  const doc = readFileSync(await download.path(), 'utf8').split('\n').filter((l) => l);
  const header = JSON.parse(doc[0]);
  check(header.kind === 'header' && header.session.id === sessionId, 'the export does not start with its header');
  check(JSON.parse(doc[doc.length - 1]).kind === 'end', 'the export has no end line');
  await forkLink.click();
  await page.waitForURL(new RegExp('#/s/' + forkSession), T);
  await page.locator('#session-meta a', { hasText: sessionId }).waitFor(T);
  await page.locator('#session-meta', { hasText: 'forked from' }).waitFor(T);
  await page.goBack();
  await page.waitForURL(new RegExp('#/s/' + sessionId), T);
  await page.locator('#session-meta a', { hasText: forkSession }).waitFor(T);

  step('live');
  console.log('WAITING live');
  const line = await nextLine();
  check(line === 'SENT', 'unexpected line from the test: ' + line);
  const live = page.locator('#timeline .item.turn', { hasText: 'live message from the test' });
  await live.waitFor(T);
  await live.locator('.msg-assistant', { hasText: 'second answer' }).waitFor(T);

  step('tool call');
  const call = page.locator('#timeline details.tool-call[data-dispatch="client"]').first();
  await call.locator('summary').click();
  check(await call.evaluate((d) => d.open), 'the tool call did not open');
  const body = await textOf(call.locator('.tool-body'));
  check(body.includes('"zone": "UTC"') && body.includes('12:00 UTC'), 'tool call input/result missing: ' + body);
  const rawButton = call.locator('button', { hasText: 'Raw JSON: tool.call' });
  await rawButton.click();
  const raw = call.locator('pre.raw-json').first();
  await raw.waitFor(T);
  const ev = JSON.parse(await textOf(raw));
  check(ev.event_type === 'tool.call' && ev.payload.dispatch === 'client' && ev.payload.id === 'tu_ui_1', 'raw JSON is not the tool.call event');
  check((await rawButton.getAttribute('aria-expanded')) === 'true', 'aria-expanded not set');
  await shot(page, '03-tool-call');
  await rawButton.click();
  await raw.waitFor({ state: 'hidden', ...T });
  await rawButton.click();

  step('synthetic log');
  const synthetic = await page.evaluate(checkInPage, syntheticLog);
  check(synthetic.bad.length === 0, 'timeline of the synthetic log: ' + synthetic.bad.join('; '));
  for (const want of ['MCP tool call', 'Sandbox tool call', 'Subagent tool call', 'Compaction', 'abandoned', 'failed 429', 'session.error driver_turn_abandoned', HOSTILE]) {
    check(synthetic.text.includes(want), `the synthetic timeline does not show "${want}"`);
  }
  await page.evaluate(() => {
    for (const b of document.querySelectorAll('#synthetic button[aria-expanded="true"]')) b.click();
  });
  await page.locator('#synthetic').screenshot({ path: path.join(artifacts, '06-synthetic-timeline.png') });
  await page.evaluate(() => document.getElementById('synthetic').remove());

  step('phone');
  await page.setViewportSize({ width: 375, height: 740 });
  await noHorizontalScroll(page, 'timeline on a phone');
  await shot(page, '04-phone-timeline');
  await page.keyboard.press('Escape');
  await ours.waitFor(T);
  await noHorizontalScroll(page, 'session list on a phone');
  await shot(page, '05-phone-sessions');

  step('quotas');
  await page.click('#nav-quotas');
  await page.waitForURL(/#\/quotas$/, T);
  const quota = page.locator(`.quota-row[data-scope="key"][data-id="${keyId}"]`);
  await quota.waitFor(T);
  const qt = await textOf(quota);
  check(/open sessions \d+ of 5/.test(qt), 'no open-session figure: ' + qt);
  check(qt.includes('requests 50/s, burst 50'), 'no rate figure: ' + qt);
  check(/tokens [\d,]+ of 100,000 this 1d window/.test(qt), 'no budget figure: ' + qt);
  check((await textOf(page.locator('#quota-refused'))).includes('Refused since the server started'), 'no refusal counts');
  await noHorizontalScroll(page, 'quotas on a phone');
  await shot(page, '07-quotas');

  step('traffic');
  await page.click('#nav-traffic');
  await page.waitForURL(/#\/traffic$/, T);
  check(await page.evaluate(() => document.activeElement && document.activeElement.id === 'traffic-title'), 'the traffic heading has no focus');
  const entry = page.locator('.traffic-row[data-entry="main"]');
  await entry.waitFor(T);
  const tt = await textOf(entry);
  check(tt.includes('main'), 'no entry name: ' + tt);
  check(/in flight \d+ of 4/.test(tt), 'no in-flight figure: ' + tt);
  check(/admitted [1-9]/.test(tt), 'no admitted total: ' + tt);
  check(/requests available \d/.test(tt), 'no request bucket: ' + tt);
  check((await textOf(page.locator('#traffic-overload'))).includes('refused since the server started'), 'no overload block');
  await noHorizontalScroll(page, 'traffic on a phone');
  await shot(page, '08-traffic');
  await page.click('#nav-sessions');
  await ours.waitFor(T);

  step('forget key');
  await page.click('#forget');
  await page.locator('#login-view').waitFor(T);
  check((await page.evaluate(() => sessionStorage.length)) === 0, 'the key is still stored');
  check((await page.locator('.session-row').count()) === 0, 'session data is still on the page');

  step('401');
  await page.evaluate(() => sessionStorage.setItem('bae.console.adminKey', 'bae_admin_revoked'));
  await page.reload();
  await page.locator('#login-error', { hasText: 'refused the admin key' }).waitFor(T);
  check((await page.evaluate(() => sessionStorage.length)) === 0, 'a refused key stayed stored');

  check(problems.length === 0, 'browser problems:\n' + problems.join('\n'));
  console.log('DONE');
} catch (e) {
  if (page) await shot(page, 'failure').catch(() => {});
  await browser.close();
  fail(String(e && e.stack ? e.stack : e).replace(/\n\s*/g, ' | '));
}
await browser.close();
process.exit(0);
