// @ts-check
// Approvals: a card for every action waiting for the user (docs/PROTOCOL.md, "Approvals") — what
// it is in one line, the full command or diff, the time left, and Allow / Allow for session /
// Deny; a badge and the page title say how many wait. The page follows the laptop once online,
// so the laptop sends every open approval (again after a reconnect) and every decision, whoever
// made it. The badge opens the approvals view (`#/approvals`, route.js): what waits, and the
// grants "Allow for session" made, each with Revoke (the `grants` and `revoke` frames).

import { answer, approvalCard, nameMachines, sessionName, settle, showTimeLeft, textOf } from '../approval-card.js';
import { el, part } from '../dom.js';
import { onSession } from '../session/events.js';
import { machineName } from '../store.js';

/**
 * @typedef {import('../app.js').Context} Context
 * @typedef {import('../session.js').Session} Session
 * @typedef {import('../protocol.js').AgentFrame} AgentFrame
 * @typedef {import('../approval-card.js').Card} Card
 */

/** How long a decided card stays, saying how it ended, before it goes. */
const RESOLVED_LINGER_MS = 2500;

export class Approvals {
  /**
   * @param {{panel: HTMLElement, badge: HTMLElement}} roots `#approvals` and `#approvals-badge`
   * @param {Context} context
   */
  constructor({ panel, badge }, { store }) {
    this.store = store;
    this.panel = panel;
    this.badge = badge;
    this.none = part(panel, 'approvals-none', HTMLElement);
    this.closer = part(panel, 'approvals-close', HTMLButtonElement);
    this.grantsView = part(panel, 'grants', HTMLElement);
    this.grantList = part(panel, 'grant-list', HTMLUListElement);
    /** @type {Record<string, any>[]} */
    this.grants = [];
    /**
     * Batches ("3 similar": one session, one tool) the user chose to review card by card, with how
     * many they held then: one that grows past it is a batch again.
     * @type {Map<string, number>}
     */
    this.reviewing = new Map();
    /** @type {Map<string, HTMLLIElement>} the batch cards shown, by session and tool */
    this.batches = new Map();
    this.opened = false;
    badge.addEventListener('click', () => store.set({ approvalsOpen: true }));
    this.closer.addEventListener('click', () => store.set({ approvalsOpen: false }));
    this.list = part(panel, 'approval-list', HTMLOListElement);
    this.announce = part(panel, 'approvals-news', HTMLElement);
    /** @type {Map<string, Card>} */
    this.cards = new Map();
    /** @type {Session | null} */
    this.session = null;
    this.online = false;
    this.view = 'starting';
    this.title = document.title;
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.ticker = undefined;
    onSession(store, { approval: (frame) => this.frame(frame) }, (session) => {
      this.session = session;
      this.grants = [];
      this.clear();
    });
    // Each new connection follows again (the agent view sends the `follow`, agent/panel.js): the
    // laptop then sends every approval still open.
    store.watch(['online'], ({ online }) => {
      this.online = online;
      if (online) this.askGrants();
      this.refresh();
    });
    store.watch(['approvalsOpen'], ({ approvalsOpen }) => {
      this.opened = approvalsOpen;
      if (approvalsOpen) {
        this.askGrants();
        this.panel.scrollIntoView({ block: 'start' });
      }
      this.refresh();
    });
    // A card from another machine names it.
    store.watch(['environments'], ({ environments }) => nameMachines(environments || []));
    /** The coding-agent session the agent view shows: its approvals are answered there. */
    this.shownSession = '';
    store.watch(['view', 'tab', 'agentSession'], ({ view, tab, agentSession }) => {
      this.view = view;
      this.shownSession = tab === 'agent' ? agentSession : '';
      this.refresh();
    });
  }

  /** @param {AgentFrame} frame */
  frame(frame) {
    if (frame.type === 'grants') {
      this.grants = Array.isArray(frame.grants) ? frame.grants.filter((g) => g && typeof g.grant === 'string') : [];
      this.renderGrants();
      return;
    }
    if (typeof frame.approval !== 'string') return;
    // An "Allow for session" made a grant: the list says so.
    if (frame.type === 'approval_resolved' && typeof frame.grant === 'string' && frame.by !== 'grant') this.askGrants();
    if (frame.type === 'approval') this.open(frame);
    else if (frame.type === 'approval_resolved') this.resolved(frame);
  }

  /** @param {AgentFrame} frame */
  open(frame) {
    const id = frame.approval;
    const known = this.cards.get(id);
    if (known) {
      known.frame = frame;
      return;
    }
    const card = this.card(frame);
    this.cards.set(id, card);
    this.list.append(card.node);
    const env = typeof frame.env === 'string' ? frame.env : '';
    const on = env ? ` on ${machineName(this.store.state.environments || [], env)}` : '';
    this.announce.textContent = `Approval needed${on}: ${textOf(frame.summary)}`;
    this.tick();
    this.refresh();
  }

  /** @param {AgentFrame} frame */
  resolved(frame) {
    const card = this.cards.get(frame.approval);
    if (!card) return;
    this.cards.delete(frame.approval);
    this.announce.textContent = `${textOf(card.frame.summary)}: ${settle(card, frame)}`;
    setTimeout(() => {
      card.node.remove();
      // No heading stays over an empty list.
      this.refresh();
    }, RESOLVED_LINGER_MS);
    this.refresh();
  }

  /** @param {AgentFrame} frame */
  card(frame) {
    return approvalCard(frame, (card, decision) => {
      if (this.session) answer(this.session, card, decision);
    });
  }

