// The console in a real browser: Debian's chromium, headless, driven by
// playwright-core, against a real cohortd and agent.  Screenshots of every
// page land in the output directory for a reviewer.
//
// usage: node tests/web/console.test.mjs COHORTD AGENT WEB_DIR OUT_DIR

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, existsSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { Platform, ADMIN } from './platform.mjs';

const [cohortd, agentBin, webDir, outDir] = process.argv.slice(2);
if (!cohortd || !agentBin || !webDir || !outDir) {
  console.error('usage: console.test.mjs COHORTD AGENT WEB_DIR OUT_DIR');
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SANDBOX = process.getuid && process.getuid() === 0; // the agent's namespaces need root
const XSS = '<img src=x onerror=alert(1)>';
const SPEC = 'cpu-console'; // priced so a two-second job costs something visible

let plat, browser, member, viewer, stranger, ws;

// The program the newcomer uploads: metrics, an HTML-looking line, a pause.
const PROGRAM = `#!/bin/sh
echo "rank $RANK of $WORLD_SIZE starting, epochs=$EPOCHS lr=$LR"
echo '${XSS} is printed as text'
i=1
for loss in 2.5 1.25 0.83 0.62 0.5; do
  echo "COHORT_METRIC {\\"epoch\\":1,\\"step\\":$i,\\"loss\\":$loss,\\"accuracy\\":0.$((i * 18))}"
  i=$((i + 1))
done
sleep 2
echo "training done"
`;

before(async () => {
  mkdirSync(outDir, { recursive: true });
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/install-deps --test`);
  plat = await new Platform({ cohortd, agent: agentBin, webDir }).start();
  await plat.must('POST', '/v1/worker-specs', ADMIN,
    { name: SPEC, cpus: 1, memory_mb: 512, price_per_hour: 360000, currency: 'USD' }, 201);
  member = await plat.user('acme', 'alice', 'member');
  viewer = await plat.user('acme', 'victor', 'viewer');
  stranger = await plat.user('other', 'olga', 'member');
  if (SANDBOX) await plat.agent('n1', ['--cpus', '8', '--memory-mb', '16384', '--port-range', '32100-32199']);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  if (browser) await browser.close();
  if (!plat) return;
  // A clean stop of every process: a sanitizer report would make it non-zero.
  const codes = await plat.stop();
  assert.deepEqual(codes, codes.map(() => 0), `exit codes of cohortd and the agents: ${codes}`);
});

// A fresh browser context (its own sessionStorage), watching for dialogs
// and script errors, which no page of the console may cause.
async function open(t) {
  const ctx = await browser.newContext({ baseURL: plat.base, viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  const page = await ctx.newPage();
  page.setDefaultTimeout(15000);
  const problems = [];
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.type()} ${d.message()}`);
    d.dismiss().catch(() => {});
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // A 404 of the API is the page working as meant; anything else is a bug
    // (a Content-Security-Policy violation is reported here too).
    if (m.type() === 'error' && !/Failed to load resource: .* (404|409|422|400)/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  t.after(async () => {
    await ctx.close();
    assert.deepEqual(problems, [], 'the page raised dialogs or errors');
  });
  return page;
}

async function signIn(page, token) {
  await page.goto('/login');
  await page.fill('#f-token', token);
  await page.click('#login button[type=submit]');
  await page.waitForURL('**/jobs');
}

const shot = (page, name) => page.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });

