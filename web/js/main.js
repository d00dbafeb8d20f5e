// @ts-check
// Boot: one store, the app, and the panels. Each panel is handed its root element and the
// context `{store, app}`; it finds its own controls inside its root (dom.js `part`), shows what it
// watches in the store, and runs tools through `app.attempt`. Nothing outside a panel touches its
// controls.
//
// Loading: index.html preloads every module this file imports statically (build.rs reads the
// imports below), so the first screen arrives in one round trip. The views a first screen does
// not show are imported when first needed: the shell and files tabs when chosen, voice when a
// call is offered (a page without voice never fetches it), the agent view once online.
//
// Adding a panel (a feature folder such as `approvals/`):
//   1. its markup in index.html: a `<section id="panel-NAME" class="panel" hidden>` in #workspace
//      and a tab button `id="tab-NAME"` in #tabs (or another root of its own);
//   2. `web/js/NAME/panel.js` exporting a class whose constructor takes `(root, {store, app})`,
//      calls `showWithTab(root, store, 'NAME')`, and watches `session` to forget the previous
//      laptop's content and `online` to enable its controls;
//   3. one line below: an import and a `new` for the first screen, or a `loadWhen` for a view loaded
//      on demand (build.rs serves every file under web/).

import { part, root } from './dom.js';
import { App } from './app.js';
import { Store } from './store.js';
import { NewLaptop } from './page/new-laptop.js';
import { watchOutbox } from './outbox.js';
import { ConnectionLine, Notice, RelayPageAlarm, shareHeight } from './page/header.js';
import { MachinePicker } from './page/picker.js';
import { Welcome } from './page/welcome.js';
import { Workspace } from './page/workspace.js';
import { Status } from './status/panel.js';
import { Commands } from './commands/panel.js';
import { Screenshot } from './screen/panel.js';
import { Notifications, registerWorker } from './notify/panel.js';
import { Approvals } from './approvals/panel.js';
import * as route from './route.js';

/** @typedef {import('./store.js').State} State */

const store = new Store();
// The place the address names, before any panel reads the store (a pairing link's secrets left
// the address already: address.js).
route.follow(store, location.hash);
const app = new App(store);
const context = { store, app };

/** Says that a view's module did not load (the network dropped). */
const failed = () => store.set({ notice: 'This view could not be loaded; check the connection and try again.' });

/**
 * A view built from its module on first use: the returned function imports and builds it once.
 * A module that fails to load is tried again on the next use, and said only if `asked` (the
 * person waits for it), not for a view loaded ahead.
 * @param {() => Promise<unknown>} build imports the module and builds the view
 * @param {(state: Readonly<State>) => boolean} asked
 * @returns {() => Promise<unknown>}
 */
function lazy(build, asked) {
  /** @type {Promise<unknown> | null} */
  let loading = null;
  return () => {
    loading ||= build().catch((error) => {
      loading = null;
      if (asked(store.state)) failed();
      throw error;
    });
    return loading;
  };
}

/**
 * Loads a view whenever `wanted(state)` holds (once: later calls are answered by the first).
 * @param {ReadonlyArray<keyof State>} keys what `wanted` reads
 * @param {(state: Readonly<State>) => boolean} wanted
 * @param {() => Promise<unknown>} load
 */
function loadWhen(keys, wanted, load) {
  store.watch(keys, (state) => {
    if (wanted(state)) load().catch(() => {});
  });
}

shareHeight(root('bar'));
new ConnectionLine(root('connection'), context);
watchOutbox(root('outbox'), store);
new MachinePicker(root('machine-pick'), context);
new Notice(root('notice'), context);
new RelayPageAlarm(root('relay-page'), context);
new NewLaptop(part(document, 'new-laptop', HTMLDialogElement), context);
new Welcome(root('welcome'), context);
new Workspace(root('workspace'), context);
new Commands(root('panel-commands'), context);
new Screenshot(root('panel-screen'), context);
new Status(root('panel-status'), context);
new Notifications(root('notify'), context);
new Approvals({ panel: root('approvals'), badge: root('approvals-badge') }, context);
const shellWanted = (/** @type {Readonly<State>} */ { tab }) => tab === 'shell';
// A view that failed to load is tried again when the network is back, on the tab still shown.
loadWhen(['tab', 'online'], shellWanted, lazy(async () => {
  const { Terminal } = await import('./terminal/panel.js');
  new Terminal(root('panel-shell'), context);
}, shellWanted));
const filesWanted = (/** @type {Readonly<State>} */ { tab }) => tab === 'files';
loadWhen(['tab', 'online'], filesWanted, lazy(async () => {
  const { Files } = await import('./files/panel.js');
  new Files(root('panel-files'), context);
}, filesWanted));
// The agent view follows the laptop's sessions and approvals (its `follow`), so it comes as soon as
// the page is online, behind the first screen; or at once when its tab or a tapped notification
// asks for it.
const agentWanted = (/** @type {Readonly<State>} */ { online, tab, agentSession }) =>
  online || tab === 'agent' || !!agentSession;
loadWhen(['online', 'tab', 'agentSession'], agentWanted, lazy(async () => {
  const { Coder } = await import('./agent/panel.js');
  new Coder(root('panel-agent'), context);
}, ({ tab, agentSession }) => tab === 'agent' || !!agentSession));

// Voice is loaded as soon as a call is possible. Where there is none, the Call button stands in
// as the voice panel shows it then ("no voice") and a tap loads the panel, which says why.
let voiceBuilt = false;
const loadVoice = lazy(async () => {
  const { Voice } = await import('./voice/panel.js');
  new Voice({ buttons: root('voice'), panel: root('call-panel') }, context);
  voiceBuilt = true;
}, () => false);
loadWhen(['voice'], ({ voice }) => !!voice && 'host' in voice, loadVoice);
const callButton = root('call');
store.watch(['voice'], ({ voice }) => {
  if (voiceBuilt) return;
  const none = !!voice && !('host' in voice);
  root('voice').hidden = !none;
  root('call-note').hidden = !none;
  callButton.classList.toggle('none', none);
});
callButton.addEventListener('click', () => {
  if (!voiceBuilt) loadVoice().then(() => callButton.click(), failed);
});

app.boot();
// The service worker shows notifications with the page closed and keeps the app's files at hand.
registerWorker();
