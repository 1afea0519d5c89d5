// dom: building the page.  Every string a user or the API supplied goes
// into the page as a text node (h's children, textContent), never as HTML:
// nothing here parses markup.

const SVGNS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked' || k === 'selected' || k === 'disabled' || k === 'hidden') el[k] = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h('a', {href: '/jobs'}, 'Jobs'): an element; attrs may be omitted.
export function h(tag, attrs, ...children) {
  if (attrs instanceof Node || typeof attrs !== 'object' || attrs === null || Array.isArray(attrs)) {
    children.unshift(attrs);
    attrs = {};
  }
  return build(document.createElement(tag), attrs, children);
}

export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVGNS, tag), attrs, children);
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

// ---- formatting ----

export function money(minor, currency) {
  if (minor === null || minor === undefined) return '—';
  const v = Number(minor) / 100;
  try {
    return new Intl.NumberFormat(undefined, { style: 'currency', currency: currency || 'USD' }).format(v);
  } catch (_) {
    return `${v.toFixed(2)} ${currency || ''}`.trim();
  }
}

export function ago(iso) {
  if (!iso) return '—';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '—';
  const sec = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (sec < 60) return `${sec}s ago`;
  if (sec < 3600) return `${Math.floor(sec / 60)}m ago`;
  if (sec < 86400) return `${Math.floor(sec / 3600)}h ago`;
  return `${Math.floor(sec / 86400)}d ago`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return '—';
  const sec = Math.round(seconds);
  if (sec < 60) return `${sec}s`;
  if (sec < 3600) return `${Math.floor(sec / 60)}m ${sec % 60}s`;
  return `${Math.floor(sec / 3600)}h ${Math.floor((sec % 3600) / 60)}m`;
}

export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '—' : d.toLocaleString();
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i ? v.toFixed(1) : v} ${u[i]}`;
}

export const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

export function stateBadge(state) {
  return h('span', { class: `badge state-${String(state).toLowerCase()}` }, state);
}

// ---- small widgets ----

export function errorBox(err) {
  return h('div', { class: 'error', role: 'alert' }, err && err.message ? err.message : String(err));
}

export function table(head, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted empty' }, empty || 'Nothing here yet.');
  return h('table', {},
    h('thead', {}, h('tr', {}, head.map((c) => h('th', {}, c)))),
    h('tbody', {}, rows));
}

// A bar showing used of limit (limit null: no limit).
export function meter(label, used, limit, fmt = (x) => String(x)) {
  const pct = limit ? Math.min(100, (100 * used) / limit) : 0;
  const fill = h('div', { class: 'meter-fill' + (pct >= 90 ? ' high' : '') });
  fill.style.width = `${pct}%`;
  return h('div', { class: 'meter', dataset: { meter: label } },
    h('div', { class: 'meter-label' }, h('span', {}, label),
      h('span', {}, limit === null || limit === undefined ? `${fmt(used)} (no limit)` : `${fmt(used)} of ${fmt(limit)}`)),
    h('div', { class: 'meter-bar' }, fill));
}

// A line chart of series [{name, points: [[x, y], ...]}] as SVG.
export function lineChart(title, series, opts = {}) {
  const W = 560, H = 220, L = 48, R = 12, T = 12, B = 30;
  const pts = series.flatMap((x) => x.points);
  const box = h('figure', { class: 'chart', dataset: { chart: title } }, h('figcaption', {}, title));
  if (!pts.length) {
    box.append(h('p', { class: 'muted' }, opts.empty || 'No data yet.'));
    return box;
  }
  let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  let y0 = Math.min(0, ...pts.map((p) => p[1])), y1 = Math.max(...pts.map((p) => p[1]));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const Y = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
  for (let i = 0; i <= 4; i++) {
    const y = y0 + ((y1 - y0) * i) / 4;
    svg.append(s('line', { x1: L, x2: W - R, y1: Y(y), y2: Y(y), class: 'grid' }),
      s('text', { x: L - 6, y: Y(y) + 4, class: 'tick', 'text-anchor': 'end' }, fmtNum(y)));
  }
  svg.append(s('text', { x: L, y: H - 8, class: 'tick' }, fmtNum(x0)),
    s('text', { x: W - R, y: H - 8, class: 'tick', 'text-anchor': 'end' }, fmtNum(x1)),
    s('text', { x: (L + W - R) / 2, y: H - 8, class: 'tick', 'text-anchor': 'middle' }, opts.xlabel || ''));
  series.forEach((ser, i) => {
    if (!ser.points.length) return;
    const d = ser.points.map((p, j) => `${j ? 'L' : 'M'}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(' ');
    svg.append(s('path', { d, class: `line c${i % 6}` }, s('title', {}, ser.name)));
    for (const p of ser.points.length <= 60 ? ser.points : []) {
      svg.append(s('circle', { cx: X(p[0]), cy: Y(p[1]), r: 2.5, class: `dot c${i % 6}` }));
    }
  });
  box.append(svg);
  if (series.length > 1) {
    box.append(h('div', { class: 'legend' }, series.map((ser, i) => h('span', { class: `key c${i % 6}` }, ser.name))));
  }
  return box;
}

