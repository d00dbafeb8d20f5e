// @ts-check
// Upload from the phone and download to it, in chunks: each chunk is one call (`upload_file`,
// `read_file` with an offset), so a file of any size within the bounds travels in frames of a
// fixed size, and the progress shown is the bytes the laptop has confirmed.

import { base64Bytes } from '../dom.js';

/** @typedef {import('../app.js').App} App */

/** Bytes per chunk: 192 KiB, 256 KiB of base64. */
export const CHUNK = 192 << 10;
/** Largest file moved either way: what the laptop accepts for an upload (256 MiB). */
export const MAX_TRANSFER = 256 << 20;

/**
 * Base64 of some bytes, in slices (one `String.fromCharCode` call per 32 KiB).
 * @param {Uint8Array} bytes
 */
function toBase64(bytes) {
  let binary = '';
  for (let at = 0; at < bytes.length; at += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  }
  return btoa(binary);
}

/**
 * Runs one call, resolving to its result or rejecting with its failure.
 * @param {App} app
 * @param {string} name
 * @param {Record<string, unknown>} args
 * @returns {Promise<Record<string, any>>}
 */
async function call(app, name, args) {
  return (await app.call(name, args).done).result;
}

/**
 * Sends `file` to `path` in chunks. `onProgress(sent, total)` after each confirmed chunk. Resolves
 * to the last answer; rejects with the failure (a `conflict` when a file of that name exists, and
 * the bytes stay on the laptop for {@link finishUpload}).
 * @param {App} app
 * @param {File | Blob} file
 * @param {string} path
 * @param {(sent: number, total: number) => void} onProgress
 */
export async function upload(app, file, path, onProgress) {
  if (file.size > MAX_TRANSFER) throw { code: 'too-large', message: `uploads are at most ${MAX_TRANSFER >> 20} MiB` };
  let offset = 0;
  for (;;) {
    const bytes = new Uint8Array(await file.slice(offset, offset + CHUNK).arrayBuffer());
    const done = offset + bytes.length >= file.size;
    const result = await call(app, 'upload_file', { path, data: toBase64(bytes), offset, done, version: 'new' });
    offset += bytes.length;
    onProgress(offset, file.size);
    if (done) return result;
  }
}

/**
 * Puts an upload refused `conflict` in place over the file that is there, without sending it again.
 * @param {App} app
 * @param {string} path
 * @param {number} size the bytes already sent
 */
export function finishUpload(app, path, size) {
  return call(app, 'upload_file', { path, data: '', offset: size, done: true });
}

/**
 * Reads `path` (of `size` bytes) in chunks into a Blob. `onProgress(received, total)` per chunk.
 * @param {App} app
 * @param {string} path
 * @param {number} size
 * @param {(received: number, total: number) => void} onProgress
 * @returns {Promise<Blob>}
 */
export async function download(app, path, size, onProgress) {
  if (size > MAX_TRANSFER) throw { code: 'too-large', message: `downloads are at most ${MAX_TRANSFER >> 20} MiB` };
  /** @type {BlobPart[]} */
  const parts = [];
  let offset = 0;
  for (;;) {
    const result = await call(app, 'read_file', { path, offset, max_bytes: CHUNK, encoding: 'base64' });
    const bytes = base64Bytes(String(result.content || ''));
    parts.push(bytes);
    offset += bytes.length;
    const total = Math.max(Number(result.size) || 0, offset);
    onProgress(offset, total);
    if (!result.truncated || bytes.length === 0) return new Blob(parts);
  }
}

/**
 * Hands a Blob to the browser as a download named `name`.
 * @param {Blob} blob
 * @param {string} name
 */
export function save(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
