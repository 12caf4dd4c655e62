/**
 * Proposals: for one policy, the smallest allowlist change its leases' denied egress calls for
 * (`GET /v1/policies/:name/proposals`): each change with the denials that call for it (which
 * sandbox and call, when, what was asked), what is not proposed and why, and the change as a
 * diff of the policy's text. Accept writes it as the next version, naming the version and the
 * proposal digest the admin reviewed (a compare-and-swap: a policy or proposal that changed
 * meanwhile is `409 policy.version_conflict`, and the page shows the new one).
 */
import { ApiError, describeError, PolicyList, PolicyVersionView } from '../api.js';
import { formatTime, h, replace, shortDigest } from '../dom.js';
import { ProposalView, type Evidence, type ProposalChange } from '../governance-api.js';
import type { PageFactory } from '../page.js';
import { policyDiff } from '../policy-text.js';

/** What a change does, in words. */
function describeChange(c: ProposalChange): string {
  const list = (xs: ReadonlyArray<string | number> = []): string => xs.join(', ');
  if (c.kind === 'add_host') return `Allow host ${c.host} on port${c.ports?.length === 1 ? '' : 's'} ${list(c.ports)}`;
  if (c.kind === 'add_ports') return `Add port${c.ports?.length === 1 ? '' : 's'} ${list(c.ports)} to the rule of ${c.host}`;
  if (c.kind === 'add_http_allow') return `Allow ${list(c.methods)} ${list(c.paths)} on ${c.host}`;
  return `${c.kind} ${c.host}`;
}

function evidenceTable(evidence: readonly Evidence[], denials: number): HTMLElement {
  return h(
    'div',
    {},
    h(
      'table',
      { class: 'data evidence' },
      h('thead', {}, h('tr', {}, ...['Denied (UTC)', 'Sandbox', 'Call', 'Request'].map((c) => h('th', {}, c)))),
      h(
        'tbody',
        {},
        ...evidence.map((e) =>
          h(
            'tr',
            {},
            h('td', { class: 'nowrap' }, formatTime(e.at)),
            h('td', {}, h('a', { href: `#/egress/${encodeURIComponent(e.leaseId)}` }, h('code', {}, e.leaseId))),
            h('td', {}, e.callId ? h('code', {}, e.callId) : h('span', { class: 'muted' }, 'not known')),
            h('td', {}, h('code', {}, `${e.method} ${e.host}:${e.port}${e.path ?? ''}`)),
          ),
        ),
      ),
    ),
    denials > evidence.length ? h('p', { class: 'muted' }, `The newest ${evidence.length} of ${denials} denials.`) : null,
  );
}

function diffView(before: Record<string, unknown>, after: Record<string, unknown>): HTMLElement {
  const hunks = policyDiff(before, after);
  return h(
    'div',
    { class: 'diff', id: 'proposal-diff' },
    ...hunks.map((lines) =>
      h(
        'pre',
        { class: 'hunk' },
        ...lines.map((l) =>
          h(
            'span',
            { class: `diff-line ${l.kind === '+' ? 'added' : l.kind === '-' ? 'removed' : 'kept'}` },
            h('span', { class: 'diff-ln' }, String(l.line).padStart(4)),
            `${l.kind} ${l.text}\n`,
          ),
        ),
      ),
    ),
  );
}