  /** Updates every card's time left, once a second while any waits. */
  tick() {
    const now = Date.now();
    for (const card of this.cards.values()) showTimeLeft(card, now);
    if (this.cards.size > 0 && this.ticker === undefined) this.ticker = setInterval(() => this.tick(), 1000);
    if (this.cards.size === 0 && this.ticker !== undefined) {
      clearInterval(this.ticker);
      this.ticker = undefined;
    }
  }

  /** Forgets the previous laptop's cards. */
  clear() {
    this.cards.clear();
    this.batches.clear();
    this.reviewing.clear();
    this.list.replaceChildren();
    this.announce.textContent = '';
    this.tick();
    this.refresh();
  }

  /** Asks the laptop for its grants (answered by a `grants` frame). */
  askGrants() {
    if (this.session && this.online) this.session.sendJson({ type: 'grants' });
  }

  /** The grants, each with what it lets through and Revoke. */
  renderGrants() {
    const rows = this.grants.map((grant) => {
      const revoke = el('button', {
        type: 'button', class: 'secondary', 'aria-label': `Revoke: ${textOf(grant.tool)} ${textOf(grant.allows)}`,
        onclick: () => {
          if (this.session && this.session.sendJson({ type: 'revoke', grant: grant.grant })) revoke.disabled = true;
        },
      }, 'Revoke');
      return el('li', { 'data-grant': textOf(grant.grant) },
        el('span', { class: 'grant-what' },
          el('strong', {}, textOf(grant.tool)), ` · ${sessionName(textOf(grant.session))}: `,
          textOf(grant.allows)),
        revoke);
    });
    this.grantList.replaceChildren(...rows);
    this.refresh();
  }

  /**
   * Open approvals of one session and tool, two or more: one card ("3 similar") with Allow all,
   * Review each and Deny all, in place of theirs (unless the user chose to review them).
   */
  batch() {
    /** @type {Map<string, Card[]>} */
    const groups = new Map();
    for (const card of this.cards.values()) {
      const from = card.frame.source;
      if (!from || typeof from.session !== 'string' || Array.isArray(card.frame.questions)) continue;
      const key = `${from.session}\n${textOf(card.frame.tool)}`;
      groups.set(key, [...(groups.get(key) || []), card]);
    }
    for (const key of [...this.reviewing.keys()]) if (!groups.has(key)) this.reviewing.delete(key);
    const reviewed = (/** @type {string} */ key) => (groups.get(key) || []).length <= (this.reviewing.get(key) || 0);
    for (const [key, node] of this.batches) {
      if ((groups.get(key) || []).length < 2 || reviewed(key)) {
        node.remove();
        this.batches.delete(key);
      }
    }
    /** @type {Set<HTMLElement>} */
    const batched = new Set();
    for (const [key, cards] of groups) {
      if (cards.length < 2 || reviewed(key)) continue;
      for (const card of cards) batched.add(card.node);
      const [session, tool] = key.split('\n');
      const every = (/** @type {string} */ decision) => {
        for (const card of cards) if (this.session && !card.node.dataset.state) answer(this.session, card, decision);
      };
      const node = el('li', { class: 'approval-card batch', 'data-session': session, 'data-risk': textOf(cards[0].frame.risk) || 'exec' },
        el('div', { class: 'approval-head' }, el('span', { class: 'risk' }, `${cards.length} similar`)),
        el('p', { class: 'approval-summary' }, `${tool} · ${sessionName(session)}`),
        el('ul', { class: 'batch-list' }, ...cards.map((card) => el('li', {}, textOf(card.frame.summary)))),
        el('div', { class: 'row approval-actions' },
          el('button', { type: 'button', class: 'allow', disabled: !this.online || undefined, onclick: () => every('allow') }, 'Allow all'),
          el('button', { type: 'button', class: 'secondary', onclick: () => { this.reviewing.set(key, cards.length); this.refresh(); } }, 'Review each'),
          el('button', { type: 'button', class: 'danger', disabled: !this.online || undefined, onclick: () => every('deny') }, 'Deny all')));
      const old = this.batches.get(key);
      if (old) old.replaceWith(node);
      else this.list.prepend(node);
      this.batches.set(key, node);
    }
    return batched;
  }

  refresh() {
    const waiting = this.cards.size;
    const batched = this.batch();
    let shown = 0;
    for (const node of this.list.children) {
      if (node.classList.contains('batch')) {
        // The open session's conversation shows its own cards.
        const here = !this.opened && Boolean(this.shownSession) && /** @type {HTMLElement} */ (node).dataset.session === this.shownSession;
        /** @type {HTMLElement} */ (node).hidden = here;
        if (!here) shown += 1;
        continue;
      }
      const card = [...this.cards.values()].find((c) => c.node === node);
      const from = card && card.frame.source;
      const inline = !this.opened && Boolean(this.shownSession) && Boolean(from) && from.session === this.shownSession;
      const hidden = inline || batched.has(/** @type {HTMLElement} */ (node));
      /** @type {HTMLElement} */ (node).hidden = hidden;
      if (!hidden) shown += 1;
    }
    const workspace = this.view === 'workspace';
    this.panel.hidden = !workspace || (shown === 0 && !this.opened);
    this.none.hidden = !this.opened || shown > 0;
    this.closer.hidden = !this.opened;
    this.grantsView.hidden = !this.opened || this.grants.length === 0;
    this.badge.hidden = waiting === 0;
    this.badge.textContent = waiting === 1 ? '1 approval waiting' : `${waiting} approvals waiting`;
    document.title = waiting > 0 ? `(${waiting}) Approval waiting — ${this.title}` : this.title;
    for (const card of this.cards.values()) {
      if (card.status.textContent !== 'Sending…') for (const button of card.buttons) button.disabled = !this.online;
    }
  }
}
