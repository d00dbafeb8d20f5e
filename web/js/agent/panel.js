// @ts-check
// The agent view: the laptop's coding-agent sessions (docs/PROTOCOL.md, "Coding-agent sessions")
// — a list (title, agent, state, last activity, approvals waiting) and, for the one opened, its
// conversation (conversation.js) with a follow-up box, Interrupt and Stop. A prompt starts a new
// session. The page follows the laptop once online, naming the last seq it holds of each
// session, so after a reconnect it gets exactly what happened meanwhile; a reloaded page holds
// nothing and gets every session's events from the start, each once. The laptop's follow covers
// its environments too: their sessions are listed beside its own, each marked with its machine,
// and shown unreachable (never ended) while the laptop cannot reach that machine.

import { el, part, refusalIn, show } from '../dom.js';
import { answer, nameSessions } from '../approval-card.js';
import { onSession } from '../session/events.js';
import { showWithTab } from '../tabs.js';
import { Away } from './away.js';
import { Conversation } from './conversation.js';
import { Where } from './where.js';

/**
 * @typedef {import('../app.js').Context} Context
 * @typedef {import('../session.js').Session} Session
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {{session: string, agent?: string, title?: string, state?: string, cwd?: string,
 *   started_at?: number, last_event_at?: number, turns?: number, cost_usd?: number, pending?: number}} Listed
 */

/** A session's state, in words. */
const STATES = /** @type {Record<string, string>} */ ({
  starting: 'starting', working: 'working', waiting: 'waiting for you', idle: 'idle', ended: 'ended', failed: 'failed',
});
/** How long after an event of a session the page does not know yet it asks for the list again. */
const LIST_AGAIN_MS = 300;
/** An environment's state, in words, where it replaces its sessions' own. */
const REACH = /** @type {Record<string, string>} */ ({ unreachable: 'unreachable', revoked: 'pairing revoked' });

export class Coder {
  /**
   * @param {HTMLElement} root `#panel-agent`
   * @param {Context} context
   */
  constructor(root, { store, app }) {
    this.store = store;
    this.app = app;
    /** @type {Session | null} */
    this.session = null;
    this.online = false;
    /** @type {Map<string, Conversation>} */
    this.convos = new Map();
    /** @type {Map<string, Listed>} */
    this.listed = new Map();
    /** @type {Map<string, string>} the environment (envKey) of each session that is not the laptop's */
    this.envOf = new Map();
    /** @type {Map<string, string>} each environment's state, as the laptop's follow says */
    this.reach = new Map();
    this.shown = '';
    this.starting = false;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.listTimer = undefined;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.ticker = undefined;

    this.listView = part(root, 'agent-list-view', HTMLElement);
    this.sessionView = part(root, 'agent-session-view', HTMLElement);
    this.prompt = part(root, 'prompt', HTMLTextAreaElement);
    this.ask = part(root, 'ask', HTMLButtonElement);
    this.error = part(root, 'coder-error', HTMLElement);
    this.list = part(root, 'agent-sessions', HTMLUListElement);
    this.title = part(root, 'agent-title', HTMLElement);
    this.stateChip = part(root, 'agent-state', HTMLElement);
    this.holder = part(root, 'agent-conversation', HTMLElement);
    this.followUp = part(root, 'follow-up', HTMLTextAreaElement);
    this.send = part(root, 'follow-up-send', HTMLButtonElement);
    this.interrupt = part(root, 'interrupt', HTMLButtonElement);
    this.stop = part(root, 'stop', HTMLButtonElement);
    this.sessionError = part(root, 'agent-error', HTMLElement);

    part(root, 'coder-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      this.start();
    });
    part(root, 'follow-up-form', HTMLFormElement).addEventListener('submit', (event) => {
      event.preventDefault();
      this.sendFollowUp();
    });
    part(root, 'agent-back', HTMLButtonElement).addEventListener('click', () => store.set({ agentSession: '' }));
    part(root, 'agent-grants', HTMLButtonElement).addEventListener('click', () => store.set({ approvalsOpen: true }));
    this.where = new Where(root, app);
    this.away = new Away(root, this);
    this.interrupt.addEventListener('click', () => this.act('agent_interrupt'));
    this.stop.addEventListener('click', () => this.act('agent_stop'));

