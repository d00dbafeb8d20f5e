// @ts-check
// The tool tabs' one rule for the panels they show: a panel is shown only while its tab is chosen
// (the store's `tab`, which the tab strip in page/workspace.js sets).

/**
 * Shows `root` only while its tab is chosen.
 * @param {HTMLElement} root
 * @param {import('./store.js').Store} store
 * @param {string} tab
 */
export function showWithTab(root, store, tab) {
  store.watch(['tab'], (state) => { root.hidden = state.tab !== tab; });
}
