import { quotaNote } from '../../../jobs/submit/state';
import { IJobOptions } from '../../../jobs/types';

function options(over: Partial<IJobOptions>): IJobOptions {
  return {
    kinds: [],
    available: true,
    reason: null,
    kubernetes: false,
    max_workers: 1,
    max_name_length: 63,
    local: null,
    ...over
  } as IJobOptions;
}

describe('quotaNote', () => {
  it("says a job here counts on this server's GPUs only when it has some", () => {
    expect(quotaNote(options({ local: { gpus: 1, gpu_type: 'a100' } }))).toBe(
      "A job here runs on this server's GPUs, which count already."
    );
    const none = quotaNote(options({ local: { gpus: 0, gpu_type: null } }));
    expect(none).toBe(
      'A job here runs on this server, which has no GPU, so it holds none.'
    );
    expect(none).not.toMatch(/count already/);
  });

  it("says a cluster job's GPUs count with the servers'", () => {
    expect(quotaNote(options({ kubernetes: true, local: null }))).toMatch(
      /^This job's GPUs count toward your quota/
    );
  });
});
