import { PageConfig } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import { requestAPI } from '../../api';
import { IBudget } from '../../gpu/budgets';
import { IHoldings } from '../../gpu/holdings';
import { emptyHint, GpuPanel } from '../../gpu/panel';
import { formatTime } from '../../time';
import { until } from '../utils';
import { FakeMetricsModel, metrics } from './fixtures';

jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  requestAPI: jest.fn()
}));

const request = requestAPI as jest.MockedFunction<typeof requestAPI>;

function budget(over: Partial<IBudget> = {}): IBudget {
  return {
    scope: 'user',
    name: 'bob',
    shared: false,
    hours: 1,
    extra_hours: 0,
    used_hours: 1,
    left_hours: 0,
    period: 'week',
    resets_at: '2026-11-30T00:00:00+00:00',
    resets: 'Monday 00:00 UTC',
    state: 'over',
    at_limit: 'refuse',
    grants: [],
    text: '1 of 1 GPU-hours used this week; resets Monday 00:00 UTC',
    ...over
  };
}

describe('emptyHint', () => {
  beforeEach(() => PageConfig.setOption('hubPrefix', '/hub/'));
  afterEach(() => PageConfig.setOption('hubPrefix', ''));

  it('offers a GPU server while the budget allows one', () => {
    expect(emptyHint([])).toMatch(
      /^To get one, stop this server .* GPU type selected, or submit/
    );
    expect(emptyHint([budget({ state: 'warning' })])).toMatch(/^To get one/);
  });

  it('never offers what a used-up budget refuses', () => {
    const hint = emptyHint([budget({ state: 'ok', name: 'staff' }), budget()]);
    expect(hint).toBe(
      `GPU servers and jobs are refused until your GPU-hour budget resets (${formatTime('2026-11-30T00:00:00+00:00')}); until then this server and CPU-only jobs still run.`
    );
    expect(hint).not.toMatch(/start it again with a GPU/);
  });

  it('says a used-up idle-only budget starts GPUs only where they would idle', () => {
    expect(emptyHint([budget({ at_limit: 'idle_only' })])).toMatch(
      /GPU type selected: with your GPU-hour budget used up, it starts only on a GPU that would otherwise stay idle\.$/
    );
  });

  it('outside a hub, names what a machine needs', () => {
    PageConfig.setOption('hubPrefix', '');
    expect(emptyHint([budget()])).toMatch(/^Run JupyterLab on a machine/);
  });
});

describe('GpuPanel on a CPU-only server with a used-up budget', () => {
  it('says what the budget card says, once the holdings answer', async () => {
    PageConfig.setOption('hubPrefix', '/hub/');
    const answer: IHoldings = {
      available: true,
      reason: null,
      quota: null,
      held: 0,
      holdings: [],
      budgets: [budget()]
    };
    request.mockResolvedValue(answer);
    const model = new FakeMetricsModel();
    const panel = new GpuPanel({
      model: model.asModel,
      commands: { execute: jest.fn() } as any,
      kernels: { shutdown: jest.fn() } as any
    });
    Widget.attach(panel, document.body);
    try {
      model.set(metrics({ available: false, reason: 'No GPU.' }));
      const hint = () =>
        panel.node.querySelector('.gpuhub-GpuPanel-emptyHint')?.textContent ??
        '';
      await until(() => hint().startsWith('GPU servers and jobs are refused'));
      const card = panel.node.querySelector('.gpuhub-Budget-limit')!;
      expect(card.textContent).toMatch(/^New GPU servers and jobs are refused/);
    } finally {
      panel.dispose();
      PageConfig.setOption('hubPrefix', '');
    }
  });
});
