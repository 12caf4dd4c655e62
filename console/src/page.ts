/** What every page of the console gets and gives back. */
import type { Api } from './api.js';

/** What a page may use: the API client and the banner for outcomes of actions. */
export interface PageContext {
  api: Api;
  /** Shows `text` in the banner under the navigation (`error` in red) until the next action or page. */
  flash(kind: 'ok' | 'error', text: string): void;
}

/** A rendered page: its element, and `dispose` to stop its timers when the user leaves it. */
export interface Page {
  el: HTMLElement;
  dispose(): void;
}

/** A page of the console, built from the route's parameter (e.g. a policy name). */
export type PageFactory = (ctx: PageContext, param: string | undefined) => Page;
