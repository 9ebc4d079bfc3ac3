// For jest only (jest.config.js): turns the ES modules of @jupyterlab/* into CommonJS.
module.exports = require('@jupyterlab/testing/lib/babel-config');