test('a newcomer uploads a program, runs it from the form, and finds log, chart, cost and bill', { skip: !SANDBOX && 'the agent needs root for its namespaces' }, async (t) => {
  const page = await open(t);
  await page.goto('/jobs');
  await page.waitForURL(/\/login\?next=%2Fjobs$/);
  await shot(page, '01-sign-in');
  await signIn(page, member);
  assert.match(await page.textContent('#who-name'), /alice · acme · member/);

  // A workspace, and the program uploaded into it through the page.
  await page.click('#nav a[data-nav=workspaces]');
  await page.fill('#volume-create #f-name', 'ws');
  await page.click('#volume-create button[type=submit]');
  await page.waitForURL('**/workspaces/ws');
  await page.setInputFiles('#f-files', { name: 'train.sh', mimeType: 'text/x-sh', buffer: Buffer.from(PROGRAM) });
  await page.check('#f-exec');
  await page.click('#upload');
  await page.waitForSelector('.upload-row.done');
  assert.equal(await page.getAttribute('.upload-row progress', 'value'), String(Buffer.byteLength(PROGRAM)));
  await page.waitForSelector('tr[data-path="train.sh"]');
  assert.equal(await page.textContent('tr[data-path="train.sh"] td:nth-child(3)'), '755');
  await shot(page, '02-workspace');
  ws = 'ws';

  // The form: choices from the API, the quote following the worker count.
  await page.click('#nav a[data-nav=jobs]');
  await page.click('#new-job');
  await page.waitForURL('**/jobs/new');
  await page.fill('#f-name', 'first-run');
  await page.selectOption('#f-image', 'native');
  await page.selectOption('#f-workspace', 'ws');
  await page.waitForFunction(() => document.querySelector('#f-code_path').value === 'train.sh');
  await page.fill('#f-epochs', '3');
  await page.fill('#f-lr', '0.05');
  await page.fill('#f-batch_size', '16');
  await page.selectOption('#f-worker_spec', SPEC);
  await page.fill('#f-worker_count', '2');
  await page.fill('#f-max_runtime_seconds', '120');
  const quote = await plat.must('POST', '/v1/quote', member, { worker_spec: SPEC, worker_count: 2, max_runtime_seconds: 120 }, 200);
  await page.waitForFunction((want) => document.querySelector('#quote').textContent.includes(want),
    `${usd(quote.price_per_hour)} per hour`);
  assert.ok((await page.textContent('#quote')).includes(`at most ${usd(quote.estimated_max)}`));
  await shot(page, '03-new-job');
  await page.click('#submit-job');
  await page.waitForURL(/\/jobs\/\d+$/);
  const id = Number(new URL(page.url()).pathname.split('/').pop());
  const job = await plat.must('GET', `/v1/jobs/${id}`, member, undefined, 200);
  assert.equal(job.name, 'first-run');
  assert.equal(job.worker_count, 2);
  assert.equal(job.epochs, 3);
  assert.equal(job.lr, 0.05);
  assert.equal(job.code_path, 'train.sh');

  // Watched to the end on its page.
  await page.waitForSelector('.page-head .badge.state-succeeded', { timeout: 60000 });
  await page.waitForFunction(() => document.querySelector('#log-text').textContent.includes('training done'), null, { timeout: 20000 });
  const log = await page.textContent('#log-text');
  assert.match(log, /rank 0 of 2 starting, epochs=3 lr=0.05/);
  assert.ok(log.includes(`${XSS} is printed as text`), 'the HTML-looking log line reads as text');
  assert.equal(await page.locator('#log-text img').count(), 0);
  // The logs route's tail: the last bytes, and where to read on from.
  const whole = await plat.api('GET', `/v1/jobs/${id}/logs?rank=0`, member);
  const tail = await plat.api('GET', `/v1/jobs/${id}/logs?rank=0&tail=14`, member);
  assert.equal(tail.text, 'training done\n');
  assert.equal(tail.headers.get('x-next-offset'), String(Buffer.byteLength(whole.text)));
  assert.equal((await plat.api('GET', `/v1/jobs/${id}/logs?rank=0&tail=5&follow=true`, member)).json.error.field, 'tail');
  await page.selectOption('#log-rank', '1');
  await page.waitForFunction(() => document.querySelector('#log-text').textContent.includes('rank 1 of 2'));
  // The loss chart: one line per rank, five points each.
  await page.waitForSelector('figure[data-chart=Loss] path.line');
  assert.equal(await page.locator('figure[data-chart=Loss] path.line').count(), 2);
  assert.equal(await page.locator('figure[data-chart=Loss] circle.c0').count(), 5);
  assert.equal(await page.locator('figure[data-chart=Accuracy] path.line').count(), 2);
  // The cost, as the API bills it.
  const cost = await plat.must('GET', `/v1/jobs/${id}/cost`, member, undefined, 200);
  assert.ok(cost.total >= 2 * 2 * 100, `two ranks of two seconds at $100/s: ${cost.total}`);
  await page.waitForFunction((want) => document.querySelector('#job-cost').textContent === want, usd(cost.total));
  assert.equal(await page.locator('#timeline li').count() >= 3, true, 'PENDING, STARTING, RUNNING, SUCCEEDED in the timeline');
  assert.equal(await page.locator('#workers tbody tr').count(), 2);
  // Each worker's CPU time as the API has it (a dash where the node counts none).
  const wlist = await plat.must('GET', `/v1/jobs/${id}/workers`, member, undefined, 200);
  const cpuCells = await page.locator('#workers tbody tr td:nth-child(6)').allTextContents();
  assert.deepEqual(cpuCells, wlist.items.map((w) => (w.cpu_seconds == null ? '—' : w.cpu_seconds.toFixed(2))));
  await shot(page, '04-job');

  // The list shows it, and the billing page has its line.
  await page.click('#nav a[data-nav=jobs]');
  await page.waitForSelector(`tr[data-job-id="${id}"] .badge.state-succeeded`);
  await shot(page, '05-jobs');
  await page.click('#nav a[data-nav=billing]');
  await page.waitForSelector(`#invoice tr[data-job-id="${id}"]`);
  assert.match(await page.textContent(`#invoice tr[data-job-id="${id}"]`), /first-run/);
  await page.waitForSelector('figure[data-chart="Spend per day"] rect.bar');
  const today = new Date().toISOString().slice(0, 10);
  assert.equal(await page.locator('figure[data-chart="Spend per day"] rect.bar').count(),
    new Date(Date.UTC(+today.slice(0, 4), +today.slice(5, 7), 0)).getUTCDate(), 'a bar for every day of the month');
  assert.equal(await page.locator('figure[data-chart="Spend per day"] rect.bar:not(.zero)').count(), 1, 'spend on one day');
  assert.match(await page.textContent('figure[data-chart="Spend per day"] rect.bar:not(.zero) title'), new RegExp(`^${today.slice(8)}: `));
  await page.waitForSelector('.meter[data-meter="Workers"]');
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#csv-invoice')]);
  const csvPath = join(outDir, 'invoice.csv');
  await dl.saveAs(csvPath);
  const csv = readFileSync(csvPath, 'utf8');
  assert.match(csv, /^job_id,job_name,worker_seconds,gpu_seconds,amount,currency/);
  assert.match(csv, new RegExp(`^${id},"?first-run"?,`, 'm'));
  await shot(page, '06-billing');
});

