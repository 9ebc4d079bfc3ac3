import { requestAPI } from '../../api';
import {
  HoldingsSection,
  IHolding,
  IHoldings,
  holderLabel,
  summary
} from '../../gpu/holdings';
import { settle } from '../utils';

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

function holding(over: Partial<IHolding> = {}): IHolding {
  return {
    kind: 'server',
    name: '',
    label: '',
    gpus: 1,
    gpu_type: 'A100',
    devices: [0],
    since: null,
    ...over
  };
}

function holdings(over: Partial<IHoldings> = {}): IHoldings {
  return {
    available: true,
    reason: null,
    quota: 4,
    held: 0,
    holdings: [],
    ...over
  };
}

describe('holderLabel', () => {
  it("capitalises the hub's label", () => {
    expect(holderLabel(holding({ label: "jobs of server 'b'" }))).toBe(
      "Jobs of server 'b'"
    );
  });

  it('builds a label from kind and name when the hub gives none', () => {
    expect(holderLabel(holding({ kind: 'job', name: 'train-x1' }))).toBe(
      "Job 'train-x1'"
    );
  });

  it("calls the unnamed server 'default'", () => {
    expect(holderLabel(holding({ kind: 'server', name: '' }))).toBe(
      "Server 'default'"
    );
  });
});

describe('summary', () => {
  it("gives the hub's reason when the ledger is unavailable", () => {
    expect(
      summary(holdings({ available: false, reason: 'The hub is down.' }))
    ).toBe('The hub is down.');
    expect(summary(holdings({ available: false }))).toBe(
      'The hub cannot say what you hold right now.'
    );
  });

  it('says when nothing is held, with and without a quota', () => {
    expect(summary(holdings({ held: 0, quota: 4 }))).toBe(
      'You hold none of your 4 GPUs.'
    );
    expect(summary(holdings({ held: 0, quota: 1 }))).toBe(
      'You hold none of your 1 GPU.'
    );
    expect(summary(holdings({ held: 0, quota: 0 }))).toBe(
      'You hold none of your 0 GPUs.'
    );
    expect(summary(holdings({ held: 0, quota: null }))).toBe(
      'You hold no GPUs on this hub.'
    );
  });

  it('counts what is held against the quota', () => {
    expect(summary(holdings({ held: 3, quota: 4 }))).toBe(
      'You hold 3 of your 4 GPUs.'
    );
    expect(summary(holdings({ held: 1, quota: null }))).toBe(
      'You hold 1 GPU on this hub.'
    );
    expect(summary(holdings({ held: 2, quota: null }))).toBe(
      'You hold 2 GPUs on this hub.'
    );
  });

  it('says what waits as waiting, never as held', () => {
    expect(summary(holdings({ held: 1, waiting: 1, quota: 4 }))).toBe(
      'You hold 1 and wait for 1, 2 of your 4 GPUs.'
    );
    expect(summary(holdings({ held: 0, waiting: 2, quota: 2 }))).toBe(
      'You hold 0 and wait for 2, 2 of your 2 GPUs.'
    );
    expect(summary(holdings({ held: 0.25, waiting: 0.5, quota: 1 }))).toBe(
      'You hold 0.25 and wait for 0.5, 0.75 of your 1 GPU.'
    );
    expect(summary(holdings({ held: 1, waiting: 1, quota: null }))).toBe(
      'You hold 1 and wait for 1 GPU on this hub.'
    );
  });
});

