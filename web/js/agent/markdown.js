// @ts-check
// Markdown of a coding agent's text, as DOM nodes: headings, paragraphs, lists, quotes, fenced
// code blocks, rules; inline code, bold, italics and links. The text is hostile (it can quote
// anything a file or a web page said), so nothing here parses HTML: every piece of text goes in
// through `textContent` (dom.js `el`), a `<script>` or `<img onerror>` in it shows as those
// characters, and a link is made only for an `http(s):` address.

import { el } from '../dom.js';

/** Longest text rendered; the rest is shown as it is, after a note. */
const MAX_RENDERED = 128 * 1024;

/**
 * The rendered blocks of `source`.
 * @param {string} source
 * @returns {DocumentFragment}
 */
export function renderMarkdown(source) {
  const out = document.createDocumentFragment();
  const text = source.length > MAX_RENDERED ? source.slice(0, MAX_RENDERED) : source;
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  /** @type {string[]} */
  let paragraph = [];
  const flush = () => {
    if (paragraph.length > 0) out.append(el('p', {}, ...inline(paragraph.join('\n'))));
    paragraph = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)/.exec(line);
    if (fence) {
      flush();
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      const code = el('code', {}, body.join('\n'));
      if (fence[2]) code.dataset.lang = fence[2];
      out.append(el('pre', { class: 'md-code', tabindex: '0' }, code));
      continue;
    }
    const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      flush();
      // An answer's headings sit under the page's own: h3 and below.
      const level = Math.min(6, heading[1].length + 2);
      out.append(el(/** @type {'h3'} */ (`h${level}`), { class: 'md-heading' }, ...inline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.append(el('hr'));
      i += 1;
      continue;
    }
    const item = listItem(line);
    if (item) {
      flush();
      const list = el(item.ordered ? 'ol' : 'ul');
      if (item.ordered && item.start !== 1) list.setAttribute('start', String(item.start));
      while (i < lines.length) {
        const next = listItem(lines[i]);
        if (!next || next.ordered !== item.ordered) {
          // A line indented under an item continues it.
          if (!next && /^\s{2,}\S/.test(lines[i]) && list.lastElementChild) {
            list.lastElementChild.append('\n', ...inline(lines[i].trim()));
            i += 1;
            continue;
          }
          break;
        }
        const li = el('li', {}, ...inline(next.text));
        if (next.depth > 0) li.classList.add('md-nested');
        list.append(li);
        i += 1;
      }
      out.append(list);
      continue;
    }
    if (/^\s{0,3}>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s{0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s{0,3}>\s?/, ''));
      out.append(el('blockquote', {}, renderMarkdown(quoted.join('\n'))));
      continue;
    }
    if (line.trim() === '') flush();
    else paragraph.push(line);
    i += 1;
  }
  flush();
  if (text !== source) {
    out.append(el('p', { class: 'muted' }, `… ${source.length - text.length} more characters, as written:`),
      el('pre', { class: 'md-code' }, source.slice(MAX_RENDERED)));
  }
  return out;
}

/**
 * A list item's marker and text, or `null` for a line that is none.
 * @param {string} line
 */
function listItem(line) {
  const bullet = /^(\s*)[-*+]\s+(.*)$/.exec(line);
  if (bullet) return { ordered: false, start: 1, depth: bullet[1].length >= 2 ? 1 : 0, text: bullet[2] };
  const numbered = /^(\s*)(\d{1,9})[.)]\s+(.*)$/.exec(line);
  if (numbered) return { ordered: true, start: Number(numbered[2]), depth: numbered[1].length >= 2 ? 1 : 0, text: numbered[3] };
  return null;
}

/**
 * Inline spans, in the order they are tried at each position. Underscores mark emphasis only at
 * word edges, so `snake_case` and `x.__name=1` stay as written.
 */
const INLINE = /`([^`\n]+)`|\*\*([^*\n]+?)\*\*|(?<![\w])__([^_\n]+?)__(?![\w])|\*([^*\s][^*\n]*?)\*|(?<![\w])_([^_\s][^_\n]*?)_(?![\w])|\[([^\]\n]+)\]\(([^)\s]+)\)/g;

/**
 * The nodes of one block's text: code, bold, italics and links as elements, the rest as text.
 * @param {string} text
 * @returns {(Node | string)[]}
 */
function inline(text) {
  /** @type {(Node | string)[]} */
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    const at = match.index || 0;
    if (at > last) nodes.push(text.slice(last, at));
    const [, code, bold, bold2, em, em2, label, href] = match;
    if (code !== undefined) nodes.push(el('code', {}, code));
    else if (bold !== undefined || bold2 !== undefined) nodes.push(el('strong', {}, ...inline(bold ?? bold2)));
    else if (em !== undefined || em2 !== undefined) nodes.push(el('em', {}, ...inline(em ?? em2)));
    else nodes.push(link(label, href));
    last = at + match[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

/**
 * A link to an `http(s):` address (opened apart from the page, telling it nothing); any other
 * address (`javascript:`, `data:`, a relative path) stays text.
 * @param {string} label
 * @param {string} href
 */
function link(label, href) {
  let url = null;
  try {
    url = new URL(href);
  } catch {
    url = null;
  }
  if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:')) return `${label} (${href})`;
  return el('a', { href: url.href, target: '_blank', rel: 'noopener noreferrer nofollow' }, label);
}
