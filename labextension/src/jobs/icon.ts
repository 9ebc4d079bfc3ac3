import { LabIcon } from '@jupyterlab/ui-components';

/** A stack of queued runs with a play mark: "jobs". Colored by the theme. */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M3 4h12v2H3zm0 4h12v2H3zm0 4h8v2H3zm0 4h8v2H3zm11-2.5v8l6.5-4z"/>
  </g>
</svg>`;

export const jobsIcon = new LabIcon({ name: 'gpuhub:jobs', svgstr: svg });

/** A small "run on cluster" glyph for the notebook toolbar: play mark over a rack. */
const runSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M3 15h18v2H3zm0 4h18v2H3zM9 2.5v10l8-5z"/>
  </g>
</svg>`;

export const runOnClusterIcon = new LabIcon({
  name: 'gpuhub:run-on-cluster',
  svgstr: runSvg
});
