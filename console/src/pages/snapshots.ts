/**
 * Snapshots: the tenant's snapshots (parent sandbox, size, policy, expiry); delete, and fork N:
 * the sandboxes the fork started are listed by id. Refusals are shown with their code
 * (`409 snapshot.in_use`, `429 quota.exceeded`).
 */
import { describeError } from '../api.js';
import { formatBytes, formatTime, h, replace } from '../dom.js';
import { ForkAnswer, type Snapshot, SnapshotList } from '../envs-api.js';
import type { PageFactory } from '../page.js';
import { deleteButton, resourceTable } from '../resource-table.js';

export const snapshotsPage: PageFactory = (ctx) => {
  const forked = h('div', { id: 'fork-result' });
  const { body, empty, el } = resourceTable({
    title: 'Snapshots',
    tableId: 'snapshots',
    headings: ['Snapshot', 'Parent sandbox', 'Size', 'Policy', 'Writable roots', 'Created (UTC)', 'Expires (UTC)', 'Fork N'],
    reload: () => load(),
    after: [forked],
  });

  const fork = async (snapshot: Snapshot, count: number, button: HTMLButtonElement): Promise<void> => {
    button.disabled = true;
    try {
      const { sandboxes } = await ctx.api.json('POST', `/v1/snapshots/${encodeURIComponent(snapshot.id)}/fork`, ForkAnswer, { count });
      ctx.flash('ok', `Forked ${snapshot.id} into ${sandboxes.length} sandbox${sandboxes.length === 1 ? '' : 'es'}.`);
      replace(
        forked,
        h('h3', {}, `Sandboxes forked from ${snapshot.id}`),
        h(
          'ul',
          {},
          ...sandboxes.map((s) =>
            h('li', { 'data-id': s.id }, h('a', { href: `#/egress/${encodeURIComponent(s.id)}` }, h('code', {}, s.id)), ` ${s.status}`),
          ),
        ),
      );
    } catch (err) {
      ctx.flash('error', `Could not fork ${snapshot.id}: ${describeError(err)}`);
    }
    button.disabled = false;
  };

  const load = async (): Promise<void> => {
    try {
      const { snapshots } = await ctx.api.json('GET', '/v1/snapshots', SnapshotList);
      replace(
        body,
        ...snapshots.reverse().map((snapshot) => {
          const count = h('input', { type: 'number', min: 1, value: 1, class: 'count', 'aria-label': 'How many sandboxes' });
          const forkButton = h('button', { type: 'button', class: 'small', 'data-action': 'fork' }, 'Fork');
          forkButton.addEventListener('click', () => void fork(snapshot, Number(count.value), forkButton));
          const del = deleteButton(ctx, {
            question: `Delete snapshot ${snapshot.id} and its image?`,
            path: `/v1/snapshots/${encodeURIComponent(snapshot.id)}`,
            label: snapshot.id,
            reload: load,
          });
          return h(
            'tr',
            { 'data-id': snapshot.id },
            h('td', {}, h('code', {}, snapshot.id)),
            h('td', {}, h('code', {}, snapshot.parentLeaseId)),
            h('td', {}, formatBytes(snapshot.sizeBytes)),
            h('td', {}, `${snapshot.policy.name} v${snapshot.policy.version}`),
            h('td', {}, snapshot.roots.map((r) => r.path).join(', ') || '—'),
            h('td', {}, formatTime(snapshot.createdAt)),
            h('td', {}, formatTime(snapshot.expiresAt)),
            h('td', { class: 'actions' }, count, forkButton, del),
          );
        }),
      );
      empty.textContent = snapshots.length === 0 ? 'No snapshots.' : '';
    } catch (err) {
      ctx.flash('error', `Could not list snapshots: ${describeError(err)}`);
    }
  };

  void load();
  return {
    el,
    dispose: () => undefined,
  };
};
