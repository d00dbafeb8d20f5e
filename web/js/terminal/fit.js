// @ts-check
// The Shell's height: the terminal fills what stays in view between its head and the key bar,
// measured on the visual viewport, which shrinks when the phone's keyboard opens (the layout
// viewport often does not), so the key bar sits right above the keyboard and the cursor's row in
// view. Where little height is left (landscape, the keyboard open) the page's header and tabs stop
// sticking and scroll away, and the Shell's head is brought to the top: the terminal keeps the
// rows the screen has room for rather than the 180 px it had under them.

/** Below this visible height (CSS px) the header and tabs give their room to the terminal. */
export const COMPACT_BELOW = 560;
/** The terminal is never made shorter than this, whatever is left. */
const LEAST_PX = 96;

/**
 * Keeps `screen` at the height that fills the view above `below`; `fitted()` runs after each
 * change (the emulator fits its rows to it).
 * @param {HTMLElement} panel `#panel-shell`
 * @param {HTMLElement} screen the emulator's element
 * @param {HTMLElement[]} below what the panel shows under it (the key bar, an error)
 * @param {() => void} fitted
 * @returns {() => void} fits now (the tab was shown)
 */
export function fillView(panel, screen, below, fitted) {
  const view = window.visualViewport;
  let scheduled = false;
  const fit = () => {
    scheduled = false;
    const compact = !panel.hidden && (view ? view.height : innerHeight) < COMPACT_BELOW;
    const root = document.documentElement;
    if (root.classList.contains('shell-compact') !== compact) root.classList.toggle('shell-compact', compact);
    if (panel.hidden) {
      panel.style.minHeight = '';
      return;
    }
    const viewTop = view ? view.offsetTop : 0;
    const bottom = viewTop + (view ? view.height : innerHeight);
    const panelTop = panel.getBoundingClientRect().top;
    // Compact, the panel's top is brought to the view's: the screen starts its head's height below.
    const top = compact ? viewTop + screen.getBoundingClientRect().top - panelTop : screen.getBoundingClientRect().top;
    const under = below.reduce((sum, node) => sum + (node.hidden ? 0 : node.offsetHeight), 0);
    const height = Math.max(LEAST_PX, Math.floor(bottom - top - under - 6));
    if (screen.style.height !== `${height}px`) screen.style.height = `${height}px`;
    // Room below for the panel's top to scroll up to the view's, whatever follows it on the page.
    const least = compact ? `${Math.ceil(bottom - viewTop)}px` : '';
    if (panel.style.minHeight !== least) panel.style.minHeight = least;
    if (compact && Math.abs(panel.getBoundingClientRect().top - viewTop) > 1) {
      scrollTo({ top: scrollY + panel.getBoundingClientRect().top - viewTop });
    }
    // Measured again where it landed: what still reaches below the view comes off the screen.
    const lowest = Math.max(screen.getBoundingClientRect().bottom,
      ...below.filter((node) => !node.hidden).map((node) => node.getBoundingClientRect().bottom));
    const over = Math.ceil(lowest - bottom);
    if (over > 0 && height - over >= LEAST_PX) screen.style.height = `${height - over}px`;
    fitted();
  };
  const soon = () => {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(fit);
    }
  };
  if (view) view.addEventListener('resize', soon);
  // What sits above the panel grows and shrinks too (the outbox's lines, a notice in the header,
  // a decided approval's card leaving the list over the tabs): the page's height changes with it,
  // the screen's top moves, and the terminal keeps filling to the key bar.
  new ResizeObserver(soon).observe(document.body);
  addEventListener('resize', soon);
  addEventListener('orientationchange', soon);
  return soon;
}
