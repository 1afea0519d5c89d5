// newjob: the job form.  Choices come from the API (images, datasets,
// workspaces and their files, worker specs); the price quote follows the
// form; the API validates everything and its errors appear beside the field
// they name.  One Idempotency-Key per form, so a double click or a retried
// request submits the job once.

import * as api from '../api.js';
import { h, replace, errorBox, field, fieldError, clearFieldErrors, money, duration } from '../dom.js';
import { go, canWrite } from '../session.js';


// A number from a text field: the number when it reads as one, else the
// text itself, so the API (not the browser) judges it and names the field.
function num(v) {
  const t = v.trim();
  if (t === '') return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

export async function render(main) {
  document.title = 'New job · Cohort';
  if (!canWrite()) {
    replace(main, errorBox(new Error('Your role cannot submit jobs.')));
    return;
  }
  const [images, datasets, workspaces, specs] = await Promise.all([
    api.all('/v1/images'), api.all('/v1/datasets'), api.all('/v1/workspaces'), api.all('/v1/worker-specs')]);

  const input = (name, attrs = {}) => h('input', { id: `f-${name}`, name, ...attrs });
  const select = (name, options, attrs = {}) => h('select', { id: `f-${name}`, name, ...attrs }, options);

  const ws = select('workspace', [h('option', { value: '' }, '— choose —'),
    workspaces.map((w) => h('option', { value: w.name }, w.name))]);
  const codeList = h('datalist', { id: 'code-files' });
  const codeHint = h('small', { class: 'hint' }, 'A file in the workspace.');
  const spec = select('worker_spec', specs.map((s) => h('option', { value: s.name },
    `${s.name} — ${s.cpus} CPU, ${s.memory_mb} MB${s.gpus ? `, ${s.gpus} × ${s.gpu_type || 'GPU'}` : ''}, ${money(s.price_per_hour, s.currency)}/h`)));
  const quote = h('div', { class: 'quote', id: 'quote', 'aria-live': 'polite' });
  const general = h('div');

  const form = h('form', { class: 'card form-grid', id: 'job-form', novalidate: true },
    h('h2', {}, 'What to run'),
    field('Name', 'name', input('name', { required: true, maxlength: 200, placeholder: 'mnist-baseline' })),
    field('Image', 'image', select('image', images.map((i) => h('option', { value: i.name }, `${i.name} (${i.framework})`)))),
    field('Workspace', 'workspace', ws, 'Writable; the job starts in it.'),
    h('div', { class: 'field' },
      h('label', { for: 'f-code_path' }, 'Code path'),
      input('code_path', { list: 'code-files', placeholder: 'train.py', autocomplete: 'off' }),
      codeList, codeHint,
      h('div', { class: 'field-error', dataset: { errorFor: 'code_path' }, hidden: true, role: 'alert' })),
    field('Datasets', 'datasets', select('datasets', datasets.map((d) => h('option', { value: d.name },
      d.public ? `${d.name} (public)` : d.name)), { multiple: true, size: Math.min(6, Math.max(2, datasets.length)) }),
    datasets.length ? 'Mounted read-only. Ctrl-click to choose several.' : 'No datasets yet.'),
    field('Arguments', 'args', input('args', { placeholder: '--hidden 256 --seed 1' }), 'Split on spaces.'),
    h('h2', {}, 'Training'),
    field('Epochs', 'epochs', input('epochs', { inputmode: 'numeric', value: '1' })),
    field('Learning rate', 'lr', input('lr', { inputmode: 'decimal', value: '0.01' })),
    field('Batch size', 'batch_size', input('batch_size', { inputmode: 'numeric', value: '32' }), 'Per worker.'),
    h('h2', {}, 'Resources'),
    field('Worker spec', 'worker_spec', spec),
    field('Workers', 'worker_count', input('worker_count', { inputmode: 'numeric', value: '1' })),
    field('Workers per node', 'workers_per_node', input('workers_per_node', { inputmode: 'numeric', placeholder: 'any' })),
    field('Max runtime (seconds)', 'max_runtime_seconds', input('max_runtime_seconds', { inputmode: 'numeric', placeholder: 'none' }),
      'Bounds the cost; lets the job backfill.'),
    field('Retries', 'max_retries', input('max_retries', { inputmode: 'numeric', value: '0' })),
    quote, general,
    h('div', { class: 'actions' },
      h('button', { type: 'submit', class: 'primary', id: 'submit-job' }, 'Submit job'),
      h('a', { class: 'button', href: '/jobs' }, 'Cancel')));
  replace(main, h('div', { class: 'page-head' }, h('h1', {}, 'New job')), form);

  // Code path: browse the chosen workspace's files.
  let filesFor = null;
  async function loadFiles() {
    const name = ws.value;
    if (!name || name === filesFor) return;
    filesFor = name;
    replace(codeList);
    try {
      const files = await api.all(`/v1/workspaces/${api.seg(name)}/files`);
      replace(codeList, files.map((f) => h('option', { value: f.path })));
      codeHint.textContent = files.length ? `${files.length} file(s) in ${name}: type or pick one.` : `${name} is empty: upload your program first.`;
      if (!form.elements.code_path.value && files.length) {
        const exe = files.find((f) => f.mode === '755') || files.find((f) => /\.py$/.test(f.path)) || files[0];
        form.elements.code_path.value = exe.path;
      }
    } catch (e) {
      codeHint.textContent = e.message;
    }
  }
  ws.addEventListener('change', loadFiles);
  if (workspaces.length === 1) {
    ws.value = workspaces[0].name;
    loadFiles();
  }

  // The quote follows the resource fields.
  let qtimer = null, qseq = 0;
  async function requote() {
    const seq = ++qseq;
    const body = {
      worker_spec: spec.value,
      worker_count: num(form.elements.worker_count.value),
      max_runtime_seconds: num(form.elements.max_runtime_seconds.value),
    };
    if (!body.worker_spec || typeof body.worker_count !== 'number') {
      replace(quote, h('span', { class: 'muted' }, 'Choose a worker spec and a worker count for a price.'));
      return;
    }
    try {
      const q = await api.post('/v1/quote', body);
      if (seq !== qseq) return;
      replace(quote,
        h('strong', {}, `${money(q.price_per_hour, q.currency)} per hour`),
        ` (${q.worker_count} × ${money(q.price_per_worker_hour, q.currency)})`,
        q.estimated_max !== null && q.estimated_max !== undefined
          ? h('span', {}, ` · at most ${money(q.estimated_max, q.currency)} for ${duration(q.max_runtime_seconds)}`)
          : h('span', {}, ` · no runtime bound: ${money(q.hold, q.currency)} is held at start (${duration(q.min_hold_seconds)})`));
    } catch (e) {
      if (seq !== qseq) return;
      replace(quote, h('span', { class: 'field-error' }, e.message));
    }
  }
  form.addEventListener('input', (e) => {
    if (['worker_spec', 'worker_count', 'max_runtime_seconds'].includes(e.target.name)) {
      clearTimeout(qtimer);
      qtimer = setTimeout(requote, 200);
    }
  });
  spec.addEventListener('change', requote);
  requote();

  const idem = crypto.randomUUID();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearFieldErrors(form);
    replace(general);
    const f = form.elements;
    const body = {
      name: f.name.value,
      image: f.image.value,
      datasets: [...f.datasets.selectedOptions].map((o) => o.value),
      workspace: f.workspace.value,
      code_path: f.code_path.value.trim(),
      args: f.args.value.trim() ? f.args.value.trim().split(/\s+/) : [],
      epochs: num(f.epochs.value),
      lr: num(f.lr.value),
      batch_size: num(f.batch_size.value),
      worker_spec: f.worker_spec.value,
      worker_count: num(f.worker_count.value),
      workers_per_node: num(f.workers_per_node.value),
      max_runtime_seconds: num(f.max_runtime_seconds.value),
      max_retries: num(f.max_retries.value),
    };
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const btn = f['submit-job'] || form.querySelector('#submit-job');
    btn.disabled = true;
    try {
      const j = await api.post('/v1/jobs', body, { headers: { 'Idempotency-Key': idem } });
      go(`/jobs/${j.id}`);
    } catch (err) {
      btn.disabled = false;
      if (!(err.field && fieldError(form, err.field, err.message))) replace(general, errorBox(err));
      const bad = err.field && form.elements[err.field];
      if (bad && bad.focus) bad.focus();
    }
  });
  return () => clearTimeout(qtimer);
}
