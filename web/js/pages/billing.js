// billing: what the tenant spends.  Quota and budget as bars, spend per day
// as a chart, cost per job, CSV downloads, and the invoice of a month.  A
// platform admin may look at any tenant (the API's ?tenant=).

import * as api from '../api.js';
import { h, replace, errorBox, table, money, meter, barChart, bytes, duration } from '../dom.js';
import { isPlatformAdmin, user, go } from '../session.js';

function monthOf(d) {
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
}

export async function render(main) {
  document.title = 'Billing · Cohort';
  const params = new URLSearchParams(location.search);
  const tenant = isPlatformAdmin() ? params.get('tenant') || '' : '';
  const month = /^\d{4}-\d{2}$/.test(params.get('month') || '') ? params.get('month') : monthOf(new Date());
  const t = tenant ? { tenant } : {};
  const who = tenant || user().tenant;

  const [quota, days] = await Promise.all([
    api.get('/v1/quota' + api.query(t)),
    api.get('/v1/usage' + api.query({ ...t, group_by: 'day', from: `${month}-01` , to: nextMonth(month) })),
  ]);
  const cur = quota.money.currency;
  const m = quota.money;
  const msg = h('div');

  const pick = h('form', { class: 'filters', id: 'billing-pick' },
    isPlatformAdmin() ? [h('label', { for: 'f-tenant' }, 'Tenant'),
      h('input', { id: 'f-tenant', name: 'tenant', value: tenant, placeholder: user().tenant })] : null,
    h('label', { for: 'f-month' }, 'Month'),
    h('input', { id: 'f-month', name: 'month', type: 'month', value: month }),
    h('button', { type: 'submit' }, 'Show'));
  pick.addEventListener('submit', (e) => {
    e.preventDefault();
    go('/billing' + api.query({ tenant: pick.elements.tenant ? pick.elements.tenant.value.trim() : '', month: pick.elements.month.value }));
  });

  const limits = h('section', { class: 'card', id: 'quota' }, h('h2', {}, 'Quota'),
    meter('Running jobs', quota.running_jobs.used, quota.running_jobs.limit),
    meter('Workers', quota.workers.used, quota.workers.limit),
    meter('CPUs', quota.cpus.used, quota.cpus.limit),
    meter('GPUs', quota.gpus.used, quota.gpus.limit),
    meter('Storage', quota.storage_bytes.used, quota.storage_bytes.limit, bytes));

  const budget = h('section', { class: 'card', id: 'budget' }, h('h2', {}, 'Budget'),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Balance'), h('dd', { id: 'balance' }, money(m.balance, cur)),
      h('dt', {}, 'Spent this month'), h('dd', { id: 'spent' }, money(m.spent_this_month, cur)),
      h('dt', {}, 'Running now'), h('dd', {}, money(m.running_cost, cur)),
      h('dt', {}, 'Held for admitted jobs'), h('dd', {}, money(m.held, cur)),
      h('dt', {}, 'Available to new jobs'), h('dd', {}, m.available === null ? 'no limit' : money(m.available, cur)),
      h('dt', {}, 'Prepaid'), h('dd', {}, m.enforce ? 'yes: jobs run against the balance' : 'no')),
    m.enforce ? meter('Balance in use (held and running)', m.held + m.running_cost, Math.max(m.balance, 0), (x) => money(x, cur)) : null,
    m.monthly_cap !== null ? meter('Monthly cap', m.spent_this_month, m.monthly_cap, (x) => money(x, cur)) : null);

  // Every day of the month, so a day without spend reads as zero.
  const spent = new Map(days.items.map((d) => [d.day, d.amount]));
  const dayBars = [];
  for (let d = new Date(`${month}-01T00:00:00Z`); monthOf(d) === month; d.setUTCDate(d.getUTCDate() + 1)) {
    const key = d.toISOString().slice(0, 10);
    dayBars.push({ label: key.slice(8), value: spent.get(key) || 0 });
  }
  const spend = h('section', { class: 'card', id: 'spend' },
    h('div', { class: 'section-head' }, h('h2', {}, `Spend per day, ${month}`),
      h('button', { type: 'button', class: 'link', id: 'csv-days', onclick: () => csv('day') }, 'CSV')),
    barChart('Spend per day', dayBars, (v) => money(v, cur), { width: 1100, empty: !days.items.length }),
    h('p', { class: 'muted' }, `Total ${money(days.total.amount, cur)} for ${duration(days.total.worker_seconds)} of worker time` +
      (days.total.gpu_seconds ? `, ${duration(days.total.gpu_seconds)} of GPU time` : '')));

  const invoice = h('section', { class: 'card', id: 'invoice' }, h('p', { class: 'muted' }, 'Loading the invoice…'));

  async function csv(group) {
    try {
      await api.download('/v1/usage' + api.query({ ...t, group_by: group, from: `${month}-01`, to: nextMonth(month) }),
        `cohort-${who}-${month}-by-${group}.csv`, 'text/csv');
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  replace(main, h('div', { class: 'page-head' }, h('h1', {}, 'Billing', tenant ? ` · ${tenant}` : '')), pick, msg,
    h('div', { class: 'cols' }, budget, limits), spend, invoice);

  // The invoice's lines come a page at a time; "More lines" appends the next.
  const lineRow = (l, cur) => h('tr', { dataset: { jobId: l.job_id } },
    h('td', {}, tenant ? `#${l.job_id} ${l.job_name}` : h('a', { href: `/jobs/${l.job_id}` }, `#${l.job_id} ${l.job_name}`)),
    h('td', { class: 'num' }, duration(l.worker_seconds)), h('td', { class: 'num' }, duration(l.gpu_seconds)),
    h('td', { class: 'num' }, money(l.amount, cur)));
  try {
    const inv = await api.get(`/v1/invoices/${month}` + api.query({ ...t, limit: 200 }));
    const lines = table(['Job', 'Worker time', 'GPU time', 'Amount'], inv.lines.map((l) => lineRow(l, inv.currency)),
      'Nothing was charged this month.');
    const more = h('p', {});
    let cursor = inv.next_cursor;
    const moreButton = () => (cursor ? h('button', { type: 'button', id: 'invoice-more', onclick: async () => {
      try {
        const next = await api.get(`/v1/invoices/${month}` + api.query({ ...t, limit: 200, cursor }));
        const body = lines.querySelector('tbody');
        for (const l of next.lines) body.appendChild(lineRow(l, next.currency));
        cursor = next.next_cursor;
        replace(more, moreButton());
      } catch (e) {
        replace(msg, errorBox(e));
      }
    } }, 'More lines') : null);
    replace(more, moreButton());
    replace(invoice,
      h('div', { class: 'section-head' }, h('h2', {}, `Invoice ${inv.month}`, inv.final ? '' : ' (month not over)', ': cost per job'),
        h('button', { type: 'button', class: 'link', id: 'csv-invoice', onclick: () =>
          api.download(`/v1/invoices/${month}` + api.query(t), `cohort-${who}-invoice-${month}.csv`, 'text/csv')
            .catch((e) => replace(msg, errorBox(e))) }, 'CSV')),
      lines, more,
      h('p', { class: 'total' }, 'Total: ', h('strong', { id: 'invoice-total' }, money(inv.total, inv.currency)),
        inv.credits_total ? ` · credits added: ${money(inv.credits_total, inv.currency)}` : ''));
  } catch (e) {
    replace(invoice, errorBox(e));
  }
}

function nextMonth(month) {
  let [y, m] = month.split('-').map(Number);
  m++;
  if (m > 12) {
    m = 1;
    y++;
  }
  return `${y}-${String(m).padStart(2, '0')}-01`;
}
