// job: one job.  Its state and why, the timeline of its events, its
// workers, a log viewer per rank that follows the log as it grows, loss and
// accuracy charts from its COHORT_METRIC lines, its cost, and cancel/retry.
// Refreshed every two seconds until the job has ended and its logs are in.

import * as api from '../api.js';
import {
  h, replace, errorBox, table, stateBadge, money, when, duration, lineChart, TERMINAL,
} from '../dom.js';
import { canWrite } from '../session.js';

const REFRESH_MS = 2000;
const LOG_KEEP = 2 * 1024 * 1024; // characters kept in the viewer
const LOG_TAIL = 256 * 1024; // bytes of a log shown when it is first opened
const RANKS_CHARTED = 4;

function dl(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

async function pages(path, cursor, signal) {
  const items = [];
  let next = cursor || '';
  for (let i = 0; i < 50; i++) {
    const page = await api.get(path + api.query({ limit: 200, cursor: next }), { signal });
    items.push(...page.items);
    if (!page.next_cursor) return { items, cursor: next, done: true, last: items.length ? items[items.length - 1].id : null };
    next = page.next_cursor;
  }
  return { items, cursor: next, done: false };
}

// signal: the navigation's (app.js); it aborts when the user moves on.
export async function render(main, [id], signal) {
  let j;
  try {
    j = await api.get(`/v1/jobs/${id}`, { signal });
  } catch (e) {
    if (e.status === 404) {
      document.title = 'Not found · Cohort';
      replace(main, h('section', { class: 'notfound', id: 'job-not-found' }, h('h1', {}, 'Job not found'),
        h('p', {}, `There is no job ${id} in your tenant.`), h('a', { href: '/jobs' }, 'Back to jobs')));
      return null;
    }
    throw e;
  }

  const head = h('div', { class: 'page-head' });
  const status = h('div', { id: 'job-status' });
  const facts = h('section', { class: 'card' });
  const timeline = h('section', { class: 'card', id: 'timeline' });
  const workers = h('section', { class: 'card', id: 'workers' });
  const charts = h('section', { class: 'card charts', id: 'charts' });
  const cost = h('section', { class: 'card', id: 'cost' });
  const logs = h('section', { class: 'card', id: 'logs' });
  const actionMsg = h('div');
  replace(main, head, actionMsg, status, h('div', { class: 'cols' }, facts, cost), charts, logs,
    h('div', { class: 'cols' }, timeline, workers));

  // ---- the job itself ----
  function showJob() {
    document.title = `${j.name} · Cohort`;
    const acts = [];
    if (canWrite() && !TERMINAL.has(j.state)) {
      acts.push(h('button', { type: 'button', class: 'danger', id: 'cancel-job', onclick: () => act('cancel') }, 'Cancel'));
    }
    if (canWrite() && (j.state === 'FAILED' || j.state === 'CANCELLED')) {
      acts.push(h('button', { type: 'button', id: 'retry-job', onclick: () => act('retry') }, 'Retry'));
    }
    replace(head, h('h1', {}, h('span', { class: 'muted' }, `#${j.id} `), h('span', { id: 'job-name' }, j.name)),
      h('div', { class: 'head-right' }, stateBadge(j.state), acts));
    const why = [];
    if (j.state === 'PENDING') {
      why.push(h('p', { class: 'pending' }, 'Waiting',
        j.position ? ` — position ${j.position} in the queue` : '',
        j.reason ? h('span', {}, ': ', h('code', { id: 'pending-reason' }, j.reason)) : '.'));
    } else if (j.reason) {
      why.push(h('p', { class: j.state === 'FAILED' ? 'error' : 'muted' }, 'Reason: ', h('code', {}, j.reason)));
    }
    replace(status, why);
    const p = j.price || {};
    replace(facts, h('h2', {}, 'Details'), dl([
      ['Image', `${j.image} (${j.framework})`],
      ['Workspace', h('a', { href: `/workspaces/${api.seg(j.workspace)}` }, j.workspace)],
      ['Code path', h('code', {}, j.code_path)],
      j.args && j.args.length ? ['Arguments', h('code', {}, j.args.join(' '))] : null,
      ['Datasets', j.datasets.length ? j.datasets.join(', ') : 'none'],
      ['Epochs · LR · batch', `${j.epochs} · ${j.lr} · ${j.batch_size}`],
      ['Workers', `${j.worker_count} × ${j.worker_spec}${j.workers_per_node ? `, ${j.workers_per_node} per node` : ''}`],
      ['Price', `${money(p.per_hour, p.currency)} per hour`],
      ['Max runtime', j.max_runtime_seconds ? duration(j.max_runtime_seconds) : 'none'],
      ['Attempt', `${j.attempt} (retries allowed: ${j.max_retries})`],
      ['Submitted', `${when(j.created_at)} by ${j.user}`],
      ['Started', when(j.started_at)],
      ['Finished', when(j.finished_at)],
    ]));
  }

  async function act(what) {
    replace(actionMsg);
    try {
      j = await api.post(`/v1/jobs/${id}/${what}`, undefined);
      showJob();
      refresh(true);
    } catch (e) {
      replace(actionMsg, errorBox(e));
    }
  }

  // ---- events, workers, cost ----
  async function showEvents() {
    const { items } = await pages(`/v1/jobs/${id}/events`, '', signal);
    replace(timeline, h('h2', {}, 'Timeline'), h('ol', { class: 'timeline' }, items.map((e) =>
      h('li', {}, h('time', { datetime: e.at }, when(e.at)), ' ',
        e.from ? [stateBadge(e.from), ' → '] : null, stateBadge(e.to),
        e.attempt > 1 ? h('small', { class: 'muted' }, ` attempt ${e.attempt}`) : null,
        e.reason ? h('div', { class: 'muted' }, e.reason) : null))));
  }

  async function showWorkers() {
    const { items } = await pages(`/v1/jobs/${id}/workers`, '', signal);
    const rows = items.map((w) => h('tr', {},
      h('td', { class: 'num' }, w.attempt), h('td', { class: 'num' }, w.rank), h('td', { class: 'num' }, w.node_id),
      h('td', {}, w.state), h('td', { class: 'num' }, w.exit_code ?? (w.signal ? `signal ${w.signal}` : '—')),
      h('td', { class: 'num' }, w.cpu_seconds == null ? '—' : w.cpu_seconds.toFixed(2)),
      h('td', { class: 'num' }, w.memory_peak_mb == null ? '—' : w.memory_peak_mb),
      h('td', {}, w.message || '')));
    replace(workers, h('h2', {}, 'Workers'),
      table(['Attempt', 'Rank', 'Node', 'State', 'Exit', 'CPU s', 'Peak MiB', 'Message'], rows, 'Not placed yet.'));
  }

  async function showCost() {
    const c = await api.get(`/v1/jobs/${id}/cost`, { signal });
    replace(cost, h('h2', {}, 'Cost'),
      h('p', { class: 'big', id: 'job-cost' }, money(c.total, c.currency)),
      h('p', { class: 'muted' }, `${duration(c.seconds)} of worker time at ${money(c.price_per_worker_hour, c.currency)} per worker-hour`,
        c.running ? ' · still running' : '', c.charged !== c.total ? ` · ${money(c.charged, c.currency)} charged so far` : ''),
      c.attempts.length > 1 ? table(['Attempt', 'Seconds', 'Amount'], c.attempts.map((a) =>
        h('tr', {}, h('td', {}, a.attempt), h('td', { class: 'num' }, a.seconds), h('td', { class: 'num' }, money(a.amount, c.currency))))) : null);
  }

  // ---- metrics: fetched incrementally, charted per rank ----
  const metrics = [];
  let metricsCursor = '';
  async function showMetrics() {
    let next = metricsCursor;
    for (let i = 0; i < 50; i++) {
      const page = await api.get(`/v1/jobs/${id}/metrics` + api.query({ limit: 200, cursor: next }), { signal });
      metrics.push(...page.items);
      if (page.items.length) next = String(page.items[page.items.length - 1].id);
      if (!page.next_cursor) break;
      next = page.next_cursor;
    }
    metricsCursor = next;
    const attempt = j.attempt;
    const series = (key) => {
      const byRank = new Map();
      metrics.filter((m) => m.attempt === attempt && typeof m.values[key] === 'number').forEach((m, i) => {
        if (m.rank >= RANKS_CHARTED) return;
        const v = m.values;
        const x = typeof v.step === 'number' ? v.step : typeof v.epoch === 'number' ? v.epoch : i;
        if (!byRank.has(m.rank)) byRank.set(m.rank, []);
        byRank.get(m.rank).push([x, v[key]]);
      });
      return [...byRank.entries()].sort((a, b) => a[0] - b[0]).map(([r, pts]) => ({ name: `rank ${r}`, points: pts }));
    };
    const xlabel = metrics.some((m) => typeof m.values.step === 'number') ? 'step' : 'epoch';
    replace(charts, h('h2', {}, 'Training'),
      h('div', { class: 'chart-row' },
        lineChart('Loss', series('loss'), { xlabel, empty: 'No loss reported yet (COHORT_METRIC lines with "loss").' }),
        lineChart('Accuracy', series('accuracy'), { xlabel, empty: 'No accuracy reported yet.' })));
  }

  // ---- logs: one rank of one attempt, polled by offset while it grows ----
  const rankSel = h('select', { id: 'log-rank', name: 'rank' });
  const attemptSel = h('select', { id: 'log-attempt', name: 'attempt' });
  const follow = h('input', { type: 'checkbox', id: 'log-follow', checked: true });
  const pre = h('pre', { class: 'log', id: 'log-text', tabindex: '0' });
  const logNote = h('small', { class: 'muted', id: 'log-note' });
  let logOffset = 0, logKey = '', logQuiet = 0;
  replace(logs, h('div', { class: 'log-head' }, h('h2', {}, 'Logs'),
    h('label', { for: 'log-rank' }, 'Rank'), rankSel,
    h('label', { for: 'log-attempt' }, 'Attempt'), attemptSel,
    h('label', { class: 'check' }, follow, 'Follow'), logNote), pre);
  function fillSelectors() {
    const r = rankSel.value, a = attemptSel.value;
    if (rankSel.options.length !== j.worker_count) {
      replace(rankSel, Array.from({ length: j.worker_count }, (_, i) => h('option', { value: i }, String(i))));
      rankSel.value = r || '0';
    }
    if (attemptSel.options.length !== j.attempt) {
      replace(attemptSel, Array.from({ length: j.attempt }, (_, i) => h('option', { value: i + 1 }, String(i + 1))));
      attemptSel.value = a && Number(a) <= j.attempt ? a : String(j.attempt);
    }
  }
  rankSel.addEventListener('change', () => pollLog(true));
  attemptSel.addEventListener('change', () => pollLog(true));
  follow.addEventListener('change', () => { if (follow.checked) pollLog(false); });

  async function pollLog(reset) {
    const key = `${rankSel.value}/${attemptSel.value}`;
    if (reset || key !== logKey) {
      logKey = key;
      logOffset = 0;
      logQuiet = 0;
      pre.textContent = '';
    }
    for (let i = 0; i < 8; i++) {
      // A new selection starts at the log's end (LOG_TAIL bytes), then follows by offset.
      const first = logOffset === 0 && !pre.textContent;
      const res = await api.request('GET', `/v1/jobs/${id}/logs` + api.query({
        rank: rankSel.value, attempt: attemptSel.value, offset: first ? undefined : logOffset,
        tail: first ? LOG_TAIL : undefined }), { raw: true, signal });
      const text = await res.text();
      if (key !== logKey) return; // the selection moved while this was in flight
      const next = Number(res.headers.get('X-Next-Offset'));
      if (!text.length) {
        logQuiet++;
        break;
      }
      logQuiet = 0;
      const size = new TextEncoder().encode(text).length;
      logOffset = Number.isFinite(next) && next > logOffset ? next : logOffset + size;
      let all = (first && logOffset > size ? '… (earlier output not shown)\n' : '') + pre.textContent + text;
      if (all.length > LOG_KEEP) all = '…\n' + all.slice(all.length - LOG_KEEP);
      pre.textContent = all;
      if (follow.checked) pre.scrollTop = pre.scrollHeight;
    }
    logNote.textContent = `${logOffset} bytes`;
  }

  // ---- the refresh loop ----
  let timer = null;
  let finalRounds = 0;
  async function refresh(once) {
    clearTimeout(timer);
    try {
      if (!once) j = await api.get(`/v1/jobs/${id}`, { signal });
      showJob();
      fillSelectors();
      await Promise.all([showEvents(), showWorkers(), showCost(), showMetrics(), pollLog(false)]);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 404) {
        replace(status, errorBox(new Error('This job was deleted.')));
        return;
      }
      replace(actionMsg, errorBox(e));
    }
    // After the end, go on a little while the last log chunks and metrics arrive.
    if (TERMINAL.has(j.state)) finalRounds++;
    if (signal.aborted) return; // the page is gone: no next round
    if (!TERMINAL.has(j.state) || finalRounds < 5 || logQuiet < 2) timer = setTimeout(() => refresh(false), REFRESH_MS);
  }
  await refresh(true);
  return () => clearTimeout(timer);
}
