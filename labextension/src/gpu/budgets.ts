/**
 * GPU-hour budgets as the hub says them (the `budgets` of
 * `GET /gpuhub/api/holdings`, docs/architecture.md "GPU-hour budgets"): a
 * compact card per budget in the GPU sidebar, and what a request would cost
 * per hour, for the job dialog.
 *
 * The hub's own sentence (`text`) is shown as given; the state ("warning"
 * from 80 % used, "over" at 100 %) is said in words as well as in colour.
 * All text goes through `textContent`.
 */
import { h } from '../dom';
import { formatTime, localText } from '../time';

export interface IBudgetGrant {
  hours: number;
  reason: string;
  by: string;
  at: string;
}

export interface IBudget {
  scope: 'user' | 'group';
  /** The user's or the group's name. */
  name: string;
  /** A group's hours shared by its members (else each member has their own). */
  shared: boolean;
  hours: number;
  extra_hours: number;
  used_hours: number;
  left_hours: number;
  period: 'day' | 'week' | 'month';
  resets_at: string;
  /** "Monday 00:00 Europe/Berlin". */
  resets: string;
  state: 'ok' | 'warning' | 'over';
  at_limit: 'refuse' | 'idle_only';
  grants?: IBudgetGrant[];
  /** "14.2 of 20 GPU-hours used this week; resets Monday 00:00 Europe/Berlin". */
  text: string;
}

/**
 * An amount of GPU-hours as the hub writes it everywhere
 * (gpuhub.core.budgets.hours_words): 1 decimal from 10, 2 from 0.1, else 2
 * significant digits; "20", "5.8", "0.25", "0.0083".
 */
export function hours(n: number): string {
  if (!(n > 0)) {
    return '0';
  }
  const text =
    n >= 10 ? n.toFixed(1) : n >= 0.1 ? n.toFixed(2) : n.toPrecision(2);
  return text.includes('.') ? text.replace(/0+$/, '').replace(/\.$/, '') : text;
}

/**
 * How long `value` GPU-hours last, as the hub says it
 * (gpuhub.core.budgets.lasts_words): "about 36 seconds", "about 2.9 hours".
 */
export function lasts(value: number): string {
  const seconds = Math.max(0, value * 3600);
  let n: number;
  let unit: string;
  if (seconds < 90) {
    n = Math.max(1, Math.floor(seconds + 0.5));
    unit = 'second';
  } else if (seconds < 3600) {
    n = Math.floor(seconds / 60 + 0.5);
    unit = 'minute';
  } else if (seconds < 48 * 3600) {
    n = seconds / 3600;
    n = n < 10 ? Math.floor(n * 10 + 0.5) / 10 : Math.floor(n + 0.5);
    unit = 'hour';
  } else {
    n = Math.floor(seconds / 86400 + 0.5);
    unit = 'day';
  }
  return `about ${n} ${unit}${n === 1 ? '' : 's'}`;
}

const PERIOD: Record<IBudget['period'], string> = {
  day: 'today',
  week: 'this week',
  month: 'this month'
};

function period(budget: IBudget): string {
  return PERIOD[budget.period] ?? `this ${budget.period}`;
}

/** Whose budget it is: "Your GPU-hours", "Group “staff”, shared", "Your GPU-hours in “staff”". */
export function budgetTitle(budget: IBudget): string {
  if (budget.scope === 'user') {
    return 'Your GPU-hours';
  }
  return budget.shared
    ? `Group “${budget.name}”, shared`
    : `Your GPU-hours in “${budget.name}”`;
}

/** The state in words, so that colour is never the only sign: '' when all is well. */
export function stateText(budget: IBudget): string {
  if (budget.state === 'over') {
    return 'Used up';
  }
  return budget.state === 'warning' ? 'Nearly used up' : '';
}

/** What happens past the limit, said on an "over" card. */
export function limitText(budget: IBudget): string {
  return budget.at_limit === 'idle_only'
    ? 'New GPU work starts only on GPUs that would otherwise stay idle, and is reclaimed first when someone within budget waits.'
    : `New GPU servers and jobs are refused until it resets (${resetTime(budget)}).`;
}

/**
 * What a request of `rate` GPUs would cost, in the budgets' words:
 * "Uses 2 GPU-hours per hour; 5.8 GPU-hours left this week (about 2.9 hours at that rate)."
 * `rate` null: it uses GPUs already counted (a job on this server's GPUs).
 */
export function costText(rate: number | null, budgets: IBudget[]): string {
  if (!budgets.length) {
    return '';
  }
  const lefts = budgets.map(b => {
    const whose =
      budgets.length === 1
        ? ''
        : b.scope === 'user'
          ? ' for you'
          : b.shared
            ? ` for group “${b.name}”`
            : ` for you in “${b.name}”`;
    if (b.state === 'over') {
      const limit = limitText(b).replace(/\.$/, '');
      return `none left ${period(b)}${whose}: ${limit.charAt(0).toLowerCase()}${limit.slice(1)}`;
    }
    const last =
      rate !== null && rate > 0
        ? ` (${lasts(b.left_hours / rate)} at that rate)`
        : '';
    return `${hours(b.left_hours)} GPU-hours left ${period(b)}${whose}${last}`;
  });
  const left = lefts.join('; ');
  if (rate === null) {
    return `A job here runs on this server's GPUs, which count already: ${left}.`;
  }
  if (rate === 0) {
    return `A CPU-only job uses no GPU-hours; ${left}.`;
  }
  return `Uses ${hours(rate)} GPU-hour${rate === 1 ? '' : 's'} per hour; ${left}.`;
}

