// @ts-check
// "Turn on notifications": the laptop pushes to this browser (Web Push) when an approval waits or
// a turn ends while no page follows. The browser's push service carries the notification; the
// laptop encrypts it for this browser alone. Lives in the status panel.

import { part } from '../dom.js';
import { showDelivery } from './delivery.js';

/** @typedef {import('../app.js').Context} Context */

/** The service worker that shows notifications and caches the app (served at the site's root). */
const WORKER = '/sw.js';

/**
 * The VAPID key as `applicationServerKey` wants it.
 * @param {string} base64url
 */
function keyBytes(base64url) {
  const base64 = base64url.replace(/-/g, '+').replace(/_/g, '/');
  const raw = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

/** What iOS needs before it lets a page receive pushes. */
export const IOS_HOME_SCREEN = 'On iPhone and iPad, notifications need voxa on the home screen: tap Share, then '
  + '"Add to Home Screen", then open voxa from its icon there and turn notifications on.';

/**
 * True in a browser tab on an iPhone or iPad (an iPad says it is a Mac, with a touch screen):
 * there Web Push needs the page opened from the home screen.
 */
function iosTab() {
  const ua = navigator.userAgent;
  const ios = /iPhone|iPad|iPod/.test(ua) || (/Macintosh/.test(ua) && navigator.maxTouchPoints > 1);
  const standalone = matchMedia('(display-mode: standalone)').matches
    || /** @type {{standalone?: boolean}} */ (navigator).standalone === true;
  return ios && !standalone;
}

/** Registers the service worker (it also caches the app); resolves to its registration or null. */
export async function registerWorker() {
  if (!('serviceWorker' in navigator)) return null;
  try {
    return await navigator.serviceWorker.register(WORKER, { scope: '/' });
  } catch {
    return null;
  }
}

export class Notifications {
  /**
   * @param {HTMLElement} root `#notify`
   * @param {Context} context
   */
  constructor(root, { store }) {
    this.store = store;
    this.button = part(root, 'notify-on', HTMLButtonElement);
    this.line = part(root, 'notify-status', HTMLElement);
    this.button.addEventListener('click', () => this.turnOn());
    showDelivery(part(root, 'notify-delivery', HTMLElement), part(root, 'awake', HTMLElement), store);
    store.watch(['online', 'hello'], () => this.show());
    // A tapped notification opens the page on what it was about: `#session=…` shows the agent
    // tab; approvals show above every tab by themselves. (Read before the app scrubs the address.)
    this.open(location.hash);
    if ('serviceWorker' in navigator) {
      navigator.serviceWorker.addEventListener('message', (event) => {
        if (event.data && event.data.type === 'open' && typeof event.data.open === 'string') this.open(event.data.open);
      });
    }
  }

  /** @param {string} fragment what a notification opens, e.g. `#session=s-…` */
  open(fragment) {
    const session = new URLSearchParams(fragment.replace(/^#/, '')).get('session');
    if (session !== null) this.store.set({ tab: 'agent', agentSession: session });
  }

  /** The laptop's VAPID key from its hello, when it sends notifications. */
  key() {
    const hello = this.store.state.hello;
    return hello && typeof hello.vapid_public_key === 'string' ? hello.vapid_public_key : '';
  }

  show() {
    const supported = 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
    const online = this.store.state.online && Boolean(this.key());
    // In a tab, iOS offers no push (or one that never arrives): the way is the home screen.
    if (iosTab() || !supported) {
      this.button.hidden = true;
      this.say(iosTab() ? IOS_HOME_SCREEN : 'This browser cannot show notifications from the laptop.');
      return;
    }
    this.button.hidden = false;
    this.button.disabled = !online;
    if (Notification.permission === 'denied') {
      this.say('Notifications are blocked for this page; allow them in the browser\'s site settings.');
    } else if (!online) {
      // Said only once the hello came without a key (not in the moment before it arrives).
      this.say(this.store.state.online && this.store.state.hello ? 'This laptop does not send notifications.' : '');
    } else {
      // The laptop sends them: nothing stale stays beside a button that works.
      this.say('');
      this.subscribed();
    }
  }

  /** Says so when this browser already gets the laptop's notifications. */
  async subscribed() {
    try {
      const registration = await navigator.serviceWorker.getRegistration('/');
      const subscription = registration ? await registration.pushManager.getSubscription() : null;
      if (subscription && Notification.permission === 'granted' && !this.line.textContent) {
        this.say('Notifications are on for this browser.');
      }
    } catch {
      // Nothing to say: the button still works.
    }
  }

  /** @param {string} text */
  say(text) {
    this.line.textContent = text;
  }

  /** Asks the browser's permission, subscribes, and hands the subscription to the laptop. */
  async turnOn() {
    const session = this.store.state.session;
    const key = this.key();
    if (!session || !key) return;
    this.button.disabled = true;
    try {
      const permission = await Notification.requestPermission();
      if (permission !== 'granted') {
        this.say(permission === 'denied'
          ? 'Notifications are blocked for this page; allow them in the browser\'s site settings.'
          : 'Notifications stay off: the browser asked and nothing was chosen.');
        return;
      }
      const registration = (await registerWorker()) || (await navigator.serviceWorker.ready);
      const subscription = await registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: keyBytes(key),
      });
      const json = subscription.toJSON();
      const sent = session.sendJson({
        type: 'push_subscribe',
        subscription: { endpoint: json.endpoint || '', keys: { p256dh: json.keys?.p256dh || '', auth: json.keys?.auth || '' } },
      });
      this.say(sent
        ? 'Notifications are on: the laptop tells this browser when it needs you.'
        : 'The laptop is not connected; try again when it is online.');
    } catch (err) {
      this.say(`Could not turn notifications on: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      this.button.disabled = !this.store.state.online;
    }
  }
}
