import { h, setText, uid } from '../dom';

describe('h', () => {
  it('sets attributes, skipping null, undefined and false', () => {
    const node = h('input', {
      className: 'a b',
      type: 'text',
      value: 2,
      readonly: true,
      disabled: false,
      placeholder: null,
      title: undefined
    });
    expect(node.tagName).toBe('INPUT');
    expect(node.className).toBe('a b');
    expect(node.getAttribute('type')).toBe('text');
    expect(node.getAttribute('value')).toBe('2');
    expect(node.getAttribute('readonly')).toBe('');
    expect(node.hasAttribute('disabled')).toBe(false);
    expect(node.hasAttribute('placeholder')).toBe(false);
    expect(node.hasAttribute('title')).toBe(false);
    expect(node.hasAttribute('classname')).toBe(false);
  });

  it('appends text and nodes, skipping empty children', () => {
    const child = h('em', {}, 'x');
    const node = h('p', {}, 'a ', child, null, undefined, false, ' b');
    expect(node.childNodes).toHaveLength(3);
    expect(node.firstElementChild).toBe(child);
    expect(node.textContent).toBe('a x b');
  });

  it('never parses text as HTML', () => {
    const node = h('div', {}, '<img src=x onerror=alert(1)>');
    expect(node.children).toHaveLength(0);
    expect(node.textContent).toBe('<img src=x onerror=alert(1)>');
  });
});

describe('setText', () => {
  it('writes text only when it changed', () => {
    const node = h('span', {}, 'a');
    const text = node.firstChild;
    setText(node, 'a');
    expect(node.firstChild).toBe(text);
    setText(node, '<b>b</b>');
    expect(node.textContent).toBe('<b>b</b>');
    expect(node.children).toHaveLength(0);
  });
});

describe('uid', () => {
  it('gives a new id on every call, with the prefix', () => {
    const a = uid('gpuhub-x');
    const b = uid('gpuhub-x');
    expect(a).toMatch(/^gpuhub-x-\d+$/);
    expect(b).toMatch(/^gpuhub-x-\d+$/);
    expect(a).not.toBe(b);
  });
});
