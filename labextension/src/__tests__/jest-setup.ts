/**
 * Run before every test file (jest.config.js `setupFiles`).
 *
 * @jupyterlab/apputils says once, on import, that jsdom has no Clipboard API: expected
 * here, so not printed with every test file. Any other warning still is.
 */
const warn = console.warn.bind(console);
console.warn = (...args: unknown[]): void => {
  if (args[0] !== 'Clipboard API not available') {
    warn(...args);
  }
};

// jsdom lays nothing out, so it has no scrollIntoView (the submit dialog scrolls to an error).
if (!Element.prototype.scrollIntoView) {
  Element.prototype.scrollIntoView = function (): void {
    /* no layout in jsdom */
  };
}
