/**
 * Images: the tenant's built images with status, name, id and size; one image's build log
 * (its events, streamed while it builds); delete, with the API's refusal shown by its code
 * (`409 image.in_use` while a sandbox runs from it).
 */
import { describeError } from '../api.js';
import { formatBytes, formatTime, h, replace } from '../dom.js';
import { ImageEvent, ImageList, type ImageView } from '../envs-api.js';
import type { PageFactory } from '../page.js';
import { deleteButton, resourceTable } from '../resource-table.js';

export const imagesPage: PageFactory = (ctx) => {
  const logTitle = h('h3', {});
  const log = h('pre', { class: 'build-log', id: 'image-log' });
  let shownLog: string | undefined;
  const { body, empty, el } = resourceTable({
    title: 'Images',
    tableId: 'images',
    headings: ['Status', 'Name', 'Image', 'Size', 'Created (UTC)', 'Error', ''],
    reload: () => load(),
    after: [logTitle, log],
  });

  const showLog = async (image: ImageView): Promise<void> => {
    shownLog = image.id;
    logTitle.textContent = `Build log of ${image.name ?? image.id}`;
    log.textContent = '';
    const mine = image.id;
    try {
      await ctx.api.events(`/v1/images/${encodeURIComponent(image.id)}/events`, (data) => {
        if (shownLog !== mine) return;
        const event = ImageEvent.safeParse(JSON.parse(data));
        if (!event.success) return;
        const e = event.data;
        log.append(
          e.type === 'log'
            ? (e.text ?? '')
            : e.type === 'failed'
              ? `\n[failed] ${e.error?.code ?? ''}: ${e.error?.message ?? ''}\n`
              : `[${e.type}]\n`,
        );
      });
      if (shownLog === mine) await load();
    } catch (err) {
      ctx.flash('error', `Could not read the build log of ${image.id}: ${describeError(err)}`);
    }
  };

  const load = async (): Promise<void> => {
    try {
      const { images } = await ctx.api.json('GET', '/v1/images', ImageList);
      replace(
        body,
        ...images
          .sort((a, b) => b.createdAt.localeCompare(a.createdAt))
          .map((image) => {
            const logButton = h('button', { type: 'button', class: 'small', 'data-action': 'log' }, 'Build log');
            logButton.addEventListener('click', () => void showLog(image));
            const del = deleteButton(ctx, {
              question: `Delete image ${image.name ?? image.id}?`,
              path: `/v1/images/${encodeURIComponent(image.id)}`,
              label: image.id,
              reload: load,
            });
            return h(
              'tr',
              { 'data-id': image.id, 'data-status': image.status },
              h('td', {}, h('span', { class: `badge status-${image.status}` }, image.status)),
              h('td', {}, image.name ?? '—'),
              h('td', {}, h('code', {}, image.id)),
              h('td', {}, image.sizeBytes === null ? '—' : formatBytes(image.sizeBytes)),
              h('td', {}, formatTime(image.createdAt)),
              h('td', { class: 'error-text' }, image.error ? `${image.error.code}: ${image.error.message}` : ''),
              h('td', { class: 'actions' }, logButton, del),
            );
          }),
      );
      empty.textContent = images.length === 0 ? 'No images. Build one with POST /v1/images or `sbx image build`.' : '';
    } catch (err) {
      ctx.flash('error', `Could not list images: ${describeError(err)}`);
    }
  };

  void load();
  return {
    el,
    dispose: () => {
      // A build still streaming keeps its request until it ends; nothing is shown from it.
      shownLog = undefined;
    },
  };
};
