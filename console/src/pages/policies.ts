/**
 * Policies: the list, one policy's version history, and an editor for its next version. Saving
 * PUTs the text with `version` = latest + 1 (a compare-and-swap: another admin's save in between
 * is a conflict, not an overwrite); a `400 policy.invalid` is shown at the fields it names —
 * listed beside the editor with their paths and lines, and marked on those lines.
 */
import { ApiError, describeError, PolicyHistory, PolicyIssues, PolicyList, PolicyVersionView } from '../api.js';
import { formatTime, h, replace, shortDigest } from '../dom.js';
import { CodeEditor } from '../editor.js';
import type { PageFactory } from '../page.js';
import { locateIssues, parsePolicyText, policyToText, type LocatedIssue, type PolicyIssue } from '../policy-text.js';

export const policiesPage: PageFactory = (ctx, selected) => {
  const list = h('ul', { class: 'side-list', id: 'policy-list' });
  const detail = h('div', { class: 'policy-detail' });

  const loadList = async (): Promise<void> => {
    try {
      const { policies } = await ctx.api.json('GET', '/v1/policies', PolicyList);
      replace(
        list,
        ...policies
          .sort((a, b) => a.name.localeCompare(b.name))
          .map((p) =>
            h(
              'li',
              { class: p.name === selected ? 'active' : '' },
              h('a', { href: `#/policies/${encodeURIComponent(p.name)}` }, p.name),
              h('span', { class: 'muted' }, ` v${p.version}`),
            ),
          ),
      );
    } catch (err) {
      ctx.flash('error', `Could not list policies: ${describeError(err)}`);
    }
  };

  void loadList();
  if (selected === undefined) replace(detail, h('p', { class: 'empty' }, 'Choose a policy to see its versions and edit it.'));
  else void showPolicy(selected);

  async function showPolicy(name: string): Promise<void> {
    let history: PolicyHistory;
    try {
      history = await ctx.api.json('GET', `/v1/policies/${encodeURIComponent(name)}/versions`, PolicyHistory);
    } catch (err) {
      replace(detail, h('p', { class: 'error-text' }, `Could not read policy ${name}: ${describeError(err)}`));
      return;
    }
    let issues: readonly PolicyIssue[] = [];
    let located: LocatedIssue[] = [];
    const title = h('h2', {});
    const status = h('p', { class: 'editor-status', role: 'status' });
    const issueList = h('ol', { class: 'issues', id: 'policy-issues' });
    const issuePanel = h('aside', { class: 'issue-panel' }, h('h3', {}, 'Problems'), issueList);
    const showIssues = (): void => {
      located = locateIssues(editor.text, issues);
      editor.setIssues(located);
      replace(
        issueList,
        ...located.map((issue) => {
          const item = h(
            'li',
            { 'data-path': issue.path, 'data-line': issue.line ?? '' },
            h('code', {}, issue.path || '(document)'),
            issue.line === null ? ' ' : h('span', { class: 'muted' }, ` line ${issue.line}${issue.exact ? '' : ' (missing here)'} `),
            h('div', {}, issue.message),
          );
          if (issue.line !== null) item.addEventListener('click', () => editor.selectLine(issue.line!));
          return item;
        }),
      );
      issuePanel.classList.toggle('clean', located.length === 0);
      if (located.length === 0) replace(issueList, h('li', { class: 'none' }, 'None found on the last save.'));
    };
    // Issues are located again on every edit, by path: a marker follows its field as lines move.
    const editor = new CodeEditor(() => showIssues());
    const base = h('span', { class: 'muted' });

    const saveButton = h('button', { type: 'button', class: 'primary', id: 'save-policy' }, 'Save as new version');
    const revertButton = h('button', { type: 'button' }, 'Revert to latest');
    const load = (version: PolicyVersionView): void => {
      editor.setText(policyToText(version.policy));
      editor.revealLine(1);
      base.textContent =
        version.version === history.latest
          ? `editing from the latest, v${version.version}`
          : `editing from v${version.version} (latest is v${history.latest})`;
      issues = [];
      showIssues();
    };
    const latestVersion = (): PolicyVersionView | undefined => history.versions.find((v) => v.version === history.latest);

    const renderHead = (): void => {
      const latest = latestVersion();
      replace(
        title,
        name,
        h('span', { class: 'muted' }, ` v${history.latest}`),
        history.deletedAt === null ? null : ' ',
        history.deletedAt === null ? null : h('span', { class: 'badge status-released' }, 'deleted'),
      );
      replace(
        historyBody,
        ...[...history.versions].reverse().map((v) => {
          const open = h('button', { type: 'button', class: 'small' }, 'Load into editor');
          open.addEventListener('click', () => load(v));
          return h(
            'tr',
            { 'data-version': v.version },
            h('td', {}, `v${v.version} `, v.version === history.latest ? h('span', { class: 'badge status-ready' }, 'latest') : null),
            h('td', {}, formatTime(v.createdAt)),
            h('td', {}, h('code', {}, v.createdBy)),
            h('td', {}, h('code', { title: v.digest }, shortDigest(v.digest))),
            h('td', {}, open),
          );
        }),
      );
      if (latest) meta.textContent = `digest ${shortDigest(latest.digest)} · by ${latest.createdBy} · ${formatTime(latest.createdAt)} UTC`;
    };

    const save = async (): Promise<void> => {
      status.className = 'editor-status';
      const parsed = parsePolicyText(editor.text);
      if (!parsed.ok) {
        issues = [];
        located = [parsed.issue];
        editor.setIssues(located);
        replace(
          issueList,
          h(
            'li',
            { 'data-path': '', 'data-line': parsed.issue.line ?? '' },
            h('code', {}, 'syntax'),
            ` line ${parsed.issue.line ?? '?'} `,
            h('div', {}, parsed.issue.message),
          ),
        );
        issuePanel.classList.remove('clean');
        status.textContent = 'Not saved: the text is not valid YAML or JSON.';
        status.classList.add('error-text');
        return;
      }
      // Anything but a mapping goes as it is: the API names what is wrong with it.
      const isMapping = typeof parsed.value === 'object' && parsed.value !== null && !Array.isArray(parsed.value);
      const body = isMapping ? { ...(parsed.value as Record<string, unknown>), version: history.latest + 1 } : parsed.value;
      saveButton.disabled = true;
      try {
        const saved = await ctx.api.json('PUT', `/v1/policies/${encodeURIComponent(name)}`, PolicyVersionView, body);
        history = await ctx.api.json('GET', `/v1/policies/${encodeURIComponent(name)}/versions`, PolicyHistory);
        renderHead();
        load(saved);
        status.textContent = `Saved version ${saved.version}.`;
        status.classList.add('ok-text');
        void loadList();
      } catch (err) {
        if (err instanceof ApiError && err.code === 'policy.invalid') {
          const details = PolicyIssues.safeParse(err.details);
          issues = details.success ? details.data.issues : [{ path: '', message: err.message }];
          showIssues();
          const first = located.find((issue) => issue.line !== null);
          if (first?.line) editor.revealLine(first.line);
          status.textContent = `Not saved: ${issues.length} problem${issues.length === 1 ? '' : 's'} (policy.invalid).`;
        } else if (err instanceof ApiError && err.code === 'policy.version_conflict') {
          status.textContent = `Not saved: another version was saved meanwhile (policy.version_conflict). Copy your change, revert to the latest and apply it again.`;
        } else {
          status.textContent = `Not saved: ${describeError(err)}`;
        }
        status.classList.add('error-text');
      } finally {
        saveButton.disabled = false;
      }
    };

    const historyBody = h('tbody');
    const meta = h('p', { class: 'muted' });
    saveButton.addEventListener('click', () => void save());
    revertButton.addEventListener('click', () => {
      const latest = latestVersion();
      if (latest) load(latest);
      status.textContent = '';
    });
    renderHead();
    const latest = latestVersion();
    if (latest) load(latest);

    replace(
      detail,
      title,
      meta,
      h(
        'div',
        { class: 'toolbar' },
        saveButton,
        revertButton,
        base,
        h('a', { href: `#/proposals/${encodeURIComponent(name)}`, class: 'small', id: 'review-proposals' }, 'Proposals from denied egress'),
      ),
      status,
      h('div', { class: 'editor-row' }, editor.el, issuePanel),
      h(
        'p',
        { class: 'muted hint' },
        'YAML or JSON. The name comes from the page and the version is assigned on save (the next one); fields left out take their defaults.',
      ),
      h('h3', {}, 'Version history'),
      h(
        'table',
        { class: 'data', id: 'policy-history' },
        h('thead', {}, h('tr', {}, ...['Version', 'Created (UTC)', 'By', 'Digest', ''].map((c) => h('th', {}, c)))),
        historyBody,
      ),
    );
  }

  return {
    el: h('section', { class: 'policies' }, h('nav', { class: 'side' }, h('h2', {}, 'Policies'), list), detail),
    dispose: () => undefined,
  };
};
