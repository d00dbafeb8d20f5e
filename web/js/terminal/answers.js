// @ts-check
// What the emulator says by itself. A program asks its terminal questions in its output (where
// the cursor is, which terminal it is, its colours, a mode's state, the window's size) and xterm.js
// answers them through the same `onData` as the keys. The page must tell the two apart: an answer
// to a screen being drawn again (a `term_snapshot`) is never sent, and an answer to live output is
// sent as it is, without the Ctrl or Alt the key bar holds for the next key.
//
// Each question xterm.js answers is watched through its public parser hooks: the hook notes that
// an answer follows and lets the emulator's own handler answer, synchronously, within the same
// parse. Everything `onData` gives before that parse's task ends is the emulator's answer, not a
// key (keys come from events of their own).

/**
 * @typedef {{prefix?: string, intermediates?: string, final: string}} SequenceId
 * @typedef {{registerCsiHandler(id: SequenceId, handler: (params: any) => boolean): unknown,
 *   registerOscHandler(code: number, handler: (data: string) => boolean): unknown,
 *   registerDcsHandler(id: SequenceId, handler: (data: string, params: any) => boolean): unknown}} Parser
 */

/** Control sequences xterm.js answers: device status and attributes, modes, window reports. */
const ASKING_CSI = /** @type {const} */ ([
  { final: 'c' }, // primary device attributes
  { prefix: '>', final: 'c' }, // secondary device attributes
  { prefix: '=', final: 'c' }, // tertiary device attributes
  { final: 'n' }, // device status, cursor position
  { prefix: '?', final: 'n' }, // the same, DEC's
  { intermediates: '$', final: 'p' }, // a mode's state
  { prefix: '?', intermediates: '$', final: 'p' }, // a DEC mode's state
  { final: 't' }, // window reports (size in cells and pixels)
  { prefix: '>', final: 'q' }, // the terminal's name and version
]);

/** Operating system commands xterm.js answers when their data is `?`: palette, colours, cursor. */
const ASKING_OSC = [4, 10, 11, 12];

/**
 * Watches `parser` for questions; returns whether what `onData` gives now is the emulator's answer.
 * @param {Parser} parser
 * @returns {() => boolean}
 */
export function answersOf(parser) {
  let answering = false;
  const asked = () => {
    if (!answering) {
      answering = true;
      queueMicrotask(() => {
        answering = false;
      });
    }
    return false; // the emulator's own handler answers
  };
  for (const id of ASKING_CSI) parser.registerCsiHandler(id, asked);
  for (const code of ASKING_OSC) parser.registerOscHandler(code, asked);
  parser.registerDcsHandler({ intermediates: '$', final: 'q' }, asked); // a setting's value
  return () => answering;
}
