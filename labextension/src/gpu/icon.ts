import { LabIcon } from '@jupyterlab/ui-components';

/** A GPU board: fan, heat sink fins, PCIe edge. Colored by the theme. */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 6h19a1 1 0 0 1 1 1v9a1 1 0 0 1-1 1H6v2H4V8H2zm4 2v7h14V8zm4 1.5a2 2 0 1 1 0 4a2 2 0 0 1 0-4zm4.5-.5h1v6h-1zm2.5 0h1v6h-1zM7 18h2v1H7zm3 0h2v1h-2zm3 0h2v1h-2z"/>
  </g>
</svg>`;

export const gpuIcon = new LabIcon({ name: 'gpuhub:gpu', svgstr: svg });