// A bar chart of [{label, value}] as SVG; fmt formats values.
export function barChart(title, bars, fmt = fmtNum, opts = {}) {
  const W = opts.width || 560, H = 240, L = 72, R = 12, T = 12, B = 30;
  const box = h('figure', { class: 'chart', dataset: { chart: title } }, h('figcaption', {}, title));
  if (!bars.length || opts.empty) {
    box.append(h('p', { class: 'muted' }, 'No spend in this period.'));
    return box;
  }
  const top = Math.max(1, ...bars.map((b) => b.value));
  const bw = (W - L - R) / bars.length;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4, y = H - B - (v / top) * (H - T - B);
    svg.append(s('line', { x1: L, x2: W - R, y1: y, y2: y, class: 'grid' }),
      s('text', { x: L - 6, y: y + 4, class: 'tick', 'text-anchor': 'end' }, fmt(v)));
  }
  bars.forEach((b, i) => {
    const hgt = (b.value / top) * (H - T - B);
    const x = L + i * bw + bw * 0.15;
    svg.append(s('rect', { x, y: H - B - hgt, width: bw * 0.7, height: Math.max(hgt, 0.5), class: b.value ? 'bar' : 'bar zero' },
      s('title', {}, `${b.label}: ${fmt(b.value)}`)));
    if (bars.length <= 31 || i % Math.ceil(bars.length / 16) === 0) {
      svg.append(s('text', { x: x + bw * 0.35, y: H - B + 14, class: 'tick', 'text-anchor': 'middle' }, b.label));
    }
  });
  box.append(svg);
  return box;
}

function fmtNum(v) {
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e3) return String(v);
  if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (a >= 1e3) return (v / 1e3).toFixed(1) + 'k';
  if (a >= 10 || v === 0) return String(Math.round(v * 10) / 10);
  return v.toPrecision(3);
}

// Shows msg under a form field (found by its name), or clears it.
export function fieldError(form, field, msg) {
  const el = form.querySelector(`[data-error-for="${CSS.escape(field)}"]`);
  if (!el) return false;
  el.textContent = msg || '';
  el.hidden = !msg;
  const input = form.elements[field];
  if (input && input.setAttribute) input.setAttribute('aria-invalid', msg ? 'true' : 'false');
  return true;
}

export function clearFieldErrors(form) {
  for (const el of form.querySelectorAll('[data-error-for]')) {
    el.textContent = '';
    el.hidden = true;
  }
  for (const el of form.querySelectorAll('[aria-invalid]')) el.setAttribute('aria-invalid', 'false');
}

// A labelled form row with a place for its error.
export function field(label, name, control, hint) {
  return h('div', { class: 'field' },
    h('label', { for: `f-${name}` }, label),
    control,
    hint ? h('small', { class: 'hint' }, hint) : null,
    h('div', { class: 'field-error', dataset: { errorFor: name }, hidden: true, role: 'alert' }));
}