test('the API\'s message for a bad learning rate appears beside the field', async (t) => {
  const page = await open(t);
  await signIn(page, member);
  await workspace();
  await page.goto('/jobs/new');
  await page.fill('#f-name', 'bad-lr');
  await page.selectOption('#f-image', 'native');
  await page.selectOption('#f-workspace', 'ws');
  await page.fill('#f-code_path', 'train.sh');
  for (const [lr, sent] of [['-1', -1], ['fast', 'fast']]) {
    await page.fill('#f-lr', lr);
    await page.click('#submit-job');
    const body = { name: 'bad-lr', image: 'native', datasets: [], workspace: 'ws', code_path: 'train.sh', args: [], epochs: 1, lr: sent,
      batch_size: 32, worker_spec: await page.inputValue('#f-worker_spec'), worker_count: 1, max_retries: 0 };
    const api = await plat.api('POST', '/v1/jobs', member, body);
    assert.ok(api.status === 400 || api.status === 422, `the API refuses lr=${lr}: ${api.status}`);
    assert.equal(api.json.error.field, 'lr');
    const err = page.locator('[data-error-for="lr"]');
    await err.waitFor({ state: 'visible' });
    assert.equal(await err.textContent(), api.json.error.message);
    assert.equal(await page.getAttribute('#f-lr', 'aria-invalid'), 'true');
    assert.ok(page.url().endsWith('/jobs/new'), 'the form stays');
    if (lr === '-1') await shot(page, '07-field-error');
  }
  const jobs = await plat.must('GET', '/v1/jobs?name=bad-lr', member, undefined, 200);
  assert.equal(jobs.items.length, 0, 'nothing was submitted');
});

