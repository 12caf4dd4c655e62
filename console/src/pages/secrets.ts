/**
 * Secrets: names and metadata only. A value can be set (a new version) but is never read back:
 * the API has no route that returns one, and the form clears the value field as soon as it is sent.
 */
import { describeError, SecretList, SecretMetadata } from '../api.js';
import { formatBytes, formatTime, h, replace } from '../dom.js';
import type { PageFactory } from '../page.js';

export const secretsPage: PageFactory = (ctx) => {
  const body = h('tbody');
  const empty = h('p', { class: 'empty' });
  const nameInput = h('input', {
    type: 'text',
    id: 'secret-name',
    required: true,
    pattern: '[A-Za-z0-9_.\\-]+',
    placeholder: 'NPM_TOKEN',
    autocomplete: 'off',
    spellcheck: 'false',
  });
  const valueInput = h('textarea', {
    id: 'secret-value',
    required: true,
    rows: 3,
    autocomplete: 'off',
    spellcheck: 'false',
    placeholder: 'the value (sent once, never shown again)',
  });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Set value');

  const load = async (): Promise<void> => {
    try {
      const { secrets } = await ctx.api.json('GET', '/v1/secrets', SecretList);
      replace(
        body,
        ...secrets
          .sort((a, b) => a.name.localeCompare(b.name))
          .map((s) => {
            const edit = h('button', { type: 'button', class: 'small' }, 'Set new value');
            edit.addEventListener('click', () => {
              nameInput.value = s.name;
              valueInput.focus();
            });
            const remove = h('button', { type: 'button', class: 'small danger' }, 'Delete');
            remove.addEventListener('click', () => void removeSecret(s.name));
            return h(
              'tr',
              { 'data-name': s.name },
              h('td', {}, h('code', {}, s.name)),
              h('td', {}, `v${s.version}`),
              h('td', {}, formatBytes(s.sizeBytes)),
              h('td', {}, formatTime(s.updatedAt)),
              h('td', {}, h('code', {}, s.updatedBy)),
              h('td', {}, formatTime(s.createdAt)),
              h('td', { class: 'actions' }, edit, remove),
            );
          }),
      );
      empty.textContent = secrets.length === 0 ? 'No secrets stored.' : '';
    } catch (err) {
      ctx.flash('error', `Could not list secrets: ${describeError(err)}`);
    }
  };

  const removeSecret = async (name: string): Promise<void> => {
    if (!confirm(`Delete secret ${name}? Running sandboxes keep the value they were given.`)) return;
    try {
      await ctx.api.call('DELETE', `/v1/secrets/${encodeURIComponent(name)}`);
      ctx.flash('ok', `Deleted ${name}.`);
    } catch (err) {
      ctx.flash('error', `Could not delete ${name}: ${describeError(err)}`);
    }
    await load();
  };

  const form = h(
    'form',
    { class: 'secret-form', id: 'secret-form' },
    h('h3', {}, 'Set a secret'),
    h('label', {}, 'Name', nameInput),
    h('label', {}, 'Value', valueInput),
    submit,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const name = nameInput.value.trim();
    const value = valueInput.value;
    // The value leaves the page with this request and nowhere else: cleared before the answer comes.
    valueInput.value = '';
    submit.disabled = true;
    void ctx.api
      .json('PUT', `/v1/secrets/${encodeURIComponent(name)}`, SecretMetadata, { value })
      .then((meta) =>
        ctx.flash('ok', `Stored ${meta.name} version ${meta.version} (${formatBytes(meta.sizeBytes)}). The value cannot be read back.`),
      )
      .catch((err: unknown) => ctx.flash('error', `Could not store ${name}: ${describeError(err)}`))
      .finally(() => {
        submit.disabled = false;
        void load();
      });
  });

  void load();
  return {
    el: h(
      'section',
      {},
      h('div', { class: 'toolbar' }, h('h2', {}, 'Secrets')),
      h(
        'p',
        { class: 'muted' },
        'Names and metadata only: values are encrypted at rest and reach only the sandboxes whose policy allows them.',
      ),
      h(
        'table',
        { class: 'data', id: 'secrets' },
        h(
          'thead',
          {},
          h('tr', {}, ...['Name', 'Version', 'Size', 'Updated (UTC)', 'Updated by', 'Created (UTC)', ''].map((c) => h('th', {}, c))),
        ),
        body,
      ),
      empty,
      form,
    ),
    dispose: () => undefined,
  };
};
