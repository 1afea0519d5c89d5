// volumes: datasets and workspaces.  The list with a create form, and one
// volume's files: browse by folder, upload (with a progress bar per file),
// download, delete, and seal a dataset.

import * as api from '../api.js';
import { h, replace, errorBox, table, when, bytes, field, fieldError, clearFieldErrors } from '../dom.js';
import { canWrite, go, user } from '../session.js';

const FILE_PAGE = 1000;

export function render(main, [kind, name]) {
  return name ? renderOne(main, kind, name) : renderList(main, kind);
}

const title = (kind) => (kind === 'datasets' ? 'Datasets' : 'Workspaces');

async function renderList(main, kind) {
  document.title = `${title(kind)} · Cohort`;
  const list = h('div', { id: 'volume-list' }, h('p', { class: 'muted' }, 'Loading…'));
  const form = h('form', { class: 'inline-form', id: 'volume-create', novalidate: true },
    field('New ' + (kind === 'datasets' ? 'dataset' : 'workspace'), 'name',
      h('input', { id: 'f-name', name: 'name', placeholder: 'lowercase-name', maxlength: 63, required: true })),
    h('button', { type: 'submit', class: 'primary' }, 'Create'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearFieldErrors(form);
    try {
      const v = await api.post(`/v1/${kind}`, { name: form.elements.name.value.trim() });
      go(`/${kind}/${api.seg(v.name)}`);
    } catch (err) {
      fieldError(form, err.field || 'name', err.message);
    }
  });
  replace(main, h('div', { class: 'page-head' }, h('h1', {}, title(kind))),
    kind === 'datasets' ? h('p', { class: 'muted' }, 'Jobs see datasets read-only. Seal a dataset once its files are in.')
      : h('p', { class: 'muted' }, 'A job\'s workspace is writable: its program, checkpoints and outputs.'),
    canWrite() ? form : null, list);
  const items = await api.all(`/v1/${kind}`);
  const rows = items.map((v) => h('tr', {},
    h('td', {}, h('a', { href: `/${kind}/${api.seg(v.name)}` }, v.name)),
    kind === 'datasets' ? h('td', {}, [v.public ? 'public' : 'private', v.sealed ? ', sealed' : '']) : null,
    h('td', {}, when(v.created_at))));
  replace(list, table(kind === 'datasets' ? ['Name', 'Kind', 'Created'] : ['Name', 'Created'], rows,
    `No ${kind} yet.`));
}

