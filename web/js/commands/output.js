// @ts-check
// One command's output on the page, fast at any size: text that arrives is gathered and written
// once per animation frame (one layout and one scroll per frame, however many chunks came), into
// blocks of about BLOCK characters cut at line ends. Blocks are laid out only near the screen
// (`content-visibility: auto` in app.css), so 256 KiB costs about what one screenful costs.

import { atBottom, el } from '../dom.js';

/** Characters per block: a few screens of text. */
const BLOCK = 8192;

/**
 * Keeps a scroller at its end while the reader leaves it there. Whether to follow is the reader's
 * choice, told by their own scrolling (wheel, drag, keys), never read back from the position after
 * output was written: blocks laid out only near the screen change the height once shown, and a
 * position measured then would stop following after a long output, hiding the next command's.
 */
export class Follower {
  /** @param {HTMLElement} scroller */
  constructor(scroller) {
    this.scroller = scroller;
    this.following = true;
    /** The reader moved it since it was last put at the end. */
    this.moved = false;
    const moved = () => {
      this.moved = true;
    };
    for (const type of ['wheel', 'touchmove', 'keydown']) scroller.addEventListener(type, moved, { passive: true });
    scroller.addEventListener('scroll', () => {
      if (this.moved) this.following = atBottom(scroller);
    }, { passive: true });
    /** @type {Element | null} */
    this.watched = null;
    // Blocks laid out only near the screen take their height once they come into view, after the
    // last write may have put the scroller at its end: whatever changes the watched block's size
    // puts it back there, in the same frame, for as long as the reader follows.
    this.resized = new ResizeObserver(() => {
      if (this.following && !this.moved) this.scroller.scrollTop = this.scroller.scrollHeight;
    });
  }

  /**
   * Follows the size of `node`, the block that grows now (the latest command's), instead of the one before.
   * @param {Element} node
   */
  watch(node) {
    if (this.watched) this.resized.unobserve(this.watched);
    this.watched = node;
    this.resized.observe(node);
  }

  /** To the end, when following; again at the next frame, once what came into view is laid out. */
  follow() {
    if (!this.following) return;
    this.moved = false;
    this.scroller.scrollTop = this.scroller.scrollHeight;
    requestAnimationFrame(() => {
      if (this.following && !this.moved) this.scroller.scrollTop = this.scroller.scrollHeight;
    });
  }
}

export class OutputView {
  /**
   * @param {HTMLElement} node the run's `.out` element
   * @param {Follower} follower the terminal that scrolls
   * @param {() => void} [onFirst] called at the frame that shows the first text
   */
  constructor(node, follower, onFirst) {
    this.node = node;
    this.follower = follower;
    this.onFirst = onFirst;
    this.pending = '';
    this.scheduled = false;
    /** @type {Text | null} */
    this.last = null;
    this.lastLength = 0;
    this.shown = false;
  }

  /** @param {string} text */
  write(text) {
    if (!text) return;
    this.pending += text;
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  /**
   * Replaces what was shown with `text` (the command's final output, head and tail).
   * @param {string} text
   */
  replace(text) {
    this.node.replaceChildren();
    this.last = null;
    this.lastLength = 0;
    this.pending = '';
    this.write(text);
  }

  /** Writes what is pending now, following the output when the reader was at the bottom. */
  flush() {
    this.scheduled = false;
    if (!this.pending) return;
    let text = this.pending;
    this.pending = '';
    /** @type {Node[]} */
    const blocks = [];
    while (text) {
      if (!this.last || this.lastLength >= BLOCK) {
        this.last = document.createTextNode('');
        this.lastLength = 0;
        blocks.push(el('div', { class: 'block' }, this.last));
      }
      let take = Math.min(text.length, BLOCK - this.lastLength);
      if (take < text.length) {
        // End the block at a line end when one is near, so a block's height is whole lines.
        const cut = text.lastIndexOf('\n', take);
        if (cut > take / 2) take = cut + 1;
      }
      this.last.appendData(text.slice(0, take));
      this.lastLength += take;
      text = text.slice(take);
    }
    if (blocks.length) this.node.append(...blocks);
    this.follower.follow();
    if (!this.shown) {
      this.shown = true;
      if (this.onFirst) this.onFirst();
    }
  }
}
