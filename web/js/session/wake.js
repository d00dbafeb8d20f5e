// @ts-check
// Back as soon as the network is (docs/PROTOCOL.md, "Back fast"). The browser says when the phone
// lost its network (`offline`), got it back (`online`) and showed the page again
// (`visibilitychange`). Losing it ends the session at once — nothing sent on it could arrive — and
// its return starts the next one without waiting out the backoff. A socket that lived across a
// return or a hidden spell may be dead without knowing it (the phone changed networks): the
// laptop is asked for a sign of life, and the socket is ended when none opens within `PROBE_MS`.

/** @typedef {import('../session.js').Session} Session */

/** How long a sealed session that lived across a network change has to answer a probe. */
export const PROBE_MS = 1000;

/**
 * What the session does: `lost` the network went away; `back` it returned (`online`); `shown` the
 * page became visible again.
 * @typedef {{lost: () => void, back: () => void, shown: () => void}} WakeHandlers
 */

/** Watches the browser's network and the page's visibility for one session until `stop()`. */
export class Wake {
  /** @param {WakeHandlers} on */
  constructor(on) {
    this.lost = () => on.lost();
    this.back = () => on.back();
    this.shown = () => {
      if (document.visibilityState === 'visible') on.shown();
    };
    addEventListener('offline', this.lost);
    addEventListener('online', this.back);
    document.addEventListener('visibilitychange', this.shown);
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.probing = undefined;
  }

  stop() {
    removeEventListener('offline', this.lost);
    removeEventListener('online', this.back);
    document.removeEventListener('visibilitychange', this.shown);
    clearTimeout(this.probing);
  }

  /**
   * Asks a sealed session for a sign of life: `ask` sends a frame the laptop answers (false when
   * it could not be sent); `dead` is called when nothing sealed opened within `PROBE_MS`.
   * @param {{heardAt: number}} channel the session's keys, which note when a frame last opened
   * @param {() => boolean} ask
   * @param {() => void} dead
   */
  probe(channel, ask, dead) {
    clearTimeout(this.probing);
    const asked = Date.now();
    if (!ask()) {
      dead();
      return;
    }
    this.probing = setTimeout(() => {
      if (channel.heardAt <= asked) dead();
    }, PROBE_MS);
  }
}

/**
 * The browser lost its network: the socket can carry nothing, so the session ends now and the
 * page keeps trying.
 * @param {Session} session
 */
export function networkLost(session) {
  if (session.stopped || session.final || !session.socket) return;
  const socket = session.socket;
  session.socket = null;
  socket.close(1000, 'offline');
  session.goOffline({ code: 'offline', message: 'the phone lost its network' });
  session.retry.schedule();
}

/**
 * The network returned (`online`) or the page was shown again: a session waiting to reconnect
 * tries at once; a sealed one that lived across it must answer a probe.
 * @param {Session} session
 * @param {boolean} online the browser said its network returned
 */
export function networkBack(session, online) {
  const wake = session.wake;
  if (session.stopped || session.final || !wake) return;
  const socket = session.socket;
  if (!socket) {
    session.retry.attempt = 0;
    session.connect();
  } else if (session.seal && session.online) {
    const channel = session.seal.channel;
    wake.probe(channel, () => session.sendJson({ type: 'status' }), () => session.restart(socket, true));
  } else if (online && !session.seal) {
    // Opened before the network returned, and not sealed yet: a fresh socket is surer.
    session.reconnectNow();
  }
}
