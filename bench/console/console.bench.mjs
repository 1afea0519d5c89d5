// The console's speed and memory in Debian's chromium (headless), against
// a real cohortd holding many jobs.  Prints figures; asserts nothing.
//
// usage: node bench/console/console.bench.mjs BUILD_DIR [JOBS] [LOADS]
//
// - what the browser downloads for a first visit (requests and bytes),
// - cold loads of the jobs list and of a job page: navigation start to the
//   table rows or the job's name on screen (median and worst of LOADS),
// - an in-app move from the list to a job (a click, no reload),
// - the JS heap after a job page has refreshed itself for 30 s (a leak in
//   the refresh loop shows as growth).

import { readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { Platform, ADMIN } from '../../tests/web/platform.mjs';

const build = resolve(process.argv[2] || 'build');
const JOBS = Number(process.argv[3] || 1000);
const LOADS = Number(process.argv[4] || 15);
const root = resolve(new URL('../..', import.meta.url).pathname);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function webBytes(dir) {
  let n = 0, files = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      const sub = webBytes(p);
      n += sub.n;
      files += sub.files;
    } else if (/\.(html|js|css|svg)$/.test(e.name)) {
      n += statSync(p).size;
      files++;
    }
  }
  return { n, files };
}

const plat = await new Platform({ cohortd: join(build, 'cohortd'), agent: join(build, 'cohort-agent'), webDir: join(root, 'web'), cohortdArgs: ['--rate-limit', '0'] }).start();
let browser;
try {
  const tok = await plat.user('bench', 'ben', 'member');
  await plat.must('PUT', '/v1/tenants/bench/quota', ADMIN, { max_running_jobs: 0 }, 200);
  await plat.must('POST', '/v1/workspaces', tok, { name: 'ws' }, 201);
  const put = await fetch(`${plat.base}/v1/workspaces/ws/files/run.sh?mode=755`,
    { method: 'PUT', headers: { Authorization: `Bearer ${tok}` }, body: '#!/bin/sh\ntrue\n' });
  if (put.status !== 201) throw new Error(`upload: ${put.status}`);
  const t0 = Date.now();
  let next = 0, last = 0;
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < JOBS) {
      next++;
      const j = await plat.must('POST', '/v1/jobs', tok, { name: `job-${next}`, image: 'native', workspace: 'ws',
        code_path: 'run.sh', epochs: 1, lr: 0.1, batch_size: 1, worker_spec: 'cpu-small', worker_count: 1 }, 201);
      last = Math.max(last, j.id);
    }
  }));
  console.log(`setup: ${JOBS} pending jobs submitted in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  // Each context signs in before any script of the page runs, and notes the
  // moment (performance.now) a watched selector first matches, in the page
  // itself, so the figures carry no polling delay of the driver.
  const fresh = async () => {
    const ctx = await browser.newContext({ baseURL: plat.base, viewport: { width: 1280, height: 900 } });
    await ctx.addInitScript((t) => {
      sessionStorage.setItem('cohort.token', t);
      window.__seen = {};
      window.__watch = [];
      new MutationObserver(() => {
        for (const sel of window.__watch) {
          if (!(sel in window.__seen) && document.querySelector(sel)) window.__seen[sel] = performance.now();
        }
      }).observe(document, { childList: true, subtree: true });
    }, tok);
    return ctx;
  };
  const seen = (page, sel) => page.waitForFunction((s) => window.__seen[s], sel).then((h) => h.jsonValue());

  // What a first visit downloads.
  {
    const ctx = await fresh();
    const page = await ctx.newPage();
    let reqs = 0, bytes = 0, api = 0;
    page.on('response', async (r) => {
      const body = await r.body().catch(() => Buffer.alloc(0));
      if (new URL(r.url()).pathname.startsWith('/v1/')) api++;
      else {
        reqs++;
        bytes += body.length;
      }
    });
    await page.goto('/jobs');
    await page.waitForSelector('#job-list tbody tr');
    await page.waitForTimeout(300);
    const w = webBytes(join(root, 'web'));
    console.log(`first visit: ${reqs} static requests, ${(bytes / 1024).toFixed(1)} KiB uncompressed ` +
      `(web/ holds ${w.files} files, ${(w.n / 1024).toFixed(1)} KiB), ${api} API calls`);
    await ctx.close();
  }

  async function coldLoad(path, selector) {
    const times = [];
    for (let i = 0; i < LOADS; i++) {
      const ctx = await fresh();
      const page = await ctx.newPage();
      await page.addInitScript((sel) => window.__watch.push(sel), selector);
      await page.goto(path, { waitUntil: 'commit' });
      times.push(await seen(page, selector));
      await ctx.close();
    }
    return times;
  }
  const list = await coldLoad('/jobs', '#job-list tbody tr');
  console.log(`cold load /jobs (${JOBS} jobs, 20 shown): median ${median(list).toFixed(0)} ms, worst ${Math.max(...list).toFixed(0)} ms over ${LOADS}`);
  const one = await coldLoad(`/jobs/${last}`, '#job-name');
  console.log(`cold load /jobs/ID: median ${median(one).toFixed(0)} ms, worst ${Math.max(...one).toFixed(0)} ms over ${LOADS}`);

  // In-app navigation: list -> job, no page load.
  {
    const ctx = await fresh();
    const page = await ctx.newPage();
    const times = [];
    for (let i = 0; i < LOADS; i++) {
      await page.goto('/jobs');
      await page.waitForSelector('#job-list tbody tr');
      // Clicked in the page, timed in the page: from the click to the job's name.
      times.push(await page.evaluate(() => new Promise((done) => {
        const t = performance.now();
        const ob = new MutationObserver(() => {
          if (document.querySelector('#job-name')) {
            ob.disconnect();
            done(performance.now() - t);
          }
        });
        ob.observe(document.getElementById('main'), { childList: true, subtree: true });
        document.querySelector('#job-list tbody tr:first-child td.name a').click();
      })));
    }
    console.log(`click from the list to a job: median ${median(times).toFixed(0)} ms, worst ${Math.max(...times).toFixed(0)} ms`);
    await ctx.close();
  }

  // Memory of a job page left open (it refreshes every 2 s while the job waits).
  {
    const ctx = await fresh();
    const page = await ctx.newPage();
    const cdp = await ctx.newCDPSession(page);
    await cdp.send('Performance.enable');
    const heap = async () => {
      await cdp.send('HeapProfiler.collectGarbage');
      const { metrics } = await cdp.send('Performance.getMetrics');
      return metrics.find((m) => m.name === 'JSHeapUsedSize').value / 1024 / 1024;
    };
    await page.goto(`/jobs/${last}`);
    await page.waitForSelector('#job-name');
    await page.waitForTimeout(2000);
    const before = await heap();
    await page.waitForTimeout(30000);
    const after = await heap();
    console.log(`JS heap of an open job page: ${before.toFixed(2)} MiB, after 30 s of refreshes ${after.toFixed(2)} MiB`);
    await ctx.close();
  }
} finally {
  if (browser) await browser.close();
  await plat.stop();
}