test('a job named like HTML renders as text and opens no dialog', async (t) => {
  const page = await open(t);
  const j = await plat.must('POST', '/v1/jobs', member, { name: XSS, image: 'native', workspace: await workspace(),
    code_path: 'train.sh', epochs: 1, lr: 0.1, batch_size: 1, worker_spec: SPEC, worker_count: 1, max_runtime_seconds: 30 }, 201);
  await signIn(page, member);
  await page.waitForSelector(`tr[data-job-id="${j.id}"]`);
  assert.equal(await page.textContent(`tr[data-job-id="${j.id}"] td.name`), XSS);
  assert.equal(await page.locator('main img').count(), 0);
  await page.click(`tr[data-job-id="${j.id}"] td.name a`);
  await page.waitForSelector('#job-name');
  assert.equal(await page.textContent('#job-name'), XSS);
  assert.equal(await page.title(), `${XSS} · Cohort`);
  assert.equal(await page.locator('main img').count(), 0);
  await page.waitForTimeout(500); // time for an onerror to fire, were there an img
  await shot(page, '08-html-name');
  await plat.api('POST', `/v1/jobs/${j.id}/cancel`, member);
});

test('a viewer gets no New job or Cancel; another tenant\'s job is not found', async (t) => {
  // A job that waits: acme may run no job while this test looks at it.
  await plat.must('PUT', '/v1/tenants/acme/quota', ADMIN, { max_running_jobs: 0 }, 200);
  const j = await plat.must('POST', '/v1/jobs', member, { name: 'waiting', image: 'native', workspace: await workspace(),
    code_path: 'train.sh', epochs: 1, lr: 0.1, batch_size: 1, worker_spec: SPEC, worker_count: 1 }, 201);
  t.after(async () => { // cancelled while it still waits, then acme may run jobs again
    const now = await plat.must('GET', `/v1/jobs/${j.id}`, member, undefined, 200);
    if (now.state !== 'CANCELLED') await plat.must('POST', `/v1/jobs/${j.id}/cancel`, member, undefined, 200);
    await plat.waitJob(member, j.id, ['CANCELLED']);
    await plat.must('PUT', '/v1/tenants/acme/quota', ADMIN, {}, 200);
  });

  const asMember = await open(t);
  await signIn(asMember, member);
  await asMember.goto(`/jobs/${j.id}`);
  await asMember.waitForSelector('#cancel-job');
  await asMember.waitForSelector('#pending-reason');
  assert.match(await asMember.textContent('#pending-reason'), /quota/);
  assert.match(await asMember.textContent('#job-status'), /position 1 in the queue/);

  const page = await open(t);
  await signIn(page, viewer);
  await page.waitForSelector(`tr[data-job-id="${j.id}"]`);
  assert.equal(await page.locator('#new-job').count(), 0, 'no New job for a viewer');
  await page.goto(`/jobs/${j.id}`);
  await page.waitForSelector('#job-name');
  await page.waitForSelector('#pending-reason');
  assert.equal(await page.locator('#cancel-job').count(), 0, 'no Cancel for a viewer');
  assert.equal(await page.locator('#retry-job').count(), 0);
  await shot(page, '09-viewer-job');
  await page.goto('/workspaces/ws');
  await page.waitForSelector('#file-list table, #file-list .empty');
  assert.equal(await page.locator('#upload-form').count(), 0, 'no upload for a viewer');
  await shot(page, '09-viewer-workspace');

  const other = await open(t);
  await signIn(other, stranger);
  await other.goto(`/jobs/${j.id}`);
  await other.waitForSelector('#job-not-found');
  assert.match(await other.textContent('main'), /Job not found/);
  assert.ok(!(await other.textContent('main')).includes('waiting'), 'nothing of the job shows');
  await shot(other, '10-other-tenant');

  // The member's Cancel does cancel it, and the page follows.
  await asMember.click('#cancel-job');
  await asMember.waitForSelector('.page-head .badge.state-cancelled');
  assert.equal(await asMember.locator('#cancel-job').count(), 0);
  await asMember.waitForSelector('#retry-job');
  assert.equal((await plat.must('GET', `/v1/jobs/${j.id}`, member, undefined, 200)).state, 'CANCELLED');
});

