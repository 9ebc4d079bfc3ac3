/**
 * Unit tests of the lab extension's TypeScript (labextension/src/__tests__), run in jsdom
 * with JupyterLab's jest setup (@jupyterlab/testing): ts-jest for our sources (against
 * tsconfig.test.json), babel for the ES modules @jupyterlab/* packages ship.
 */
const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');

// ES-module packages babel turns into CommonJS: @jupyterlab/testing's list, and
// @jupyterlab/* itself (as JupyterLab's extension template adds).
const esModules = [
  '@codemirror',
  '@marijn',
  '@microsoft',
  '@jupyter/react-components',
  '@jupyter/web-components',
  '@jupyter/ydoc',
  '@jupyterlab/',
  'color',
  'exenv-es6',
  'lib0',
  'marked',
  'nanoid',
  'vscode-ws-jsonrpc',
  'y-protocols',
  'y-websocket',
  'yjs'
].join('|');

const baseConfig = jestJupyterLab(__dirname);

module.exports = {
  ...baseConfig,
  automock: false,
  // Only the extension's sources: jest need not crawl .venv, the cluster cache, etc.
  roots: ['<rootDir>/labextension/src'],
  collectCoverageFrom: [
    'labextension/src/**/*.ts',
    '!labextension/src/**/*.d.ts',
    '!labextension/src/__tests__/**'
  ],
  coverageReporters: ['lcov', 'text'],
  // No junit.xml in the working tree: the console is the report.
  reporters: ['default', 'github-actions'],
  setupFiles: [
    ...baseConfig.setupFiles,
    '<rootDir>/labextension/src/__tests__/jest-setup.ts'
  ],
  testRegex: 'labextension/src/__tests__/.*\\.spec\\.ts$',
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).+`]
};
