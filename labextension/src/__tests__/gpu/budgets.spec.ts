import { requestAPI } from '../../api';
import {
  BudgetList,
  IBudget,
  budgetTitle,
  costText,
  hours
} from '../../gpu/budgets';
import { HoldingsSection, IHoldings } from '../../gpu/holdings';
import { formatTime } from '../../time';

// The reset as the lab writes every time: in the reader's zone, never the budget's.
const RESETS = formatTime('2026-11-30T00:00:00+01:00');

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

/** A budget as the hub answers it (budget-contract: the holdings' `budgets`). */
function budget(over: Partial<IBudget> = {}): IBudget {
  return {
    scope: 'user',
    name: 'alice',
    shared: false,
    hours: 20,
    extra_hours: 0,
    used_hours: 14.2,
    left_hours: 5.8,
    period: 'week',
    resets_at: '2026-11-30T00:00:00+01:00',
    resets: 'Monday 00:00 Europe/Berlin',
    state: 'ok',
    at_limit: 'refuse',
    grants: [],
    text: '14.2 of 20 GPU-hours used this week; resets Monday 00:00 Europe/Berlin',
    ...over
  };
}

describe('hours', () => {
  it('writes GPU-hours as a person does', () => {
    expect(hours(20)).toBe('20');
    expect(hours(5.8)).toBe('5.8');
    expect(hours(5.84)).toBe('5.84');
    expect(hours(0.25)).toBe('0.25');
    expect(hours(0)).toBe('0');
  });
});

describe('budgetTitle', () => {
  it('says whose hours they are', () => {
    expect(budgetTitle(budget())).toBe('Your GPU-hours');
    expect(
      budgetTitle(budget({ scope: 'group', name: 'staff', shared: true }))
    ).toBe('Group “staff”, shared');
    expect(budgetTitle(budget({ scope: 'group', name: 'class' }))).toBe(
      'Your GPU-hours in “class”'
    );
  });
});

describe('costText', () => {
  it('says what a request costs per hour and what is left', () => {
    expect(costText(2, [budget()])).toBe(
      'Uses 2 GPU-hours per hour; 5.8 GPU-hours left this week (about 2.9 hours at that rate).'
    );
    expect(costText(0.5, [budget({ period: 'day' })])).toBe(
      'Uses 0.5 GPU-hours per hour; 5.8 GPU-hours left today (about 12 hours at that rate).'
    );
    expect(costText(1, [budget()])).toMatch(/^Uses 1 GPU-hour per hour; /);
  });

  it('names each budget when several apply', () => {
    const staff = budget({
      scope: 'group',
      name: 'staff',
      shared: true,
      period: 'month',
      left_hours: 120
    });
    expect(costText(4, [budget(), staff])).toBe(
      'Uses 4 GPU-hours per hour; 5.8 GPU-hours left this week for you (about 1.5 hours at that rate); ' +
        '120 GPU-hours left this month for group “staff” (about 30 hours at that rate).'
    );
  });

  it('says what happens at the limit, as the admin chose', () => {
    const over = budget({ state: 'over', used_hours: 20, left_hours: 0 });
    expect(costText(1, [over])).toBe(
      `Uses 1 GPU-hour per hour; none left this week: new GPU servers and jobs are refused until it resets (${RESETS}).`
    );
    expect(costText(1, [{ ...over, at_limit: 'idle_only' }])).toMatch(
      /none left this week: new GPU work starts only on GPUs that would otherwise stay idle/
    );
  });

  it('says a CPU-only job or a job on counted GPUs costs nothing more', () => {
    expect(costText(0, [budget()])).toBe(
      'A CPU-only job uses no GPU-hours; 5.8 GPU-hours left this week.'
    );
    expect(costText(null, [budget()])).toBe(
      "A job here runs on this server's GPUs, which count already: 5.8 GPU-hours left this week."
    );
  });

  it('says nothing where no budget applies', () => {
    expect(costText(2, [])).toBe('');
  });
});