    showWithTab(root, store, 'agent');
    const handlers = {
      agent_event: (/** @type {any} */ frame) => this.event(frame),
      approval: (/** @type {AgentFrame} */ frame) => this.approval(frame),
      environment: (/** @type {any} */ frame) => this.environment(frame),
    };
    onSession(store, handlers, (session, previous) => {
      this.session = session;
      // Another laptop: its sessions are others. (The first one keeps a session a tapped
      // notification asked for.)
      this.reset(previous !== null);
    });
    store.watch(['online'], ({ online }) => {
      this.online = online;
      if (online) this.follow();
      this.refresh();
    });
    store.watch(['agentSession'], ({ agentSession }) => this.showSession(agentSession));
    // The low-data switch (Status) changes what the laptop sends from now on.
    store.watch(['lowData'], () => { if (this.online) this.follow(); });
  }

  /** Follows every session from the last event the page holds of each (all of them when it holds none). */
  follow() {
    if (!this.session) return;
    /** @type {Record<string, number>} */
    const after = {};
    for (const [id, convo] of this.convos) {
      if (convo.seq <= 0) continue;
      const env = this.envOf.get(id);
      if (!env) after[id] = convo.seq;
      else after[env] = { ...(/** @type {any} */ (after[env]) || {}), [id]: convo.seq };
    }
    this.session.sendJson({
      type: 'follow',
      ...(Object.keys(after).length > 0 ? { after } : {}),
      ...(this.store.state.lowData ? { low_data: true } : {}),
    });
    this.loadList();
  }

  /** Asks the laptop for its sessions (titles, agents, costs). */
  async loadList() {
    clearTimeout(this.listTimer);
    this.listTimer = undefined;
    const session = this.session;
    const machines = ['', ...(this.store.state.environments || []).map((e) => e.envKey)];
    const lists = await Promise.all(machines.map((env) => this.app.attempt('agent_sessions', {}, () => {}, { env }).done));
    if (session !== this.session) return;
    lists.forEach((outcome, index) => {
      const sessions = outcome && Array.isArray(outcome.result.sessions) ? outcome.result.sessions : [];
      for (const listed of sessions) {
        if (!listed || typeof listed.session !== 'string') continue;
        this.listed.set(listed.session, listed);
        if (machines[index]) this.envOf.set(listed.session, machines[index]);
      }
    });
    // The new-session sheet offers this laptop's agents; cards name their session by its title.
    const own = lists[0];
    if (own) this.where.offer(own.result.agents);
    nameSessions([...this.listed.values()].map((l) => [l.session, typeof l.title === 'string' ? l.title : '']));
    this.renderList();
    if (this.shown) this.showSession(this.shown);
  }

  /** @param {Record<string, any>} frame an `agent_event` */
  event(frame) {
    if (typeof frame.session !== 'string' || typeof frame.seq !== 'number') return;
    if (typeof frame.env === 'string' && frame.env) this.envOf.set(frame.session, frame.env);
    const convo = this.conversation(frame.session);
    const shown = frame.session === this.shown;
    const follow = shown && nearBottom();
    if (!convo.add(/** @type {any} */ (frame))) return;
    this.away.add(/** @type {any} */ (frame));
    const kind = frame.event && frame.event.kind;
    if (!this.listed.has(frame.session) && this.listTimer === undefined) {
      this.listTimer = setTimeout(() => this.loadList(), LIST_AGAIN_MS);
    }
    if (kind === 'state' || kind === 'turn_end' || kind === 'approval' || kind === 'approval_resolved') this.renderList();
    if (shown) {
      this.showState();
      if (follow) scrollToEnd();
    }
  }

  /** @param {AgentFrame} frame an `approval` or `approval_resolved` the laptop sent */
  approval(frame) {
    if (typeof frame.approval !== 'string') return;
    if (frame.type === 'approval_resolved') {
      for (const convo of this.convos.values()) convo.resolved(frame);
    } else {
      const from = frame.source && typeof frame.source.session === 'string' ? frame.source.session : '';
      if (!from) return;
      if (typeof frame.env === 'string' && frame.env) this.envOf.set(from, frame.env);
      this.conversation(from).open(frame);
      this.conversation(from).enable(this.online);
    }
    this.tick();
    this.renderList();
  }

  /** @param {Record<string, any>} frame an `environment`: whether the laptop reaches one of its machines */
  environment(frame) {
    if (typeof frame.env !== 'string' || typeof frame.state !== 'string') return;
    this.reach.set(frame.env, frame.state);
    this.renderList();
    if (this.shown) this.showState();
  }

  /**
   * The machine a session runs on, as the page names it ('' for this laptop).
   * @param {string} id
   */
  machineOf(id) {
    const env = this.envOf.get(id);
    if (!env) return '';
    const known = (this.store.state.environments || []).find((e) => e.envKey === env);
    return known ? known.name : env.slice(0, 12);
  }

  /** @param {string} id */
  conversation(id) {
    let convo = this.convos.get(id);
    if (!convo) {
      convo = new Conversation(id, (card, decision) => {
        if (this.session) answer(this.session, card, decision);
      });
      this.convos.set(id, convo);
    }
    return convo;
  }

  /** Starts a session with the prompt, and opens it. */
  async start() {
    const prompt = this.prompt.value.trim();
    if (!prompt || this.starting) return;
    this.starting = true;
    this.refresh();
    const outcome = await this.app.attempt('agent_start', { prompt, ...this.where.args() }, refusalIn(this.error)).done;
    this.starting = false;
    this.refresh();
    if (!outcome || typeof outcome.result.session !== 'string') return;
    this.prompt.value = '';
    this.store.set({ agentSession: outcome.result.session });
    this.loadList();
  }

  sendFollowUp() {
    const words = this.followUp.value.trim();
    if (!words || !this.shown) return;
    const session = this.shown;
    this.act('agent_send', { text: words }).then((done) => {
      if (done && this.shown === session) this.followUp.value = '';
    });
  }

  /**
   * Runs one session tool on the open session; true when it succeeded.
   * @param {string} tool
   * @param {Record<string, unknown>} [args]
   */
  async act(tool, args = {}) {
    if (!this.shown) return false;
    const env = this.envOf.get(this.shown) || '';
    const outcome = await this.app.attempt(tool, { session: this.shown, ...args }, refusalIn(this.sessionError), { env }).done;
    return outcome !== null;
  }

  /** @param {string} id the session to show ('' for the list) */
  showSession(id) {
    this.shown = id;
    this.away.close();
    this.listView.hidden = Boolean(id);
    this.sessionView.hidden = !id;
    show(this.sessionError);
    if (!id) {
      this.holder.replaceChildren();
      this.renderList();
      return;
    }
    const convo = this.conversation(id);
    if (this.holder.firstElementChild !== convo.root) {
      this.holder.replaceChildren(convo.root);
      convo.enable(this.online);
      scrollToEnd();
    }
    const listed = this.listed.get(id);
    this.title.textContent = (listed && listed.title) || id;
    this.showState();
    this.refresh();
  }

  showState() {
    const convo = this.convos.get(this.shown);
    const listed = this.listed.get(this.shown);
    const away = REACH[this.reach.get(this.envOf.get(this.shown) || '') || ''];
    const state = away ? 'unreachable' : (convo && convo.state) || (listed && listed.state) || '';
    this.stateChip.textContent = away || STATES[state] || state;
    this.stateChip.dataset.state = state;
    this.refresh();
  }

  renderList() {
    const ids = new Set([...this.listed.keys(), ...this.convos.keys()]);
    const rows = [...ids].map((id) => this.row(id)).sort((a, b) => b.at - a.at);
    this.list.replaceChildren(...rows.map((row) => row.node));
    if (rows.length === 0) this.list.append(el('li', { class: 'muted empty' }, 'No sessions yet: ask something above.'));
    this.away.render();
    this.tick();
  }

  /** @param {string} id */
  row(id) {
    const listed = this.listed.get(id) || { session: id };
    const convo = this.convos.get(id);
    const away = REACH[this.reach.get(this.envOf.get(id) || '') || ''];
    const state = away ? 'unreachable' : (convo && convo.state) || listed.state || '';
    const at = Math.max(Number(listed.last_event_at) || 0, convo ? convo.lastAt : 0);
    const pending = convo && convo.approvals.size > 0 ? convo.pending : Number(listed.pending) || 0;
    const title = listed.title || id;
    const machine = this.machineOf(id);
    const meta = [machine ? `on ${machine}` : '', listed.agent || 'agent', away || STATES[state] || state, at ? ago(at) : '']
      .filter(Boolean).join(' · ');
    const node = el('li', { class: 'session-row', 'data-state': state, 'data-machine': machine || 'this laptop' },
      el('button', { type: 'button', class: 'session-open', 'aria-label': title, onclick: () => this.store.set({ agentSession: id }) },
        el('span', { class: 'session-title' }, title),
        el('span', { class: 'session-meta muted' }, meta),
        pending > 0 ? el('span', { class: 'badge' }, pending === 1 ? '1 approval waiting' : `${pending} approvals waiting`) : null));
    return { node, at };
  }

  /** Updates the open approvals' time left, once a second while any waits. */
  tick() {
    const convo = this.convos.get(this.shown);
    if (convo) convo.tick(Date.now());
    const waiting = [...this.convos.values()].some((c) => c.pending > 0);
    if (waiting && this.ticker === undefined) this.ticker = setInterval(() => this.tick(), 1000);
    if (!waiting && this.ticker !== undefined) {
      clearInterval(this.ticker);
      this.ticker = undefined;
    }
  }

  /**
   * Forgets the previous laptop's sessions.
   * @param {boolean} close also go back to the list
   */
  reset(close) {
    this.convos.clear();
    this.listed.clear();
    this.envOf.clear();
    this.reach.clear();
    this.away.load();
    this.holder.replaceChildren();
    show(this.error);
    if (close) this.store.set({ agentSession: '' });
    this.showSession(this.store.state.agentSession);
  }

  refresh() {
    this.ask.disabled = !this.online || this.starting;
    this.ask.textContent = this.starting ? 'Starting…' : 'Ask';
    const convo = this.convos.get(this.shown);
    const state = convo ? convo.state : '';
    this.send.disabled = !this.online;
    this.interrupt.disabled = !this.online || !['working', 'waiting'].includes(state);
    this.stop.disabled = !this.online || !['starting', 'working', 'waiting', 'idle'].includes(state);
    for (const each of this.convos.values()) each.enable(this.online);
  }
}

/** @param {number} at Unix ms */
function ago(at) {
  const seconds = Math.max(0, Math.round((Date.now() - at) / 1000));
  if (seconds < 60) return 'just now';
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(at).toLocaleDateString();
}

const nearBottom = () => {
  const page = document.scrollingElement || document.documentElement;
  return page.scrollHeight - page.scrollTop - page.clientHeight < 120;
};

const scrollToEnd = () => {
  const page = document.scrollingElement || document.documentElement;
  page.scrollTop = page.scrollHeight;
};
