// @ts-check
// The page's Content-Security-Policy allows no inline style, and the terminal emulator styles its
// rows with `<style>` elements and `style` attributes it writes itself. This applies what it wrote
// through the CSSOM instead (constructed style sheets, `element.style`), which the policy leaves
// alone: nothing from the terminal's output can become CSS, only the emulator's own rules.

/**
 * Mirrors every `<style>` element and `style` attribute under `root` into effect.
 * @param {HTMLElement} root
 * @returns {() => void} stops mirroring
 */
export function mirrorStyles(root) {
  /** @type {Map<HTMLStyleElement, CSSStyleSheet>} */
  const sheets = new Map();
  const adopt = () => {
    const others = document.adoptedStyleSheets.filter((sheet) => ![...sheets.values()].includes(sheet));
    for (const [element, sheet] of [...sheets]) {
      if (!element.isConnected) sheets.delete(element);
      else others.push(sheet);
    }
    document.adoptedStyleSheets = others;
  };
  /** @param {HTMLStyleElement} element */
  const mirrorSheet = (element) => {
    let sheet = sheets.get(element);
    const fresh = !sheet;
    if (!sheet) {
      sheet = new CSSStyleSheet();
      sheets.set(element, sheet);
    }
    sheet.replaceSync(element.textContent || '');
    if (fresh) adopt();
  };
  /** @param {Element} element */
  const mirrorAttribute = (element) => {
    if (!(element instanceof HTMLElement)) return;
    const written = element.getAttribute('style');
    if (written !== null && written !== element.style.cssText) element.style.cssText = written;
  };
  /** @param {Node} node */
  const visit = (node) => {
    if (node instanceof HTMLStyleElement) mirrorSheet(node);
    else if (node instanceof Element) {
      if (node.hasAttribute('style')) mirrorAttribute(node);
      for (const inner of node.querySelectorAll('style, [style]')) visit(inner);
    }
  };
  const observer = new MutationObserver((records) => {
    let removed = false;
    for (const record of records) {
      if (record.type === 'attributes' && record.target instanceof Element) mirrorAttribute(record.target);
      const parent = record.target.parentNode;
      if (record.type === 'characterData' && parent instanceof HTMLStyleElement) mirrorSheet(parent);
      if (record.type === 'childList') {
        if (record.target instanceof HTMLStyleElement) mirrorSheet(record.target);
        record.addedNodes.forEach(visit);
        removed ||= record.removedNodes.length > 0;
      }
    }
    if (removed) adopt();
  });
  observer.observe(root, { subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ['style'] });
  visit(root);
  return () => {
    observer.disconnect();
    sheets.clear();
    adopt();
  };
}