test('the jobs list pages with the API\'s cursors and filters by state', async (t) => {
  // 23 jobs of a tenant that may run none, so they all wait.
  await plat.must('PUT', '/v1/tenants/other/quota', ADMIN, { max_running_jobs: 0 }, 200);
  await plat.must('POST', '/v1/workspaces', stranger, { name: 'ows' }, 201);
  const put = await fetch(`${plat.base}/v1/workspaces/ows/files/run.sh?mode=755`,
    { method: 'PUT', headers: { Authorization: `Bearer ${stranger}` }, body: '#!/bin/sh\ntrue\n' });
  assert.equal(put.status, 201);
  const ids = [];
  for (let i = 1; i <= 23; i++) {
    const j = await plat.must('POST', '/v1/jobs', stranger, { name: `sweep-${i}`, image: 'native', workspace: 'ows',
      code_path: 'run.sh', epochs: 1, lr: 0.1, batch_size: 1, worker_spec: SPEC, worker_count: 1 }, 201);
    ids.push(j.id);
  }
  await plat.must('POST', `/v1/jobs/${ids[0]}/cancel`, stranger, undefined, 200);
  t.after(async () => {
    for (const id of ids.slice(1)) await plat.must('POST', `/v1/jobs/${id}/cancel`, stranger, undefined, 200);
    await plat.must('PUT', '/v1/tenants/other/quota', ADMIN, {}, 200);
  });
  const page = await open(t);
  await signIn(page, stranger);
  await page.waitForSelector('#job-list tbody tr');
  const shown = async () => page.$$eval('#job-list tbody tr', (rows) => rows.map((r) => Number(r.dataset.jobId)));
  const newest = [...ids].reverse();
  assert.deepEqual(await shown(), newest.slice(0, 20), 'the 20 newest first');
  await page.click('#older');
  await page.waitForFunction(() => document.querySelectorAll('#job-list tbody tr').length === 3);
  assert.deepEqual(await shown(), newest.slice(20));
  assert.equal(await page.locator('#older').count(), 0, 'no page after the last');
  await page.click('text=← Newer');
  await page.waitForFunction(() => document.querySelectorAll('#job-list tbody tr').length === 20);
  assert.deepEqual(await shown(), newest.slice(0, 20));
  await page.selectOption('#f-state', 'CANCELLED');
  await page.waitForURL(/state=CANCELLED/);
  await page.waitForFunction(() => document.querySelectorAll('#job-list tbody tr').length === 1);
  assert.deepEqual(await shown(), [ids[0]]);
  // It updates itself: a job cancelled elsewhere appears without a reload.
  await plat.must('POST', `/v1/jobs/${ids[1]}/cancel`, stranger, undefined, 200);
  await page.waitForFunction(() => document.querySelectorAll('#job-list tbody tr').length === 2, null, { timeout: 10000 });
  assert.deepEqual(await shown(), [ids[1], ids[0]]);
  ids.splice(1, 1);
  await shot(page, '13-jobs-filtered');
});

