/**
 * The parts the pages that list one kind of the tenant's resources (images, snapshots, volumes)
 * share: the frame (a toolbar with the title and Refresh, the table with its column headings,
 * the line shown when the list is empty) and the Delete button that asks first, shows the API's
 * answer in the banner (a refusal by its code, e.g. `409 image.in_use`) and reloads the list.
 */
import { describeError } from './api.js';
import { h, type Child } from './dom.js';
import type { PageContext } from './page.js';

/** The body and the empty-state line a page fills, and the frame's element. */
export interface ResourceTable {
  /** Rows go here (`replace(body, ...rows)`). */
  body: HTMLTableSectionElement;
  /** Its text says the list is empty (else ''). */
  empty: HTMLParagraphElement;
  /** The section: toolbar, table, empty line, then `after`. */
  el: HTMLElement;
}

export interface ResourceTableOptions {
  /** The page's heading. */
  title: string;
  /** The table's `id` (the tests find it by that). */
  tableId: string;
  /** Column headings, in order ('' for the actions column). */
  headings: readonly string[];
  /** Called by the Refresh button. */
  reload: () => Promise<void>;
  /** Further elements of the toolbar, after Refresh. */
  toolbar?: Child[];
  /** What follows the table (a form, a log). */
  after?: Child[];
}

/** Builds the frame of a list page; the page loads the rows itself (`void load()`). */
export function resourceTable(options: ResourceTableOptions): ResourceTable {
  const body = h('tbody');
  const empty = h('p', { class: 'empty' });
  const refresh = h('button', { type: 'button', class: 'small' }, 'Refresh');
  refresh.addEventListener('click', () => void options.reload());
  const el = h(
    'section',
    {},
    h('div', { class: 'toolbar' }, h('h2', {}, options.title), refresh, ...(options.toolbar ?? [])),
    h('table', { class: 'data', id: options.tableId }, h('thead', {}, h('tr', {}, ...options.headings.map((c) => h('th', {}, c)))), body),
    empty,
    ...(options.after ?? []),
  );
  return { body, empty, el };
}

export interface DeleteButtonOptions {
  /** The confirmation asked before anything is sent. */
  question: string;
  /** The API path to DELETE. */
  path: string;
  /** How the banner names the resource. */
  label: string;
  /** Called after the answer, whatever it was. */
  reload: () => Promise<void>;
}

/** A `Delete` button (`data-action="delete"`) that deletes one resource once confirmed. */
export function deleteButton(ctx: PageContext, options: DeleteButtonOptions): HTMLButtonElement {
  const button = h('button', { type: 'button', class: 'small danger', 'data-action': 'delete' }, 'Delete');
  button.addEventListener('click', () => {
    if (!confirm(options.question)) return;
    button.disabled = true;
    void ctx.api
      .call('DELETE', options.path)
      .then(() => ctx.flash('ok', `Deleted ${options.label}.`))
      .catch((err: unknown) => ctx.flash('error', `Could not delete ${options.label}: ${describeError(err)}`))
      .finally(() => void options.reload());
  });
  return button;
}
