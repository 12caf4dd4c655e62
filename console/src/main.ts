/**
 * The admin console's entry: sign-in with an admin API key (kept in sessionStorage, so it goes
 * with the tab), then hash routes to the pages. The key is checked by asking an admin route:
 * the API's own 401/403 decide, and its code is shown (`auth.admin_required` for a user key).
 */
import { Api, ApiError, describeError, PolicyList } from './api.js';
import { h, replace } from './dom.js';
import type { Page, PageFactory, PageContext } from './page.js';
import { approvalsPage } from './pages/approvals.js';
import { auditPage } from './pages/audit.js';
import { egressPage } from './pages/egress.js';
import { imagesPage } from './pages/images.js';
import { policiesPage } from './pages/policies.js';
import { proposalsPage } from './pages/proposals.js';
import { sandboxesPage } from './pages/sandboxes.js';
import { secretsPage } from './pages/secrets.js';
import { snapshotsPage } from './pages/snapshots.js';
import { volumesPage } from './pages/volumes.js';

const KEY_STORAGE = 'sbx.console.adminKey';

const PAGES: Array<{ path: string; title: string; page: PageFactory }> = [
  { path: 'sandboxes', title: 'Sandboxes', page: sandboxesPage },
  { path: 'policies', title: 'Policies', page: policiesPage },
  { path: 'proposals', title: 'Proposals', page: proposalsPage },
  { path: 'approvals', title: 'Approvals', page: approvalsPage },
  { path: 'secrets', title: 'Secrets', page: secretsPage },
  { path: 'images', title: 'Images', page: imagesPage },
  { path: 'snapshots', title: 'Snapshots', page: snapshotsPage },
  { path: 'volumes', title: 'Volumes', page: volumesPage },
  { path: 'egress', title: 'Egress', page: egressPage },
  { path: 'audit', title: 'Audit', page: auditPage },
];

const root = document.getElementById('app')!;
let current: Page | undefined;

/** Why the user is at the sign-in form (a rejected key, a sign-out), shown above it. */
function showLogin(message = ''): void {
  current?.dispose();
  current = undefined;
  window.onhashchange = null;
  sessionStorage.removeItem(KEY_STORAGE);
  const key = h('input', {
    type: 'password',
    id: 'api-key',
    required: true,
    autocomplete: 'off',
    placeholder: 'sbx_…',
    'aria-label': 'Admin API key',
  });
  const error = h('p', { class: 'error-text', id: 'login-error', role: 'alert' }, message);
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h(
    'form',
    { class: 'login', id: 'login' },
    h('h1', {}, 'sbx console'),
    h(
      'p',
      { class: 'muted' },
      'Sign in with an admin API key. It is kept in this tab only (sessionStorage) and sent to this control plane alone.',
    ),
    h('label', {}, 'Admin API key', key),
    button,
    error,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    button.disabled = true;
    const candidate = key.value.trim();
    void new Api(candidate)
      .json('GET', '/v1/policies', PolicyList)
      .then(() => {
        sessionStorage.setItem(KEY_STORAGE, candidate);
        if (location.hash === '' || location.hash === '#/') location.hash = '#/sandboxes';
        showShell(candidate);
      })
      .catch((err: unknown) => {
        error.textContent =
          err instanceof ApiError && err.code === 'auth.admin_required'
            ? `Admin key required: this key works, but not for the admin routes (${err.status} ${err.code}: ${err.message}).`
            : err instanceof ApiError && err.status === 401
              ? `The API does not accept this key (${err.status} ${err.code}).`
              : `Could not sign in: ${describeError(err)}`;
      })
      .finally(() => (button.disabled = false));
  });
  replace(root, form);
  key.focus();
}

function showShell(key: string): void {
  const api = new Api(key, (err) => showLogin(`Signed out: the API no longer accepts this key (${err.code}).`));
  const nav = h('nav', { class: 'top' });
  const banner = h('div', { class: 'banner', id: 'banner', role: 'status' });
  const main = h('main', {});
  const signOut = h('button', { type: 'button', class: 'small', id: 'sign-out' }, 'Sign out');
  signOut.addEventListener('click', () => showLogin());
  const ctx: PageContext = {
    api,
    flash(kind, text) {
      banner.className = `banner ${kind}`;
      banner.textContent = text;
    },
  };
  replace(
    root,
    h(
      'header',
      {},
      h('span', { class: 'brand' }, 'sbx console'),
      nav,
      h('span', { class: 'who muted' }, `admin key …${key.slice(-4)}`),
      signOut,
    ),
    banner,
    main,
  );

  const route = (): void => {
    const [path = 'sandboxes', param] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
    const entry = PAGES.find((p) => p.path === path) ?? PAGES[0]!;
    replace(nav, ...PAGES.map((p) => h('a', { href: `#/${p.path}`, class: p === entry ? 'active' : '' }, p.title)));
    current?.dispose();
    banner.className = 'banner';
    banner.textContent = '';
    current = entry.page(ctx, param === '' ? undefined : param);
    replace(main, current.el);
    document.title = `${entry.title} · sbx console`;
  };
  window.onhashchange = route;
  route();
}

const stored = sessionStorage.getItem(KEY_STORAGE);
if (stored) showShell(stored);
else showLogin();
