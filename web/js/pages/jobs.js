// jobs: the tenant's jobs, newest first, filtered by state and name, a page
// at a time (the API's cursors), refreshed while the page is open.

import * as api from '../api.js';
import { h, replace, errorBox, table, stateBadge, money, ago } from '../dom.js';
import { canWrite, go } from '../session.js';

const STATES = ['PENDING', 'STARTING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const PAGE = 20;
const REFRESH_MS = 3000;

export function render(main, _params, signal) {
  document.title = 'Jobs · Cohort';
  const params = new URLSearchParams(location.search);
  const state = params.get('state') || '';
  const name = params.get('name') || '';
  const cursor = params.get('cursor') || '';
  const prev = params.getAll('prev'); // the cursors of the pages before this one

  const stateSel = h('select', { name: 'state', id: 'f-state' },
    h('option', { value: '' }, 'Any state'),
    STATES.map((s) => h('option', { value: s, selected: s === state }, s)));
  const nameIn = h('input', { name: 'name', id: 'f-name', value: name, placeholder: 'Exact job name', maxlength: 200 });
  const filters = h('form', { class: 'filters', id: 'job-filters' },
    h('label', { for: 'f-state' }, 'State'), stateSel,
    h('label', { for: 'f-name' }, 'Name'), nameIn,
    h('button', { type: 'submit' }, 'Filter'));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    go('/jobs' + api.query({ state: stateSel.value, name: nameIn.value.trim() }));
  });
  stateSel.addEventListener('change', () => filters.requestSubmit());

  const list = h('div', { id: 'job-list' }, h('p', { class: 'muted' }, 'Loading…'));
  const pager = h('div', { class: 'pager' });
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Jobs'),
      canWrite() ? h('a', { class: 'button primary', href: '/jobs/new', id: 'new-job' }, 'New job') : null),
    filters, list, pager);

  let timer = null;
  async function load() {
    try {
      const page = await api.get('/v1/jobs' + api.query({ state, name, limit: PAGE, cursor }), { signal });
      const rows = page.items.map((j) => h('tr', { dataset: { jobId: j.id } },
        h('td', {}, h('a', { href: `/jobs/${j.id}` }, `#${j.id}`)),
        h('td', { class: 'name' }, h('a', { href: `/jobs/${j.id}` }, j.name)),
        h('td', {}, stateBadge(j.state), j.state === 'PENDING' && j.position ? h('small', { class: 'muted' }, ` #${j.position} in queue`) : null),
        h('td', { class: 'num' }, `${j.worker_count} × ${j.worker_spec}`),
        h('td', { class: 'num' }, money(j.price && j.price.cost_so_far, j.price && j.price.currency)),
        h('td', { title: j.created_at }, ago(j.created_at))));
      replace(list, table(['ID', 'Name', 'State', 'Workers', 'Cost so far', 'Age'], rows,
        state || name ? 'No job matches these filters.' : 'No jobs yet.'));
      const base = { state, name };
      replace(pager,
        prev.length ? h('a', { class: 'button', href: '/jobs' + pagerQuery(base, prev.slice(0, -1), prev[prev.length - 1]) }, '← Newer') : null,
        page.next_cursor ? h('a', { class: 'button', id: 'older', href: '/jobs' + pagerQuery(base, [...prev, cursor], page.next_cursor) }, 'Older →') : null);
    } catch (e) {
      if (e.name === 'AbortError') return;
      replace(list, errorBox(e));
    }
    if (!signal.aborted) timer = setTimeout(load, REFRESH_MS);
  }
  load();
  return () => clearTimeout(timer);
}

function pagerQuery(base, prev, cursor) {
  const q = new URLSearchParams();
  if (base.state) q.set('state', base.state);
  if (base.name) q.set('name', base.name);
  if (cursor) q.set('cursor', cursor);
  for (const p of prev) q.append('prev', p);
  const s = q.toString();
  return s ? '?' + s : '';
}
