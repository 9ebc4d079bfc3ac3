import { showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import { requestAPI } from '../../api';
import { GpuPanel } from '../../gpu/panel';
import { IGpuProcess } from '../../gpu/types';
import { ServerGone } from '../../hub/stopped';
import { settle, until } from '../utils';
import { FakeMetricsModel, GIB, gpu, metrics } from './fixtures';

jest.mock('@jupyterlab/apputils', () => ({
  ...jest.requireActual('@jupyterlab/apputils'),
  showDialog: jest.fn()
}));
jest.mock('../../api', () => ({
  ...jest.requireActual('../../api'),
  // The holdings section asks the hub; it has its own tests.
  requestAPI: jest.fn(() => new Promise(() => undefined))
}));

const dialog = showDialog as jest.MockedFunction<typeof showDialog>;

function proc(over: Partial<IGpuProcess> = {}): IGpuProcess {
  return {
    pid: 1,
    memory_used: GIB,
    kernel_id: null,
    path: null,
    ...over
  };
}

describe('GpuPanel', () => {
  let model: FakeMetricsModel;
  let panel: GpuPanel;
  let commands: { execute: jest.Mock };
  let kernels: { shutdown: jest.Mock };

  beforeEach(() => {
    PageConfig.setOption('hubPrefix', '');
    model = new FakeMetricsModel();
    commands = { execute: jest.fn(async () => undefined) };
    kernels = { shutdown: jest.fn(async () => undefined) };
    dialog.mockReset();
    panel = new GpuPanel({
      model: model.asModel,
      commands: commands as any,
      kernels: kernels as any
    });
    Widget.attach(panel, document.body); // visible: it redraws on every change
  });

  afterEach(() => {
    panel.dispose();
    (requestAPI as jest.Mock).mockClear();
  });

  const $ = (selector: string) =>
    panel.node.querySelector(selector) as HTMLElement;
  const $$ = (selector: string, root: ParentNode = panel.node) =>
    Array.from(root.querySelectorAll(selector)) as HTMLElement[];
  const cards = () => $$('.gpuhub-GpuCard');
  const holders = (card: HTMLElement) =>
    $$('.gpuhub-GpuCard-holder', card).map(li => [
      li.querySelector('.gpuhub-GpuCard-holderName')?.textContent ??
        li.textContent,
      li.querySelector('.gpuhub-GpuCard-holderMemory')?.textContent ?? null
    ]);

  it('says it is loading until the first answer', () => {
    expect(panel.id).toBe('gpuhub-gpu-panel');
    expect($('.gpuhub-GpuPanel-status').textContent).toBe('Loading…');
    expect($('.gpuhub-GpuPanel-banner').hidden).toBe(true);
    expect(cards()).toHaveLength(0);
  });

  it('shows why the metrics service cannot be reached', () => {
    model.set(null, 'The Jupyter server did not answer');
    const banner = $('.gpuhub-GpuPanel-banner');
    expect(banner.hidden).toBe(false);
    expect(banner.textContent).toBe(
      "Cannot reach gpuhub's metrics service: The Jupyter server did not answer. Retrying…"
    );
    expect($('.gpuhub-GpuPanel-status').textContent).toBe('');
    model.set(metrics());
    expect(banner.hidden).toBe(true);
  });

  it('says there is no GPU, why, and what to do outside a hub', () => {
    model.set(metrics({ available: false, reason: 'No NVIDIA driver found.' }));
    const empty = $('.gpuhub-GpuPanel-empty');
    expect(empty.hidden).toBe(false);
    expect($('.gpuhub-GpuPanel-cards').hidden).toBe(true);
    expect($('.gpuhub-GpuPanel-emptyTitle').textContent).toBe(
      'No GPU on this server'
    );
    expect($('.gpuhub-GpuPanel-emptyReason').textContent).toBe(
      'No NVIDIA driver found.'
    );
    expect($('.gpuhub-GpuPanel-emptyHint').textContent).toMatch(
      /^Run JupyterLab on a machine with an NVIDIA GPU/
    );
  });

  it('tells a hub user to restart the server with a GPU', () => {
    PageConfig.setOption('hubPrefix', '/hub/');
    model.set(metrics({ available: false, reason: 'No GPU.' }));
    expect($('.gpuhub-GpuPanel-emptyHint').textContent).toMatch(
      /^To get one, stop this server/
    );
  });

  it('names the assigned GPUs that cannot be read', () => {
    model.set(
      metrics({
        available: false,
        reason: 'No NVIDIA driver in this container.',
        assigned: { devices: [2], gpu_type: 'L4', simulated: false }
      })
    );
    expect($('.gpuhub-GpuPanel-emptyTitle').textContent).toBe(
      'GPU 2 (L4) assigned'
    );
    expect($('.gpuhub-GpuPanel-emptyReason').textContent).toBe(
      'The hub gave this server this GPU, but there are no live figures for it: no NVIDIA driver in this container.'
    );
    expect($('.gpuhub-GpuPanel-emptyHint')).toBeNull();
  });

  it('says where the figures come from', () => {
    model.set(
      metrics({
        time: 1_700_000_000,
        assigned: { devices: [0], gpu_type: 'A100', simulated: false }
      })
    );
    const status = $('.gpuhub-GpuPanel-status').textContent!;
    expect(status).toMatch(
      /^GPU 0 \(A100\) assigned\. Sampled every 1 s from NVML · \S/
    );
    model.set(metrics({ source: 'simulated', interval: 2 }));
    expect($('.gpuhub-GpuPanel-status').textContent).toMatch(
      /^Simulated: .*sampled every 2 s$/
    );
  });

  it("announces where the figures come from, not every sample's time", () => {
    model.set(metrics({ time: 1_700_000_000 }));
    const live = $('.gpuhub-GpuPanel-status [aria-live]');
    expect(live.textContent).toBe('Sampled every 1 s from NVML');
    const text = live.firstChild;
    model.set(metrics({ time: 1_700_000_001 }));
    expect(live.firstChild).toBe(text); // untouched: nothing to announce
    expect($('.gpuhub-GpuPanel-status').hasAttribute('aria-live')).toBe(false);
  });

  it('draws a card per GPU with its figures', () => {
    model.set(
      metrics({
        gpus: [
          gpu({ utilization: 42.4 }),
          gpu({
            index: 1,
            uuid: 'MIG-1',
            name: 'A100 1g.10gb',
            mig: true,
            utilization: null,
            temperature: null,
            power: null
          })
        ]
      })
    );
    const [whole, slice] = cards();
    expect(whole.querySelector('.gpuhub-GpuCard-title')!.textContent).toBe(
      'GPU 0 · NVIDIA A100'
    );
    expect(whole.getAttribute('aria-label')).toBe('GPU 0, NVIDIA A100');
    expect(
      (whole.querySelector('.gpuhub-GpuCard-badge') as HTMLElement).hidden
    ).toBe(true);
    const values = $$('.gpuhub-GpuCard-value', whole).map(v => v.textContent);
    expect(values).toEqual(['42 %', '4.0 GiB of 40.0 GiB']);
    expect(whole.querySelector('.gpuhub-GpuCard-vitals')!.textContent).toBe(
      '65 °C · 250 W'
    );

    expect(slice.querySelector('.gpuhub-GpuCard-title')!.textContent).toBe(
      'GPU 1 slice · A100 1g.10gb'
    );
    expect(
      (slice.querySelector('.gpuhub-GpuCard-badge') as HTMLElement).hidden
    ).toBe(false);
    const util = slice.querySelector('.gpuhub-GpuCard-value') as HTMLElement;
    expect(util.textContent).toBe('n/a');
    expect(util.title).toMatch(/MIG slice/);
    expect(
      (slice.querySelector('.gpuhub-Sparkline-util') as SVGElement).style
        .display
    ).toBe('none');
    expect(slice.querySelector('.gpuhub-GpuCard-vitals')!.textContent).toBe('');
  });

  it("shows a device's error instead of its figures", () => {
    model.set(
      metrics({ gpus: [gpu({ error: 'GPU has fallen off the bus' })] })
    );
    const [card] = cards();
    const error = card.querySelector('.gpuhub-GpuCard-error') as HTMLElement;
    expect(error.hidden).toBe(false);
    expect(error.textContent).toBe('GPU has fallen off the bus');
    expect(
      (card.querySelector('.gpuhub-GpuCard-figures') as HTMLElement).hidden
    ).toBe(true);
    expect(
      (card.querySelector('.gpuhub-GpuCard-holders') as HTMLElement).hidden
    ).toBe(true);
  });

  it('keeps each card across updates, in the order of the GPUs, and drops gone ones', () => {
    const a = gpu({ uuid: 'A', index: 0 });
    const b = gpu({ uuid: 'B', index: 1 });
    const c = gpu({ uuid: 'C', index: 2 });
    model.set(metrics({ gpus: [a, b, c] }));
    const [cardA, cardB] = cards();
    model.set(metrics({ gpus: [b, a] }));
    expect(cards()).toEqual([cardB, cardA]);
    model.set(metrics({ gpus: [a, b] }));
    expect(cards()).toEqual([cardA, cardB]);
    model.set(metrics({ gpus: [b] }));
    expect(cards()).toEqual([cardB]);
    model.set(metrics({ gpus: [b, c] }));
    expect(cards()[0]).toBe(cardB);
    expect(cards()[1]).not.toBe(cardA);
  });

  // Moving a node blurs it (jsdom and Chromium alike): the panel moves only the cards
  // out of place and updates the rest in place, so focus stays where it was.
  it('keeps keyboard focus on a card across updates', () => {
    const a = gpu({ uuid: 'A', index: 0 });
    const b = gpu({ uuid: 'B', index: 1 });
    model.set(metrics({ gpus: [a, b] }));
    const [, cardB] = cards();
    cardB.focus();
    expect(document.activeElement).toBe(cardB);
    model.set(metrics({ gpus: [a, b] }));
    expect(document.activeElement).toBe(cardB);
    // A GPU that appears before it moves the others, not it.
    model.set(metrics({ gpus: [gpu({ uuid: 'Z', index: 9 }), a, b] }));
    expect(cards()[2]).toBe(cardB);
    expect(document.activeElement).toBe(cardB);
  });

  it("keeps focus on a notebook's button while its memory changes", () => {
    const held = (memory: number, others: number[] = []) =>
      metrics({
        gpus: [
          gpu({
            processes: [
              proc({
                pid: 5,
                memory_used: memory,
                kernel_id: 'k1',
                path: 'a.ipynb'
              }),
              ...others.map(pid => proc({ pid, memory_used: GIB }))
            ]
          })
        ]
      });
    model.set(held(GIB));
    const stop = $$('.gpuhub-GpuCard-holder button')[1];
    expect(stop.textContent).toBe('Shut down');
    stop.focus();
    for (const memory of [2 * GIB, 3 * GIB]) {
      model.set(held(memory, [77]));
      expect(document.activeElement).toBe(stop);
    }
    expect(holders(cards()[0])).toEqual([
      ['a.ipynb', '3.0 GiB'],
      ['Other process (pid 77)', '1.0 GiB']
    ]);
    model.set(held(GIB, []));
    expect(document.activeElement).toBe(stop);
    expect($$('.gpuhub-GpuCard-holder')).toHaveLength(1);
  });

  it('labels the time axis with the window the history fills', () => {
    model.times = [100, 110];
    model.set(metrics());
    const axis = () =>
      $$('.gpuhub-GpuCard-axis span').map(span => span.textContent);
    expect(axis()).toEqual(['−1 min', 'now', '−1 min', 'now']);
    model.times = Array.from({ length: 61 }, (_, i) => 1000 + 10 * i);
    model.set(metrics());
    expect(axis()).toEqual(['−5 min', 'now', '−5 min', 'now']);
  });

  it('lists what holds GPU memory: notebooks by size, then other processes', () => {
    model.set(
      metrics({
        gpus: [
          gpu({
            processes: [
              proc({
                pid: 10,
                memory_used: GIB,
                kernel_id: 'k1',
                path: 'a/small.ipynb'
              }),
              proc({
                pid: 11,
                memory_used: 2 * GIB,
                kernel_id: 'k1',
                path: 'a/small.ipynb'
              }),
              proc({
                pid: 20,
                memory_used: 5 * GIB,
                kernel_id: 'k2abcdef-123',
                path: null
              }),
              proc({ pid: 30, memory_used: null }),
              proc({ pid: 31, memory_used: GIB })
            ]
          }),
          gpu({
            uuid: 'B',
            index: 1,
            processes: [proc({ pid: 7, memory_used: null })]
          }),
          gpu({ uuid: 'C', index: 2, processes: [] })
        ]
      })
    );
    const [first, second, third] = cards();
    expect(holders(first)).toEqual([
      ['Kernel k2abcdef', '5.0 GiB'],
      ['small.ipynb', '3.0 GiB'],
      ['2 other processes', '1.0 GiB']
    ]);
    expect(holders(second)).toEqual([['Other process (pid 7)', '–']]);
    expect(holders(third)).toEqual([['No process uses this GPU.', null]]);
    // Open only where the notebook is known; Shut down for every kernel.
    const buttons = $$('.gpuhub-GpuCard-holder', first).map(li =>
      $$('button', li).map(b => b.textContent)
    );
    expect(buttons).toEqual([['Shut down'], ['Open', 'Shut down'], []]);
  });

  it('opens the notebook that holds a GPU', () => {
    model.set(
      metrics({
        gpus: [
          gpu({ processes: [proc({ kernel_id: 'k1', path: 'x/train.ipynb' })] })
        ]
      })
    );
    const open = $$('button').find(b => b.textContent === 'Open')!;
    expect(open.getAttribute('aria-label')).toBe('Open x/train.ipynb');
    open.click();
    expect(commands.execute).toHaveBeenCalledWith('docmanager:open', {
      path: 'x/train.ipynb'
    });
  });

  it('shuts a kernel down only once confirmed, then polls', async () => {
    dialog.mockResolvedValueOnce({ button: { accept: false } } as any);
    await panel.shutDownKernel('k1', 'train.ipynb');
    expect(dialog.mock.calls[0][0]!.body).toMatch(
      /^Shutting down the kernel of train\.ipynb frees its GPU memory/
    );
    expect(kernels.shutdown).not.toHaveBeenCalled();
    expect(model.refresh).not.toHaveBeenCalled();

    dialog.mockResolvedValueOnce({ button: { accept: true } } as any);
    await panel.shutDownKernel('k1', 'train.ipynb');
    expect(kernels.shutdown).toHaveBeenCalledWith('k1');
    expect(model.refresh).toHaveBeenCalledTimes(1);
  });

  it('says why a kernel could not be shut down', async () => {
    dialog.mockResolvedValue({ button: { accept: true } } as any);
    kernels.shutdown.mockRejectedValueOnce(new Error('Kernel is busy.'));
    await panel.shutDownKernel('k1', 'train.ipynb');
    expect(dialog).toHaveBeenCalledTimes(2);
    expect(dialog.mock.calls[1][0]!.title).toBe(
      'Could not shut the kernel down'
    );
    expect(dialog.mock.calls[1][0]!.body).toBe('Kernel is busy.');
    expect(model.refresh).toHaveBeenCalledTimes(1);
  });

  it("shows the hub's idle clock line, warned or not", () => {
    const line = $('.gpuhub-GpuPanel-idleClock');
    expect(line.style.display).toBe('none');
    panel.showIdleClock('GPUs idle for 13 min.', false);
    expect(line.style.display).toBe('');
    expect(line.textContent).toBe('GPUs idle for 13 min.');
    expect(line.classList.contains('gpuhub-mod-warned')).toBe(false);
    panel.showIdleClock('Stops in 5 min.', true);
    expect(line.classList.contains('gpuhub-mod-warned')).toBe(true);
    panel.showIdleClock('', false);
    expect(line.style.display).toBe('none');
  });

  it('asks the hub what this user holds only while shown', async () => {
    // Attached where it shows (restored open at start-up): it asks.
    await until(() => (requestAPI as jest.Mock).mock.calls.length > 0);
    expect(requestAPI).toHaveBeenCalledWith('holdings');
    panel.hide();
    (requestAPI as jest.Mock).mockClear();
    await settle(20);
    expect(requestAPI).not.toHaveBeenCalled();
    panel.show();
    await until(() => (requestAPI as jest.Mock).mock.calls.length > 0);
    expect(requestAPI).toHaveBeenCalledWith('holdings');
    expect(model.wake).toHaveBeenCalled();
  });

  // Last: once gone, the page's ServerGone stays gone.
  it('offers to start the server again once it was stopped', async () => {
    model.set(metrics());
    PageConfig.setOption('hubPrefix', '/hub/');
    PageConfig.setOption('hubUser', 'ann');
    dialog.mockResolvedValue({ button: { accept: false } } as any);
    (globalThis as any).fetch = jest.fn(
      async () =>
        new Response(
          JSON.stringify({ user: 'ann', xsrf: '', notices: [], servers: {} })
        )
    );
    expect(await ServerGone.instance.check()).toBe(true);
    expect($('.gpuhub-GpuPanel-cards').hidden).toBe(true);
    expect($('.gpuhub-Holdings').hidden).toBe(true);
    expect($('.gpuhub-GpuPanel-emptyTitle').textContent).toBe(
      'This server is not running'
    );
    expect($('.gpuhub-GpuPanel-stopped').textContent).toMatch(
      /holds no GPU now/
    );
    expect($('.gpuhub-GpuPanel-empty button').textContent).toBe(
      'Start it again'
    );
  });
});
