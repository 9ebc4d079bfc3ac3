/**
 * Papermill parameter values typed in the dialog: JSON when they look like
 * JSON (`10`, `0.5`, `true`, `null`, `[1, 2]`, `{"a": 1}`, `"quoted"`),
 * text otherwise. The server still validates names and values.
 */

const LOOKS_LIKE_JSON = /^(-?\d|[[{"]|true$|false$|null$)/;

export interface IParsedValue {
  value: unknown;
  /** A hint for the person when the value looked like JSON but was not. */
  note: string | null;
}

const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

export function parseParameterValue(raw: string): IParsedValue {
  const text = raw.trim();
  if (NUMBER.test(text)) {
    return { value: Number(text), note: null }; // also .5, +1, 1. (not JSON, but meant)
  }
  if (!LOOKS_LIKE_JSON.test(text)) {
    return { value: raw, note: null };
  }
  try {
    return { value: JSON.parse(text), note: null };
  } catch {
    return {
      value: raw,
      note: 'Not valid JSON, so it is passed as text.'
    };
  }
}

/** How a value appears in an input box again (strings without quotes). */
export function formatParameterValue(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/**
 * `name = value` assignments of a notebook's `parameters` cell, so the
 * dialog can offer them (values as written in the cell).
 */
export function parametersFromSource(source: string): Array<[string, string]> {
  const found: Array<[string, string]> = [];
  for (const line of source.split('\n')) {
    const match =
      /^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]+)?=\s*(.+?)\s*(\s#.*)?$/.exec(line);
    if (match) {
      found.push([match[1], match[2]]);
    }
  }
  return found;
}
