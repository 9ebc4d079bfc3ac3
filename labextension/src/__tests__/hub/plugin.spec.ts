import { ConnectionLost, IConnectionLost } from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';

import { connectionLostPlugin } from '../../hub/plugin';
import { ServerGone } from '../../hub/stopped';

// Only what the plugin uses: the real module pulls in all of JupyterLab's shell.
jest.mock('@jupyterlab/application', () => ({
  ConnectionLost: jest.fn(async () => undefined),
  IConnectionLost: { name: 'IConnectionLost' }
}));

const jupyterLost = ConnectionLost as jest.MockedFunction<
  typeof ConnectionLost
>;

function activate(): IConnectionLost {
  // The lab as far as the plugin reads it: no open documents, never restored (no polling).
  const app = {
    shell: { widgets: () => [] },
    restored: new Promise(() => undefined)
  };
  return connectionLostPlugin.activate(app as any) as IConnectionLost;
}

describe('connectionLostPlugin', () => {
  beforeEach(() => {
    jupyterLost.mockClear();
    PageConfig.setOption('hubPrefix', '');
    PageConfig.setOption('hubUser', '');
  });

  it("provides JupyterLab's own dialog outside a hub", () => {
    expect(connectionLostPlugin.id).toBe('gpuhub:connection-lost');
    expect(connectionLostPlugin.autoStart).toBe(true);
    expect(activate()).toBe(ConnectionLost);
  });

  describe('in a hub', () => {
    let check: jest.SpyInstance;

    beforeEach(() => {
      PageConfig.setOption('hubPrefix', '/hub/');
      PageConfig.setOption('hubUser', 'ann');
      check = jest.spyOn(ServerGone.instance, 'check');
    });

    afterEach(() => check.mockRestore());

    it("shows JupyterLab's dialog while the server still runs", async () => {
      check.mockResolvedValue(false);
      const lost = activate();
      await lost({} as any, new Error('lost') as any);
      expect(check).toHaveBeenCalledTimes(1);
      expect(jupyterLost).toHaveBeenCalledTimes(1);
    });

    it("leaves it to gpuhub's dialog when the server is gone", async () => {
      check.mockResolvedValue(true);
      const lost = activate();
      await lost({} as any, new Error('lost') as any);
      expect(jupyterLost).not.toHaveBeenCalled();
    });

    it("closes JupyterLab's dialog once the hub says the server was stopped", async () => {
      // The hub was still stopping the server when the lab asked: JupyterLab's
      // "Server Connection Error" went up; gpuhub learns better later, and its
      // own dialog (queued behind JupyterLab's) must not wait for a click.
      let shown!: Promise<Dialog.IResult<unknown>>;
      jupyterLost.mockImplementationOnce(async () => {
        shown = showDialog({ title: 'Server Connection Error', body: 'lost' });
      });
      check.mockResolvedValue(false);
      const lost = activate();
      await lost({} as any, new Error('lost') as any);
      expect(Dialog.tracker.size).toBe(1);
      (ServerGone.instance as any)._changed.emit(); // the server is known stopped
      const result = await shown;
      expect(result.button.accept).toBe(false);
      expect(Dialog.tracker.size).toBe(0);
    });

    it('asks once while a check is under way', async () => {
      let answer!: (gone: boolean) => void;
      check.mockReturnValue(new Promise<boolean>(r => (answer = r)));
      const lost = activate();
      const first = lost({} as any, new Error('lost') as any);
      await lost({} as any, new Error('lost again') as any);
      answer(false);
      await first;
      expect(check).toHaveBeenCalledTimes(1);
      expect(jupyterLost).toHaveBeenCalledTimes(1);
      // Done: the next loss is asked about again.
      check.mockResolvedValue(true);
      await lost({} as any, new Error('lost') as any);
      expect(check).toHaveBeenCalledTimes(2);
    });
  });
});
