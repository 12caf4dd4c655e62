/**
 * Sandboxes: every tenant's leases with state, policy version and time left, refreshed every few
 * seconds; live ones by default, ended ones on request; a release button per live sandbox, and
 * pause (ready ones) or resume (paused ones), refusals shown by code (`policy.pause_denied`).
 */
import { describeError, Lease, SandboxList } from '../api.js';
import { formatDuration, formatTime, h, replace } from '../dom.js';
import type { PageFactory } from '../page.js';

const REFRESH_MS = 5000;
const LIVE = ['creating', 'ready', 'paused', 'releasing'];

export const sandboxesPage: PageFactory = (ctx) => {
  let leases: Lease[] = [];
  const showEnded = h('input', { type: 'checkbox', id: 'show-ended' });
  const updated = h('span', { class: 'muted' });
  const body = h('tbody');
  const table = h(
    'table',
    { class: 'data', id: 'sandboxes' },
    h(
      'thead',
      {},
      h('tr', {}, ...['Sandbox', 'Tenant', 'Status', 'Policy', 'Created', 'TTL left', 'Labels', ''].map((c) => h('th', {}, c))),
    ),
    body,
  );
  const empty = h('p', { class: 'empty' });

  const ttlText = (lease: Lease): string =>
    LIVE.includes(lease.status) ? formatDuration((Date.parse(lease.expiresAt) - Date.now()) / 1000) : '—';

  const release = async (lease: Lease, button: HTMLButtonElement): Promise<void> => {
    if (!confirm(`Release sandbox ${lease.id}? Its container and workspace are removed.`)) return;
    button.disabled = true;
    try {
      const released = await ctx.api.json('DELETE', `/v1/sandboxes/${encodeURIComponent(lease.id)}`, Lease);
      ctx.flash('ok', `Released ${released.id} (${released.status}).`);
    } catch (err) {
      ctx.flash('error', `Could not release ${lease.id}: ${describeError(err)}`);
    }
    await load();
  };

  const pauseOrResume = async (lease: Lease, action: 'pause' | 'resume', button: HTMLButtonElement): Promise<void> => {
    button.disabled = true;
    try {
      const after = await ctx.api.json('POST', `/v1/sandboxes/${encodeURIComponent(lease.id)}/${action}`, Lease);
      ctx.flash('ok', `${action === 'pause' ? 'Paused' : 'Resumed'} ${after.id} (${after.status}).`);
    } catch (err) {
      ctx.flash('error', `Could not ${action} ${lease.id}: ${describeError(err)}`);
    }
    await load();
  };

  const render = (): void => {
    const shown = showEnded.checked ? leases : leases.filter((l) => LIVE.includes(l.status));
    replace(
      body,
      ...shown.map((lease) => {
        const live = LIVE.includes(lease.status);
        const button = h('button', { class: 'danger small', type: 'button', 'data-action': 'release' }, 'Release');
        button.addEventListener('click', () => void release(lease, button));
        const action = lease.status === 'ready' ? 'pause' : lease.status === 'paused' ? 'resume' : undefined;
        const toggle = h(
          'button',
          { class: 'small', type: 'button', 'data-action': action ?? '' },
          action === 'pause' ? 'Pause' : 'Resume',
        );
        if (action) toggle.addEventListener('click', () => void pauseOrResume(lease, action, toggle));
        return h(
          'tr',
          { 'data-id': lease.id, 'data-status': lease.status },
          h('td', {}, h('code', {}, lease.id)),
          h('td', {}, lease.tenant),
          h('td', {}, h('span', { class: `badge status-${lease.status}` }, lease.status)),
          h(
            'td',
            {},
            h('a', { href: `#/policies/${encodeURIComponent(lease.policy.name)}` }, lease.policy.name),
            ` v${lease.policy.version}`,
          ),
          h('td', {}, formatTime(lease.createdAt)),
          h('td', { class: 'ttl', 'data-expires': lease.expiresAt }, ttlText(lease)),
          h('td', {}, ...Object.entries(lease.labels).map(([k, v]) => h('span', { class: 'label' }, `${k}=${v}`))),
          h(
            'td',
            { class: 'actions' },
            h('a', { href: `#/egress/${encodeURIComponent(lease.id)}`, class: 'small' }, 'Egress'),
            action !== undefined && toggle,
            live && button,
          ),
        );
      }),
    );
    empty.textContent = shown.length === 0 ? (showEnded.checked ? 'No sandboxes.' : 'No live sandboxes.') : '';
  };

  const load = async (): Promise<void> => {
    try {
      leases = (await ctx.api.json('GET', '/v1/sandboxes', SandboxList)).sandboxes.sort((a, b) => b.createdAt.localeCompare(a.createdAt));
      updated.textContent = `Updated ${formatTime(new Date().toISOString())} UTC`;
      render();
    } catch (err) {
      ctx.flash('error', `Could not list sandboxes: ${describeError(err)}`);
    }
  };

  showEnded.addEventListener('change', render);
  const refresh = h('button', { type: 'button', class: 'small' }, 'Refresh');
  refresh.addEventListener('click', () => void load());
  // The countdown moves every second; the list itself is re-read every REFRESH_MS.
  const tick = setInterval(() => {
    for (const cell of body.querySelectorAll<HTMLElement>('td.ttl')) {
      const row = cell.closest('tr');
      const lease = leases.find((l) => l.id === row?.dataset.id);
      if (lease) cell.textContent = ttlText(lease);
    }
  }, 1000);
  const poll = setInterval(() => void load(), REFRESH_MS);
  void load();

  return {
    el: h(
      'section',
      {},
      h('div', { class: 'toolbar' }, h('h2', {}, 'Sandboxes'), h('label', {}, showEnded, ' Show ended'), refresh, updated),
      table,
      empty,
    ),
    dispose: () => {
      clearInterval(tick);
      clearInterval(poll);
    },
  };
};