export const proposalsPage: PageFactory = (ctx, selected) => {
  const policy = h('select', { id: 'proposal-policy' });
  const detail = h('div', { class: 'proposal' });

  const show = async (name: string): Promise<void> => {
    let view: ProposalView;
    let current: PolicyVersionView;
    try {
      view = await ctx.api.json('GET', `/v1/policies/${encodeURIComponent(name)}/proposals`, ProposalView);
      current = await ctx.api.json('GET', `/v1/policies/${encodeURIComponent(name)}/versions/${view.policy.version}`, PolicyVersionView);
    } catch (err) {
      replace(detail, h('p', { class: 'error-text' }, `Could not read the proposal for ${name}: ${describeError(err)}`));
      return;
    }
    const denials = view.changes.reduce((n, c) => n + c.denials, 0);
    const accept = h('button', { type: 'button', class: 'primary', id: 'accept-proposal' }, `Accept as version ${view.policy.version + 1}`);
    accept.addEventListener('click', () => {
      accept.disabled = true;
      void ctx.api
        .json('POST', `/v1/policies/${encodeURIComponent(name)}/proposals/accept`, PolicyVersionView, {
          version: view.policy.version,
          digest: view.digest,
        })
        .then((written) =>
          ctx.flash(
            'ok',
            `Wrote ${name} v${written.version} (digest ${shortDigest(written.digest)}). Running sandboxes keep their version.`,
          ),
        )
        .catch((err: unknown) =>
          ctx.flash(
            'error',
            err instanceof ApiError && err.code === 'policy.version_conflict'
              ? `Not written: ${name} or its proposal changed since you loaded it (policy.version_conflict). This is the new one: review it again.`
              : `Not written: ${describeError(err)}`,
          ),
        )
        // The version list too: the select names each policy's latest.
        .finally(() => void loadPolicies(name));
    });
    replace(
      detail,
      h('h3', {}, `Proposal for ${name} v${view.policy.version}`),
      h(
        'p',
        { class: 'muted', id: 'proposal-summary' },
        view.changes.length === 0
          ? `Nothing to propose: no denied egress of the ${view.leasesRead} sandbox${view.leasesRead === 1 ? '' : 'es'} read calls for a change.`
          : `${view.changes.length} change${view.changes.length === 1 ? '' : 's'} from ${denials} denied request${denials === 1 ? '' : 's'} in the egress logs of ${view.leasesRead} sandbox${view.leasesRead === 1 ? '' : 'es'} · proposal ${shortDigest(view.digest)}`,
      ),
      view.changes.length === 0 ? null : h('div', { class: 'toolbar' }, accept),
      ...view.changes.map((c) =>
        h(
          'div',
          { class: 'change', 'data-kind': c.kind, 'data-host': c.host },
          h('h4', {}, describeChange(c), h('span', { class: 'muted' }, ` · ${c.denials} denied`)),
          evidenceTable(c.evidence, c.denials),
        ),
      ),
      view.changes.length === 0 ? null : h('h3', {}, 'The change to the policy'),
      view.changes.length === 0 ? null : diffView(current.policy, view.proposed),
      view.notProposed.length === 0 ? null : h('h3', {}, 'Not proposed'),
      ...view.notProposed.map((n) =>
        h(
          'div',
          { class: 'change not-proposed' },
          h('h4', {}, n.reason, h('span', { class: 'muted' }, ` · ${n.denials} denied`)),
          evidenceTable(n.evidence, n.denials),
        ),
      ),
    );
  };

  /** Lists the policies in the select and shows the proposal for `chosen` (default: the first). */
  const loadPolicies = async (chosen: string | undefined): Promise<void> => {
    try {
      const { policies } = await ctx.api.json('GET', '/v1/policies', PolicyList);
      policies.sort((a, b) => a.name.localeCompare(b.name));
      chosen ??= policies[0]?.name;
      replace(policy, ...policies.map((p) => h('option', { value: p.name, selected: p.name === chosen }, `${p.name} v${p.version}`)));
      if (chosen === undefined) replace(detail, h('p', { class: 'empty' }, 'No policy to review.'));
      else await show(chosen);
    } catch (err) {
      ctx.flash('error', `Could not list policies: ${describeError(err)}`);
    }
  };
  policy.addEventListener('change', () => {
    history.replaceState(null, '', `#/proposals/${encodeURIComponent(policy.value)}`);
    void show(policy.value);
  });
  void loadPolicies(selected);

  return {
    el: h(
      'section',
      {},
      h('div', { class: 'toolbar' }, h('h2', {}, 'Proposals'), h('label', {}, 'Policy ', policy)),
      h(
        'p',
        { class: 'muted' },
        'What the denied egress of a policy’s sandboxes asks for, as the smallest change of its allowlist. Nothing changes until you accept; running sandboxes keep their version.',
      ),
      detail,
    ),
    dispose: () => undefined,
  };
};