/**
 * The hub's sentence with its reset written as every time in the lab is
 * (formatTime, the reader's zone), not in the budget's zone beside the
 * sidebar's other times: "…; resets 30 Nov 2026, 00:00".
 */
export function cardText(budget: IBudget): string {
  return localText({
    text: budget.text,
    when: budget.resets_at,
    at: budget.resets
  });
}

/** When the budget resets, in the reader's zone (the hub's words if unreadable). */
export function resetTime(budget: IBudget): string {
  return formatTime(budget.resets_at) || budget.resets;
}

/** One budget's card: whose, the bar, the hub's sentence, the state and its grants. */
class BudgetCard {
  constructor() {
    this.node = h('li', { className: 'gpuhub-Budget' });
    const head = h('div', { className: 'gpuhub-Budget-head' });
    this._title = h('span', { className: 'gpuhub-Budget-title' });
    this._state = h('span', { className: 'gpuhub-Budget-state' });
    head.append(this._title, this._state);
    this._bar = h('div', { className: 'gpuhub-Budget-bar', role: 'meter' });
    this._fill = h('div', { className: 'gpuhub-Budget-fill' });
    this._bar.append(this._fill);
    this._text = h('p', { className: 'gpuhub-Budget-text' });
    this._limit = h('p', { className: 'gpuhub-Budget-limit' });
    this._grants = h('ul', { className: 'gpuhub-Budget-grants' });
    this.node.append(head, this._bar, this._text, this._limit, this._grants);
  }

  readonly node: HTMLElement;

  update(budget: IBudget): void {
    const total = budget.hours + (budget.extra_hours ?? 0);
    const state = stateText(budget);
    const title = budgetTitle(budget);
    this.node.classList.toggle(
      'gpuhub-mod-warning',
      budget.state === 'warning'
    );
    this.node.classList.toggle('gpuhub-mod-over', budget.state === 'over');
    this._title.textContent = title;
    this._state.textContent = state;
    this._state.hidden = !state;
    const used = Math.max(0, Math.min(budget.used_hours, total));
    this._fill.style.width = `${total > 0 ? (100 * used) / total : 100}%`;
    this._bar.setAttribute(
      'aria-label',
      state ? `${title}, ${state.toLowerCase()}` : title
    );
    this._bar.setAttribute('aria-valuemin', '0');
    this._bar.setAttribute('aria-valuemax', String(total));
    this._bar.setAttribute('aria-valuenow', String(used));
    const text = cardText(budget);
    this._bar.setAttribute('aria-valuetext', text);
    this._text.textContent = text;
    this._limit.textContent = budget.state === 'over' ? limitText(budget) : '';
    this._limit.hidden = budget.state !== 'over';
    const grants = (budget.grants ?? []).map(g =>
      h(
        'li',
        { className: 'gpuhub-Budget-grant' },
        `${hours(g.hours)} extra GPU-hours${g.reason ? `: ${g.reason}` : ''}${g.by ? ` (${g.by})` : ''}`
      )
    );
    const signature = JSON.stringify(budget.grants ?? []);
    if (signature !== this._grantsSignature) {
      this._grantsSignature = signature;
      this._grants.replaceChildren(...grants);
    }
    this._grants.hidden = grants.length === 0;
  }

  private _bar: HTMLElement;
  private _fill: HTMLElement;
  private _grants: HTMLElement;
  private _grantsSignature = '';
  private _limit: HTMLElement;
  private _state: HTMLElement;
  private _text: HTMLElement;
  private _title: HTMLElement;
}

/**
 * The budgets' cards, keyed by scope and name and updated in place; the list
 * is hidden when no budget applies.
 */
export class BudgetList {
  constructor() {
    this.node = h('ul', {
      className: 'gpuhub-Budgets',
      'aria-label': 'GPU-hour budgets'
    });
    this.node.hidden = true;
  }

  readonly node: HTMLElement;

  update(budgets: IBudget[]): void {
    const keys = new Set(budgets.map(b => `${b.scope}:${b.name}`));
    for (const [key, card] of this._cards) {
      if (!keys.has(key)) {
        card.node.remove();
        this._cards.delete(key);
      }
    }
    let at = this.node.firstElementChild;
    for (const budget of budgets) {
      const key = `${budget.scope}:${budget.name}`;
      let card = this._cards.get(key);
      if (!card) {
        card = new BudgetCard();
        this._cards.set(key, card);
      }
      if (card.node === at) {
        at = at.nextElementSibling;
      } else {
        this.node.insertBefore(card.node, at);
      }
      card.update(budget);
    }
    this.node.hidden = budgets.length === 0;
  }

  private _cards = new Map<string, BudgetCard>();
}
