import {
  formatParameterValue,
  parametersFromSource,
  parseParameterValue
} from '../../jobs/params';

describe('parseParameterValue', () => {
  it.each([
    ['10', 10],
    ['-3', -3],
    ['0.5', 0.5],
    ['.5', 0.5],
    ['+1', 1],
    ['1.', 1],
    ['1e-3', 0.001],
    ['2E3', 2000],
    ['.5e1', 5],
    ['+1e2', 100],
    ['  7  ', 7]
  ])('reads %j as the number %p', (raw, value) => {
    expect(parseParameterValue(raw)).toEqual({ value, note: null });
  });

  it.each([
    ['true', true],
    ['false', false],
    ['null', null],
    ['[1, 2]', [1, 2]],
    ['{"a": 1}', { a: 1 }],
    ['"quoted"', 'quoted'],
    ['"10"', '10']
  ])('reads %j as JSON', (raw, value) => {
    expect(parseParameterValue(raw)).toEqual({ value, note: null });
  });

  it('keeps anything else as the text typed, spaces and all', () => {
    for (const raw of [
      'resnet50',
      ' data/train ',
      'True',
      'trueish',
      'None',
      '-x'
    ]) {
      expect(parseParameterValue(raw)).toEqual({ value: raw, note: null });
    }
  });

  it('passes broken JSON as text, with a note', () => {
    for (const raw of ['[1, 2', "{'a': 1}", '"open', '1.2.3', '-1x']) {
      expect(parseParameterValue(raw)).toEqual({
        value: raw,
        note: 'Not valid JSON, so it is passed as text.'
      });
    }
  });
});

describe('formatParameterValue', () => {
  it('shows strings bare and anything else as JSON', () => {
    expect(formatParameterValue('resnet')).toBe('resnet');
    expect(formatParameterValue(10)).toBe('10');
    expect(formatParameterValue(true)).toBe('true');
    expect(formatParameterValue(null)).toBe('null');
    expect(formatParameterValue({ a: [1] })).toBe('{"a":[1]}');
  });

  it('round-trips what the parser reads', () => {
    for (const value of [3, 0.25, false, null, [1, 'a'], { k: 'v' }, 'text']) {
      expect(parseParameterValue(formatParameterValue(value)).value).toEqual(
        value
      );
    }
  });
});

describe('parametersFromSource', () => {
  it('finds the assignments of a parameters cell, as written', () => {
    const source = [
      '# Parameters for papermill',
      'epochs = 3',
      'lr=0.1',
      'model_name = "resnet50"',
      'layers = [64, 128]',
      'batch_size: int = 32',
      'shape: tuple[int, int] = (224, 224)',
      ''
    ].join('\n');
    expect(parametersFromSource(source)).toEqual([
      ['epochs', '3'],
      ['lr', '0.1'],
      ['model_name', '"resnet50"'],
      ['layers', '[64, 128]'],
      ['batch_size', '32'],
      ['shape', '(224, 224)']
    ]);
  });

  it('drops trailing comments and spaces', () => {
    expect(parametersFromSource('lr = 0.1   # learning rate  ')).toEqual([
      ['lr', '0.1']
    ]);
    expect(parametersFromSource('url = "http://x/#top"')).toEqual([
      ['url', '"http://x/#top"']
    ]);
  });

  it('ignores what is not a top-level assignment', () => {
    const source = [
      'import os',
      '    indented = 1',
      'if debug:',
      '# note = 2',
      'print(x)',
      '1x = 2',
      'empty =',
      ''
    ].join('\n');
    expect(parametersFromSource(source)).toEqual([]);
  });
});