test('an invoice of many jobs shows a page of lines and More lines the rest', async (t) => {
  // 230 charges of a tenant of its own, written into the ledger as cohortd
  // would: past one page of 200.
  const token = await plat.user('ledgerco', 'lee', 'member');
  const db = join(plat.dir, 'cohort.db');
  const sql = (q) => execFileSync('sqlite3', [db, q], { encoding: 'utf8' }).trim();
  const tenant = Number(sql("SELECT id FROM tenants WHERE name = 'ledgerco'"));
  const user = Number(sql("SELECT id FROM users WHERE name = 'lee'"));
  const now = Date.now();
  sql(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 229)
    INSERT INTO ledger(tenant_id, at, kind, amount, currency, job_id, attempt, rank, job_name, user_id,
      worker_spec, gpus, seconds, price_per_hour)
    SELECT ${tenant}, ${now} - 230000 + i * 1000, 'charge', 100, 'USD', 90000 + i, 1, 0, 'sweep-' || i, ${user},
      '${SPEC}', 0, 1, 360000 FROM n`);
  const page = await open(t);
  await signIn(page, token);
  await page.goto('/billing');
  await page.waitForSelector('#invoice tbody tr');
  const rows = () => page.locator('#invoice tbody tr').count();
  assert.equal(await rows(), 200, 'the first page');
  await page.click('#invoice-more');
  await page.waitForFunction(() => document.querySelectorAll('#invoice tbody tr').length === 230);
  const ids = await page.$$eval('#invoice tbody tr', (trs) => trs.map((r) => Number(r.dataset.jobId)));
  assert.deepEqual(ids, Array.from({ length: 230 }, (_, i) => 90000 + i), 'every job once, in order');
  assert.equal(await page.locator('#invoice-more').count(), 0, 'no More after the last page');
  assert.equal(await page.textContent('#invoice-total'), '$230.00', 'the total is the whole month\'s');
});

test('leaving a job page before it has loaded leaves nothing of it behind', async (t) => {
  const j = await plat.must('POST', '/v1/jobs', member, { name: 'left-early', image: 'native', workspace: await workspace(),
    code_path: 'train.sh', epochs: 1, lr: 0.1, batch_size: 1, worker_spec: SPEC, worker_count: 1, max_runtime_seconds: 30 }, 201);
  t.after(() => plat.api('POST', `/v1/jobs/${j.id}/cancel`, member));
  const page = await open(t);
  await signIn(page, member);
  await page.waitForSelector(`tr[data-job-id="${j.id}"]`);
  // The job page's first answer is held until the user has moved on.
  let release;
  const held = new Promise((r) => { release = r; });
  await page.route(`**/v1/jobs/${j.id}`, async (route) => {
    await held;
    await route.continue().catch(() => {}); // the page may have aborted it
  });
  await page.click(`tr[data-job-id="${j.id}"] td.name a`);
  await page.waitForURL(`**/jobs/${j.id}`);
  await page.click('#nav a[data-nav="jobs"]');
  await page.waitForURL(/\/jobs$/);
  await page.waitForSelector(`#job-list tr[data-job-id="${j.id}"]`);
  const late = [];
  page.on('request', (r) => {
    if (new URL(r.url()).pathname.startsWith(`/v1/jobs/${j.id}`)) late.push(r.url());
  });
  release();
  // Longer than two rounds of the job page's refresh (2 s) would take.
  await page.waitForTimeout(5000);
  assert.deepEqual(late, [], 'the job page left behind went on asking for its job');
  assert.equal(await page.locator('#job-name').count(), 0, 'the job page left behind wrote into the page');
  assert.equal(await page.locator('#job-list').count(), 1, 'the jobs list is what shows');
  await page.unroute(`**/v1/jobs/${j.id}`);
});

