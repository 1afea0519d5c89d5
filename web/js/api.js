// api: the console's only way to cohortd.  Owns the session's token (kept in
// sessionStorage, sent as a Bearer header, never put in a URL) and turns
// the API's error bodies into ApiError.

const KEY = 'cohort.token';

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
}

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

// Called when the API answers 401: the token is gone or revoked.
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

function headers(extra, tok) {
  const h = new Headers(extra || {});
  const t = tok || token();
  if (t) h.set('Authorization', `Bearer ${t}`);
  return h;
}

async function errorOf(res) {
  let code = 'http_' + res.status, message = `${res.status} ${res.statusText}`, field = null;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      field = body.error.field || null;
    }
  } catch (_) { /* not JSON: keep the status line */ }
  return new ApiError(res.status, code, message, field);
}

// One request.  opts: body (JSON-encoded), accept, signal, headers, token
// (sign-in checks a token before keeping it).  Resolves to the parsed JSON,
// or to the Response itself when opts.raw is set.
export async function request(method, path, opts = {}) {
  const h = headers(opts.headers, opts.token);
  let body;
  if (opts.body !== undefined) {
    h.set('Content-Type', 'application/json');
    body = JSON.stringify(opts.body);
  }
  if (opts.accept) h.set('Accept', opts.accept);
  let res;
  try {
    res = await fetch(path, { method, headers: h, body, signal: opts.signal, cache: 'no-store' });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'cohortd cannot be reached: ' + e.message);
  }
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401 && !opts.token) onUnauthorized(err);
    throw err;
  }
  if (opts.raw) return res;
  if (res.status === 204) return null;
  return res.json();
}

export const get = (path, opts) => request('GET', path, opts);
export const post = (path, body, opts = {}) => request('POST', path, { ...opts, body });
export const put = (path, body, opts = {}) => request('PUT', path, { ...opts, body });
export const del = (path, opts) => request('DELETE', path, opts);

// Path segments are always encoded: names come from users.
export const seg = (s) => encodeURIComponent(String(s));

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

// Every item of a paged list (at most 20 pages of 200); signal may abort it.
export async function all(path, signal) {
  const out = [];
  let cursor = '';
  for (let i = 0; i < 20; i++) {
    const page = await get(path + query({ limit: 200, cursor }), { signal });
    out.push(...page.items);
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  return out;
}

// Saves what a GET answers as a file (CSV, a workspace's file): the token
// goes in the header, so a plain link cannot do it.
export async function download(path, filename, accept) {
  const res = await request('GET', path, { raw: true, accept });
  const blob = await res.blob();
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// PUTs a file's bytes with upload progress (fetch has none), calling
// progress(loaded, total).  Resolves to the API's JSON answer.
export function upload(path, file, progress, signal) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', path);
    x.setRequestHeader('Authorization', `Bearer ${token()}`);
    x.setRequestHeader('Content-Type', 'application/octet-stream');
    x.upload.onprogress = (e) => progress(e.loaded, e.lengthComputable ? e.total : file.size);
    x.onload = () => {
      let body = null;
      try { body = JSON.parse(x.responseText); } catch (_) { /* keep null */ }
      if (x.status >= 200 && x.status < 300) {
        resolve(body);
        return;
      }
      const e = body && body.error ? body.error : {};
      const err = new ApiError(x.status, e.code || 'http_' + x.status,
        e.message || `upload failed: ${x.status}`, e.field);
      if (x.status === 401) onUnauthorized(err);
      reject(err);
    };
    x.onerror = () => reject(new ApiError(0, 'network', 'the upload was cut off'));
    x.onabort = () => reject(new DOMException('aborted', 'AbortError'));
    if (signal) signal.addEventListener('abort', () => x.abort(), { once: true });
    x.send(file);
  });
}