describe('BudgetList', () => {
  let list: BudgetList;
  const cards = () =>
    Array.from(list.node.querySelectorAll('.gpuhub-Budget')) as HTMLElement[];
  const part = (card: HTMLElement, name: string) =>
    card.querySelector(`.gpuhub-Budget-${name}`) as HTMLElement;

  beforeEach(() => {
    list = new BudgetList();
    document.body.append(list.node);
  });

  afterEach(() => document.body.replaceChildren());

  it('shows nothing when no budget applies', () => {
    expect(list.node.hidden).toBe(true);
    list.update([]);
    expect(list.node.hidden).toBe(true);
    expect(cards()).toHaveLength(0);
  });

  it("draws a card per budget: whose, a bar of what is used, the hub's sentence", () => {
    list.update([budget()]);
    expect(list.node.hidden).toBe(false);
    const [card] = cards();
    expect(part(card, 'title').textContent).toBe('Your GPU-hours');
    expect(part(card, 'text').textContent).toBe(
      `14.2 of 20 GPU-hours used this week; resets ${RESETS}`
    );
    expect(RESETS).toMatch(/^(29|30) Nov 2026, \d\d:\d\d$/);
    const bar = part(card, 'bar');
    expect(bar.getAttribute('role')).toBe('meter');
    expect(bar.getAttribute('aria-valuenow')).toBe('14.2');
    expect(bar.getAttribute('aria-valuemax')).toBe('20');
    expect(bar.getAttribute('aria-valuetext')).toBe(
      `14.2 of 20 GPU-hours used this week; resets ${RESETS}`
    );
    expect(part(card, 'fill').style.width).toBe('71%');
    expect(part(card, 'state').hidden).toBe(true);
    expect(part(card, 'limit').hidden).toBe(true);
    expect(part(card, 'grants').hidden).toBe(true);
    expect(card.className).toBe('gpuhub-Budget');
  });

  it('says "Nearly used up" from 80 %, and "Used up" with what happens, at 100 %', () => {
    list.update([budget({ state: 'warning', used_hours: 17, left_hours: 3 })]);
    const [card] = cards();
    expect(card.classList.contains('gpuhub-mod-warning')).toBe(true);
    expect(part(card, 'state').hidden).toBe(false);
    expect(part(card, 'state').textContent).toBe('Nearly used up');
    expect(part(card, 'bar').getAttribute('aria-label')).toBe(
      'Your GPU-hours, nearly used up'
    );

    list.update([budget({ state: 'over', used_hours: 21, left_hours: 0 })]);
    expect(cards()[0]).toBe(card); // the same card, updated
    expect(card.classList.contains('gpuhub-mod-warning')).toBe(false);
    expect(card.classList.contains('gpuhub-mod-over')).toBe(true);
    expect(part(card, 'state').textContent).toBe('Used up');
    expect(part(card, 'fill').style.width).toBe('100%'); // never past the end
    expect(part(card, 'limit').hidden).toBe(false);
    expect(part(card, 'limit').textContent).toBe(
      `New GPU servers and jobs are refused until it resets (${RESETS}).`
    );

    list.update([budget()]);
    expect(card.className).toBe('gpuhub-Budget');
    expect(part(card, 'state').hidden).toBe(true);
  });

  it('counts extra hours and lists each grant with its reason', () => {
    list.update([
      budget({
        extra_hours: 5,
        used_hours: 12.5,
        grants: [
          {
            hours: 5,
            reason: 'thesis deadline',
            by: 'admin',
            at: '2026-11-26T10:00:00+00:00'
          }
        ]
      })
    ]);
    const [card] = cards();
    expect(part(card, 'bar').getAttribute('aria-valuemax')).toBe('25');
    expect(part(card, 'fill').style.width).toBe('50%');
    expect(part(card, 'grants').hidden).toBe(false);
    expect(part(card, 'grants').textContent).toBe(
      '5 extra GPU-hours: thesis deadline (admin)'
    );
  });

  it('keeps each card (and what has focus) across updates, in order, dropping gone ones', () => {
    const staff = budget({ scope: 'group', name: 'staff', shared: true });
    list.update([budget(), staff]);
    const [mine, group] = cards();
    group.tabIndex = 0;
    group.focus();
    list.update([budget({ used_hours: 15 }), staff]);
    expect(cards()).toEqual([mine, group]);
    expect(document.activeElement).toBe(group);
    list.update([staff]);
    expect(cards()).toEqual([group]);
    list.update([]);
    expect(list.node.hidden).toBe(true);
  });
});

describe("the sidebar's budgets", () => {
  it('come with the holdings, and go when the hub says none applies', async () => {
    const answer: IHoldings = {
      available: true,
      reason: null,
      quota: 4,
      held: 1,
      holdings: [],
      budgets: [budget({ state: 'warning' })]
    };
    request.mockImplementation(async () => answer as any);
    const section = new HoldingsSection();
    document.body.append(section.node);
    try {
      section.setActive(true);
      const list = section.node.querySelector('.gpuhub-Budgets') as HTMLElement;
      await new Promise<void>(resolve => {
        const check = () => (list.hidden ? setTimeout(check, 2) : resolve());
        check();
      });
      expect(list.textContent).toContain('Nearly used up');
      expect(list.textContent).toContain('14.2 of 20 GPU-hours used this week');
      delete answer.budgets; // a hub from before budgets
      request.mockClear();
      section.setActive(false);
      section.setActive(true);
      await new Promise<void>(resolve => {
        const check = () => (list.hidden ? resolve() : setTimeout(check, 2));
        check();
      });
      expect(list.querySelectorAll('.gpuhub-Budget')).toHaveLength(0);
    } finally {
      section.dispose();
      document.body.replaceChildren();
    }
  });
});
