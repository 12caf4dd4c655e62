/**
 * A plain-textarea code editor with a line-number gutter and per-line diagnostics: lines with an
 * issue are highlighted and their messages written at the end of the line. The textarea sits on
 * top of a backdrop that draws the highlights (the textarea's own text stays the only text the
 * user edits), and both scroll together.
 */
import { h, replace } from './dom.js';
import type { LocatedIssue } from './policy-text.js';

export class CodeEditor {
  /** The editor's root element, to be placed on the page. */
  readonly el: HTMLElement;
  /** The textarea itself (tests and the page focus and fill it). */
  readonly textarea: HTMLTextAreaElement;
  private readonly gutter: HTMLElement;
  private readonly backdrop: HTMLElement;
  private issues: readonly LocatedIssue[] = [];

  /** @param onInput called after every edit with the new text */
  constructor(onInput: (text: string) => void) {
    this.textarea = h('textarea', {
      class: 'code-input',
      spellcheck: 'false',
      wrap: 'off',
      autocomplete: 'off',
      'aria-label': 'Policy document (YAML or JSON)',
    });
    this.gutter = h('div', { class: 'code-gutter', 'aria-hidden': 'true' });
    this.backdrop = h('div', { class: 'code-backdrop', 'aria-hidden': 'true' });
    this.el = h('div', { class: 'code-editor' }, this.gutter, h('div', { class: 'code-area' }, this.backdrop, this.textarea));
    this.textarea.addEventListener('input', () => {
      this.render();
      onInput(this.textarea.value);
    });
    // The backdrop and gutter do not scroll themselves: they follow the textarea.
    this.textarea.addEventListener('scroll', () => {
      this.backdrop.style.transform = `translate(${-this.textarea.scrollLeft}px, ${-this.textarea.scrollTop}px)`;
      this.gutter.scrollTop = this.textarea.scrollTop;
    });
  }

  get text(): string {
    return this.textarea.value;
  }

  /** Replaces the text (and keeps the current issues until `setIssues` is called). */
  setText(text: string): void {
    this.textarea.value = text;
    this.render();
  }

  setReadOnly(readOnly: boolean): void {
    this.textarea.readOnly = readOnly;
  }

  /** Marks the lines of `issues` (those with a line) in the gutter and the backdrop. */
  setIssues(issues: readonly LocatedIssue[]): void {
    this.issues = issues;
    this.render();
  }

  /** Selects line `line` (1-based) and scrolls it into view. */
  selectLine(line: number): void {
    const lines = this.textarea.value.split('\n');
    const start = lines.slice(0, line - 1).reduce((sum, l) => sum + l.length + 1, 0);
    this.textarea.focus();
    this.textarea.setSelectionRange(start, start + (lines[line - 1]?.length ?? 0));
    this.revealLine(line);
  }

  /** Scrolls so that line `line` (1-based) shows near the top, with two lines of context above it. */
  revealLine(line: number): void {
    const lineHeight = parseFloat(getComputedStyle(this.textarea).lineHeight) || 20;
    this.textarea.scrollTop = Math.max(0, (line - 3) * lineHeight);
    // Setting scrollTop fires 'scroll' only later (or not at all when unchanged): align now.
    this.textarea.dispatchEvent(new Event('scroll'));
  }

  private render(): void {
    const lines = this.textarea.value.split('\n');
    const byLine = new Map<number, LocatedIssue[]>();
    for (const issue of this.issues) if (issue.line !== null) byLine.set(issue.line, [...(byLine.get(issue.line) ?? []), issue]);
    replace(
      this.gutter,
      ...lines.map((_, i) => h('div', { class: byLine.has(i + 1) ? 'gutter-line has-issue' : 'gutter-line' }, i + 1)),
      // Room for a horizontal scrollbar under the last line.
      h('div', { class: 'gutter-line' }, ' '),
    );
    replace(
      this.backdrop,
      ...lines.map((text, i) => {
        const here = byLine.get(i + 1);
        return h(
          'div',
          { class: here ? 'code-line has-issue' : 'code-line', 'data-line': i + 1 },
          h('span', { class: 'code-text' }, text || ' '),
          here &&
            h(
              'span',
              { class: 'inline-issue' },
              here.map((issue) => `${issue.exact ? '' : `${issue.path}: `}${issue.message}`).join(' · '),
            ),
        );
      }),
    );
  }
}
