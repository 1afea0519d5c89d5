// app: the console's shell.  Owns the router (history API paths such as
// /jobs/12, which cohortd answers with index.html), the signed-in user, the
// header, and the life of the current page: a page's render() may return a
// cleanup function, called before the next page renders, which stops its
// timers and streams.

import * as api from './api.js';
import { h, replace, errorBox } from './dom.js';
import * as login from './pages/login.js';
import * as jobs from './pages/jobs.js';
import * as newjob from './pages/newjob.js';
import * as job from './pages/job.js';
import * as volumes from './pages/volumes.js';
import * as billing from './pages/billing.js';
import * as admin from './pages/admin.js';

const routes = [
  [/^\/login$/, login, 'login'],
  [/^\/(?:jobs)?$/, jobs, 'jobs'],
  [/^\/jobs\/new$/, newjob, 'jobs'],
  [/^\/jobs\/(\d+)$/, job, 'jobs'],
  [/^\/(datasets|workspaces)$/, volumes, null],
  [/^\/(datasets|workspaces)\/([a-z0-9][a-z0-9._-]{0,62})$/, volumes, null],
  [/^\/billing$/, billing, 'billing'],
  [/^\/admin$/, admin, 'admin'],
];

const main = document.getElementById('main');
let cleanup = null;
let me = null; // whoami of the signed-in token

export function user() {
  return me;
}

export function canWrite() {
  return !!me && me.role !== 'viewer';
}

export function isPlatformAdmin() {
  return !!me && me.role === 'platform_admin';
}

export function go(path, replaceState = false) {
  if (replaceState) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

export async function signIn(tok) {
  const who = await api.get('/v1/whoami', { token: tok });
  api.setToken(tok);
  me = who;
  showUser();
  return who;
}

export function signOut() {
  api.setToken(null);
  me = null;
  showUser();
  go('/login', true);
}

function showUser() {
  document.getElementById('nav').hidden = !me;
  document.getElementById('who').hidden = !me;
  document.getElementById('nav-admin').hidden = !isPlatformAdmin();
  document.getElementById('who-name').textContent = me ? `${me.user} · ${me.tenant} · ${me.role.replace('_', ' ')}` : '';
}

function markNav(section) {
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

async function render() {
  if (cleanup) {
    try { cleanup(); } catch (_) { /* a page's cleanup must not stop the next */ }
    cleanup = null;
  }
  const path = location.pathname;
  if (!me && api.token()) {
    try {
      me = await api.get('/v1/whoami');
      showUser();
    } catch (e) {
      api.setToken(null);
    }
  }
  if (!me && path !== '/login') {
    const next = path + location.search;
    history.replaceState(null, '', '/login' + (next !== '/' ? api.query({ next }) : ''));
    return render();
  }
  for (const [re, page, section] of routes) {
    const m = path.match(re);
    if (!m) continue;
    markNav(section || m[1]);
    document.title = 'Cohort';
    replace(main, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const c = await page.render(main, m.slice(1));
      if (typeof c === 'function') cleanup = c;
    } catch (e) {
      if (e.name !== 'AbortError') replace(main, errorBox(e));
    }
    return;
  }
  markNav(null);
  replace(main, h('section', { class: 'notfound' }, h('h1', {}, 'Not found'),
    h('p', {}, 'There is no such page. '), h('a', { href: '/jobs' }, 'Back to jobs')));
}

// Same-origin links go through the router; new tabs and downloads do not.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (a.target || a.hasAttribute('download') || a.origin !== location.origin) return;
  if (a.pathname.startsWith('/v1/')) return;
  e.preventDefault();
  go(a.pathname + a.search);
});
window.addEventListener('popstate', render);
document.getElementById('sign-out').addEventListener('click', signOut);
api.setUnauthorizedHandler(() => {
  if (me) signOut();
});

render();