test('datasets: create, upload into a folder with progress, browse, download, seal', async (t) => {
  const page = await open(t);
  await signIn(page, member);
  await page.click('#nav a[data-nav=datasets]');
  await page.fill('#volume-create #f-name', 'digits');
  await page.click('#volume-create button[type=submit]');
  await page.waitForURL('**/datasets/digits');
  const big = Buffer.alloc(3 * 1024 * 1024, 7);
  await page.fill('#f-dir', 'raw');
  await page.setInputFiles('#f-files', [
    { name: 'train.bin', mimeType: 'application/octet-stream', buffer: big },
    { name: '<img src=x onerror=alert(3)> odd.txt', mimeType: 'text/plain', buffer: Buffer.from('hello\n') },
  ]);
  await page.click('#upload');
  await page.waitForFunction(() => document.querySelectorAll('.upload-row.done').length === 2);
  await page.waitForSelector('tr.folder a');
  assert.equal(await page.textContent('tr.folder a'), 'raw/');
  await page.click('tr.folder a');
  await page.waitForSelector('tr[data-path="raw/train.bin"]');
  assert.match(await page.textContent('tr[data-path="raw/train.bin"]'), /3\.0 MiB/);
  assert.equal(await page.textContent('tr[data-path="raw/<img src=x onerror=alert(3)> odd.txt"] td.name'), '<img src=x onerror=alert(3)> odd.txt');
  assert.equal(await page.locator('main img').count(), 0);
  const [dl] = await Promise.all([page.waitForEvent('download'),
    page.click('tr[data-path="raw/<img src=x onerror=alert(3)> odd.txt"] button:has-text("Download")')]);
  const p = join(outDir, 'downloaded.txt');
  await dl.saveAs(p);
  assert.equal(readFileSync(p, 'utf8'), 'hello\n');
  await shot(page, '11-dataset');
  await page.click('#seal');
  await page.waitForSelector('text=sealed (read-only)');
  assert.equal(await page.locator('#upload-form').count(), 0, 'a sealed dataset takes no upload');
  const d = await plat.must('GET', '/v1/datasets/digits', member, undefined, 200);
  assert.equal(d.sealed, true);
});

test('the platform admin drains a node, rotates its token, sets a quota and adds credit', { skip: !SANDBOX && 'no agent without root' }, async (t) => {
  const page = await open(t);
  await signIn(page, ADMIN);
  await page.click('#nav-admin');
  await page.waitForSelector('tr[data-node="n1"]');
  await page.click('tr[data-node="n1"] button');
  await page.waitForSelector('tr[data-node="n1"] .badge.drained');
  let nodes = await plat.must('GET', '/v1/nodes', ADMIN, undefined, 200);
  assert.equal(nodes.items.find((n) => n.name === 'n1').drained, true);
  await page.click('tr[data-node="n1"] button');
  await page.waitForFunction(() => !document.querySelector('tr[data-node="n1"] .badge.drained'));
  nodes = await plat.must('GET', '/v1/nodes', ADMIN, undefined, 200);
  assert.equal(nodes.items.find((n) => n.name === 'n1').drained, false);
  // Its token rotated: the agent takes the new one with its next heartbeat,
  // so the token's issue time moves and nothing is left under way.
  const was = nodes.items.find((n) => n.name === 'n1');
  await page.click('tr[data-node="n1"] button.rotate');
  let n1 = was;
  for (let i = 0; i < 150 && (n1.token_issued_at === was.token_issued_at || n1.token_rotation !== null); i++) {
    await new Promise((r) => setTimeout(r, 200));
    nodes = await plat.must('GET', '/v1/nodes', ADMIN, undefined, 200);
    n1 = nodes.items.find((n) => n.name === 'n1');
  }
  assert.notEqual(n1.token_issued_at, was.token_issued_at, 'the agent never took its new token');
  assert.equal(n1.token_rotation, null);
  assert.equal(n1.state, 'up');

  await page.click('tr[data-tenant="acme"] button');
  await page.waitForSelector('#quota-form');
  await page.fill('#quota-form #f-max_workers', '12');
  await page.click('#quota-form button[type=submit]');
  await page.waitForSelector('text=Quota saved.');
  const q = await plat.must('GET', '/v1/tenants/acme/quota', ADMIN, undefined, 200);
  assert.equal(q.max_workers, 12);
  await page.fill('#credit-form #f-amount', 'lots');
  await page.click('#credit-form button[type=submit]');
  await page.waitForSelector('[data-error-for="amount"]:not([hidden])');
  const before = await plat.must('GET', '/v1/tenants/acme/budget', ADMIN, undefined, 200);
  await page.fill('#credit-form #f-amount', '5000');
  await page.fill('#credit-form #f-note', 'welcome credit');
  await page.click('#credit-form button[type=submit]');
  await page.waitForSelector('text=Credit added');
  const after = await plat.must('GET', '/v1/tenants/acme/budget', ADMIN, undefined, 200);
  assert.equal(after.balance, before.balance + 5000);
  await page.waitForFunction((want) => document.querySelector('#tenant-balance').textContent.includes(want), '$');
  await page.fill('#budget-form #f-monthly_cap', '90000');
  await page.check('#budget-form #f-enforce');
  await page.click('#budget-form button[type=submit]');
  await page.waitForSelector('text=Budget saved.');
  t.after(() => plat.must('PUT', '/v1/tenants/acme/budget', ADMIN, {}, 200));
  const b = await plat.must('GET', '/v1/tenants/acme/budget', ADMIN, undefined, 200);
  assert.equal(b.monthly_cap, 90000);
  assert.equal(b.enforce, true);
  await shot(page, '12-admin');
  await plat.must('PUT', '/v1/tenants/acme/quota', ADMIN, {}, 200);

  // The admin reads acme's bill: the cap and the prepaid balance as bars.
  await page.click('tr[data-tenant="acme"] a:has-text("Billing")');
  await page.waitForURL(/\/billing\?tenant=acme/);
  await page.waitForSelector('.meter[data-meter="Monthly cap"]');
  const quota = await plat.must('GET', '/v1/quota?tenant=acme', ADMIN, undefined, 200);
  assert.match(await page.textContent('.meter[data-meter="Monthly cap"]'), new RegExp(`${usd(quota.money.spent_this_month).replace('$', '\\$')} of \\$900\\.00`));
  await page.waitForSelector('.meter[data-meter^="Balance in use"]');
  assert.equal(await page.textContent('#balance'), usd(quota.money.balance));
  await shot(page, '14-admin-billing');
});

