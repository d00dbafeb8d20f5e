// @ts-check
// Screenshot: one button; the image frame is shown, zoomable and downloadable.

import { base64Bytes, part, refusalIn, sentence, show } from '../dom.js';
import { showWithTab } from '../tabs.js';

/** @typedef {import('../app.js').Context} Context */

export class Screenshot {
  /**
   * @param {HTMLElement} root `#panel-screen`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    this.app = app;
    /** @type {string | null} */
    this.url = null;
    this.busy = false;
    this.online = false;
    this.button = part(root, 'screenshot', HTMLButtonElement);
    this.zoom = part(root, 'zoom', HTMLButtonElement);
    this.frame = part(root, 'shot-frame', HTMLElement);
    this.image = part(root, 'shot', HTMLImageElement);
    this.download = part(root, 'shot-download', HTMLAnchorElement);
    this.info = part(root, 'shot-info', HTMLElement);
    this.error = part(root, 'shot-error', HTMLElement);
    this.button.addEventListener('click', () => this.take());
    this.zoom.addEventListener('click', () => this.toggleZoom());
    this.image.addEventListener('click', () => this.toggleZoom());
    showWithTab(root, store, 'screen');
    store.watch(['session'], () => this.reset());
    store.watch(['online'], ({ online }) => {
      this.online = online;
      this.refresh();
    });
  }

  async take() {
    this.busy = true;
    this.refresh();
    this.info.textContent = 'taking a screenshot…';
    const outcome = await this.app.attempt('screenshot', {}, refusalIn(this.error)).done;
    this.info.textContent = '';
    try {
      if (outcome) this.showImage(outcome.image);
    } catch {
      show(this.error, sentence({ code: 'internal', message: 'the laptop sent no image' }));
    } finally {
      this.busy = false;
      this.refresh();
    }
  }

  /**
   * Shows an `image` frame; throws when it holds no picture.
   * @param {Record<string, any> | undefined} image
   */
  showImage(image) {
    if (!image || typeof image.data !== 'string') throw new Error('no image');
    if (this.url) URL.revokeObjectURL(this.url);
    const mime = typeof image.mime === 'string' && image.mime.startsWith('image/') ? image.mime : 'image/png';
    this.url = URL.createObjectURL(new Blob([base64Bytes(image.data)], { type: mime }));
    this.image.src = this.url;
    this.image.alt = `Screenshot of the laptop's screen, ${image.width} × ${image.height}`;
    this.image.dataset.width = String(image.width);
    this.image.dataset.height = String(image.height);
    const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
    this.download.href = this.url;
    this.download.download = `screenshot-${stamp}.${mime.split('/')[1] || 'png'}`;
    this.download.hidden = false;
    this.zoom.disabled = false;
    this.setZoom(false);
    this.frame.hidden = false;
    this.info.textContent = `${image.width} × ${image.height} — tap the image to zoom`;
  }

  toggleZoom() {
    if (!this.frame.hidden) this.setZoom(!this.frame.classList.contains('zoomed'));
  }

  /** @param {boolean} zoomed */
  setZoom(zoomed) {
    this.frame.classList.toggle('zoomed', zoomed);
    this.zoom.setAttribute('aria-pressed', String(zoomed));
  }

  reset() {
    if (this.url) URL.revokeObjectURL(this.url);
    this.url = null;
    this.image.removeAttribute('src');
    this.frame.hidden = true;
    this.download.hidden = true;
    this.zoom.disabled = true;
    this.info.textContent = '';
    show(this.error);
  }

  refresh() {
    this.button.disabled = !this.online || this.busy;
  }
}
