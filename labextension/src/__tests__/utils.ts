/** Waiting helpers for the tests (not a test file: no `.spec`). */

/** Resolves at the next emission of a lumino signal. */
export function nextEmission(signal: {
  connect: (slot: () => void) => boolean;
  disconnect: (slot: () => void) => boolean;
}): Promise<void> {
  return new Promise(resolve => {
    const slot = () => {
      signal.disconnect(slot);
      resolve();
    };
    signal.connect(slot);
  });
}

/** Let pending timers and promises (a poll taking in its result) run. */
export function settle(ms = 0): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/** Resolves once `condition` holds (checked every few ms), then lets the rest run. */
export async function until(
  condition: () => boolean,
  timeoutMs = 2000
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > end) {
      throw new Error(`Timed out waiting for ${condition}`);
    }
    await settle(2);
  }
  await settle();
}
