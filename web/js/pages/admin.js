// admin: the platform admin's page.  Nodes with capacity and use (drain,
// undrain, token rotation, join tokens), tenants (create; quota, budget and credit of
// each), worker specs and their prices.

import * as api from '../api.js';
import { h, replace, errorBox, table, money, ago, meter, field, fieldError, clearFieldErrors } from '../dom.js';
import { isPlatformAdmin } from '../session.js';


// Integer field: empty is null (no limit), else the number or the raw text
// so the API names what is wrong.
function intOrNull(v) {
  const t = v.trim();
  if (t === '') return null;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

function formError(form, msgEl, err) {
  if (!(err.field && fieldError(form, err.field, err.message))) replace(msgEl, errorBox(err));
}

export async function render(main, _params, signal) {
  document.title = 'Admin · Cohort';
  if (!isPlatformAdmin()) {
    replace(main, h('section', { class: 'notfound' }, h('h1', {}, 'Not found'), h('p', {}, 'This page is for the platform admin.')));
    return null;
  }
  const nodes = h('section', { class: 'card', id: 'nodes' });
  const tenants = h('section', { class: 'card', id: 'tenants' });
  const specs = h('section', { class: 'card', id: 'specs' });
  replace(main, h('div', { class: 'page-head' }, h('h1', {}, 'Admin')), nodes, tenants, specs);
  let timer = null;

  async function showNodes() {
    clearTimeout(timer);
    const msg = h('div');
    try {
      const items = await api.all('/v1/nodes', signal);
      const rows = items.map((n) => h('tr', { dataset: { node: n.name } },
        h('td', {}, n.name, h('div', { class: 'muted' }, n.address)),
        h('td', {}, h('span', { class: `badge node-${n.state}` }, n.state), n.drained ? h('span', { class: 'badge drained' }, 'drained') : null),
        h('td', { class: 'meters' },
          meter('CPUs', n.allocated.cpus, n.capacity.cpus),
          meter('Memory MB', n.allocated.memory_mb, n.capacity.memory_mb),
          n.capacity.gpus ? meter('GPUs', n.allocated.gpus, n.capacity.gpus) : null),
        h('td', { class: 'num' }, n.allocated.workers),
        h('td', {}, ago(n.last_heartbeat)),
        h('td', {}, h('button', { type: 'button', onclick: () => drain(n, msg) }, n.drained ? 'Undrain' : 'Drain'),
          ' ',
          h('button', { type: 'button', class: 'rotate', title: 'Send the node a new token with its next heartbeat; the old one is refused once the new one is used', onclick: () => rotate(n, msg) }, 'Rotate token'),
          n.token_rotation ? h('span', { class: 'badge rotation' }, `token ${n.token_rotation}`) : null)));
      const tokenOut = h('div', { class: 'token-out' });
      replace(nodes, h('div', { class: 'section-head' }, h('h2', {}, 'Nodes'),
        h('button', { type: 'button', id: 'join-token', onclick: () => joinToken(tokenOut, msg) }, 'New join token')),
      tokenOut, msg, table(['Node', 'State', 'Capacity in use', 'Workers', 'Heartbeat', ''], rows,
        'No node has joined. Start cohort-agent with a join token.'));
    } catch (e) {
      replace(nodes, h('h2', {}, 'Nodes'), errorBox(e));
    }
    if (!signal.aborted) timer = setTimeout(showNodes, 5000);
  }

  async function drain(n, msg) {
    try {
      await api.post(`/v1/nodes/${n.id}/${n.drained ? 'undrain' : 'drain'}`, undefined);
      showNodes();
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  async function rotate(n, msg) {
    try {
      await api.post(`/v1/nodes/${n.id}/rotate-token`, undefined);
      showNodes();
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  async function joinToken(out, msg) {
    try {
      const t = await api.post('/v1/nodes/join-tokens', {});
      replace(out, h('p', {}, 'Join token (shown once): ', h('code', { class: 'secret' }, t.token)),
        h('p', { class: 'muted' }, 'cohort-agent --server ', location.origin, ' --join-token ', t.token, ' --name NODE'));
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  async function showTenants() {
    const items = await api.all('/v1/tenants', signal);
    const msg = h('div');
    const create = h('form', { class: 'inline-form', id: 'tenant-create', novalidate: true },
      field('New tenant', 'name', h('input', { id: 'f-tenant-name', name: 'name', placeholder: 'lowercase-name' })),
      h('button', { type: 'submit', class: 'primary' }, 'Create'));
    create.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearFieldErrors(create);
      try {
        await api.post('/v1/tenants', { name: create.elements.name.value.trim() });
        showTenants();
      } catch (err) {
        formError(create, msg, err);
      }
    });
    const detail = h('div', { id: 'tenant-detail' });
    const rows = items.map((t) => h('tr', { dataset: { tenant: t.name } },
      h('td', {}, t.name), h('td', {}, ago(t.created_at)),
      h('td', {}, h('button', { type: 'button', class: 'link', onclick: () => showTenant(t.name, detail) }, 'Quota & budget'),
        ' ', h('a', { href: '/billing' + api.query({ tenant: t.name }) }, 'Billing'))));
    replace(tenants, h('h2', {}, 'Tenants'), create, msg, table(['Tenant', 'Created', ''], rows), detail);
  }

  async function showTenant(name, box) {
    const t = api.seg(name);
    const [q, b] = await Promise.all([api.get(`/v1/tenants/${t}/quota`), api.get(`/v1/tenants/${t}/budget`)]);
    const msg = h('div');
    const num = (n, v) => h('input', { id: `f-${n}`, name: n, inputmode: 'numeric', value: v ?? '', placeholder: 'no limit' });
    const quota = h('form', { class: 'card form-grid', id: 'quota-form', novalidate: true },
      h('h3', {}, `Quota of ${name}`),
      field('Max running jobs', 'max_running_jobs', num('max_running_jobs', q.max_running_jobs)),
      field('Max workers', 'max_workers', num('max_workers', q.max_workers)),
      field('Max CPUs', 'max_cpus', num('max_cpus', q.max_cpus)),
      field('Max GPUs', 'max_gpus', num('max_gpus', q.max_gpus)),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save quota')));
    quota.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearFieldErrors(quota);
      replace(msg);
      const f = quota.elements, body = {};
      for (const k of ['max_running_jobs', 'max_workers', 'max_cpus', 'max_gpus']) {
        const v = intOrNull(f[k].value);
        if (v !== null) body[k] = v;
      }
      try {
        await api.put(`/v1/tenants/${t}/quota`, body);
        replace(msg, h('p', { class: 'ok' }, 'Quota saved.'));
      } catch (err) {
        formError(quota, msg, err);
      }
    });
    const budget = h('form', { class: 'card form-grid', id: 'budget-form', novalidate: true },
      h('h3', {}, `Budget of ${name}`),
      h('p', {}, 'Balance: ', h('strong', { id: 'tenant-balance' }, money(b.balance, b.currency))),
      field('Prepaid', 'enforce', h('input', { id: 'f-enforce', name: 'enforce', type: 'checkbox', checked: b.enforce }),
        'Admit jobs only against the balance.'),
      field('Monthly cap (minor units)', 'monthly_cap', num('monthly_cap', b.monthly_cap)),
      field('Currency', 'currency', h('input', { id: 'f-currency', name: 'currency', value: b.currency, maxlength: 3 })),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save budget')));
    budget.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearFieldErrors(budget);
      replace(msg);
      const f = budget.elements;
      try {
        await api.put(`/v1/tenants/${t}/budget`, { enforce: f.enforce.checked, monthly_cap: intOrNull(f.monthly_cap.value), currency: f.currency.value.trim() });
        replace(msg, h('p', { class: 'ok' }, 'Budget saved.'));
      } catch (err) {
        formError(budget, msg, err);
      }
    });
    const credit = h('form', { class: 'card form-grid', id: 'credit-form', novalidate: true },
      h('h3', {}, `Add credit to ${name}`),
      field('Amount (minor units)', 'amount', h('input', { id: 'f-amount', name: 'amount', inputmode: 'numeric' })),
      field('Note', 'note', h('input', { id: 'f-note', name: 'note', maxlength: 200 })),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Add credit')));
    credit.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearFieldErrors(credit);
      replace(msg);
      const f = credit.elements;
      const body = { amount: intOrNull(f.amount.value) };
      if (f.note.value.trim()) body.note = f.note.value.trim();
      try {
        const r = await api.post(`/v1/tenants/${t}/credits`, body);
        replace(msg, h('p', { class: 'ok' }, `Credit added; the balance is now ${money(r.account.balance, r.account.currency)}.`));
        document.getElementById('tenant-balance').textContent = money(r.account.balance, r.account.currency);
        f.amount.value = '';
      } catch (err) {
        formError(credit, msg, err);
      }
    });
    replace(box, msg, h('div', { class: 'cols3' }, quota, budget, credit));
  }

  async function showSpecs() {
    const items = await api.all('/v1/worker-specs', signal);
    const msg = h('div');
    const rows = items.map((s) => {
      const price = h('input', { name: 'price', inputmode: 'numeric', value: s.price_per_hour, class: 'short', 'aria-label': `Price of ${s.name}` });
      return h('tr', { dataset: { spec: s.name } },
        h('td', {}, s.name), h('td', { class: 'num' }, s.cpus), h('td', { class: 'num' }, s.memory_mb),
        h('td', {}, s.gpus ? `${s.gpus} × ${s.gpu_type || 'GPU'}` : '—'),
        h('td', {}, price, ` ${s.currency} minor/h = ${money(s.price_per_hour, s.currency)}`),
        h('td', {}, h('button', { type: 'button', onclick: async () => {
          replace(msg);
          try {
            await api.put(`/v1/worker-specs/${api.seg(s.name)}`, { price_per_hour: intOrNull(price.value) });
            showSpecs();
          } catch (e) {
            replace(msg, errorBox(e));
          }
        } }, 'Save price')));
    });
    const create = h('form', { class: 'form-grid', id: 'spec-create', novalidate: true },
      h('h3', {}, 'New worker spec'),
      field('Name', 'name', h('input', { id: 'f-spec-name', name: 'name' })),
      field('CPUs', 'cpus', h('input', { id: 'f-cpus', name: 'cpus', inputmode: 'numeric' })),
      field('Memory MB', 'memory_mb', h('input', { id: 'f-memory_mb', name: 'memory_mb', inputmode: 'numeric' })),
      field('GPUs', 'gpus', h('input', { id: 'f-gpus', name: 'gpus', inputmode: 'numeric', value: '0' })),
      field('GPU type', 'gpu_type', h('input', { id: 'f-gpu_type', name: 'gpu_type' })),
      field('Price per hour (minor units)', 'price_per_hour', h('input', { id: 'f-price', name: 'price_per_hour', inputmode: 'numeric' })),
      field('Currency', 'currency', h('input', { id: 'f-spec-currency', name: 'currency', value: 'USD', maxlength: 3 })),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Create spec')));
    create.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearFieldErrors(create);
      replace(msg);
      const f = create.elements;
      const body = { name: f.name.value.trim(), cpus: intOrNull(f.cpus.value), memory_mb: intOrNull(f.memory_mb.value),
        gpus: intOrNull(f.gpus.value) ?? 0, price_per_hour: intOrNull(f.price_per_hour.value), currency: f.currency.value.trim() };
      if (f.gpu_type.value.trim()) body.gpu_type = f.gpu_type.value.trim();
      try {
        await api.post('/v1/worker-specs', body);
        showSpecs();
      } catch (err) {
        formError(create, msg, err);
      }
    });
    replace(specs, h('h2', {}, 'Worker specs and prices'), msg,
      table(['Spec', 'CPUs', 'Memory MB', 'GPUs', 'Price per worker-hour', ''], rows), create);
  }

  await Promise.all([showNodes(), showTenants(), showSpecs()]);
  return () => clearTimeout(timer);
}
