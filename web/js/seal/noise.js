// @ts-check
// The Noise handshake `Noise_NNpsk0_25519_AESGCM_SHA256` (Noise Protocol Framework, revision 34)
// over WebCrypto: X25519, AES-256-GCM and SHA-256 (HMAC for the key derivation). Both roles, so
// the published test vectors can be reproduced byte for byte; the page is the initiator.
//
//   -> psk, e
//   <- e, ee

/** Bytes in memory of their own (what WebCrypto takes). @typedef {Uint8Array<ArrayBuffer>} Bytes */

export const NOISE_PROTOCOL = 'Noise_NNpsk0_25519_AESGCM_SHA256';
/** Largest Noise message. */
export const MAX_NOISE_MESSAGE = 65535;
/** AES-GCM tag length. */
export const TAG_LEN = 16;
const DH_LEN = 32;
/** PKCS #8 wrapping of a raw X25519 private key (RFC 8410), for fixed test keys only. */
const PKCS8_X25519 = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20];

const EMPTY = new Uint8Array(0);

/** @param {Bytes[]} parts */
export function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** @param {Bytes[]} parts */
export async function sha256(...parts) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', concat(...parts)));
}

/**
 * @param {Bytes} key
 * @param {Bytes[]} parts
 */
async function hmac(key, ...parts) {
  const imported = await crypto.subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return new Uint8Array(await crypto.subtle.sign('HMAC', imported, concat(...parts)));
}

/**
 * The framework's HKDF: two or three 32-byte outputs from the chaining key and input material.
 * @param {Bytes} chainingKey
 * @param {Bytes} input
 * @param {2 | 3} count
 */
async function hkdf(chainingKey, input, count) {
  const temp = await hmac(chainingKey, input);
  const outputs = [await hmac(temp, Uint8Array.of(1))];
  for (let i = 2; i <= count; i += 1) outputs.push(await hmac(temp, outputs[i - 2], Uint8Array.of(i)));
  return outputs;
}

/**
 * AES-GCM's 96-bit nonce: 32 zero bits, then the counter big-endian.
 * @param {number} n
 */
function nonce(n) {
  const iv = new Uint8Array(12);
  const view = new DataView(iv.buffer);
  view.setUint32(4, Math.floor(n / 2 ** 32));
  view.setUint32(8, n >>> 0);
  return iv;
}

/** One direction's key and nonce counter. */
export class CipherState {
  constructor() {
    /** @type {CryptoKey | null} */
    this.key = null;
    this.n = 0;
  }

  /** @param {Bytes} raw 32 bytes */
  async initKey(raw) {
    this.key = await crypto.subtle.importKey('raw', raw, { name: 'AES-GCM' }, false, ['encrypt', 'decrypt']);
    this.n = 0;
  }

  /** The next nonce, taken now: calls made in order use nonces in order whenever they finish. */
  take() {
    if (!this.key) throw new Error('no key yet');
    if (this.n >= Number.MAX_SAFE_INTEGER) throw new Error('nonces used up');
    const n = this.n;
    this.n += 1;
    return { key: this.key, iv: nonce(n) };
  }

  /**
   * Ciphertext and tag of `plaintext` under the next nonce.
   * @param {Bytes} ad
   * @param {Bytes} plaintext
   */
  async encrypt(ad, plaintext) {
    const { key, iv } = this.take();
    const sealed = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: ad, tagLength: 128 }, key, plaintext);
    return new Uint8Array(sealed);
  }

  /**
   * The plaintext of `ciphertext` under the next nonce; rejects when it does not open.
   * @param {Bytes} ad
   * @param {Bytes} ciphertext
   */
  async decrypt(ad, ciphertext) {
    const { key, iv } = this.take();
    const plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv, additionalData: ad, tagLength: 128 }, key, ciphertext);
    return new Uint8Array(plain);
  }
}

/**
 * An X25519 key pair: fresh, or from a fixed private key (test vectors only).
 * @param {Bytes} [fixed]
 * @returns {Promise<{privateKey: CryptoKey, publicKey: Bytes}>}
 */
async function keyPair(fixed) {
  if (fixed) {
    const der = concat(Uint8Array.from(PKCS8_X25519), fixed);
    const privateKey = await crypto.subtle.importKey('pkcs8', der, { name: 'X25519' }, true, ['deriveBits']);
    const jwk = await crypto.subtle.exportKey('jwk', privateKey);
    return { privateKey, publicKey: fromBase64(String(jwk.x), true) };
  }
  const pair = /** @type {CryptoKeyPair} */ (await crypto.subtle.generateKey({ name: 'X25519' }, false, ['deriveBits']));
  return { privateKey: pair.privateKey, publicKey: new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey)) };
}

/**
 * X25519 of our private key and their public key. Rejects for a key of low order (an all-zero
 * result), as WebCrypto does.
 * @param {CryptoKey} privateKey
 * @param {Bytes} theirs
 */
