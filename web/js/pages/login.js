// login: sign in with an API token.  The token is checked against
// /v1/whoami before the console keeps it (in sessionStorage only).

import { h, replace, errorBox } from '../dom.js';
import { signIn, go } from '../session.js';

export function render(main) {
  document.title = 'Sign in · Cohort';
  const input = h('input', { id: 'f-token', name: 'token', type: 'password', autocomplete: 'off',
    required: true, spellcheck: 'false', placeholder: 'coh_…' });
  const msg = h('div');
  const form = h('form', { class: 'card narrow', id: 'login' },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'Paste an API token. cohortd prints the admin token at first start; ' +
      'a tenant admin creates tokens for users.'),
    h('div', { class: 'field' }, h('label', { for: 'f-token' }, 'API token'), input),
    msg,
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    replace(msg);
    const tok = input.value.trim();
    if (!tok) return;
    try {
      await signIn(tok);
      const next = new URLSearchParams(location.search).get('next');
      go(next && next.startsWith('/') && !next.startsWith('//') ? next : '/jobs', true);
    } catch (err) {
      replace(msg, errorBox(err.status === 401 ? new Error('That token is not valid (unknown, revoked or expired).') : err));
    }
  });
  replace(main, form);
  input.focus();
}