describe('HoldingsSection', () => {
  let section: HoldingsSection;

  afterEach(() => {
    section.dispose();
    request.mockReset();
  });

  /** Resolves after the section has asked for, and drawn, the holdings once more. */
  async function shown(data: IHoldings): Promise<void> {
    let asked!: () => void;
    const done = new Promise<void>(resolve => (asked = resolve));
    request.mockImplementation(async () => {
      setTimeout(asked);
      return data as any;
    });
    section.setActive(true);
    await done;
  }

  it('does not ask the hub while inactive', async () => {
    section = new HoldingsSection();
    await settle(20);
    expect(request).not.toHaveBeenCalled();
  });

  it('lists every holding with its GPUs and devices', async () => {
    section = new HoldingsSection();
    await shown(
      holdings({
        held: 3,
        holdings: [
          holding({ label: "server 'default'", gpus: 2, devices: [0, 1] }),
          holding({
            kind: 'job',
            name: 'train-1',
            gpus: 1,
            gpu_type: '',
            devices: []
          }),
          holding({
            kind: 'job',
            name: 'share',
            share: 0.5,
            text: '8 GB of GPU 3 (T4)',
            devices: [3]
          }),
          holding({
            label: "server 'big'",
            name: 'big',
            gpus: 2,
            devices: [],
            waiting: 'waiting in line'
          })
        ]
      })
    );
    expect(request).toHaveBeenCalledWith('holdings');
    const node = section.node;
    expect(node.querySelector('.gpuhub-Holdings-summary')!.textContent).toBe(
      'You hold 3 of your 4 GPUs.'
    );
    const rows = Array.from(node.querySelectorAll('.gpuhub-Holdings-item'));
    expect(
      rows.map(row => [
        row.querySelector('.gpuhub-Holdings-name')!.textContent,
        row.querySelector('.gpuhub-Holdings-detail')!.textContent
      ])
    ).toEqual([
      ["Server 'default'", '2 x A100 (GPUs 0, 1)'],
      ["Job 'train-1'", '1 x'],
      ["Job 'share'", '8 GB of GPU 3 (T4)'],
      ["Server 'big'", '2 x A100, waiting in line']
    ]);
    expect(node.classList.contains('gpuhub-mod-empty')).toBe(false);
  });

  it('names the devices a DRA holding was allocated', async () => {
    section = new HoldingsSection();
    await shown(
      holdings({
        held: 1,
        holdings: [
          holding({
            devices: [],
            device_names: ['GPU 3 (A100-SXM4-80GB) on a100-7']
          })
        ]
      })
    );
    const detail = section.node.querySelector('.gpuhub-Holdings-detail')!;
    expect(detail.textContent).toBe(
      '1 x A100: GPU 3 (A100-SXM4-80GB) on a100-7'
    );
  });

  const WAITING = holding({
    label: "server 'big'",
    name: 'big',
    devices: [],
    waiting: 'waiting in line',
    estimate: {
      likely: '2026-11-29T14:30:00Z',
      by: '2026-11-29T15:10:00Z',
      latest: null,
      because: ['You are 2nd in line.', "<b>bob</b>'s server stops by 14:20."]
    },
    estimate_text:
      'Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC.'
  });

  it("says a waiting holding's estimated start, its reasons behind a summary", async () => {
    section = new HoldingsSection();
    await shown(
      holdings({
        held: 1,
        waiting: 1,
        holdings: [
          // A held one says no estimate, whatever it carries.
          holding({ estimate_text: 'Likely to start within moments.' }),
          WAITING
        ]
      })
    );
    const estimates = section.node.querySelectorAll(
      '.gpuhub-Holdings-estimate'
    );
    expect(estimates).toHaveLength(1);
    const details = estimates[0] as HTMLDetailsElement;
    expect(details.tagName).toBe('DETAILS');
    expect(details.open).toBe(false);
    expect(details.querySelector('summary')!.textContent).toBe(
      'Likely to start around 14:30 UTC, 4 times in 5 by 15:10 UTC.'
    );
    const reasons = Array.from(details.querySelectorAll('li'));
    expect(reasons.map(li => li.textContent)).toEqual(
      WAITING.estimate!.because
    );
    expect(details.querySelector('b')).toBeNull(); // a name is text, never markup
  });

  it('keeps the reasons open across polls', async () => {
    section = new HoldingsSection();
    await shown(holdings({ waiting: 1, holdings: [WAITING] }));
    const first = section.node.querySelector('details')!;
    first.open = true;
    first.dispatchEvent(new Event('toggle'));
    section.setActive(false);
    await shown(holdings({ waiting: 1, holdings: [WAITING] }));
    const again = section.node.querySelector('details')!;
    expect(again).not.toBe(first);
    expect(again.open).toBe(true);
  });

  it('says the estimate as a line where the hub gives no reasons', async () => {
    section = new HoldingsSection();
    await shown(
      holdings({
        waiting: 1,
        holdings: [
          { ...WAITING, estimate: { ...WAITING.estimate!, because: [] } },
          holding({ name: 'x', waiting: 'waiting in line', estimate: null })
        ]
      })
    );
    const estimates = section.node.querySelectorAll(
      '.gpuhub-Holdings-estimate'
    );
    expect(estimates).toHaveLength(1);
    expect(estimates[0].tagName).toBe('P');
    expect(estimates[0].textContent).toBe(WAITING.estimate_text);
  });

  it('shows the next booking beside the holdings, or why it cannot', async () => {
    section = new HoldingsSection();
    let asked!: () => void;
    const done = new Promise<void>(resolve => (asked = resolve));
    request.mockImplementation(async (path: string) => {
      if (path === 'bookings') {
        throw new Error('no hub');
      }
      setTimeout(asked);
      return holdings() as any;
    });
    section.setActive(true);
    await done;
    expect(request).toHaveBeenCalledWith('bookings');
    const card = section.node.querySelector('.gpuhub-Booking')!;
    expect(card.textContent).toContain(
      'Your bookings cannot be read right now.'
    );
    expect(section.node.textContent).toContain('You hold none of your 4 GPUs.');
  });

  it('marks itself empty when nothing is held', async () => {
    section = new HoldingsSection();
    await shown(holdings({ held: 0, quota: null }));
    expect(section.node.classList.contains('gpuhub-mod-empty')).toBe(true);
    expect(section.node.querySelectorAll('li')).toHaveLength(0);
    expect(section.node.textContent).toContain('You hold no GPUs on this hub.');
  });
});
