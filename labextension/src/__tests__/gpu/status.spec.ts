import { showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';

import { ServerGone } from '../../hub/stopped';
import { GpuStatus } from '../../gpu/status';
import { FakeMetricsModel, GIB, gpu, metrics } from './fixtures';

jest.mock('@jupyterlab/apputils', () => ({
  ...jest.requireActual('@jupyterlab/apputils'),
  showDialog: jest.fn(async () => ({ button: { accept: false } }))
}));

describe('GpuStatus', () => {
  let model: FakeMetricsModel;
  let open: jest.Mock;
  let item: GpuStatus;

  beforeEach(() => {
    model = new FakeMetricsModel();
    open = jest.fn();
    item = new GpuStatus(model.asModel, open);
  });

  afterEach(() => item.dispose());

  const text = () => item.node.textContent;
  const title = () => item.node.title;

  it('is a button that opens the GPU panel', () => {
    expect(item.node.tagName).toBe('BUTTON');
    expect(item.node.getAttribute('type')).toBe('button');
    item.node.click();
    expect(open).toHaveBeenCalledTimes(1);
  });

  it('says it is loading, or why it cannot load', () => {
    expect(text()).toBe('GPU …');
    expect(title()).toBe('Loading GPU metrics');
    model.set(null, 'The server did not answer.');
    expect(text()).toBe('GPU …');
    expect(title()).toBe('The server did not answer.');
  });

  it('says there is no GPU, and why', () => {
    model.set(metrics({ available: false, reason: 'No NVIDIA driver.' }));
    expect(text()).toBe('No GPU');
    expect(title()).toBe('No NVIDIA driver.');
  });

  it('says which GPUs the hub assigned when they cannot be read', () => {
    model.set(
      metrics({
        available: false,
        reason: 'no NVIDIA driver in this container.',
        assigned: { devices: [0, 1], gpu_type: 'A100', simulated: false }
      })
    );
    expect(text()).toBe('2 GPUs assigned · no live figures');
    expect(title()).toBe(
      'GPUs 0, 1 (A100) assigned. No live figures: no NVIDIA driver in this container.'
    );
    model.set(
      metrics({
        available: false,
        reason: null,
        assigned: {
          devices: [3],
          gpu_type: 'T4',
          simulated: false,
          share: 0.5,
          share_text: '8 GB of GPU 3 (T4)'
        }
      })
    );
    expect(text()).toBe('GPU share assigned · no live figures');
    expect(title()).toContain('the GPUs cannot be read here.');
  });

  it('sums memory and averages utilization over readable GPUs', () => {
    model.set(
      metrics({
        gpus: [
          gpu({
            utilization: 20,
            memory_used: 10 * GIB,
            memory_total: 40 * GIB
          }),
          gpu({
            index: 1,
            uuid: 'GPU-1',
            utilization: 51,
            memory_used: 2.5 * GIB,
            memory_total: 40 * GIB
          }),
          gpu({
            index: 2,
            uuid: 'GPU-2',
            utilization: 100,
            memory_used: 40 * GIB,
            memory_total: 40 * GIB,
            error: 'GPU is lost'
          })
        ]
      })
    );
    // (20 + 51) / 2 = 35.5: rounded; the lost GPU counts in ×3 only.
    expect(text()).toBe('GPU ×3 36% · 12.5/80 GiB');
    expect(title().split('\n')).toEqual([
      'GPU 0 NVIDIA A100: 20% busy, 10.0 GiB of 40.0 GiB',
      'GPU 1 NVIDIA A100: 51% busy, 2.5 GiB of 40.0 GiB',
      'GPU 2 NVIDIA A100: GPU is lost'
    ]);
  });

  it('leaves utilization out where no GPU reports it, and marks simulated GPUs', () => {
    model.set(
      metrics({
        source: 'simulated',
        gpus: [gpu({ utilization: null, mig: true })],
        assigned: { devices: [0], gpu_type: 'A100', simulated: true }
      })
    );
    expect(text()).toBe('Simulated GPU 4.0/40 GiB');
    const [heading, line] = title().split('\n');
    expect(heading).toBe('GPU 0 (A100) assigned.');
    expect(line).toMatch(/^GPU 0 NVIDIA A100: .*4\.0 GiB of 40\.0 GiB$/);
  });

  it('says the server stopped once the hub says so', async () => {
    model.set(metrics());
    PageConfig.setOption('hubPrefix', '/hub/');
    PageConfig.setOption('hubUser', 'ann');
    PageConfig.setOption('hubServerName', '');
    (globalThis as any).fetch = jest.fn(
      async () =>
        new Response(
          JSON.stringify({
            user: 'ann',
            xsrf: '',
            notices: [
              {
                key: 'k',
                kind: 'server',
                server: '',
                when: '',
                by: 'admin',
                reason: 'idle',
                text: 'Stopped after 2 h idle.'
              }
            ],
            servers: {}
          })
        )
    );
    expect(await ServerGone.instance.check()).toBe(true);
    expect(showDialog).toHaveBeenCalled();
    expect(text()).toBe('Server stopped · no GPU');
    expect(title()).toBe('Stopped after 2 h idle.');
    model.set(metrics()); // new figures do not bring it back
    expect(text()).toBe('Server stopped · no GPU');
  });
});
