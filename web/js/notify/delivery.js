// @ts-check
// Whether the laptop's last push arrived and whether it keeps the laptop awake, from its `status`
// answer (asked while the Status tab shows): "Last notification: delivered in 1.2 s", "not
// delivered", and "Kept awake: a command runs · on battery".

import { onSession } from '../session/events.js';

/**
 * The last push, in words; '' before the first.
 * @param {unknown} push the status's `push`
 */
export function deliveryLine(push) {
  if (!push || typeof push !== 'object') return '';
  const { state, delivered_after_ms: after, resent } = /** @type {Record<string, unknown>} */ (push);
  const again = resent === true ? ' (sent again: the first was not delivered in time)' : '';
  if (state === 'delivered' && typeof after === 'number') {
    return `Last notification: delivered in ${(after / 1000).toFixed(1)} s${again}.`;
  }
  if (state === 'not-delivered') return `Last notification: not delivered${again}.`;
  if (state === 'waiting') return `Last notification: sent, not acknowledged yet${again}.`;
  return '';
}

/**
 * The sleep inhibitor and the battery, in words; '' when the laptop does not say.
 * @param {unknown} awake the status's `awake`
 */
export function awakeLine(awake) {
  if (!awake || typeof awake !== 'object') return '';
  const { held, why, unavailable, on_battery: battery } = /** @type {Record<string, unknown>} */ (awake);
  const text = (/** @type {unknown} */ value) => (typeof value === 'string' ? value.slice(0, 120) : '');
  const line = held === true
    ? `Kept awake: ${text(why) || 'busy'}`
    : unavailable ? 'Not kept awake: the laptop may sleep while it works' : 'Not kept awake: nothing runs';
  return battery === true ? `${line} · on battery` : battery === false ? `${line} · on mains` : line;
}

/**
 * Writes both lines into `delivery` and `awake` at each `status` answer.
 * @param {HTMLElement} delivery
 * @param {HTMLElement} awake
 * @param {import('../store.js').Store} store
 */
export function showDelivery(delivery, awake, store) {
  onSession(store, {
    status: (/** @type {Record<string, any>} */ status) => {
      delivery.textContent = deliveryLine(status.push);
      awake.textContent = awakeLine(status.awake);
    },
  }, () => {
    delivery.textContent = '';
    awake.textContent = '';
  });
}
