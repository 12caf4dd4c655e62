/**
 * Approvals: the calls a policy's tool rules hold for a person (`GET /v1/approvals`), soonest
 * deadline first, each with what would run — the resolved arguments, which are what an approval
 * binds (its fingerprint) — the rule that asked and the time left; Approve runs it, Deny ends it
 * denied. The list reloads every few seconds while the page is open.
 */
import { ApiError, describeError } from '../api.js';
import { formatDuration, formatTime, h, replace, shortDigest } from '../dom.js';
import { CallArgs, CallOutcome, PendingApprovalList, type PendingApproval } from '../governance-api.js';
import type { PageFactory } from '../page.js';

/** How often the list is read again while the page is shown, ms. */
const RELOAD_EVERY_MS = 5000;

/** The line an approver reads first: the argv or script of a command, the path of a file tool. */
function headline(a: PendingApproval): string {
  const { argv, cmd, path, from, to } = a.args;
  if (Array.isArray(argv)) return argv.map(String).join(' ');
  if (typeof cmd === 'string') return cmd;
  if (typeof from === 'string' && typeof to === 'string') return `${from} → ${to}`;
  if (typeof path === 'string') return path;
  return JSON.stringify(a.args);
}

export const approvalsPage: PageFactory = (ctx) => {
  const body = h('tbody');
  const note = h('p', { class: 'empty' });

  const decide = async (a: PendingApproval, verdict: 'approve' | 'deny', buttons: HTMLButtonElement[]): Promise<void> => {
    for (const b of buttons) b.disabled = true;
    const path = `/v1/sandboxes/${encodeURIComponent(a.sandboxId)}/calls/${encodeURIComponent(a.callId)}/${verdict}`;
    try {
      const call = await ctx.api.json('POST', path, CallOutcome);
      ctx.flash(
        'ok',
        verdict === 'approve'
          ? `Approved ${a.callId}: it is ${call.status === 'finished' ? `finished (${call.result?.status ?? '?'})` : call.status}.`
          : `Denied ${a.callId}: it ended ${call.result?.status ?? call.status}; nothing ran.`,
      );
    } catch (err) {
      ctx.flash(
        'error',
        err instanceof ApiError && err.code === 'approval.expired'
          ? `Too late: ${a.callId} waited past its deadline and ended denied (approval.expired).`
          : err instanceof ApiError && err.code === 'approval.not_pending'
            ? `${a.callId} no longer waits: someone answered it, or it was cancelled (approval.not_pending).`
            : `Could not ${verdict} ${a.callId}: ${describeError(err)}`,
      );
    }
    await load();
  };

  /** The resolved arguments; those cut for the list are read whole from the call on request. */
  const argumentsView = (a: PendingApproval): HTMLElement => {
    const pre = h('pre', {}, JSON.stringify(a.args, null, 2));
    if (a.truncatedArgs.length === 0) return h('details', {}, h('summary', {}, 'resolved arguments'), pre);
    const whole = h('button', { type: 'button', class: 'small', 'data-action': 'whole-args' }, 'Show them whole');
    const note = h('p', { class: 'muted' }, `cut for this list: ${a.truncatedArgs.join(', ')}. `, whole);
    whole.addEventListener('click', () => {
      whole.disabled = true;
      const path = `/v1/sandboxes/${encodeURIComponent(a.sandboxId)}/calls/${encodeURIComponent(a.callId)}`;
      void ctx.api
        .json('GET', path, CallArgs)
        .then((call) => {
          pre.textContent = JSON.stringify(call.args, null, 2);
          note.textContent = 'whole, as the call holds them';
        })
        .catch((err: unknown) => ctx.flash('error', `Could not read ${a.callId}: ${describeError(err)}`))
        .finally(() => (whole.disabled = false));
    });
    return h(
      'details',
      { open: true },
      h('summary', {}, 'resolved arguments (cut: approve only once you have read them whole)'),
      pre,
      note,
    );
  };

  /** The rows shown, by sandbox and call id, and each one's time-left cell. */
  let shown = new Map<string, HTMLElement>();
  const timeLeft = new Map<string, HTMLElement>();
  const keyOf = (a: PendingApproval): string => `${a.sandboxId} ${a.callId}`;
  const tick = (a: PendingApproval): void => {
    const cell = timeLeft.get(keyOf(a));
    if (cell) cell.textContent = formatDuration((Date.parse(a.expiresAt) - Date.now()) / 1000);
  };

  const row = (a: PendingApproval): HTMLElement => {
    const approve = h('button', { type: 'button', class: 'small primary', 'data-action': 'approve' }, 'Approve');
    const deny = h('button', { type: 'button', class: 'small danger', 'data-action': 'deny' }, 'Deny');
    approve.addEventListener('click', () => void decide(a, 'approve', [approve, deny]));
    deny.addEventListener('click', () => void decide(a, 'deny', [approve, deny]));
    const left = h('td', { class: 'nowrap', title: `${formatTime(a.expiresAt)} UTC` });
    timeLeft.set(keyOf(a), left);
    return h(
      'tr',
      { 'data-call': a.callId, 'data-sandbox': a.sandboxId },
      h('td', {}, h('code', {}, a.sandboxId)),
      h('td', {}, h('code', {}, a.callId)),
      h('td', {}, a.tool),
      h('td', { class: 'details' }, h('code', { class: 'effect' }, headline(a)), argumentsView(a)),
      h('td', {}, h('code', {}, a.rule)),
      h('td', {}, h('code', { title: a.fingerprint }, shortDigest(a.fingerprint))),
      h('td', { class: 'nowrap' }, formatTime(a.createdAt)),
      left,
      h('td', { class: 'actions' }, approve, deny),
    );
  };

  const load = async (): Promise<void> => {
    try {
      const { approvals } = await ctx.api.json('GET', '/v1/approvals', PendingApprovalList);
      // A call listed before keeps its row (what the approver has opened or is reading stays as it is).
      shown = new Map(approvals.map((a) => [keyOf(a), shown.get(keyOf(a)) ?? row(a)]));
      for (const key of timeLeft.keys()) if (!shown.has(key)) timeLeft.delete(key);
      replace(body, ...shown.values());
      for (const a of approvals) tick(a);
      note.textContent =
        approvals.length === 0 ? 'No call waits for approval. Calls wait here when a policy’s tools.approvals rules say ask.' : '';
    } catch (err) {
      replace(body);
      note.textContent = `Could not list the calls waiting for approval: ${describeError(err)}`;
    }
  };

  const refresh = h('button', { type: 'button', id: 'approvals-refresh' }, 'Refresh');
  refresh.addEventListener('click', () => void load());
  const timer = setInterval(() => void load(), RELOAD_EVERY_MS);
  void load();

  return {
    el: h(
      'section',
      {},
      h('div', { class: 'toolbar' }, h('h2', {}, 'Approvals'), refresh),
      h(
        'p',
        { class: 'muted' },
        'An approval binds the call’s fingerprint: the same tool with other arguments waits for its own. Unanswered calls end denied at their deadline.',
      ),
      h(
        'table',
        { class: 'data', id: 'approvals' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            ...['Sandbox', 'Call', 'Tool', 'What would run', 'Rule', 'Fingerprint', 'Asked (UTC)', 'Time left', ''].map((c) =>
              h('th', {}, c),
            ),
          ),
        ),
        body,
      ),
      note,
    ),
    dispose: () => clearInterval(timer),
  };
};
