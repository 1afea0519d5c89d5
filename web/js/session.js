// session: who is signed in, and the way to another page.  Pages import
// these from here rather than from app.js, so the shell can import the
// pages without a cycle: app.js hands its router to setRouter() and its
// header to onUserChange() at start.

import * as api from './api.js';

let me = null; // whoami of the signed-in token
let router = () => {};
let userChanged = () => {};

export function setRouter(fn) {
  router = fn;
}

export function onUserChange(fn) {
  userChanged = fn;
}

export function user() {
  return me;
}

export function setUser(who) {
  me = who;
  userChanged(me);
}

export function canWrite() {
  return !!me && me.role !== 'viewer';
}

export function isPlatformAdmin() {
  return !!me && me.role === 'platform_admin';
}

// To path, as a new history entry or in place of the current one.
export function go(path, replaceState = false) {
  if (replaceState) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  router();
}

export async function signIn(tok) {
  const who = await api.get('/v1/whoami', { token: tok });
  api.setToken(tok);
  setUser(who);
  return who;
}

export function signOut() {
  api.setToken(null);
  setUser(null);
  go('/login', true);
}