async function renderOne(main, kind, name) {
  document.title = `${name} · Cohort`;
  const base = `/v1/${kind}/${api.seg(name)}`;
  let vol;
  try {
    vol = await api.get(base);
  } catch (e) {
    if (e.status === 404) {
      replace(main, h('section', { class: 'notfound' }, h('h1', {}, 'Not found'),
        h('p', {}, `There is no ${kind === 'datasets' ? 'dataset' : 'workspace'} of that name.`),
        h('a', { href: `/${kind}` }, `Back to ${kind}`)));
      return null;
    }
    throw e;
  }
  const dir = new URLSearchParams(location.search).get('dir') || '';
  const me = user();
  const mine = vol.tenant === me.tenant;
  const writable = canWrite() && mine && !vol.sealed;
  const msg = h('div');
  const listing = h('div', { id: 'file-list' }, h('p', { class: 'muted' }, 'Loading…'));
  const more = h('div', { class: 'pager' });
  const uploads = h('div', { class: 'uploads', id: 'uploads' });
  const ctl = new AbortController();

  const crumbs = [h('a', { href: `/${kind}/${api.seg(name)}` }, name)];
  let acc = '';
  for (const part of dir.split('/').filter(Boolean)) {
    acc += part + '/';
    crumbs.push(' / ', h('a', { href: `/${kind}/${api.seg(name)}` + api.query({ dir: acc }) }, part));
  }

  const actions = [];
  if (kind === 'datasets' && canWrite() && mine && !vol.sealed) {
    actions.push(h('button', { type: 'button', id: 'seal', onclick: seal }, 'Seal'));
  }
  if (canWrite() && mine) {
    actions.push(h('button', { type: 'button', class: 'danger', onclick: remove }, 'Delete ' + (kind === 'datasets' ? 'dataset' : 'workspace')));
  }

  const fileIn = h('input', { type: 'file', id: 'f-files', name: 'files', multiple: true });
  const exe = h('input', { type: 'checkbox', id: 'f-exec', name: 'exec' });
  const target = h('input', { id: 'f-dir', name: 'dir', value: dir, placeholder: 'folder/ (optional)' });
  const upForm = h('form', { class: 'card upload-form', id: 'upload-form' },
    h('h2', {}, 'Upload files'),
    h('div', { class: 'row' },
      fileIn,
      h('label', { for: 'f-dir' }, 'into'), target,
      h('label', { class: 'check' }, exe, 'executable (mode 755)'),
      h('button', { type: 'submit', class: 'primary', id: 'upload' }, 'Upload')),
    uploads);
  upForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    replace(msg);
    let prefix = target.value.trim().replace(/^\/+/, '');
    if (prefix && !prefix.endsWith('/')) prefix += '/';
    for (const file of fileIn.files) await uploadOne(prefix + file.name, file);
    fileIn.value = '';
    loadFiles('');
  });

  async function uploadOne(path, file) {
    const bar = h('progress', { max: file.size || 1, value: 0 });
    const state = h('span', { class: 'muted' }, '0%');
    const row = h('div', { class: 'upload-row' }, h('span', { class: 'name' }, path), bar, state);
    uploads.append(row);
    try {
      const out = await api.upload(`${base}/files/${path.split('/').map(api.seg).join('/')}` +
        api.query({ mode: exe.checked ? '755' : undefined }), file, (loaded, total) => {
        bar.max = total || 1;
        bar.value = loaded;
        state.textContent = `${Math.floor((100 * loaded) / (total || 1))}%`;
      }, ctl.signal);
      bar.value = bar.max;
      state.textContent = `done, ${bytes(out && out.size)}`;
      row.classList.add('done');
    } catch (err) {
      state.textContent = err.message;
      state.className = 'field-error';
    }
  }

  async function seal() {
    try {
      await api.post(`${base}/seal`, undefined);
      go(location.pathname + location.search, true);
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  async function remove() {
    if (!confirm(`Delete ${name} and all its files?`)) return;
    try {
      await api.del(base);
      go(`/${kind}`);
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  async function removeFile(path) {
    try {
      await api.del(`${base}/files/${path.split('/').map(api.seg).join('/')}`);
      loadFiles('');
    } catch (e) {
      replace(msg, errorBox(e));
    }
  }

  let rows = [];
  const folders = new Set();
  async function loadFiles(cursor) {
    if (!cursor) {
      rows = [];
      folders.clear();
    }
    try {
      const page = await api.get(`${base}/files` + api.query({ prefix: dir, limit: FILE_PAGE, cursor }), { signal: ctl.signal });
      for (const f of page.items) {
        const rest = f.path.slice(dir.length);
        const slash = rest.indexOf('/');
        if (slash >= 0) {
          const sub = rest.slice(0, slash + 1);
          if (folders.has(sub)) continue;
          folders.add(sub);
          rows.push(h('tr', { class: 'folder' },
            h('td', {}, h('a', { href: `/${kind}/${api.seg(name)}` + api.query({ dir: dir + sub }) }, sub)),
            h('td', {}), h('td', {}), h('td', {}), h('td', {})));
          continue;
        }
        rows.push(h('tr', { dataset: { path: f.path } },
          h('td', { class: 'name' }, rest),
          h('td', { class: 'num' }, bytes(f.size)),
          h('td', {}, f.mode),
          h('td', {}, when(f.modified_at)),
          h('td', { class: 'row-actions' },
            h('button', { type: 'button', class: 'link', onclick: () => api.download(`${base}/files/${f.path.split('/').map(api.seg).join('/')}`, rest.split('/').pop()).catch((e) => replace(msg, errorBox(e))) }, 'Download'),
            writable ? h('button', { type: 'button', class: 'link danger', onclick: () => removeFile(f.path) }, 'Delete') : null)));
      }
      replace(listing, table(['Name', 'Size', 'Mode', 'Modified', ''], rows, dir ? 'This folder is empty.' : 'No files yet.'),
        page.truncated ? h('p', { class: 'muted' }, 'The listing is partial: the volume holds too many files.') : null);
      replace(more, page.next_cursor ? h('button', { type: 'button', onclick: () => loadFiles(page.next_cursor) }, 'More files') : null);
    } catch (e) {
      if (e.name !== 'AbortError') replace(listing, errorBox(e));
    }
  }

  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, h('a', { href: `/${kind}` }, title(kind)), ' / ', crumbs),
      h('div', { class: 'head-right' }, actions)),
    h('p', { class: 'muted' }, [
      kind === 'datasets' ? (vol.public ? 'Public dataset' : 'Dataset') : 'Workspace',
      mine ? '' : ` of ${vol.tenant}`, vol.sealed ? ', sealed (read-only)' : '', `, created ${when(vol.created_at)}`]),
    msg, writable ? upForm : null, h('section', { class: 'card' }, listing, more));
  loadFiles('');
  return () => ctl.abort();
}