test('cohortd serves the console with a policy that forbids inline script', async () => {
  const res = await fetch(plat.base + '/jobs/1');
  assert.equal(res.status, 200);
  const csp = res.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.match(csp, /frame-ancestors 'none'/);
  const html = await res.text();
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/i, 'no inline script element');
  assert.doesNotMatch(html, /\son[a-z]+=/i, 'no inline event handler');
  assert.doesNotMatch(html, /style=/i, 'no inline style');
  for (const p of ['/../cohort.db', '/%2e%2e/cohort.db', '/.git/config', '/js/%2e%2e/index.html',
    '/js/../../cohort.db', '/README.md', '/js/nope.js', '/%2e%2e/%2e%2e/etc/passwd']) {
    assert.equal(await rawStatus(p), 404, p);
  }
  const js = await fetch(plat.base + '/js/app.js');
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  assert.equal((await fetch(plat.base + '/v1/nope')).status, 404);
  const api = await fetch(plat.base + '/v1/whoami');
  assert.equal(api.status, 401, 'the API is not the console');
});

// The workspace with the program in it, when the newcomer's test did not make it.
async function workspace() {
  if (!ws) {
    await plat.must('POST', '/v1/workspaces', member, { name: 'ws' }, 201);
    const r = await fetch(`${plat.base}/v1/workspaces/ws/files/train.sh?mode=755`,
      { method: 'PUT', headers: { Authorization: `Bearer ${member}` }, body: PROGRAM });
    assert.equal(r.status, 201);
    ws = 'ws';
  }
  return ws;
}

// Dollars as the page shows them (en-US).
function usd(minor) {
  return (minor < 0 ? '-$' : '$') + (Math.abs(minor) / 100).toFixed(2).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

// A GET whose path is sent as written: fetch would resolve the dots first.
function rawStatus(path) {
  const u = new URL(plat.base);
  return new Promise((resolve, reject) => {
    http.get({ host: u.hostname, port: u.port, path }, (res) => {
      res.resume();
      resolve(res.statusCode);
    }).on('error', reject);
  });
}
