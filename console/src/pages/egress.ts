/**
 * Egress: the connection log of one sandbox (network mode `allowlist`), filtered by decision and
 * by a substring of the host — both applied by the API (`?decision=&host=`), so `limit` counts
 * matching events.
 */
import { describeError, EgressLog, SandboxList, type EgressEvent } from '../api.js';
import { formatBytes, formatTime, h, replace } from '../dom.js';
import type { PageFactory } from '../page.js';

export const egressPage: PageFactory = (ctx, selected) => {
  const sandbox = h('select', { id: 'egress-sandbox' });
  const decision = h(
    'select',
    { id: 'egress-decision' },
    h('option', { value: '' }, 'any'),
    h('option', { value: 'allowed' }, 'allowed'),
    h('option', { value: 'denied' }, 'denied'),
  );
  const host = h('input', { type: 'search', id: 'egress-host', placeholder: 'host contains…', autocomplete: 'off' });
  const body = h('tbody');
  const note = h('p', { class: 'empty' });

  const row = (e: EgressEvent): HTMLElement =>
    h(
      'tr',
      { 'data-host': e.host, 'data-decision': e.decision },
      h('td', { class: 'nowrap' }, formatTime(e.at)),
      h('td', {}, h('span', { class: `badge decision-${e.decision}` }, e.decision)),
      h('td', {}, e.method),
      h('td', {}, h('code', {}, `${e.host}:${e.port}`)),
      h('td', {}, e.rule),
      h('td', {}, e.address ?? '—'),
      h('td', { class: 'num' }, formatBytes(e.bytesOut)),
      h('td', { class: 'num' }, formatBytes(e.bytesIn)),
    );

  const load = async (): Promise<void> => {
    const id = sandbox.value;
    if (id === '') {
      replace(body);
      note.textContent = 'No sandbox to show.';
      return;
    }
    const query = new URLSearchParams();
    if (decision.value !== '') query.set('decision', decision.value);
    if (host.value.trim() !== '') query.set('host', host.value.trim());
    try {
      const log = await ctx.api.json(
        'GET',
        `/v1/sandboxes/${encodeURIComponent(id)}/egress${query.size > 0 ? `?${query}` : ''}`,
        EgressLog,
      );
      // Newest first, like the audit log.
      replace(body, ...[...log.events].reverse().map(row));
      const filtered = query.size > 0;
      const dropped = log.dropped.allowed + log.dropped.denied;
      note.textContent =
        log.events.length > 0
          ? dropped > 0
            ? `${dropped} older events were dropped from the log.`
            : ''
          : filtered
            ? 'No connections match these filters.'
            : 'No connections recorded. Only sandboxes whose policy has network mode allowlist reach the egress proxy.';
    } catch (err) {
      replace(body);
      note.textContent = `Could not read the egress log: ${describeError(err)}`;
    }
  };

  const loadSandboxes = async (): Promise<void> => {
    try {
      const { sandboxes } = await ctx.api.json('GET', '/v1/sandboxes', SandboxList);
      sandboxes.sort((a, b) => b.createdAt.localeCompare(a.createdAt));
      replace(
        sandbox,
        ...sandboxes.map((l) =>
          h('option', { value: l.id, selected: l.id === selected }, `${l.id} · ${l.policy.name} v${l.policy.version} · ${l.status}`),
        ),
      );
      await load();
    } catch (err) {
      ctx.flash('error', `Could not list sandboxes: ${describeError(err)}`);
    }
  };

  const form = h(
    'form',
    { class: 'filters', id: 'egress-filters' },
    h('label', {}, 'Sandbox ', sandbox),
    h('label', {}, 'Decision ', decision),
    h('label', {}, 'Host ', host),
    h('button', { type: 'submit' }, 'Filter'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void load();
  });
  sandbox.addEventListener('change', () => {
    history.replaceState(null, '', `#/egress/${encodeURIComponent(sandbox.value)}`);
    void load();
  });
  decision.addEventListener('change', () => void load());
  void loadSandboxes();

  return {
    el: h(
      'section',
      {},
      h('div', { class: 'toolbar' }, h('h2', {}, 'Egress')),
      form,
      h(
        'table',
        { class: 'data', id: 'egress' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ...['Time (UTC)', 'Decision', 'Method', 'Destination', 'Rule / reason', 'Address', 'Out', 'In'].map((c) => h('th', {}, c)),
          ),
        ),
        body,
      ),
      note,
    ),
    dispose: () => undefined,
  };
};