async function dh(privateKey, theirs) {
  const publicKey = await crypto.subtle.importKey('raw', theirs, { name: 'X25519' }, true, []);
  return new Uint8Array(await crypto.subtle.deriveBits({ name: 'X25519', public: publicKey }, privateKey, DH_LEN * 8));
}

/**
 * Standard base64 (or base64url without padding) to bytes; throws on anything else.
 * @param {string} text
 * @param {boolean} [url]
 */
export function fromBase64(text, url = false) {
  const standard = url ? text.replace(/-/g, '+').replace(/_/g, '/') : text;
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(standard) || (!url && standard.length % 4 !== 0)) throw new Error('not base64');
  return Uint8Array.from(atob(standard + '='.repeat((4 - (standard.length % 4)) % 4)), (c) => c.charCodeAt(0));
}

/** @param {Bytes} bytes */
export function toBase64(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

/**
 * One side of an NNpsk0 handshake. Make it with `Handshake.begin`, then the initiator writes
 * message 1 and reads message 2 (the responder the reverse), then `split()`.
 */
export class Handshake {
  /**
   * @param {boolean} initiator
   * @param {Bytes} psk
   * @param {Bytes} h
   * @param {{privateKey: CryptoKey, publicKey: Bytes}} e
   */
  constructor(initiator, psk, h, e) {
    this.initiator = initiator;
    this.psk = psk;
    this.h = h;
    this.ck = h;
    this.e = e;
    this.cipher = new CipherState();
    this.step = 0;
  }

  /**
   * @param {{initiator: boolean, psk: Bytes, prologue: Bytes, ephemeral?: Bytes}} options
   */
  static async begin({ initiator, psk, prologue, ephemeral }) {
    if (psk.length !== 32) throw new Error('the pre-shared key must be 32 bytes');
    // The name is exactly 32 bytes, so it is `h` as it stands (no hashing, no padding).
    const name = new TextEncoder().encode(NOISE_PROTOCOL);
    const handshake = new Handshake(initiator, psk, name, await keyPair(ephemeral));
    await handshake.mixHash(prologue);
    return handshake;
  }

  /** @param {Bytes} data */
  async mixHash(data) {
    this.h = await sha256(this.h, data);
  }

  /** @param {Bytes} input */
  async mixKey(input) {
    const [ck, key] = await hkdf(this.ck, input, 2);
    this.ck = ck;
    await this.cipher.initKey(key);
  }

  /** @param {Bytes} input */
  async mixKeyAndHash(input) {
    const [ck, temp, key] = await hkdf(this.ck, input, 3);
    this.ck = ck;
    await this.mixHash(temp);
    await this.cipher.initKey(key);
  }

  /** The `e` token, written: our ephemeral key goes out and into the keys (psk mode). */
  async writeE() {
    await this.mixHash(this.e.publicKey);
    await this.mixKey(this.e.publicKey);
    return this.e.publicKey;
  }

  /**
   * The `e` token, read.
   * @param {Bytes} message
   */
  async readE(message) {
    if (message.length < DH_LEN + TAG_LEN) throw new Error('a handshake message too short');
    const re = message.slice(0, DH_LEN);
    await this.mixHash(re);
    await this.mixKey(re);
    return re;
  }

  /**
   * Writes the next handshake message carrying `payload`.
   * @param {Bytes} payload
   */
  async writeMessage(payload) {
    const first = this.step === 0;
    if (first !== this.initiator || this.step > 1) throw new Error('not this side\'s turn to write');
    this.step += 1;
    if (first) await this.mixKeyAndHash(this.psk);
    const e = await this.writeE();
    if (!first) await this.mixKey(await dh(this.e.privateKey, /** @type {Bytes} */ (this.re)));
    const sealed = await this.cipher.encrypt(this.h, payload);
    await this.mixHash(sealed);
    const message = concat(e, sealed);
    if (message.length > MAX_NOISE_MESSAGE) throw new Error('a handshake message too large');
    return message;
  }

  /**
   * Reads the peer's handshake message; its payload. Rejects when it does not check out.
   * @param {Bytes} message
   */
  async readMessage(message) {
    const first = this.step === 0;
    if (first === this.initiator || this.step > 1) throw new Error('not this side\'s turn to read');
    if (message.length > MAX_NOISE_MESSAGE) throw new Error('a handshake message too large');
    this.step += 1;
    if (first) await this.mixKeyAndHash(this.psk);
    this.re = await this.readE(message);
    if (!first) await this.mixKey(await dh(this.e.privateKey, this.re));
    const sealed = message.slice(DH_LEN);
    const payload = await this.cipher.decrypt(this.h, sealed);
    await this.mixHash(sealed);
    return payload;
  }

  /**
   * After both messages: the transport keys (what this side sends, what it receives) and the
   * handshake hash.
   */
  async split() {
    if (this.step !== 2) throw new Error('the handshake is not complete');
    const [first, second] = await hkdf(this.ck, EMPTY, 2);
    const send = new CipherState();
    const receive = new CipherState();
    await send.initKey(this.initiator ? first : second);
    await receive.initKey(this.initiator ? second : first);
    return { send, receive, hash: this.h };
  }
}
