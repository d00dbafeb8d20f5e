// @ts-check
// Boot: one store, the app, and the panels. Each panel is handed its root element and the
// context `{store, app}`; it finds its own controls inside its root (dom.js `part`), shows what it
// watches in the store, and runs tools through `app.attempt`. Nothing outside a panel touches its
// controls.
//
// Adding a panel (a feature folder such as `approvals/`):
//   1. its markup in index.html: a `<section id="panel-NAME" class="panel" hidden>` in #workspace
//      and a tab button `id="tab-NAME"` in #tabs (or another root of its own);
//   2. `web/js/NAME/panel.js` exporting a class whose constructor takes `(root, {store, app})`,
//      calls `showWithTab(root, store, 'NAME')`, and watches `session` to forget the previous
//      laptop's content and `online` to enable its controls;
//   3. one line below, and its files in the embedded list of src/net/web.rs (a test fails when a
//      file under web/ is not served).

import { root } from './dom.js';
import { App } from './app.js';
import { Store } from './store.js';
import { ConnectionLine, Notice, shareHeight } from './shell/header.js';
import { MachinePicker } from './shell/picker.js';
import { Welcome } from './shell/welcome.js';
import { Workspace } from './shell/workspace.js';
import { Status } from './shell/status.js';
import { Terminal } from './terminal/panel.js';
import { Pty } from './pty/panel.js';
import { Files } from './files/panel.js';
import { Screenshot } from './screen/panel.js';
import { Coder } from './agent/panel.js';
import { Voice } from './voice/panel.js';
import { Notifications, registerWorker } from './notify/panel.js';
import { Approvals } from './approvals/panel.js';

const store = new Store();
const app = new App(store);
const context = { store, app };

shareHeight(root('bar'));
new ConnectionLine(root('connection'), context);
new MachinePicker(root('machine-pick'), context);
new Notice(root('notice'), context);
new Welcome(root('welcome'), context);
new Workspace(root('workspace'), context);
new Terminal(root('panel-terminal'), context);
new Pty(root('panel-pty'), context);
new Files(root('panel-files'), context);
new Screenshot(root('panel-screen'), context);
new Coder(root('panel-agent'), context);
new Status(root('panel-status'), context);
new Voice({ buttons: root('voice'), panel: root('call-panel') }, context);
new Notifications(root('notify'), context);
new Approvals({ panel: root('approvals'), badge: root('approvals-badge') }, context);

app.boot();
// The service worker shows notifications with the page closed and keeps the app's files at hand.
registerWorker();
