/**
 * Volumes: the tenant's persistent volumes with size, state and the sandboxes that mount them,
 * the bytes they take against the tenant's limit; create (name, size in MiB) and delete, with
 * the API's refusals shown by code (`409 volume.in_use`, `volume.size_out_of_range`, `quota.exceeded`).
 */
import { describeError } from '../api.js';
import { formatBytes, formatTime, h, replace } from '../dom.js';
import { Volume, VolumeList } from '../envs-api.js';
import type { PageFactory } from '../page.js';
import { deleteButton, resourceTable } from '../resource-table.js';

const MIB = 1024 * 1024;

export const volumesPage: PageFactory = (ctx) => {
  const used = h('span', { class: 'muted', id: 'volumes-used' });
  const nameInput = h('input', {
    type: 'text',
    id: 'volume-name',
    required: true,
    pattern: '[a-z0-9][a-z0-9_.\\-]{0,62}',
    placeholder: 'cache',
    autocomplete: 'off',
    spellcheck: 'false',
  });
  const sizeInput = h('input', { type: 'number', id: 'volume-size', required: true, min: 16, value: 64 });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Create');

  const load = async (): Promise<void> => {
    try {
      const list = await ctx.api.json('GET', '/v1/volumes', VolumeList);
      used.textContent = `${formatBytes(list.usedBytes)} used of ${list.limitBytes === null ? 'no limit' : formatBytes(list.limitBytes)}`;
      // Mounts are only in a volume's own answer.
      const volumes = await Promise.all(
        list.volumes.map((v) => ctx.api.json('GET', `/v1/volumes/${encodeURIComponent(v.name)}`, Volume).catch(() => v)),
      );
      replace(
        body,
        ...volumes
          .sort((a, b) => a.name.localeCompare(b.name))
          .map((v) => {
            const del = deleteButton(ctx, {
              question: `Delete volume ${v.name} and everything on it?`,
              path: `/v1/volumes/${encodeURIComponent(v.name)}`,
              label: v.name,
              reload: load,
            });
            return h(
              'tr',
              { 'data-name': v.name, 'data-state': v.state },
              h('td', {}, h('code', {}, v.name)),
              h('td', {}, formatBytes(v.sizeBytes)),
              h('td', {}, h('span', { class: `badge status-${v.state}` }, v.state)),
              h('td', {}, v.shared ? 'shared' : 'one writer'),
              h(
                'td',
                { class: 'mounts' },
                ...(v.mounts ?? []).map((m) => h('span', { class: 'label' }, `${m.leaseId}${m.readOnly ? ' (ro)' : ''}`)),
              ),
              h('td', {}, formatTime(v.createdAt)),
              h('td', { class: 'actions' }, del),
            );
          }),
      );
      empty.textContent = volumes.length === 0 ? 'No volumes.' : '';
    } catch (err) {
      ctx.flash('error', `Could not list volumes: ${describeError(err)}`);
    }
  };

  const form = h(
    'form',
    { class: 'secret-form', id: 'volume-form' },
    h('h3', {}, 'Create a volume'),
    h('label', {}, 'Name', nameInput),
    h('label', {}, 'Size (MiB)', sizeInput),
    submit,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const name = nameInput.value.trim();
    submit.disabled = true;
    void ctx.api
      .json('POST', '/v1/volumes', Volume, { name, sizeBytes: Math.round(Number(sizeInput.value) * MIB) })
      .then((v) => ctx.flash('ok', `Created ${v.name} (${formatBytes(v.sizeBytes)}).`))
      .catch((err: unknown) => ctx.flash('error', `Could not create ${name}: ${describeError(err)}`))
      .finally(() => {
        submit.disabled = false;
        void load();
      });
  });

  const { body, empty, el } = resourceTable({
    title: 'Volumes',
    tableId: 'volumes',
    headings: ['Volume', 'Size', 'State', 'Writers', 'Mounted by', 'Created (UTC)', ''],
    reload: () => load(),
    toolbar: [used],
    after: [form],
  });

  void load();
  return {
    el,
    dispose: () => undefined,
  };
};
