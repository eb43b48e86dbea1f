#!/usr/bin/python3
"""Generates chat-template conversation cases (JSON list of render contexts).

A fixed list of scenario shapes (every feature the Nemotron templates branch on) is
crossed with randomly drawn content from a seed: nothing is tuned to pass.
Usage: gen_chat_cases.py --seed 1 --random 40 > cases.json
"""
import argparse
import json
import random

WORDS = ("alpha beta gamma delta the quick brown fox jumps over lazy dog weather city "
         "compute sum file path résumé naïve 東京 天气 😀 café ß Ωmega \\ \" ' <tag> & {x} "
         "  tab\there new\nline").split(' ')


class G:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def text(self, lo=1, hi=12):
        s = ' '.join(self.r.choice(WORDS) for _ in range(self.r.randint(lo, hi)))
        if self.r.random() < 0.2:
            s = self.r.choice(['  ', '\n', '\t']) + s + self.r.choice(['  ', '\n\n', ''])
        return s

    def schema(self, depth=0):
        r = self.r
        kind = r.choice(['string', 'integer', 'number', 'boolean', 'array', 'object', 'enum', 'multi'])
        s = {}
        if kind == 'enum':
            s['type'] = 'string'
            s['enum'] = [self.text(1, 2) for _ in range(r.randint(1, 4))]
        elif kind == 'multi':
            s['type'] = ['string', 'null']
        elif kind == 'array':
            s['type'] = 'array'
            s['items'] = self.schema(depth + 1) if depth < 2 else {'type': 'string'}
        elif kind == 'object' and depth < 2:
            s['type'] = 'object'
            s['properties'] = {f'k{i}': self.schema(depth + 1) for i in range(r.randint(1, 3))}
            s['required'] = ['k0']
        else:
            s['type'] = kind if kind != 'object' else 'string'
        if r.random() < 0.7:
            s['description'] = self.text()
        extra = r.random()
        if extra < 0.15:
            s['minimum'] = r.choice([0, -5, 1.5, 100])
        elif extra < 0.25:
            s['default'] = r.choice([None, True, False, 3, 2.25, 'x', [1, 2], {'a': 1}])
        elif extra < 0.3:
            s['nullable'] = True
        elif extra < 0.35:
            s['pattern'] = '^[a-z]+$'
        return s

    def tool(self, i):
        r = self.r
        params = {'type': 'object', 'properties': {f'p{j}_{self.r.randint(0, 99)}': self.schema() for j in range(r.randint(0, 4))}}
        if params['properties'] and r.random() < 0.7:
            params['required'] = list(params['properties'])[:1]
        if r.random() < 0.2:
            params['additionalProperties'] = False
        fn = {'name': f'tool_{i}_{r.choice(["get", "set", "run"])}', 'parameters': params}
        if r.random() < 0.85:
            fn['description'] = self.text(3, 20)
        if r.random() < 0.1:
            fn['strict'] = True
        if r.random() < 0.15:
            del fn['parameters']
        return {'type': 'function', 'function': fn} if r.random() < 0.85 else fn

    def arg_value(self):
        r = self.r
        return r.choice([self.text(1, 4), r.randint(-100, 1000), round(r.uniform(-10, 10), 3), True, False, None,
                         [1, 'two', 3.5], {'nested': {'k': [1, 2]}, 'u': 'ü'}, '', '{"json": "in a string"}', '42'])

    def tool_call(self, tools):
        r = self.r
        name = r.choice([t.get('function', t)['name'] for t in tools]) if tools else 'anon'
        args = {f'a{i}': self.arg_value() for i in range(r.randint(0, 3))}
        if r.random() < 0.05:
            args = json.dumps(args)  # OpenAI wire form: the templates reject it (both engines must)
        tc = {'type': 'function', 'function': {'name': name, 'arguments': args}}
        if r.random() < 0.3:
            tc['id'] = f'call_{r.randint(0, 9999)}'
        return tc if r.random() < 0.9 else {'name': name, 'arguments': args}

    def assistant(self, tools, reasoning=None, think_tags=None, calls=0):
        r = self.r
        m = {'role': 'assistant', 'content': self.text()}
        if reasoning is None:
            reasoning = r.random() < 0.4
        if reasoning:
            m['reasoning_content'] = r.choice([self.text(2, 20), '   ', self.text()])
        if think_tags is None:
            think_tags = r.random() < 0.2
        if think_tags:
            m['content'] = r.choice(['<think>' + self.text() + '</think>' + self.text(),
                                     '<think>unclosed ' + self.text(), 'pre </think> post' + self.text()])
        if calls:
            m['tool_calls'] = [self.tool_call(tools) for _ in range(calls)]
            if r.random() < 0.4:
                m['content'] = r.choice([None, '', self.text()])
        return m

    def conversation(self, shape):
        r = self.r
        tools = [self.tool(i) for i in range(shape.get('tools', 0))]
        msgs = []
        if shape.get('system') == 'text':
            msgs.append({'role': 'system', 'content': self.text(2, 30)})
        elif shape.get('system') == 'empty':
            msgs.append({'role': 'system', 'content': ''})
        for turn in range(shape.get('turns', 1)):
            msgs.append({'role': 'user', 'content': self.text(1, 25)})
            if turn < shape.get('turns', 1) - 1 or shape.get('end') == 'assistant':
                calls = shape.get('calls', 0) if r.random() < 0.7 else 0
                msgs.append(self.assistant(tools, calls=calls))
                if calls:
                    for _ in range(shape.get('responses', 1)):
                        msgs.append({'role': 'tool', 'content': self.text(1, 15)})
                    msgs.append(self.assistant(tools))
        if shape.get('end') == 'tool':
            msgs.append(self.assistant(tools, calls=max(1, shape.get('calls', 1))))
            for _ in range(shape.get('responses', 1)):
                msgs.append({'role': 'tool', 'content': self.text(1, 10)})
        if shape.get('mid_system'):
            msgs.insert(len(msgs) // 2 + 1, {'role': 'system', 'content': self.text()})
        ctx = {'messages': msgs}
        if tools or shape.get('empty_tools'):
            ctx['tools'] = tools
        ctx['add_generation_prompt'] = shape.get('gen', True)
        if 'think' in shape:
            ctx['enable_thinking'] = shape['think']
        if 'truncate' in shape:
            ctx['truncate_history_thinking'] = shape['truncate']
        return ctx


SHAPES = [
    {}, {'system': 'text'}, {'system': 'empty'}, {'think': False}, {'think': True}, {'gen': False},
    {'system': 'text', 'tools': 1}, {'tools': 2}, {'system': 'empty', 'tools': 3}, {'empty_tools': True},
    {'turns': 3}, {'turns': 3, 'think': False}, {'turns': 4, 'truncate': False},
    {'turns': 3, 'end': 'assistant', 'gen': False},
    {'tools': 2, 'turns': 2, 'calls': 1}, {'tools': 2, 'turns': 3, 'calls': 2, 'responses': 2},
    {'tools': 1, 'end': 'tool', 'calls': 1, 'responses': 1},
    {'tools': 3, 'end': 'tool', 'calls': 3, 'responses': 3},
    {'tools': 2, 'end': 'tool', 'calls': 2, 'responses': 2, 'think': False},
    {'system': 'text', 'tools': 2, 'turns': 4, 'calls': 1, 'responses': 1, 'truncate': False},
    {'system': 'text', 'turns': 2, 'mid_system': True},
    {'turns': 5, 'end': 'assistant'},
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--random', type=int, default=40)
    a = ap.parse_args()
    g = G(a.seed)
    cases = [g.conversation(s) for s in SHAPES]
    keys = ['system', 'tools', 'turns', 'calls', 'responses', 'end', 'think', 'gen', 'truncate']
    for _ in range(a.random):
        r = g.r
        shape = {'system': r.choice([None, 'text', 'empty']), 'tools': r.choice([0, 0, 1, 2, 3]),
                 'turns': r.randint(1, 4), 'calls': r.choice([0, 1, 2]), 'responses': r.randint(1, 3),
                 'end': r.choice(['user', 'user', 'assistant', 'tool'])}
        if r.random() < 0.5:
            shape['think'] = r.random() < 0.5
        if r.random() < 0.3:
            shape['truncate'] = r.random() < 0.5
        shape['gen'] = r.random() < 0.8
        cases.append(g.conversation({k: v for k, v in shape.items() if k in keys}))
    print(json.dumps(cases, ensure_ascii=False, indent=1))


if __name__ == '__main__':
    main()
