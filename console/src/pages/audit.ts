/**
 * Audit: the append-only log of admin changes, newest first, a page at a time. "Older" follows
 * the API's `nextCursor`; "Newer" goes back along the cursors already visited.
 */
import { AuditPage, describeError, type AuditEntry } from '../api.js';
import { formatTime, h, replace, shortDigest } from '../dom.js';
import type { PageFactory } from '../page.js';

export const auditPage: PageFactory = (ctx) => {
  const action = h('input', { type: 'text', id: 'audit-action', placeholder: 'e.g. policy.put', autocomplete: 'off' });
  const target = h('input', { type: 'text', id: 'audit-target', placeholder: 'e.g. policy:default', autocomplete: 'off' });
  const limit = h('select', { id: 'audit-limit' }, ...[10, 25, 100].map((n) => h('option', { value: n, selected: n === 25 }, String(n))));
  const body = h('tbody');
  const note = h('p', { class: 'empty' });
  const newer = h('button', { type: 'button', id: 'audit-newer' }, '← Newer');
  const older = h('button', { type: 'button', id: 'audit-older' }, 'Older →');
  const position = h('span', { class: 'muted', id: 'audit-page' });
  /** Cursors of the pages before the current one (`undefined`: the newest page). */
  let cursors: Array<string | undefined> = [];
  let current: string | undefined;
  let next: string | null = null;

  const actor = (e: AuditEntry): string => (e.actor === 'system' ? 'system' : `${e.actor.keyId} (${e.actor.role}, ${e.actor.tenant})`);

  const load = async (): Promise<void> => {
    const query = new URLSearchParams({ limit: limit.value });
    if (action.value.trim() !== '') query.set('action', action.value.trim());
    if (target.value.trim() !== '') query.set('target', target.value.trim());
    if (current !== undefined) query.set('cursor', current);
    try {
      const page = await ctx.api.json('GET', `/v1/audit?${query}`, AuditPage);
      next = page.nextCursor;
      replace(
        body,
        ...page.entries.map((e) =>
          h(
            'tr',
            { 'data-id': e.id, 'data-action': e.action },
            h('td', { class: 'nowrap' }, formatTime(e.at)),
            h('td', {}, h('code', {}, e.action)),
            h('td', {}, h('code', {}, e.target)),
            h('td', {}, actor(e)),
            h('td', { class: 'nowrap' }, h('code', {}, `${shortDigest(e.beforeDigest)} → ${shortDigest(e.afterDigest)}`)),
            h('td', { class: 'details' }, Object.keys(e.details).length === 0 ? '' : JSON.stringify(e.details)),
          ),
        ),
      );
      note.textContent = page.entries.length === 0 ? 'No entries.' : '';
      position.textContent = `Page ${cursors.length + 1}`;
      newer.disabled = cursors.length === 0;
      older.disabled = next === null;
    } catch (err) {
      replace(body);
      note.textContent = `Could not read the audit log: ${describeError(err)}`;
    }
  };

  const restart = (): void => {
    cursors = [];
    current = undefined;
    void load();
  };
  older.addEventListener('click', () => {
    if (next === null) return;
    cursors.push(current);
    current = next;
    void load();
  });
  newer.addEventListener('click', () => {
    current = cursors.pop();
    void load();
  });
  const form = h(
    'form',
    { class: 'filters', id: 'audit-filters' },
    h('label', {}, 'Action ', action),
    h('label', {}, 'Target ', target),
    h('label', {}, 'Per page ', limit),
    h('button', { type: 'submit' }, 'Filter'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    restart();
  });
  limit.addEventListener('change', restart);
  void load();

  return {
    el: h(
      'section',
      {},
      h('div', { class: 'toolbar' }, h('h2', {}, 'Audit log')),
      form,
      h(
        'table',
        { class: 'data', id: 'audit' },
        h('thead', {}, h('tr', {}, ...['Time (UTC)', 'Action', 'Target', 'Actor', 'Before → after', 'Details'].map((c) => h('th', {}, c)))),
        body,
      ),
      note,
      h('div', { class: 'pager' }, newer, position, older),
    ),
    dispose: () => undefined,
  };
};
