// app: the console's shell.  Owns the router (history API paths such as
// /jobs/12, which cohortd answers with index.html), the header, and the
// life of the current page.  Each navigation gets a root element of its
// own inside main and an AbortSignal: render(root, params, signal) may
// return a cleanup function (its timers and streams), called when the
// next navigation starts.  A page whose render is still awaiting when the
// user moves on is aborted: its fetches end, its root is no longer in the
// document, and its cleanup runs as soon as it returns, so it can neither
// overwrite the next page nor leave a timer running.

import * as api from './api.js';
import { h, replace, errorBox } from './dom.js';
import * as session from './session.js';
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
let current = null; // the current navigation: { ctl, cleanup }

function showUser(me) {
  document.getElementById('nav').hidden = !me;
  document.getElementById('who').hidden = !me;
  document.getElementById('nav-admin').hidden = !session.isPlatformAdmin();
  document.getElementById('who-name').textContent = me ? `${me.user} · ${me.tenant} · ${me.role.replace('_', ' ')}` : '';
}

function markNav(section) {
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function runCleanup(fn) {
  try { fn(); } catch (_) { /* a page's cleanup must not stop the next */ }
}

// Ends the current page: its signal aborts, its cleanup (if it has one yet) runs.
function leave() {
  if (!current) return;
  current.ctl.abort();
  if (current.cleanup) runCleanup(current.cleanup);
  current = null;
}

async function render() {
  leave();
  const nav = { ctl: new AbortController(), cleanup: null };
  current = nav;
  const signal = nav.ctl.signal;
  const path = location.pathname;
  if (!session.user() && api.token()) {
    try {
      session.setUser(await api.get('/v1/whoami', { signal }));
    } catch (e) {
      if (e.name === 'AbortError') return;
      api.setToken(null);
    }
    if (signal.aborted) return;
  }
  if (!session.user() && path !== '/login') {
    const next = path + location.search;
    history.replaceState(null, '', '/login' + (next !== '/' ? api.query({ next }) : ''));
    return render();
  }
  for (const [re, page, section] of routes) {
    const m = path.match(re);
    if (!m) continue;
    markNav(section || m[1]);
    document.title = 'Cohort';
    const root = h('div', { class: 'page' }, h('p', { class: 'muted' }, 'Loading…'));
    replace(main, root);
    try {
      const c = await page.render(root, m.slice(1), signal);
      if (typeof c !== 'function') return;
      if (signal.aborted) runCleanup(c); // the user moved on while it loaded
      else nav.cleanup = c;
    } catch (e) {
      if (e.name !== 'AbortError' && !signal.aborted) replace(root, errorBox(e));
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
  session.go(a.pathname + a.search);
});
window.addEventListener('popstate', render);
document.getElementById('sign-out').addEventListener('click', session.signOut);
api.setUnauthorizedHandler(() => {
  if (session.user()) session.signOut();
});
session.setRouter(render);
session.onUserChange(showUser);

render();
