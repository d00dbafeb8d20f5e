// @ts-check
// What the call panel says (docs/PROTOCOL.md, "Voice" and "Hosted voice"): each call_error code
// and each of the page's own failures as a sentence, worded for whoever hosts the call (the
// laptop, or the relay whose key and limits they are), and the call's clock.

import { sentence } from '../dom.js';

/** @typedef {import('../dom.js').Failure} Failure */

/**
 * What each call_error code means, as a sentence, when the laptop hosts the call: every code of
 * protocol.js (the type says so), and the page's own.
 * @type {Record<import('../protocol.js').CallErrorCode | 'mic-denied' | 'no-mic' | 'no-audio' | 'offline'
 *   | 'call-socket' | 'no-voice-laptop' | 'no-voice-relay' | 'proxy-token', string>}
 */
const CALL_ERRORS = {
  'bad-key': 'The laptop\'s Gemini API key was refused. Check GEMINI_API_KEY on the laptop.',
  'gemini-refused': 'Gemini refused the call\'s request.',
  'gemini-not-found': 'Gemini does not know the model (or the session) the laptop asked for.',
  'gemini-unavailable': 'Gemini is busy or out of quota right now; try again in a minute.',
  'gemini-unreachable': 'The laptop cannot reach Gemini. Check its internet connection.',
  'gemini-closed': 'Gemini ended the call and it could not be resumed.',
  'busy': 'The call is not keeping up; try again in a moment.',
  'unavailable': 'This laptop does not host voice calls. Start it with voxa --self-hosted and a GEMINI_API_KEY.',
  'no-call': 'No call is running on the laptop.',
  'at-capacity': 'As many calls as allowed are running; try again later.',
  'too-many-calls': 'This network runs or just started as many relay calls as its operator allows; try again in a minute.',
  'budget-spent': 'The relay\'s voice minutes for today are spent; they come back at midnight UTC.',
  'mic-denied': 'The microphone is blocked. Allow it for this page in the browser\'s site settings.',
  'no-mic': 'No microphone was found.',
  'no-audio': 'This browser cannot run a voice call here (it needs https and Web Audio).',
  'offline': 'The call ended: the laptop went offline.',
  'call-socket': 'The relay\'s socket for this call did not open, or closed; try the call again.',
  'no-voice-laptop': 'There is no voice on this laptop: it does not host calls itself. '
    + 'Start it with voxa --self-hosted and a GEMINI_API_KEY.',
  'no-voice-relay': 'There is no voice on this relay, and this laptop does not host calls itself. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY, or pair it through a relay that hosts voice.',
  'proxy-token': 'This relay hosts voice only for apps that send it a token, which a browser cannot do. '
    + 'Start the laptop with voxa --self-hosted and a GEMINI_API_KEY to call from here.',
};

// The same codes when the relay hosts the call (at `/live`): the key and the limits are its operator's.
const RELAY_CALL_ERRORS = {
  ...CALL_ERRORS,
  'bad-key': 'The relay\'s Gemini API key was refused. Tell the relay\'s operator.',
  'gemini-not-found': 'Gemini does not know the model (or the session) the relay asked for.',
  'gemini-unreachable': 'The relay cannot reach Gemini right now; try again in a minute.',
  'unavailable': 'The relay cannot start a call while the laptop is not connected to it.',
  'no-call': 'No call is running on the relay.',
  'at-capacity': 'The relay is running as many calls as its operator allows; try again later.',
};

/**
 * Where a call runs, as the call panel says it when the call starts: a call the relay hosts is
 * heard by the relay (it is not sealed).
 * @type {Record<'laptop' | 'relay', string>}
 */
export const CALL_HOSTS = { laptop: 'on the laptop', relay: 'the relay runs the model and hears this call' };

/** The refusals that say the relay's hosted voice cannot serve this laptop at all. */
export const UNHOSTED = new Set(['proxy-token', 'no-voice-relay']);

/**
 * A call_error (or a page-side failure) as a sentence with its code; `host` is who runs the call.
 * @param {Failure} error
 * @param {string} [host]
 */
export const callSentence = (error, host = 'laptop') =>
  sentence(error, host === 'relay' ? RELAY_CALL_ERRORS : CALL_ERRORS);

/**
 * "1:05" for 65 s; "1:02:03" past an hour.
 * @param {number} seconds
 */
export function clockText(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const mm = String(Math.floor((s % 3600) / 60));
  const ss = String(s % 60).padStart(2, '0');
  return s >= 3600 ? `${Math.floor(s / 3600)}:${mm.padStart(2, '0')}:${ss}` : `${mm}:${ss}`;
}
