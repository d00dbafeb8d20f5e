// Screenshot: one button; the image frame is shown, zoomable and downloadable.

import { base64Bytes, byId, sentence, show } from './dom.js';

export class Screenshot {
  constructor(app) {
    this.app = app;
    this.url = null;
    this.busy = false;
    this.button = byId('screenshot');
    this.zoom = byId('zoom');
    this.frame = byId('shot-frame');
    this.image = byId('shot');
    this.download = byId('shot-download');
    this.button.addEventListener('click', () => this.take());
    this.zoom.addEventListener('click', () => this.toggleZoom());
    this.image.addEventListener('click', () => this.toggleZoom());
  }

  async take() {
    this.busy = true;
    this.app.refreshControls();
    byId('shot-info').textContent = 'taking a screenshot…';
    const outcome = await this.app.attempt('screenshot', {}, byId('shot-error')).done;
    byId('shot-info').textContent = '';
    try {
      if (outcome) this.showImage(outcome.image);
    } catch {
      show(byId('shot-error'), sentence({ code: 'internal', message: 'the laptop sent no image' }));
    } finally {
      this.busy = false;
      this.app.refreshControls();
    }
  }

  /** Shows an `image` frame; throws when it holds no picture. */
  showImage(image) {
    if (!image || typeof image.data !== 'string') throw new Error('no image');
    if (this.url) URL.revokeObjectURL(this.url);
    const mime = typeof image.mime === 'string' && image.mime.startsWith('image/') ? image.mime : 'image/png';
    this.url = URL.createObjectURL(new Blob([base64Bytes(image.data)], { type: mime }));
    this.image.src = this.url;
    this.image.alt = `Screenshot of the laptop's screen, ${image.width} × ${image.height}`;
    this.image.dataset.width = image.width;
    this.image.dataset.height = image.height;
    const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
    this.download.href = this.url;
    this.download.download = `screenshot-${stamp}.${mime.split('/')[1] || 'png'}`;
    this.download.hidden = false;
    this.zoom.disabled = false;
    this.setZoom(false);
    this.frame.hidden = false;
    byId('shot-info').textContent = `${image.width} × ${image.height} — tap the image to zoom`;
  }

  toggleZoom() {
    if (!this.frame.hidden) this.setZoom(!this.frame.classList.contains('zoomed'));
  }

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
    byId('shot-info').textContent = '';
    show(byId('shot-error'));
  }
}
